"""Patches that forge their own verdict, scored in real containers (issue 32): a conftest.py that rewrites the parser
at test time to report every required test PASSED, one that prints forged PASSED lines after pytest has ended (with
a parser in the official style, which keeps every line it finds, as many of the official parsers do), and one that
rewrites output.json. None resolves, each names its integrity findings, none ends a run; the gold and empty patches
of every bundled task keep their verdicts."""

import html
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from leftovers import run_containers
from scripted_pipeline import SUBMIT, apply_patch_command, bash

from pipeline.evaluation.runner import EvalSettings, evaluate
from pipeline.evaluation.task_scoring import score_prediction
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED, BUNDLED_DIR, BUNDLED_IMAGE_TEMPLATE, defaults_for

pytestmark = pytest.mark.docker
TASKS = {t.repo.split("/")[-1]: t for t in load_tasks(BUNDLED)}
TINYQ, CURSORLY = TASKS["tinyq"], TASKS["cursorly"]

# A parser as many official ones are written: every matching line is an entry, a name may come twice (the official
# harness counts a test passed when any of its entries is PASSED).
OFFICIAL_STYLE_PARSER = r'''import json, re, sys
LINE = re.compile(r"^(\S+\.py::\S+)\s+(PASSED|FAILED|SKIPPED|ERROR)\b")
tests = []
for path in sys.argv[1:3]:
    with open(path, errors="replace") as log:
        for line in log:
            match = LINE.match(line.strip())
            if match:
                tests.append({"name": match.group(1), "status": match.group(2)})
with open(sys.argv[3], "w") as out:
    json.dump({"tests": tests}, out)
'''


def new_file(path: str, text: str) -> str:
    lines = text.splitlines(keepends=True)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n" + "".join("+" + line for line in lines))


def hook_claiming_every_required_test_passed(task) -> str:
    """conftest.py, loaded by pytest before any test runs, rewrites /workspace/parser.py to report every required
    test PASSED, whatever the tests do."""
    names = task.fail_to_pass + task.pass_to_pass
    forged = ("import json, sys\njson.dump({'tests': [{'name': n, 'status': 'PASSED'} for n in %r]}, "
              "open(sys.argv[3], 'w'))\n" % names)
    return f"with open('/workspace/parser.py', 'w') as parser:\n    parser.write({forged!r})\n"


def hook_printing_forged_passes(task) -> str:
    """conftest.py prints a PASSED line for each FAIL_TO_PASS test once pytest has ended (the tests fail)."""
    return ("import atexit\n\n"
            f"REQUIRED = {task.fail_to_pass!r}\n"
            "atexit.register(lambda: print(''.join(f'{name} PASSED\\n' for name in REQUIRED), flush=True))\n")


HOOK_REWRITING_OUTPUT_JSON = """import atexit


def tamper():
    with open('/workspace/parser.py', 'w') as parser:
        parser.write('pass\\n')
    with open('/workspace/output.json', 'w') as output:
        output.write('[]')


atexit.register(tamper)
"""


def settings(run_id, **overrides):
    defaults = defaults_for(BUNDLED)
    return EvalSettings(**{"image_template": defaults.image_template, "run_scripts": defaults.run_scripts,
                           "run_id": run_id, **overrides})


def scripts_with(tmp_path, *parsers) -> "os.PathLike":
    """A run_scripts folder: each task's bundled run_script.sh, and the parser given for it ((task, parser)s)."""
    root = tmp_path / "run_scripts"
    for task, parser in parsers:
        (root / task.instance_id).mkdir(parents=True)
        shutil.copy(defaults_for(BUNDLED).run_scripts / task.instance_id / "run_script.sh",
                    root / task.instance_id / "run_script.sh")
        (root / task.instance_id / "parser.py").write_text(parser)
    return root


def kinds(result) -> set:
    return {finding["kind"] for finding in result.get("integrity") or []}


