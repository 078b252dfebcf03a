import json
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "swebench_pro_rows.jsonl"


def swepipe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_tasks_table_lists_ids_and_test_counts():
    done = swepipe("tasks", "--dataset", str(FIXTURE), "--language", "go")
    assert done.returncode == 0, done.stderr
    assert "1 task(s)" in done.stdout and "gravitational/teleport" in done.stdout
    assert "qutebrowser" not in done.stdout


def test_tasks_json_is_decoded_and_loads_again(tmp_path):
    done = swepipe("tasks", "--dataset", str(FIXTURE), "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert all(isinstance(row["fail_to_pass"], list) for row in rows)
    again = tmp_path / "again.json"
    again.write_text(done.stdout)
    reloaded = swepipe("tasks", "--dataset", str(again), "--json")
    assert json.loads(reloaded.stdout) == rows


def test_bad_input_exits_2_with_one_clear_message(tmp_path):
    broken = tmp_path / "broken.jsonl"
    lines = FIXTURE.read_text().splitlines()
    row = json.loads(lines[0])
    row["fail_to_pass"] = "['unterminated"
    broken.write_text(json.dumps(row) + "\n")
    done = swepipe("tasks", "--dataset", str(broken))
    assert done.returncode == 2
    assert "broken.jsonl" in done.stderr and "fail_to_pass" in done.stderr and row["instance_id"][:20] in done.stderr
    assert "Traceback" not in done.stderr


def test_unsafe_instance_id_or_non_hex_base_commit_exits_2_naming_file_row_and_column(tmp_path):
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    rows[1]["instance_id"] = "../../outside"
    (tmp_path / "ids.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = swepipe("tasks", "--dataset", str(tmp_path / "ids.jsonl"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "ids.jsonl" in done.stderr and "line 2" in done.stderr and "'instance_id'" in done.stderr
    assert "not a safe file name" in " ".join(done.stderr.split())  # rich wraps long lines

    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    rows[3]["base_commit"] = "HEAD~1"
    (tmp_path / "shas.json").write_text(json.dumps(rows))
    done = swepipe("run", "--dataset", str(tmp_path / "shas.json"), "--run-id", "never", "--runs-dir",
                   str(tmp_path / "runs"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "shas.json" in done.stderr and "row 4" in done.stderr and "'base_commit'" in done.stderr
    assert "not a commit sha" in " ".join(done.stderr.split()) and not (tmp_path / "runs").exists()


def test_missing_dataset_file_exits_2():
    done = swepipe("tasks", "--dataset", "no/such/file.parquet")
    assert done.returncode == 2 and "does not exist" in done.stderr
