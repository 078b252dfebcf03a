"""The run directory's typed records (pipeline.records): what is written, how a file that is no record is named, and
that a run written by the previous version (records without a format) reads exactly as the same run with format 1:
the report, the task pages, export and whatif give the same output on both."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from scripted_pipeline import bash, reply

from pipeline import records
from pipeline.analysis.load import load_run
from pipeline.analysis.stats import run_stats
from pipeline.analysis.whatif import Pricer, what_if
from pipeline.analysis.whatif_data import read_run
from pipeline.interop.export import export_predictions, export_trajectories
from pipeline.records import (
    Brief,
    EvalResult,
    Pool,
    Prediction,
    PrincipalResult,
    RecordError,
    ReplayResult,
    Rollout,
    SoloResult,
    TaskContainers,
    TeamDelegations,
    TeamResult,
    Unreadable,
)
from pipeline.records.trajectory import ExitReason
from pipeline.report.build import build_report, write_report
from pipeline.tasks import load_task_file

FIXTURES = Path(__file__).parent / "fixtures" / "runs"
# Each record's files in a run directory, as globs from its root.
RECORD_FILES = {Rollout: ["tasks/*/junior/rollout-[0-9][0-9].json"], Pool: ["tasks/*/junior/pool.json"],
                Brief: ["tasks/*/senior/brief.json", "tasks/*/analysis/senior-at-*/brief.json"],
                PrincipalResult: ["tasks/*/principal/result.json"],
                EvalResult: ["tasks/*/eval/result.json", "tasks/*/eval/infra_error.json",
                             "tasks/*/candidates/*/result.json", "eval/*/result.json"]}
LINES = ("predictions.jsonl", "infra_errors.jsonl")


# -- reading and writing one record ---------------------------------------------------------------------------


def test_a_file_that_is_no_record_is_named_with_why(tmp_path):
    path = tmp_path / "junior" / "rollout-03.json"
    assert Rollout.read(path) == Unreadable(path, "missing")
    path.parent.mkdir()
    for text, why in [("{\"index\": 3", "not valid JSON, perhaps cut short by a kill"), ("[1, 2]", "not a JSON object"),
                      ('{"exit_reason": {"a": 1}}', "of the wrong shape (exit_reason: Input should be a valid string)"),
                      ('{"trajectory": "steps"}', "of the wrong shape (trajectory: "),
                      ('{"format": 2}', "of format 2, newer than this swepipe reads (1)"),
                      ('{"format": "one"}', "of the wrong shape (format: 'one' is not a format version)")]:
        path.write_text(text)
        read = Rollout.read(path)
        assert isinstance(read, Unreadable) and read.why.startswith(why), (text, read)
    with pytest.raises(RecordError, match="rollout-03.json is not a JSON object"):
        path.write_text("[]")
        Rollout.load(path)


def test_reading_keeps_unknown_keys_and_odd_values_and_upgrades_format_0(tmp_path):
    path = tmp_path / "rollout-07.json"
    path.write_text(json.dumps({"exit_reason": "submitted", "cost": "lots", "plugin_note": {"kept": True}}))
    read = Rollout.read(path)
    assert read.index == 7 and read.cost == "lots" and read.plugin_note == {"kept": True}  # index: its file's
    assert read.to_dict() == {"exit_reason": "submitted", "cost": "lots", "plugin_note": {"kept": True}, "index": 7}
    assert read.to_disk()["format"] == 1
    result = tmp_path / "principal" / "result.json"
    result.parent.mkdir()
    result.write_text(json.dumps({"source": "principal", "calls": 1}))
    (result.parent / "patch.diff").write_bytes(b"diff --git a/x b/x\n+caf\xe9\n")
    assert PrincipalResult.read(result).patch == "diff --git a/x b/x\n+caf\udce9\n"  # before results held it


def test_writing_is_strict_and_keeps_values_and_keys_as_given(tmp_path):
    with pytest.raises(RecordError, match="Rollout record: cost"):
        Rollout.of({"index": 0, "cost": "lots"})
    with pytest.raises(RecordError, match="Prediction record: instance_id: Field required"):
        Prediction.of({"model_patch": ""})
    data = {"instance_id": "t", "model_patch": "", "cost": {"junior": 0, "total": 0.5}, "mine": [1]}
    Prediction.of(data).write(tmp_path / "p.json")
    assert json.loads((tmp_path / "p.json").read_text()) == {"format": 1, **data}  # 0 stays 0, not 0.0
    assert list(json.loads((tmp_path / "p.json").read_text())) == ["format", "instance_id", "model_patch", "cost",
                                                                  "mine"]


def test_a_malformed_brief_or_prediction_is_named_never_a_crash_of_the_report(tmp_path):
    """stats.py used to crash the whole report on a brief.json that is no JSON object and on a prediction whose
    exit_reason is an object; each is now a named unreadable record of its task."""
    run = tmp_path / "runs" / "pipe"
    shutil.copytree(FIXTURES / "pipe", run)
    (run / "tasks" / "demo__calc-1" / "senior" / "brief.json").write_text("[\"not\", \"a\", \"brief\"]")
    lines = (run / "predictions.jsonl").read_text().splitlines()
    odd = {**json.loads(lines[1]), "exit_reason": {"agent": "submitted"}}
    (run / "predictions.jsonl").write_text("\n".join([lines[0], json.dumps(odd), lines[2]]) + "\n")
    loaded = load_run(run)
    assert [t.instance_id for t in loaded.tasks] == ["demo__calc-1", "demo__lib-3"]
    words = " or ".join(", ".join(repr(reason.value) for reason in ExitReason).rsplit(", ", 1))
    assert loaded.refused == {"demo__calc-2": "task demo__calc-2: its prediction (predictions.jsonl line 2) is of "
                                              f"the wrong shape (exit_reason: Input should be {words})"}
    calc = loaded.tasks[0]
    assert calc.brief is None and calc.unreadable["senior/brief.json"] == "not a JSON object"
    stats = run_stats(loaded)
    assert stats.tasks == 2 and stats.senior_sources == {}
    report = build_report([run], {t.instance_id: t.patch for t in load_task_file(FIXTURES / "tasks.jsonl")})
    write_report(report, tmp_path / "site")
    text = (tmp_path / "site" / "report.md").read_text()
    assert "pipe: task demo__calc-2: its prediction (predictions.jsonl line 2) is of the wrong shape" in text
    assert "demo__calc-1: senior/brief.json is not a JSON object; the report reads it as none" in text
    page = (tmp_path / "site" / "report_tasks" / "pipe" / "demo__calc-1.html").read_text()
    assert "senior/brief.json is not a JSON object" in page


# -- a run of the previous version reads as the same run with format 1 ------------------------------------------


def record_files(root: Path) -> dict[type, list[Path]]:
    found = {kind: sorted(p for pattern in patterns for p in root.glob(pattern)) for kind, patterns in
             RECORD_FILES.items()}
    found[Prediction] = [root / name for name in LINES if (root / name).is_file()]
    return found


def rewrite_formats(root: Path, change) -> dict[type, int]:
    """Every record of the run at ``root`` rewritten with ``change(data)``; how many of each kind."""
    counts = {}
    for kind, paths in record_files(root).items():
        counts[kind] = 0
        for path in paths:
            if kind is Prediction:
                rows = [change(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
                path.write_text("".join(json.dumps(row) + "\n" for row in rows))
                counts[kind] += len(rows)
            else:
                path.write_text(json.dumps(change(json.loads(path.read_text())), indent=2) + "\n")
                counts[kind] += 1
    return counts


def without_format(data: dict) -> dict:
    assert data.get("format") in (1, EvalResult.FORMAT), data
    return {key: value for key, value in data.items() if key != "format"}


def with_format(data: dict) -> dict:
    assert "format" not in data, data
    return {"format": 1, **data}


def outputs(run: Path, patches: dict[str, str], problems: dict[str, str] | None = None) -> dict[str, object]:
    """What the report (report.md, report.html, figures), the task pages, export (official, swebench and
    trajectories) and whatif make of the run, times and the run's folder taken out."""
    site = run.parent.parent / "site"
    write_report(build_report([run], patches, problems=problems), site)
    made: dict[str, object] = {"report.md": (site / "report.md").read_text()}
    made.update({str(p.relative_to(site)): p.read_text() for p in sorted(site.rglob("*.html"))})
    made.update({f"figures/{p.name}": p.read_bytes() for p in sorted((site / "figures").glob("*.png"))})
    export = run.parent.parent / "export"
    made["export: official"] = export_predictions(run, "official", export / "official.json").line()
    made["export: swebench"] = export_predictions(run, "swebench", export / "swebench.jsonl").line()
    made["export: trajectories"] = export_trajectories(run, export / "trajectories").line()
    made.update({str(p.relative_to(export)): p.read_text() for p in sorted(export.rglob("*")) if p.is_file()})
    replay = read_run(run)
    result = what_if(replay, Pricer.for_run(replay.config, {}))
    made["whatif"] = ([dataclasses.asdict(policy) for policy in result.policies], result.notes, result.tasks)
    root = str(run.parent.parent)
    return {name: re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "<time>", value.replace(root, "<root>"))
            if isinstance(value, str) else value for name, value in made.items()}


