"""Loading, decoding and filtering SWE-Bench Pro tasks."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import DatasetError
from pipeline.tasks import CellError, Task, TaskFilter, load_tasks, parse_instance_ids, register_named_dataset, sources
from pipeline.tasks.decode import decode_list, unwrap_json_text

FIXTURE = Path(__file__).parent / "fixtures" / "swebench_pro_rows.jsonl"
QUTE_ID = ("instance_qutebrowser__qutebrowser-1a2b3c4d5e6f708192a3b4c5d6e7f80912345678"
           "-v2ef375ac784985212b1805e1d0431dc8f1b3c171")
GO_ID = "instance_gravitational__teleport-0415e422f12454db0c22316cf3eaa5088d6b6322"
JS_ID = "instance_NodeBB__NodeBB-04998908ba6721d64eba79ae3b65a351dcfbc5b5-vnan"
TS_ID = "instance_element-hq__element-web-33e8edb3d508d6eefb354819ca693b7accc695e7"


def raw_rows() -> list[dict]:
    """The fixture rows in their raw string form, exactly as the Hub serves them."""
    return [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def load_error(dataset: Path | str) -> str:
    with pytest.raises(DatasetError) as caught:
        load_tasks(str(dataset))
    return str(caught.value)


# --- decoding real rows ---------------------------------------------------------------------------


def test_fixture_rows_decode_like_the_hub_rows():
    tasks = {task.instance_id: task for task in load_tasks(str(FIXTURE))}
    assert list(tasks) == [QUTE_ID, GO_ID, JS_ID, TS_ID]

    qute = tasks[QUTE_ID]
    assert qute.fail_to_pass == [
        "tests/unit/utils/test_urlutils.py::test_fuzzy_url_fragment",
        "tests/unit/utils/test_urlutils.py::test_fuzzy_url[it's-a-fragment]",
    ]
    assert qute.pass_to_pass == []
    assert qute.problem_statement.startswith("## Title: URL parsing drops the fragment\n\n### Description")
    assert "\\n" not in qute.problem_statement and '"fuzzy"' in qute.problem_statement
    assert qute.requirements.startswith("- `urlutils.fuzzy_url` must keep")
    assert qute.interface == "No new interfaces are introduced"
    assert qute.selected_test_files_to_run == ["tests/unit/utils/test_urlutils.py"]
    assert qute.issue_specificity == ["major_bug", "edge_case_bug"]
    assert qute.issue_categories == ["back_end_knowledge"]
    assert qute.before_repo_set_cmd.startswith("git reset --hard 1a2b3c4d")
    assert qute.hidden_test_names == qute.fail_to_pass

    js = tasks[JS_ID]
    assert js.problem_statement.startswith('"User fields" are returned as strings\n')
    assert "test/user.js | User .getUserField() should return 'null' for a missing field" in js.pass_to_pass
    assert js.hidden_test_names == js.fail_to_pass + js.pass_to_pass

    assert tasks[GO_ID].requirements == "" and tasks[GO_ID].interface == ""
    assert [t.repo_language for t in tasks.values()] == ["python", "go", "js", "ts"]


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("", []),
        ("  ", []),
        ("[]", []),
        ("['a.py::x', \"b.py::y[it's]\"]", ["a.py::x", "b.py::y[it's]"]),
        ('["a", "b"]', ["a", "b"]),
        ('["caf\\u00e9", "\\ud83d\\ude00"]', ["café", "😀"]),
        (["already", "a list"], ["already", "a list"]),
        (("a", "tuple"), ["a", "tuple"]),
    ],
)
def test_decode_list(cell, expected):
    assert decode_list(cell) == expected


@pytest.mark.parametrize("cell", ["[1, 2]", "['a', None]", "'just a string'", "{'a'}", "[unclosed", 42, {"a": 1}])
def test_decode_list_rejects_non_string_lists(cell):
    with pytest.raises(ValueError):
        decode_list(cell)


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ('"line one\\nline two"', "line one\nline two"),
        ("plain\ntext", "plain\ntext"),
        ('"quoted" at the start, then more', '"quoted" at the start, then more'),
        ('"', '"'),
        ("", ""),
    ],
)
def test_unwrap_json_text(cell, expected):
    assert unwrap_json_text(cell) == expected


def test_eval_is_never_used(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pwned"
    row = raw_rows()[0] | {"fail_to_pass": f"__import__('os').system('touch {marker}')"}
    message = load_error(write_jsonl(tmp_path / "evil.jsonl", [row]))
    assert not marker.exists()
    assert "evil.jsonl" in message and "line 1" in message and QUTE_ID in message and "'fail_to_pass'" in message


def test_uppercase_aliases_and_unknown_columns(tmp_path):
    row = raw_rows()[1]
    row["FAIL_TO_PASS"] = row.pop("fail_to_pass")
    row["PASS_TO_PASS"] = row.pop("pass_to_pass")
    row["created_at"] = "2024-01-01"
    [task] = load_tasks(str(write_jsonl(tmp_path / "upper.jsonl", [row])))
    assert task.fail_to_pass == ["TestMTLSClientCAs", "TestMTLSClientCAs/1_CA", "TestMTLSClientCAs/100_CAs"]
    assert task.pass_to_pass == ["TestAuthMiddleware", "TestAuthMiddleware/no_certs"]
    assert not hasattr(task, "created_at")


def test_optional_columns_default_to_empty(tmp_path):
    optional = ["requirements", "interface", "patch", "test_patch", "issue_specificity", "issue_categories"]
    row = {k: v for k, v in raw_rows()[0].items() if k not in optional}
    [task] = load_tasks(str(write_jsonl(tmp_path / "minimal.jsonl", [row])))
    assert (task.requirements, task.interface, task.patch, task.test_patch) == ("", "", "", "")
    assert task.issue_specificity == [] and task.issue_categories == []


def test_null_cells_count_as_missing(tmp_path):
    rows = raw_rows()
    rows[0]["requirements"] = None
    [task, *_] = load_tasks(str(write_parquet(tmp_path / "nulls.parquet", rows)))
    assert task.requirements == ""
    assert Task.from_row(raw_rows()[0] | {"interface": float("nan")}).interface == ""

    rows[1]["dockerhub_tag"] = None
    message = load_error(write_parquet(tmp_path / "nulls.parquet", rows))
    assert "nulls.parquet" in message and "row 2" in message and GO_ID in message
    assert "'dockerhub_tag'" in message and "null" in message


# --- the same rows in every format ----------------------------------------------------------------


def test_all_formats_load_the_same_tasks(tmp_path):
    rows = raw_rows()
    expected = load_tasks(str(FIXTURE))
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    decoded_lists = [{**row, **{c: decode_list(row[c]) for c in ("fail_to_pass", "pass_to_pass")}} for row in rows]
    for path in [
        write_csv(tmp_path / "rows.csv", rows),
        tmp_path / "rows.json",
        write_parquet(tmp_path / "rows.parquet", rows),
        write_parquet(tmp_path / "lists.parquet", decoded_lists),
        write_jsonl(tmp_path / "hf_to_json.json", rows),  # Dataset.to_json writes JSON Lines
    ]:
        assert load_tasks(str(path)) == expected, path


def test_to_row_round_trips(tmp_path):
    tasks = load_tasks(str(FIXTURE))
    tricky = tasks[0].model_copy(update={"problem_statement": '"looks JSON-encoded"', "interface": '"x\\ny"'})
    tasks.append(tricky.model_copy(update={"instance_id": "tricky"}))
    rows = [task.to_row() for task in tasks]
    assert all(isinstance(row["fail_to_pass"], list) for row in rows)
    path = tmp_path / "ours.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert load_tasks(str(path)) == tasks
    assert [Task.from_row(row) for row in rows] == tasks


def test_a_row_holds_every_field_of_the_task_in_its_order():
    """to_row writes TaskRow's columns by hand: a field added to Task and not to the row would be lost, and a row
    in another order would change the bytes of every dataset written (they were model_dump's)."""
    from pipeline.bundled.build import ROW_COLUMNS
    from pipeline.tasks.task import TaskRow

    task = load_tasks(str(FIXTURE))[0]
    assert list(TaskRow.__annotations__) == list(Task.model_fields) == list(task.to_row())
    assert sorted(ROW_COLUMNS) == sorted(TaskRow.__annotations__)
    dumped = task.model_dump(mode="json")
    assert json.dumps(task.to_row()) == json.dumps(dumped)


def test_blank_jsonl_lines_are_skipped_and_lines_are_counted(tmp_path):
    rows = raw_rows()
    rows[1]["fail_to_pass"] = "[broken"
    path = tmp_path / "gaps.jsonl"
    path.write_text("\n" + json.dumps(rows[0]) + "\n\n   \n" + json.dumps(rows[1]) + "\n")
    message = load_error(path)
    assert "line 5" in message and GO_ID in message and "'fail_to_pass'" in message


# --- sources ------------------------------------------------------------------------------------


def test_named_dataset_returning_rows_or_a_path(monkeypatch):
    monkeypatch.setattr(sources, "_NAMED_DATASETS", {})
    register_named_dataset("bundled", lambda: FIXTURE)
    register_named_dataset("in-memory", lambda: raw_rows()[:2])
    assert [t.instance_id for t in load_tasks("bundled")] == [QUTE_ID, GO_ID, JS_ID, TS_ID]
    assert [t.instance_id for t in load_tasks("in-memory")] == [QUTE_ID, GO_ID]


def test_hub_dataset_loads_through_datasets(monkeypatch):
    import datasets

    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda name, split: calls.append((name, split)) or raw_rows())
    tasks = load_tasks("ScaleAI/SWE-bench_Pro")
    assert calls == [("ScaleAI/SWE-bench_Pro", "test")] and len(tasks) == 4


