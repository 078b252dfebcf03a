"""`swepipe run --repeats N` and the report across the repeats: mean ± sd and pass@k worked out by hand on made-up
repeats; the run end to end with the scripted model in local clones (tests/local_opener.py), resumed without paying
again, its budget shared by the repeats, a stop in a repeat; and, in Docker, the repeats scored and reported."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import scripted_pipeline
import yaml
from interrupting import interrupt_when
from scripted_pipeline import SUBMIT, bash, brief_from_patch, edits_from_patch, patch_per_file, reply
from test_report import make_run
from test_sweep import apply_command

from pipeline.analysis.load import load_run
from pipeline.analysis.repeats import pass_at_k, repeat_groups, runs_named_by
from pipeline.analysis.stats import run_stats
from pipeline.models.ledger import Ledger, LedgerRow
from pipeline.records.prediction import finished_predictions
from pipeline.report.build import build_report, write_report
from pipeline.run.repeats import Repeat, repeat_config
from pipeline.rundir.layout import RunLayout
from pipeline.settings.config import RunConfig
from pipeline.tasks import load_tasks

TESTS = Path(__file__).parent
TASK = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))  # a fix in two files
PRICES = {"input": 1.0, "output": 2.0}
REPLY_COST = (1000 * 1 + 100 * 2) / 1e6  # scripted_pipeline's usage at these prices
REPLIES_PER_TASK = 2 * 2 + 2 + 1  # two juniors of two replies, the senior's two, the principal's one


# -- the numbers, on hand-made repeats ---------------------------------------------------------------------------


# Verdicts per repeat (None: not scored, e.g. an infrastructure error) and each task's dollars in that repeat.
OUTCOMES = {1: {"A": True, "B": False, "C": True, "E": True, "D": True},
            2: {"A": False, "B": False, "C": True, "E": True, "D": None},
            3: {"A": False, "B": False, "C": True, "E": False, "D": None}}
DOLLARS = {1: 0.1, 2: 0.2, 3: 0.3}


def make_repeats(runs: Path, group: str = "g", numbers=(1, 2, 3)) -> list[Path]:
    made = []
    for number in numbers:
        tasks = [{"id": task, "cost": {"junior": DOLLARS[number]}, **({} if verdict is None else {"resolved": verdict})}
                 for task, verdict in OUTCOMES[number].items()]
        run = make_run(runs, f"{group}-r{number}", {"juniors": {"seed": 1000 * (number - 1)}}, tasks)
        (run / "repeat.json").write_text(json.dumps({"group": group, "repeat": number, "repeats": 3}))
        made.append(run)
    return made


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(1 - 1 / 3)  # 1 - C(2,2)/C(3,2): only the pair without the hit misses
    assert pass_at_k(3, 1, 3) == 1.0 and pass_at_k(3, 0, 2) == 0.0 and pass_at_k(2, 2, 1) == 1.0


def test_mean_sd_and_pass_at_k_across_repeats_match_the_hand_count(tmp_path):
    paths = make_repeats(tmp_path)
    runs = [load_run(path) for path in reversed(paths)]  # the order given does not matter
    (group,) = repeat_groups(runs, [run_stats(run) for run in runs])
    assert group.group == "g" and [row.number for row in group.rows] == [1, 2, 3]
    assert [row.seed for row in group.rows] == [0, 1000, 2000]
    # Resolve rates 4/5, 2/4 and 1/4 (D is scored in repeat 1 only): in 60ths 48, 30, 15, mean 31, deviations
    # 17, -1, -16, squares 289 + 1 + 256 = 546, over n - 1 = 2: 273.
    assert [(row.resolved, row.scored) for row in group.rows] == [(4, 5), (2, 4), (1, 4)]
    assert group.rate == pytest.approx((31 / 60, math.sqrt(273) / 60))
    assert group.dollars_per_task == pytest.approx((0.2, 0.1))  # $0.1, $0.2, $0.3 a task
    # pass@1: A 1/3, B 0, C 1, E 2/3, D 1 (n = 1), over 5 tasks; pass@2: A 1 - C(2,2)/C(3,2) = 2/3, B 0, C 1,
    # E 1 - C(1,2)/C(3,2) = 1, over the 4 scored twice or more; pass@3: A 1, B 0, C 1, E 1.
    assert [(p.k, p.tasks) for p in group.pass_at] == [(1, 5), (2, 4), (3, 4)]
    assert [p.value for p in group.pass_at] == pytest.approx([3 / 5, (2 / 3 + 0 + 1 + 1) / 4, 3 / 4])


def test_the_report_of_a_group_shows_its_repeats_in_markdown_and_html(tmp_path):
    paths = make_repeats(tmp_path / "runs")
    make_run(tmp_path / "runs", "other", None, [{"id": "A", "cost": {"junior": 1.0}, "resolved": True}])
    report = build_report([*paths, tmp_path / "runs" / "other"], None)
    written = write_report(report, paths[0], task_pages=False)
    markdown = written["report.md"].read_text()
    assert "## Repeats of g (3 repeats)" in markdown and "## pass@k over the repeats of g" in markdown
    assert "| mean ± sd |  |  |  | 51.7% ± 27.5 pp | $0.2000 ± $0.1000 |" in markdown  # 31/60, sqrt(273)/60
    assert "| 2 | g-r2 | 1000 | 2/4 | 50.0% | $0.2000 |" in markdown
    assert "| 1 | 60.0% | 5 |" in markdown and "| 3 | 75.0% | 4 |" in markdown
    assert "other" not in markdown.split("## Repeats of g")[1].split("## pass@k")[0]  # not a repeat of g
    html = (paths[0] / "report.html").read_text()
    assert "<h2>Repeats of g (3 repeats)</h2>" in html and "51.7% ± 27.5 pp" in html


def test_a_group_name_stands_for_its_repeats_and_a_run_for_itself(tmp_path):
    paths = make_repeats(tmp_path, numbers=(1, 2, 3))
    (tmp_path / "g-r10x").mkdir()  # not a repeat's name
    assert runs_named_by(tmp_path / "g") == paths
    assert runs_named_by(paths[1]) == [paths[1]]
    assert runs_named_by(tmp_path / "nothing") == [tmp_path / "nothing"]  # load_run says it does not exist


# -- the run's config per repeat ---------------------------------------------------------------------------------


def spend(runs: Path, run_id: str, dollars: float) -> None:
    Ledger(runs / run_id / "tasks" / "t" / "ledger.jsonl").append(
        LedgerRow(stage="junior", role="junior", model="m", cost=dollars))


def test_each_repeat_gets_its_own_seeds_and_what_the_other_repeats_left_of_the_budget(tmp_path):
    spend(tmp_path, "g-r1", 0.3)
    spend(tmp_path, "g-r3", 0.2)
    spend(tmp_path, "g-r2", 0.25)  # repeat 2's own spend: its run's budget counts it from its ledger
    spend(tmp_path, "h-r1", 5.0)  # another group
    config = RunConfig.model_validate({"juniors": {"seed": 7}, "budgets": {"per_run": 1.0, "per_task": 0.4}})
    second = repeat_config(config, Repeat("g", 2, 3), tmp_path)
    assert second.juniors.seed == 1007 and second.budgets.per_run == pytest.approx(1.0 - 0.3 - 0.2)
    assert second.budgets.per_task == 0.4 and second.juniors.k == config.juniors.k
    first = repeat_config(config, Repeat("g", 1, 3), tmp_path)
    assert first.juniors.seed == 7 and first.budgets.per_run == pytest.approx(1.0 - 0.25 - 0.2)
    spent_out = RunConfig.model_validate({"budgets": {"per_run": 0.4}})
    assert repeat_config(spent_out, Repeat("g", 2, 3), tmp_path).budgets.per_run == 0.0  # never below nothing
    assert repeat_config(RunConfig(), Repeat("g", 3, 3), tmp_path).budgets.per_run is None  # no budget: none


# -- `swepipe run --repeats` end to end (scripted model, local clones) ----------------------------------------


def setup(tmp_path: Path, junior_sleep: float = 0, local: bool = True, prices: dict = PRICES,
          max_tokens: int | None = None, **extra) -> None:
    """Juniors fix one file each (after ``junior_sleep`` seconds), the senior covers both, the principal both.
    ``max_tokens``: of every model, which bounds the worst case each call reserves against the budgets."""
    halves = list(patch_per_file(TASK.patch).values())
    first = [bash(f"sleep {junior_sleep}")] if junior_sleep else []
    script = {"junior": [[*first, bash(apply_command(half)), SUBMIT] for half in halves],
              "senior": [bash("git grep -n 'def ' -- '*.py' | head -40"), reply(brief_from_patch(TASK.patch))],
              "principal": [reply(edits_from_patch(TASK.patch))]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    spec = {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": prices,
            **({"max_tokens": max_tokens} if max_tokens else {})}
    config = {"models": {role: spec for role in ("junior", "senior", "principal")}, "juniors": {"k": 2},
              "limits": {"max_steps": 6, "command_timeout": 60}, **extra}
    if local:
        config["containers"] = {"impl": "local_opener:open_local"}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))


def env(repo: Path, **more) -> dict:
    return {**os.environ, "COLUMNS": "250", "PYTHONPATH": str(TESTS), "SWEPIPE_TEST_REPO": str(repo),
            "SWEPIPE_TEST_BASE": TASK.base_commit, **more}


def swepipe(*args, cwd, environment, check=True):
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=environment, stdin=subprocess.DEVNULL, timeout=600)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def run_args(*more: str) -> list[str]:
    return ["run", "--config", "config.yaml", "--instance-ids", TASK.instance_id, "--run-id", "g", *more]


def ledgers(runs: Path) -> dict[str, list]:
    return {run.name: [(r.call, r.cost) for p in sorted(run.glob("tasks/*/ledger.jsonl")) for r in Ledger.read(p)]
            for run in sorted(runs.iterdir()) if run.is_dir()}


@pytest.mark.slow
def test_repeats_run_into_sibling_directories_with_their_own_seeds_and_resume_without_paying(tmp_path, tinyq_repo):
    setup(tmp_path)
    done = swepipe(*run_args("--repeats", "2"), cwd=tmp_path, environment=env(tinyq_repo))
    runs = tmp_path / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["g-r1", "g-r2"]  # no runs/g: the group is its repeats
    for number, seed in ((1, 0), (2, 1000)):
        layout = RunLayout(runs / f"g-r{number}")
        assert json.loads(layout.repeat.read_text()) == {
            "group": "g", "repeat": number, "repeats": 2, "seed_offset": seed, "juniors_seed": seed,
            "group_budget_per_run": None}
        assert yaml.safe_load(layout.config.read_text())["juniors"]["seed"] == seed
        rollouts = [json.loads(p.read_text()) for p in sorted(layout.task(TASK.instance_id).junior.glob(
            "rollout-*.json")) if not p.name.endswith(".trajectory.json")]
        assert [r["seed"] for r in rollouts] == [seed, seed + 1]  # rollout i: juniors.seed + i
        assert [len(patch_per_file(r["patch"])) for r in rollouts] == [1, 1]  # each fixed its half
        prediction = finished_predictions(layout.predictions)[TASK.instance_id]
        assert prediction["source"] == "principal" and prediction["cost"]["total"] == pytest.approx(
            REPLIES_PER_TASK * REPLY_COST)
    output = " ".join(done.stdout.split())
    assert "repeat 1/2: juniors.seed 0" in output and "repeat 2/2: juniors.seed 1000" in output
    assert "swepipe report runs/g" in output

    paid = ledgers(runs)
    assert [len(rows) for rows in paid.values()] == [REPLIES_PER_TASK] * 2
    again = swepipe(*run_args("--repeats", "2"), cwd=tmp_path, environment=env(tinyq_repo, SWEPIPE_TEST_REFUSE="1"))
    assert ledgers(runs) == paid  # nothing paid again, no workspace opened (the opener refuses)
    assert " ".join(again.stdout.split()).count("had finished in an earlier session of this run and were skipped") == 2

    report = swepipe("report", "runs/g", cwd=tmp_path, environment=env(tinyq_repo))
    assert "runs/g: the 2 repeats g-r1, g-r2" in " ".join(report.stdout.split())
    markdown = (runs / "g-r1" / "report.md").read_text()
    assert "## Repeats of g (2 repeats)" in markdown and "## pass@k over the repeats of g" in markdown
    dollars = f"${REPLIES_PER_TASK * REPLY_COST:.4f}"
    assert f"| 2 | g-r2 | 1000 | 0/0 | n/a | {dollars} |" in markdown  # not scored: no rate, no pass@k
    assert f"| mean ± sd |  |  |  | n/a | {dollars} ± $0.0000 |" in markdown
    assert "| 1 | n/a | 0 |" in markdown and "| 2 | n/a | 0 |" in markdown
    both = swepipe("report", "runs/g-r2", "runs/g-r1", cwd=tmp_path, environment=env(tinyq_repo))
    assert "Repeats of g (2 repeats)" in both.stdout


@pytest.mark.slow
def test_the_repeats_share_the_run_budget(tmp_path, tinyq_repo):
    """budgets.per_run is the whole group's: the second repeat gets what the first left, and the two together stay
    within it, though either alone could have spent all of it."""
    # Input nearly free and replies of exactly max_tokens: each call's worst case is about its real cost, so the
    # first repeat fits in 1.5 times its cost whatever the prompts' lengths, and the second cannot.
    prices, usage = {"input": 0.01, "output": 10.0}, scripted_pipeline.USAGE
    one_repeat = REPLIES_PER_TASK * (usage["prompt_tokens"] * 0.01 + usage["completion_tokens"] * 10.0) / 1e6
    budget = 1.5 * one_repeat
    setup(tmp_path, prices=prices, max_tokens=usage["completion_tokens"], budgets={"per_run": budget})
    swepipe(*run_args("--repeats", "2"), cwd=tmp_path, environment=env(tinyq_repo))
    runs = tmp_path / "runs"
    spent = {name: sum(cost for _, cost in rows) for name, rows in ledgers(runs).items()}
    assert spent["g-r1"] == pytest.approx(one_repeat)  # the first had room for its whole task
    assert 0 < spent["g-r2"] < one_repeat and sum(spent.values()) <= budget + 1e-9
    second = yaml.safe_load((runs / "g-r2" / "config.yaml").read_text())["budgets"]["per_run"]
    assert second == pytest.approx(budget - spent["g-r1"])
    assert json.loads((runs / "g-r2" / "repeat.json").read_text())["group_budget_per_run"] == pytest.approx(budget)


def test_bad_repeats_are_refused_naming_the_input(tmp_path, tinyq_repo):
    setup(tmp_path)
    zero = swepipe(*run_args("--repeats", "0"), cwd=tmp_path, environment=env(tinyq_repo), check=False)
    assert zero.returncode == 2 and "--repeats 0:" in " ".join(zero.stderr.split()) and "Traceback" not in zero.stderr
    reuse = swepipe(*run_args("--repeats", "2", "--reuse-juniors-from", "earlier"), cwd=tmp_path,
                    environment=env(tinyq_repo), check=False)
    assert reuse.returncode == 2 and "--repeats with --reuse-juniors-from" in " ".join(reuse.stderr.split())
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_stop_in_a_repeat_says_how_to_resume_the_repeats(tmp_path, tinyq_repo):
    setup(tmp_path, junior_sleep=4)
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", *run_args("--repeats", "2")], cwd=tmp_path,
                            env=env(tinyq_repo), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = interrupt_when(proc, lambda: bool(list(runs.glob("g-r1/tasks/*/junior/rollout-*.trajectory.jsonl"))),
                              "a rollout of the first repeat")  # a junior sleeps
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    said = " ".join(out.split())
    assert "run the same command again (--run-id g --repeats 2) to resume repeat 1 and run the ones after it" in said
    assert not (runs / "g-r2").exists() and finished_predictions(RunLayout(runs / "g-r1").predictions) == {}


# -- scored in Docker ----------------------------------------------------------------------------------------


@pytest.mark.docker
def test_scored_repeats_give_resolve_rates_and_pass_at_k(tmp_path, tinyq_repo):
    """The agents work in local clones; each repeat's patch is scored with the task's hidden tests in its image."""
    setup(tmp_path)
    swepipe(*run_args("--repeats", "2", "--evaluate"), cwd=tmp_path, environment=env(tinyq_repo))
    runs = tmp_path / "runs"
    assert all(finished_predictions(RunLayout(runs / f"g-r{n}").predictions)[TASK.instance_id]["resolved"] is True
               for n in (1, 2))
    swepipe("report", "runs/g", cwd=tmp_path, environment=env(tinyq_repo))
    markdown = (runs / "g-r1" / "report.md").read_text()
    assert "| 1 | g-r1 | 0 | 1/1 | 100.0% |" in markdown and "| 2 | g-r2 | 1000 | 1/1 | 100.0% |" in markdown
    assert "| mean ± sd |  |  |  | 100.0% ± 0.0 pp |" in markdown
    assert "| 1 | 100.0% | 1 |" in markdown and "| 2 | 100.0% | 1 |" in markdown