@pytest.mark.parametrize("name", ["pipe", "failed", "reused", "solo"])
def test_a_checked_in_run_of_format_0_reads_as_with_format_1(tmp_path, name):
    """The hand-built runs of tests/fixtures/runs are of the previous version (no record has a format)."""
    old, new = tmp_path / "old" / "runs" / name, tmp_path / "new" / "runs" / name
    shutil.copytree(FIXTURES / name, old)
    shutil.copytree(FIXTURES / name, new)
    counts = rewrite_formats(new, with_format)
    assert counts[Prediction] and (name != "pipe" or counts[Rollout] and counts[Pool] and counts[Brief]), counts
    patches = {t.instance_id: t.patch for t in load_task_file(FIXTURES / "tasks.jsonl")}
    assert outputs(old, patches) == outputs(new, patches)


PRICES = {"input": 1.0, "output": 2.0}
FIX, OTHER = "sed -i 's/a - b/a + b/' calc.py", "sed -i 's/a - b/b + a/' calc.py"
EDIT = "calc.py\n```\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n```\n"
GOLD = ("diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
        "-    return a - b\n+    return a + b\n")


def scripted_run(directory: Path, repo) -> Path:
    """A pipeline run of this version on one task (two juniors, a senior, a principal: scripted models, a local
    clone), its eval result and each candidate's written as scoring writes them; the run's root."""
    from conftest import demo_task

    from pipeline.run.bookkeeping import RunSummary, record_prediction
    from pipeline.run.task import RunSettings, run_one_task, seeded_run_budget
    from pipeline.rundir.layout import RunLayout
    from pipeline.settings.config import load_config

    brief = {"analysis": "add() subtracts.", "spans": [{"file": "calc.py", "start": 1, "end": 2, "reason": "add"}],
             "candidate": 1}
    script = {"junior": [[bash(FIX), bash("submit")], [bash(OTHER), bash("submit")]],
              "senior": [bash("cat calc.py"), reply(f"```json\n{json.dumps(brief)}\n```\n```bash\nsubmit\n```")],
              "principal": [reply(EDIT)]}
    directory.mkdir(parents=True)
    (directory.parent / "script.yaml").write_text(yaml.safe_dump(script))  # named in the records: not in the run
    spec = {"model": f"scripted/{directory.parent / 'script.yaml'}", "prices": PRICES}
    (directory / "config.yaml").write_text(yaml.safe_dump({
        "models": {role: spec for role in ("junior", "senior", "principal")}, "juniors": {"k": 2},
        "limits": {"max_steps": 6}, "containers": {"impl": "local_opener:open_local"}}))
    config = load_config(directory / "config.yaml")
    layout = RunLayout(directory / "runs" / "scripted")
    layout.root.mkdir(parents=True)
    layout.config.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    settings = RunSettings(config=config, layout=layout, image_template="unused/{dockerhub_tag}")
    task = demo_task(repo)
    prediction = run_one_task(task, settings, seeded_run_budget(settings))
    record_prediction(RunSummary(roles=settings.roles), settings, prediction)
    paths = layout.task(task.instance_id)
    verdict = {"instance_id": task.instance_id, "resolved": True, "category": "resolved", "patch_empty": False,
               "patch_applied": True, "network": False, "timed_out": False, "entry_exit_code": 0,
               "FAIL_TO_PASS": {"passed": ["test_add"], "failed": [], "missing": []},
               "PASS_TO_PASS": {"passed": [], "failed": [], "missing": []}, "statuses": {"test_add": "PASSED"},
               "duration": 1.5}
    EvalResult.of(verdict).write(paths.eval / "result.json")
    for number, candidate in enumerate(Pool.load(paths.junior / "pool.json").candidates):
        EvalResult.of({**verdict, "resolved": number == 0, "category": "resolved" if number == 0 else "tests_failed",
                       "key": candidate.key, "votes": candidate.votes, "rollouts": candidate.rollouts}
                      ).write(paths.candidate_result(candidate.key))
    return layout.root