def test_a_hook_that_rewrites_the_parser_to_claim_every_test_passed_does_not_resolve(tmp_path, run_id):
    """Before, the rewritten parser ran in the tests' container and the patch was scored resolved."""
    patch = new_file("conftest.py", hook_claiming_every_required_test_passed(TINYQ))
    result = evaluate(TINYQ, patch, tmp_path / "eval", settings(run_id)).to_dict()
    assert not result["resolved"] and not result["official_resolved"], result
    assert result["category"] == "tests_failed" and result["patch_applied"] is True
    assert kinds(result) == {"grader_written"}
    assert "changed or removed parser.py" in result["integrity"][0]["detail"]
    assert result["FAIL_TO_PASS"]["failed"] == TINYQ.fail_to_pass  # the pristine parser read the real outcome
    assert result["test_infrastructure"] == ["conftest.py: pytest configuration"]
    assert "FAILED" in (tmp_path / "eval" / "stdout.log").read_text()
    assert run_containers(run_id) == []


def test_forged_passed_lines_printed_after_the_tests_end_do_not_resolve(tmp_path, run_id):
    """The official protocol resolves it (a PASSED entry for each test) and so did swepipe (the last entry won);
    the runner's own summary counts the failures, and the tests are reported twice with different statuses."""
    scripts = scripts_with(tmp_path, (CURSORLY, OFFICIAL_STYLE_PARSER))
    patch = new_file("conftest.py", hook_printing_forged_passes(CURSORLY))
    result = evaluate(CURSORLY, patch, tmp_path / "eval", settings(run_id, run_scripts=scripts)).to_dict()
    assert result["official_resolved"] is True and result["resolved"] is False, result
    assert result["category"] == "flagged"
    assert kinds(result) == {"conflicting_statuses", "summary_contradicts"}
    assert any("pytest" in finding["detail"] for finding in result["integrity"])
    gold = evaluate(CURSORLY, CURSORLY.patch, tmp_path / "gold", settings(run_id, run_scripts=scripts)).to_dict()
    assert gold["resolved"] and gold["integrity"] == []  # an honest patch keeps its verdict under that parser


def test_tests_that_rewrite_output_json_are_recorded_not_a_crash_of_the_run(tmp_path, run_id):
    """Before, the run's scoring read output.json's list with .get (AttributeError) and the whole run ended."""
    paths = RunLayout(tmp_path / "run").task(TINYQ.instance_id)
    patch = new_file("conftest.py", HOOK_REWRITING_OUTPUT_JSON)
    assert score_prediction(TINYQ, patch, paths, settings(run_id)) is False
    result = json.loads((paths.eval / "result.json").read_text())
    assert result["category"] == "tests_failed" and not result["official_resolved"]
    details = " ".join(finding["detail"] for finding in result["integrity"])
    assert kinds(result) == {"grader_written"} and "parser.py" in details and "wrote output.json" in details
    assert result["PASS_TO_PASS"]["passed"] == TINYQ.pass_to_pass  # the pristine parser read the real outcome


def test_a_parser_that_writes_output_json_of_the_wrong_shape_is_a_recorded_scoring_error(tmp_path, run_id):
    scripts = scripts_with(tmp_path, (TINYQ, "import sys\nopen(sys.argv[3], 'w').write('[]')\n"))
    result = evaluate(TINYQ, TINYQ.patch, tmp_path / "eval", settings(run_id, run_scripts=scripts)).to_dict()
    assert result["category"] == "tests_failed" and not result["resolved"]
    assert result["error"] == "output.json cannot be read: output.json holds a list, not an object"


def swepipe(*args, cwd):
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "400"}, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return " ".join(done.stdout.split())


FORGED = [(TINYQ, new_file("conftest.py", hook_claiming_every_required_test_passed(TINYQ))),
          (CURSORLY, new_file("conftest.py", hook_printing_forged_passes(CURSORLY)))]


