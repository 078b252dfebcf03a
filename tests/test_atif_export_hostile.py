"""`swepipe export --format atif` over a run directory whose records hold anything (hand-edited, foreign, from an
older swepipe): every file it writes validates against the atif models, or the export stops with a SwepipeError
naming the task and agent; it never crashes, and a ledger row it cannot read is not counted."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import atif
from fuzzing import fuzz
from hostile import hostile_text, json_scalar
from hypothesis import given
from hypothesis import strategies as st

from pipeline.errors import SwepipeError
from pipeline.interop.atif_export import export_atif

TASK = "demo__calc-1"
ROW = {"stage": "solo", "role": "solo", "model": "m", "input_tokens": 1000, "cached_tokens": 200,
       "cache_write_tokens": 0, "output_tokens": 100, "cost": 0.0012, "latency": 0.1, "retries": 0, "error": None,
       "task": TASK, "agent": "solo", "time": 1796554993.9, "call": "c1"}
RUN = {"name": "solo", "exit_reason": "submitted", "error": None, "submission": None, "cost": 0.0024,
       "input_tokens": 2000, "output_tokens": 200, "started": 1796554990.0, "seconds": 2.0,
       "messages": [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "add() subtracts."},
                    {"role": "assistant", "content": "Fix.\n```bash\nsed -i s/-/+/ calc.py\n```"},
                    {"role": "user", "content": "exit code: 0"},
                    {"role": "assistant", "content": "Done.\n```bash\nsubmit\n```"}],
       "steps": [{"index": 0, "reply": "Fix.\n```bash\nsed -i s/-/+/ calc.py\n```", "command": "sed -i s/-/+/ calc.py",
                  "action": "bash", "exit_code": 0, "output": "", "format_error": None, "tool_calls": [],
                  "cost": 0.0012, "input_tokens": 1000, "output_tokens": 100},
                 {"index": 1, "reply": "Done.\n```bash\nsubmit\n```", "command": "submit", "action": "submit",
                  "tool_calls": [], "cost": 0.0012, "input_tokens": 1000, "output_tokens": 100}]}


def _run_dir(root: Path, run: object, rows: list[object]) -> Path:
    task = root / "tasks" / TASK
    (task / "solo").mkdir(parents=True)
    (root / "predictions.jsonl").write_text(json.dumps({"instance_id": TASK, "model_patch": "diff --git a/x b/x\n",
                                                        "strategy": "solo", "models": {"solo": "m"}}) + "\n")
    (task / "solo" / "trajectory.json").write_text(json.dumps(run, allow_nan=True))
    (task / "ledger.jsonl").write_text("".join(json.dumps(row, allow_nan=True) + "\n" for row in rows))
    return root


def _places(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _places(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _places(inner, (*prefix, index))


def _replaced(data, path, value):
    if not path:
        return value
    changed = copy.deepcopy(data)
    holder = changed
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    return changed


_JSON = st.recursive(json_scalar | hostile_text(), lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(hostile_text(max_size=12), inner, max_size=3), max_leaves=6)


def test_the_well_formed_run_exports_and_adds_up():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        root = _run_dir(Path(folder) / "run", RUN, [ROW, {**ROW, "call": "c2", "time": ROW["time"] + 1}])
        summary = export_atif(root, Path(folder) / "out")
        data = json.loads((Path(folder) / "out" / TASK / "solo.atif.json").read_text())
    atif.Trajectory.model_validate(data)
    assert summary.files == 1 and data["final_metrics"]["total_cost_usd"] == 0.0024
    assert [step["metrics"]["cached_tokens"] for step in data["steps"] if step["source"] == "agent"] == [200, 200]


@fuzz
@given(target=st.sampled_from(("run", "row")), place=st.integers(min_value=0), value=_JSON)
def test_any_value_in_a_run_s_records_exports_valid_atif_or_a_named_refusal(tmp_path_factory, target, place, value):
    folder = tmp_path_factory.mktemp("hostile-run")
    run, row = RUN, ROW
    if target == "run":
        places = list(_places(RUN))
        run = _replaced(RUN, places[place % len(places)], value)
    else:
        places = list(_places(ROW))
        row = _replaced(ROW, places[place % len(places)], value)
    root = _run_dir(folder / "run", run, [row, {**ROW, "call": "c2", "time": ROW["time"] + 1}])
    try:
        export_atif(root, folder / "out")
    except SwepipeError as refused:
        assert TASK in str(refused) and "solo" in str(refused)
        return
    written = list((folder / "out").rglob("*.atif.json"))
    for path in written:
        data = json.loads(path.read_text())
        atif.Trajectory.model_validate(data)
        assert 0 <= data["final_metrics"]["total_cost_usd"] <= 0.0024 + 1e-12  # an unreadable row is not counted