@pytest.mark.slow
def test_a_run_of_the_previous_version_reads_as_the_same_run_of_this_one(tmp_path, local_repo):
    new = scripted_run(tmp_path / "new", local_repo)
    files = record_files(new)
    for kind, paths in files.items():  # every record this version wrote is of its type, checked strictly
        assert paths, kind
        for path in paths:
            for line in path.read_text().splitlines() if kind is Prediction else [path.read_text()]:
                data = json.loads(line)
                assert data["format"] == kind.FORMAT, path
                kind.of(data)
    prediction = json.loads((new / "predictions.jsonl").read_text())
    assert prediction["source"] == "principal" and "+    return a + b" in prediction["model_patch"], prediction
    old = tmp_path / "old" / "runs" / "scripted"
    shutil.copytree(new, old)
    counts = rewrite_formats(old, without_format)
    assert all(counts.values()), counts
    patches, problems = {prediction["instance_id"]: GOLD}, {prediction["instance_id"]: "add() subtracts."}
    before, after = outputs(old, patches, problems), outputs(new, patches, problems)
    assert set(before) == set(after) and any(name.startswith("trajectories/") for name in after)
    for name in after:
        assert before[name] == after[name], name
    assert "vote@k" in str(after["whatif"]) and "pass@k" in str(after["whatif"])  # the candidates' verdicts read