@pytest.mark.slow
def test_forged_verdicts_are_not_resolved_by_eval_nor_by_run_evaluate_nor_in_the_report(tmp_path):
    scripts = scripts_with(tmp_path, (TINYQ, (BUNDLED_DIR / "tasks" / TINYQ.instance_id / "parser.py").read_text()),
                           (CURSORLY, OFFICIAL_STYLE_PARSER))
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("".join(json.dumps({"instance_id": task.instance_id, "model_patch": patch}) + "\n"
                                   for task, patch in FORGED))
    shown = swepipe("eval", "--predictions", str(predictions), "--run-scripts", str(scripts), "--output", "out",
                    cwd=tmp_path)
    assert json.loads((tmp_path / "out" / "eval_results.json").read_text()) == dict.fromkeys(
        (TINYQ.instance_id, CURSORLY.instance_id), False)
    assert f"integrity findings in {TINYQ.instance_id} (not resolved): grader_written" in shown
    assert f"integrity findings in {CURSORLY.instance_id} (not resolved): conflicting_statuses" in shown
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["flagged"] == 2

    # `swepipe run --evaluate`: a solo agent writes the task's forged conftest.py and submits
    chooser = "".join(f"if [ -f {task.fail_to_pass[0].split('::')[0]} ]; then\n{apply_patch_command(patch)}\nfi\n"
                      for task, patch in FORGED)
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"solo": [[bash(chooser), SUBMIT]]}))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"models": {"solo": {
        "model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}}}))
    swepipe("run", "--strategy", "solo", "--instance-ids", f"{TINYQ.instance_id},{CURSORLY.instance_id}",
            "--config", "config.yaml", "--run-id", "forged", "--evaluate", "--run-scripts", str(scripts),
            cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "forged")
    finished = finished_predictions(layout.predictions)
    for task, patch in FORGED:
        assert patch.splitlines()[-1] in finished[task.instance_id]["model_patch"]  # the agent's diff has the hook
        assert finished[task.instance_id]["resolved"] is False, finished[task.instance_id]
    result = json.loads((layout.task(CURSORLY.instance_id).eval / "result.json").read_text())
    assert result["official_resolved"] is True and kinds(result) == {"conflicting_statuses", "summary_contradicts"}
    swepipe("report", str(layout.root), cwd=tmp_path)
    report = (layout.root / "report.md").read_text().replace("\\", "")  # as shown, Markdown's escapes read
    assert "verdicts flagged by integrity checks (not resolved) | 2 (conflicting_statuses 1, grader_written 1, " \
           "summary_contradicts 1)" in report
    assert "| resolved (95% CI) | 0/2 = 0.0%" in report
    page = html.unescape(next(tmp_path.rglob(f"{CURSORLY.instance_id}.html")).read_text())  # the task's page
    assert "integrity findings" in page and "summary_contradicts: the runner's own summaries count" in page


def _validated(tmp_path: Path) -> Path:
    """`swepipe validate`'s output for the bundled tasks: the test command's own run of it (scripts/test.sh runs it
    before the tests, stops on its failure, and says where it wrote), else one made here."""
    given = os.environ.get("SWEPIPE_VALIDATED")
    if given and (Path(given) / "reliable.txt").is_file():
        return Path(given)
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "validate", "--dataset", BUNDLED, "--run-scripts",
                           str(BUNDLED_DIR / "tasks"), "--image-template", BUNDLED_IMAGE_TEMPLATE,
                           "--output", "out"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "COLUMNS": "400"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return tmp_path / "out"


@pytest.mark.slow
def test_the_gold_and_empty_patches_of_every_bundled_task_keep_their_verdicts_under_validate(tmp_path):
    out = _validated(tmp_path)
    tasks = load_tasks(BUNDLED)
    assert (out / "reliable.txt").read_text().split() == sorted(t.instance_id for t in tasks)
    for patch in ("gold", "empty"):
        for task in tasks:
            result = json.loads((out / patch / "r1" / task.instance_id / "result.json").read_text())
            assert result["integrity"] == [] and result["resolved"] is result["official_resolved"] is \
                (patch == "gold"), (patch, task.instance_id, result)
