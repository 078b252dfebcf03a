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


def test_missing_dataset_file_exits_2():
    done = swepipe("tasks", "--dataset", "no/such/file.parquet")
    assert done.returncode == 2 and "does not exist" in done.stderr