def test_unreachable_hub_is_a_clear_error(monkeypatch):
    import datasets

    def offline(name, split):
        raise ConnectionError("Couldn't reach 'ScaleAI/SWE-bench_Pro' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    message = load_error("ScaleAI/SWE-bench_Pro")
    assert "ScaleAI/SWE-bench_Pro" in message and "Hub could not be reached" in message
    assert "local file" in message and ".parquet" in message


def test_bad_hub_row_names_row_and_column(monkeypatch):
    import datasets

    rows = raw_rows()
    rows[2]["selected_test_files_to_run"] = "not a list"
    monkeypatch.setattr(datasets, "load_dataset", lambda name, split: rows)
    message = load_error("ScaleAI/SWE-bench_Pro")
    assert "ScaleAI/SWE-bench_Pro" in message and "row 3" in message and JS_ID in message
    assert "'selected_test_files_to_run'" in message


def test_missing_file(tmp_path):
    message = load_error(tmp_path / "nope.jsonl")
    assert "nope.jsonl" in message and "does not exist" in message


def test_unknown_extension(tmp_path):
    path = tmp_path / "tasks.txt"
    path.write_text("x")
    message = load_error(path)
    assert "tasks.txt" in message and "'.txt'" in message and ".jsonl" in message and ".parquet" in message


def test_directory_and_non_dataset_names(tmp_path):
    assert "directory" in load_error(tmp_path)
    assert "not a file that exists" in load_error("no such thing")


def test_missing_required_column(tmp_path):
    rows = [{k: v for k, v in row.items() if k != "dockerhub_tag"} for row in raw_rows()[1:]]
    message = load_error(write_csv(tmp_path / "tasks.csv", rows))
    assert "tasks.csv" in message and "row 1" in message and GO_ID in message
    assert "'dockerhub_tag'" in message and "missing" in message


def test_missing_instance_id_still_names_file_row_and_column(tmp_path):
    rows = raw_rows()
    del rows[0]["instance_id"]
    message = load_error(write_jsonl(tmp_path / "noid.jsonl", rows))
    assert "noid.jsonl" in message and "line 1" in message and "'instance_id'" in message


@pytest.mark.parametrize(
    ("column", "value", "hint"),
    [
        ("pass_to_pass", "['ok', 3]", "only strings"),
        ("issue_categories", "{'not': 'a list'}", "list of strings"),
        ("repo_language", "rust", "'python', 'go', 'js' or 'ts'"),
        ("problem_statement", 7, "expected a string"),
        ("base_commit", "", "at least 1 character"),
    ],
)
def test_undecodable_cell(tmp_path, column, value, hint):
    rows = raw_rows()
    rows[3][column] = value
    message = load_error(write_jsonl(tmp_path / "bad.jsonl", rows))
    assert "bad.jsonl" in message and "line 4" in message and TS_ID in message
    assert f"'{column}'" in message and hint in message


@pytest.mark.parametrize(
    ("instance_id", "problem"),
    [
        ("../../etc/cron.d/x", "contains '/'"),
        ("tasks\\evil", "contains '\\\\'"),
        ("..", "starts with '.'"),
        ("instance_a..b", "contains '..'"),
        (".hidden", "starts with '.'"),
        ("-rf", "starts with '-'"),
        ("nul\x00byte", "contains '\\x00'"),
        ("new\nline", "contains '\\n'"),
        ("instance_" + "a" * 192, "201 characters, more than 200"),
    ],
)
def test_an_instance_id_that_is_not_a_safe_file_name_is_refused(tmp_path, instance_id, problem):
    rows = raw_rows()
    rows[2]["instance_id"] = instance_id
    for path in (write_jsonl(tmp_path / "ids.jsonl", rows), write_parquet(tmp_path / "ids.parquet", rows)):
        message = load_error(path)
        where = "line 3" if path.suffix == ".jsonl" else "row 3"
        assert path.name in message and where in message and "column 'instance_id'" in message
        assert "not a safe file name" in message and problem in message, message


@pytest.mark.parametrize("base_commit", ["HEAD", "main", "abc12", "1e137b07052bc3ea0da44ed201702c94055b8ad2; rm -rf ~",
                                         "--output=/tmp/x", "1e137b07052bc3ea0da44ed201702c94055b8ad2" + "0" * 10,
                                         "g" * 40])
def test_a_base_commit_that_is_not_a_hex_sha_is_refused(tmp_path, base_commit):
    rows = raw_rows()
    rows[2]["base_commit"] = base_commit
    message = load_error(write_csv(tmp_path / "shas.csv", rows))
    assert "shas.csv" in message and "row 3" in message and JS_ID in message and "column 'base_commit'" in message
    assert "is not a commit sha" in message


def test_real_ids_and_shas_load_and_a_short_sha_or_stray_whitespace_is_fine(tmp_path):
    rows = raw_rows()
    rows[0]["base_commit"] = " " + rows[0]["base_commit"] + "\n"  # as a hand-edited CSV cell may hold it
    rows[1]["base_commit"] = rows[1]["base_commit"][:7].upper()
    tasks = load_tasks(str(write_jsonl(tmp_path / "ok.jsonl", rows)))
    assert [t.instance_id for t in tasks] == [QUTE_ID, GO_ID, JS_ID, TS_ID]
    assert tasks[0].base_commit == "1a2b3c4d5e6f708192a3b4c5d6e7f80912345678" and tasks[1].base_commit == "8EE8122"
    assert len(load_tasks("bundled")) == 15


def test_a_task_built_in_code_is_checked_too():
    from pydantic import ValidationError

    fields = dict(repo="demo/calc", problem_statement="p", repo_language="python", fail_to_pass=[],
                  pass_to_pass=[], selected_test_files_to_run=[], before_repo_set_cmd="", dockerhub_tag="t")
    with pytest.raises(ValidationError, match="not a commit sha"):
        Task(instance_id="t", base_commit="HEAD", **fields)
    with pytest.raises(ValidationError, match="not a safe file name"):
        Task(instance_id="a/b", base_commit="0" * 40, **fields)


def test_bad_jsonl_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(raw_rows()[0]) + "\n{not json\n")
    message = load_error(path)
    assert "bad.jsonl" in message and "line 2" in message and "not valid JSON" in message