def test_the_records_package_names_every_record_type():
    assert set(records.RECORDS) == {Rollout, Pool, Brief, PrincipalResult, Prediction, EvalResult, SoloResult,
                                    ReplayResult, TeamResult, TeamDelegations, TaskContainers}
    assert all(kind.FILE and kind.FORMAT >= 1 and kind.__doc__ for kind in records.RECORDS)


def test_the_run_directory_document_is_what_the_record_types_give():
    """docs/run-directory.md is generated (python -m pipeline.records.schema): it cannot drift from the types."""
    from pipeline.records import schema

    assert schema.DOC.read_text(encoding="utf-8") == schema.render(), "run python -m pipeline.records.schema"
    assert schema.main(["--check"]) == 0
    text = schema.render()
    for kind in records.RECORDS:
        section = text.split(f"\n## {kind.__name__}\n", 1)[1].split("\n## ", 1)[0]
        assert f"Format {kind.FORMAT}." in section
        for name, info in kind.model_fields.items():  # every field, with its description
            assert f"| `{name}` |" in section and info.description and _words(info.description) in section, name


def _words(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def test_a_runs_finished_tasks_are_read_by_the_one_lenient_reader(tmp_path):
    """What a resumed run skips: every task with a line (the last one wins), one whose last line is no readable
    prediction too, with a dict that says why; a last line cut short by a kill, or a line naming no task, is none."""
    from pipeline.records.prediction import finished_predictions

    path = tmp_path / "predictions.jsonl"
    assert finished_predictions(path) == {}  # no file yet
    lines = [{"format": 1, "instance_id": "a", "model_patch": "old", "source": "principal"},
             {"format": 1, "instance_id": "a", "model_patch": "new", "source": "principal", "extra": 1},
             {"format": 99, "instance_id": "b", "model_patch": ""},
             {"format": 1, "model_patch": "nobody's"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"format": 1, "instance_id": "c", "mod')
    finished = finished_predictions(path)
    assert finished["a"] == {"instance_id": "a", "model_patch": "new", "source": "principal", "extra": 1}
    assert finished["b"]["instance_id"] == "b" and finished["b"]["error"].startswith("predictions.jsonl line 3: ")
    assert set(finished) == {"a", "b"}


def test_a_stage_that_hands_back_a_dict_is_told_which_record_it_must_return(tmp_path):
    from pipeline.job import once
    from pipeline.records.base import expect_record
    from pipeline.strategies.answer import TaskAnswer

    with pytest.raises(RecordError, match="expected a Brief record .* got dict"):
        once(tmp_path / "brief.json", lambda: {"context": "the fields, not the record"}, records.Brief)
    assert not (tmp_path / "brief.json").exists()  # nothing written: a rerun asks the stage again
    made = once(tmp_path / "brief.json", lambda: records.Brief.of({"context": "kept"}), records.Brief)
    assert made.context == "kept" and records.Brief.load(tmp_path / "brief.json").context == "kept"
    with pytest.raises(RecordError, match="expected a TaskAnswer record"):
        expect_record({"model_patch": ""}, TaskAnswer)