def test_json_file_must_hold_a_list_of_objects(tmp_path):
    (tmp_path / "object.json").write_text('{"rows": []}')
    assert "object.json" in load_error(tmp_path / "object.json")
    (tmp_path / "scalars.json").write_text("[1]")
    message = load_error(tmp_path / "scalars.json")
    assert "scalars.json" in message and "row 1" in message and "expected an object" in message


def test_duplicate_instance_id(tmp_path):
    rows = raw_rows()
    message = load_error(write_jsonl(tmp_path / "dups.jsonl", rows + [rows[1]]))
    assert "dups.jsonl" in message and GO_ID in message and "line 5" in message and "line 2" in message
    assert "duplicate" in message


def test_empty_dataset(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    assert "empty.jsonl" in load_error(tmp_path / "empty.jsonl")


def test_cell_error_carries_the_column():
    with pytest.raises(CellError) as caught:
        Task.from_row(raw_rows()[0] | {"fail_to_pass": "[oops"})
    assert caught.value.column == "fail_to_pass"


# --- filters ------------------------------------------------------------------------------------


def many_tasks(count: int = 20) -> list[Task]:
    base = load_tasks(str(FIXTURE))
    return [base[i % 4].model_copy(update={"instance_id": f"task-{i:02d}"}) for i in range(count)]


def ids(tasks: list[Task]) -> list[str]:
    return [task.instance_id for task in tasks]


def test_parse_instance_ids_from_text_and_file(tmp_path):
    assert parse_instance_ids(" a, b ,,a ,c") == ["a", "b", "c"]
    path = tmp_path / "ids.txt"
    path.write_text(f"# tasks to retry\n{QUTE_ID}\n\n  {JS_ID}   # flaky\n#{GO_ID}\n")
    assert parse_instance_ids(f"@{path}") == [QUTE_ID, JS_ID]


def test_parse_instance_ids_errors(tmp_path):
    with pytest.raises(DatasetError, match="missing.txt"):
        parse_instance_ids(f"@{tmp_path / 'missing.txt'}")
    (tmp_path / "blank.txt").write_text("# nothing\n\n")
    with pytest.raises(DatasetError, match="blank.txt"):
        parse_instance_ids(f"@{tmp_path / 'blank.txt'}")


def test_filter_by_ids_from_file(tmp_path):
    path = tmp_path / "ids.txt"
    path.write_text(f"{TS_ID}\n{QUTE_ID}\n")
    selected = TaskFilter(instance_ids=parse_instance_ids(f"@{path}")).apply(load_tasks(str(FIXTURE)))
    assert ids(selected) == [QUTE_ID, TS_ID]  # dataset order


def test_unknown_requested_ids_are_named():
    with pytest.raises(DatasetError) as caught:
        TaskFilter(instance_ids=[QUTE_ID, "instance_typo-1", "instance_typo-2"]).apply(load_tasks(str(FIXTURE)))
    message = str(caught.value)
    assert "instance_typo-1" in message and "instance_typo-2" in message and QUTE_ID not in message


def test_filter_by_repo_and_language():
    tasks = load_tasks(str(FIXTURE))
    assert ids(TaskFilter(repo="nodebb/nodebb").apply(tasks)) == [JS_ID]
    assert TaskFilter(repo="nodebb").apply(tasks) == []  # exact match, not substring
    assert ids(TaskFilter(language="go").apply(tasks)) == [GO_ID]
    assert ids(TaskFilter(language="TypeScript").apply(tasks)) == [TS_ID]
    assert TaskFilter(repo="NodeBB/NodeBB", language="go").apply(tasks) == []
    with pytest.raises(DatasetError, match="rust"):
        TaskFilter(language="rust")


@pytest.mark.parametrize("text", ["3:7", "5:", ":4", "-3:", ":-18", ":", " 2 : 4 ", "-50:50"])
def test_slice_follows_python_semantics(text):
    tasks = many_tasks()
    start, end = (int(part) if part.strip() else None for part in text.split(":"))
    assert TaskFilter(slice=text).apply(tasks) == tasks[start:end]


@pytest.mark.parametrize("text", ["3", "a:b", "1:2:3", "1.5:2", "", "1-3"])
def test_bad_slice(text):
    with pytest.raises(DatasetError) as caught:
        TaskFilter(slice=text)
    assert f"'{text}'" in str(caught.value)


def test_limit():
    tasks = many_tasks()
    assert ids(TaskFilter(limit=3).apply(tasks)) == ["task-00", "task-01", "task-02"]
    assert TaskFilter(limit=0).apply(tasks) == []
    assert TaskFilter(limit=100).apply(tasks) == tasks
    with pytest.raises(DatasetError):
        TaskFilter(limit=-1)


def test_shuffle_is_deterministic_by_seed():
    tasks = many_tasks()
    first = ids(TaskFilter(shuffle=True, seed=7).apply(tasks))
    assert first == ids(TaskFilter(shuffle=True, seed=7).apply(tasks))
    assert first != ids(TaskFilter(shuffle=True, seed=8).apply(tasks))
    assert sorted(first) == ids(tasks) and first != ids(tasks)
    assert ids(tasks) == [f"task-{i:02d}" for i in range(20)]  # input left untouched


def test_order_is_select_shuffle_slice_limit():
    tasks = many_tasks()
    python_only = [t for t in tasks if t.repo_language == "python"]
    shuffled = python_only.copy()
    import random

    random.Random(3).shuffle(shuffled)
    chosen = TaskFilter(language="python", shuffle=True, seed=3, slice="1:", limit=2).apply(tasks)
    assert chosen == shuffled[1:][:2]
