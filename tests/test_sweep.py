"""`swepipe sweep`: the grid, its worst case, one run directory per cell, resume, stop, and the report."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from interrupting import interrupt_when
from scripted_pipeline import SUBMIT, bash, patch_per_file, reply

from pipeline.errors import SwepipeError
from pipeline.models.ledger import Ledger
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.runtime import containers
from pipeline.settings.config import RunConfig
from pipeline.studies.sweep import build_grid, plan_sweep, read_grid_file, slug
from pipeline.tasks import load_tasks

TESTS = Path(__file__).parent
TASK = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))  # a fix in two files
PRICES = {"input": 1.0, "output": 2.0}
REPLY_COST = (1000 * 1 + 100 * 2) / 1e6  # scripted_pipeline's usage at these prices
TEAM = ["team-s1-implementation-blocking-lead_script-worker_script-minimal",
        "team-s2-implementation-blocking-lead_script-worker_script-minimal",
        "team-s4-implementation-blocking-lead_script-worker_script-minimal"]
SOLO = "solo-script-minimal"


def apply_command(patch: str) -> str:
    """Apply ``patch`` through a private temporary file (workers run at once in one workspace)."""
    return (f"f=$(mktemp) && cat > \"$f\" <<'SWEPIPE_PATCH'\n{patch}SWEPIPE_PATCH\n"
            "git apply \"$f\"; rm -f \"$f\"; git status --short")


def report(text: str) -> dict:
    return reply(f"Done.\n```report\n{text}\n```\n```bash\nsubmit\n```")


def script(worker_sleep: float = 0) -> dict:
    """Worker i applies half i mod 2 of the gold patch, so one worker fixes half the task and two or more fix all
    of it; the solo agent (the lead model playing solo) fixes only the first half."""
    halves = list(patch_per_file(TASK.patch).values())
    delegate = reply("Team action.\n```delegate\nstage: implementation\ntask: Fix the queue's retry handling.\n```")
    first = [bash(f"sleep {worker_sleep}")] if worker_sleep else []
    return {"lead": [delegate, reply("```wait\n```"), SUBMIT],
            "worker": [[*first, bash(apply_command(halves[0])), report("fixed the first file")],
                       [*first, bash(apply_command(halves[1])), report("fixed the second file")]],
            "solo": [[bash(apply_command(halves[0])), SUBMIT]]}


def setup(tmp_path, budgets=None, local=True, worker_sleep: float = 0, **extra) -> None:
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script(worker_sleep)))
    spec = {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": PRICES}
    config = {"models": {"lead": spec, "worker": spec}, "limits": {"max_steps": 8, "command_timeout": 60}, **extra}
    if budgets is not None:
        config["budgets"] = budgets
    if local:
        config["containers"] = {"impl": "local_opener:open_local"}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))


def env(repo: Path | None = None, **more) -> dict:
    values = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(TESTS), **more}
    if repo is not None:
        values.update(SWEPIPE_TEST_REPO=str(repo), SWEPIPE_TEST_BASE=TASK.base_commit)
    return values


def swepipe(*args, cwd, environment=None, check=True):
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=environment or env(), stdin=subprocess.DEVNULL, timeout=600)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def sweep_args(*more: str) -> list[str]:
    return ["sweep", "--config", "config.yaml", "--instance-ids", TASK.instance_id, "--sizes", "1,2,4",
            "--stages", "implementation", "--modes", "blocking", "--sweep-id", "sw", *more]


def ledger_rows(root: Path) -> dict[str, int]:
    return {cell.name: sum(len(Ledger.read(p)) for p in cell.glob("tasks/*/ledger.jsonl"))
            for cell in sorted(root.iterdir()) if cell.is_dir() and (cell / "tasks").is_dir()}


# -- the grid --------------------------------------------------------------------------------------


def test_dry_run_prints_every_cell_and_the_worst_case_and_writes_nothing(tmp_path):
    setup(tmp_path, budgets={"per_task": 0.5, "per_run": 1.2}, local=False)
    done = swepipe("sweep", "--config", "config.yaml", "--limit", "3", "--sizes", "1,2,4", "--modes", "blocking,async",
                   "--stages", "implementation", "--sweep-id", "sw", "--dry-run", cwd=tmp_path)
    lines = done.stdout.splitlines()
    cells = [line for line in lines if " -> runs/sw/" in line]
    assert len(cells) == 1 + 3 * 2  # the solo baseline (the lead model playing solo) and 3 sizes x 2 modes
    assert cells[0].startswith("solo") and f"-> runs/sw/{SOLO}" in cells[0]
    assert "size=4 sizing=fixed stage=implementation mode=async" in cells[-1]
    assert "-> runs/sw/team-s4-implementation-async-lead_script-worker_script-minimal" in cells[-1]
    assert all("worst case $1.20 (per_run $1.2, under per_task $0.5 x 3 task(s))" in line for line in cells)
    assert "worst case: $8.40 for the whole sweep" in done.stdout
    assert not (tmp_path / "runs").exists()

    setup(tmp_path, budgets={"per_task": 0.25}, local=False)
    done = swepipe("sweep", "--config", "config.yaml", "--limit", "2", "--sizes", "2", "--dry-run", cwd=tmp_path)
    assert "worst case $0.50 (per_task $0.25 x 2 task(s))" in done.stdout
    assert "worst case: $1.00 for the whole sweep" in done.stdout

    setup(tmp_path, local=False)  # no budget at all
    done = swepipe("sweep", "--config", "config.yaml", "--limit", "2", "--sizes", "2", "--dry-run", cwd=tmp_path)
    assert "worst case: UNBOUNDED" in done.stdout and "budgets.per_task and budgets.per_run unset" in done.stdout
    assert "$" not in done.stdout.split("worst case: ")[1].splitlines()[0]  # no dollar figure pretends a bound
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--sizes", "0"], "--sizes: '0' is not a team size"),
    (["--sizes", "1,two"], "--sizes: 'two' is not a team size"),
    (["--sizes", "17"], "sizes are whole numbers from 1 to 16"),
    (["--sizes", "1,,4"], "an empty value in the list"),
    (["--stages", "testing"], "--stages: unknown stage 'testing'"),
    (["--modes", "parallel"], "--modes: unknown mode 'parallel'"),
    (["--lead-prompts", "heavy"], "--lead-prompts: unknown prompt 'heavy'"),
    (["--sizing", "auto"], "sizing 'auto'"),
    (["--lead-models", "none"], "cannot be switched off"),
    (["--editors", "on,maybe"], "--editors: unknown editor setting 'maybe'"),
])
def test_bad_grid_values_are_refused_with_a_clear_message_before_anything_runs(tmp_path, args, message):
    setup(tmp_path)
    done = swepipe("sweep", "--config", "config.yaml", "--instance-ids", TASK.instance_id, "--sweep-id", "sw", *args,
                   cwd=tmp_path, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in " ".join(done.stderr.split()), done.stderr
    assert not (tmp_path / "runs").exists()


def test_a_grid_file_gives_the_axes_and_the_command_line_replaces_one(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"sizes": [1, 2, 2], "modes": "async", "lead_prompts": ["minimal", "piv"],
                                    "lead_models": ["gpt-4o", {"model": "openai/local-coder", "free": True}]}))
    config = RunConfig()
    found = build_grid(config, read_grid_file(grid), {"sizes": "4,8"}, grid_file=grid)
    assert found.sizes == [4, 8] and found.modes == ["async"] and found.lead_prompts == ["minimal", "piv"]
    assert found.solo_prompts == ["minimal", "piv"]  # default: the lead prompts
    assert [c.model for c in found.lead_models] == ["gpt-4o", "openai/local-coder"]
    assert found.lead_models[1].spec.free and not found.lead_models[1].from_cli
    assert build_grid(config, read_grid_file(grid)).sizes == [1, 2]  # a repeated value is one cell
    assert build_grid(config).sizes == [3] and build_grid(config, sizing="lead").sizes == [16]  # as team.team_size

    grid.write_text(yaml.safe_dump({"sizes": [1], "teams": [3]}))
    with pytest.raises(SwepipeError, match="unknown key.*teams"):
        read_grid_file(grid)
    grid.write_text(yaml.safe_dump({"sizes": [0]}))
    with pytest.raises(SwepipeError, match=r"grid\.yaml: sizes: 0 is not a team size"):
        build_grid(config, read_grid_file(grid), grid_file=grid)
    grid.write_text(yaml.safe_dump({"lead_models": [{"model": "x", "price": 1}]}))
    with pytest.raises(SwepipeError, match="price"):
        build_grid(config, read_grid_file(grid), grid_file=grid)
    grid.write_text("- 1\n- 2\n")
    with pytest.raises(SwepipeError, match="must map axes"):
        read_grid_file(grid)


def test_cell_names_are_readable_stable_and_never_shared(tmp_path):
    assert slug("scripted//tmp/x/lead.yaml") == "lead" and slug("anthropic/claude-3-5-sonnet") == "claude-3-5-sonnet"
    assert slug("openai/qwen2.5:32b") == "qwen2.5-32b" and slug(None) == "local"
    config = RunConfig(models={"worker": {"model": "w", "free": True}})
    grid = build_grid(config, cli_axes={"lead_models": "a/coder,b/coder", "sizes": "2"})
    tasks = [TASK]
    first = plan_sweep(config.model_copy(update={"models": {
        **config.models, "lead": config.models["worker"]}}), grid, tasks, sweep_id="s", runs_dir=tmp_path)
    names = [cell.name for cell in first.cells]
    assert len(set(names)) == len(names) == 4  # two solo baselines, two team cells: same slug, told apart
    assert all("coder-" in name for name in names)
    again = plan_sweep(config.model_copy(update={"models": {
        **config.models, "lead": config.models["worker"]}}), grid, tasks, sweep_id="s", runs_dir=tmp_path)
    assert [cell.name for cell in again.cells] == names
    team = [cell for cell in first.cells if cell.kind == "team"]
    assert [cell.baseline for cell in team] == [c.name for c in first.cells if c.kind == "solo"]
    assert all(cell.config.models["solo"].model == cell.values["model"] for cell in first.cells if cell.kind == "solo")


def test_the_file_editor_is_an_axis_of_every_cell_its_baselines_included(tmp_path):
    config = RunConfig(models={"worker": {"model": "w", "free": True}, "lead": {"model": "l/lead", "free": True}})
    grid = build_grid(config, cli_axes={"editors": "on,off", "sizes": "2"})
    plan = plan_sweep(config, grid, [TASK], sweep_id="s", runs_dir=tmp_path)
    by_name = {cell.name: cell for cell in plan.cells}
    assert sorted(by_name) == ["solo-lead-minimal", "solo-lead-minimal-bashonly",
                               "team-s2-all-blocking-lead_lead-worker_w-minimal",
                               "team-s2-all-blocking-lead_lead-worker_w-minimal-bashonly"]
    for name, cell in by_name.items():
        off = name.endswith("-bashonly")
        assert cell.values["editor"] == ("off" if off else "on") and cell.config.limits.editor is not off
        if cell.kind == "team":  # compared with the solo agent of the same editor setting
            assert cell.baseline == ("solo-lead-minimal-bashonly" if off else "solo-lead-minimal")
    assert build_grid(config).editors == ["on"]  # default: the config's limits.editor
    assert build_grid(config.model_copy(update={"limits": config.limits.model_copy(update={"editor": False})})
                      ).editors == ["off"]
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text("editors: [on, off]\n")  # YAML reads these as booleans
    assert build_grid(config, read_grid_file(grid_file), grid_file=grid_file).editors == ["on", "off"]


def test_an_unpriced_model_stops_the_sweep_before_any_cell_runs(tmp_path):
    setup(tmp_path)
    done = swepipe(*sweep_args("--worker-models", "my-provider/unknown-model"), cwd=tmp_path, check=False)
    assert done.returncode == 2 and "has no known price" in done.stderr
    assert not (tmp_path / "runs").exists()


# -- running ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_sweep_over_sizes_runs_each_cell_resumes_without_paying_and_refuses_a_changed_config(tmp_path, tinyq_repo):
    setup(tmp_path)
    done = swepipe(*sweep_args(), cwd=tmp_path, environment=env(tinyq_repo))
    root = tmp_path / "runs" / "sw"
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted([SOLO, *TEAM, "figures"])
    manifest = json.loads((root / "sweep.json").read_text())
    assert [(c["name"], c["status"], c["finished"]) for c in manifest["cells"]] == \
        [(name, "done", 1) for name in [SOLO, *TEAM]]
    assert all(c["baseline"] == SOLO for c in manifest["cells"][1:])
    assert [c["values"]["size"] for c in manifest["cells"][1:]] == [1, 2, 4]
    assert manifest["task_ids"] == [TASK.instance_id] and manifest["grid"]["sizes"] == [1, 2, 4]

    for name, workers in zip(TEAM, (1, 2, 4), strict=True):
        layout = RunLayout(root / name)
        prediction = finished_predictions(layout.predictions)[TASK.instance_id]
        assert prediction["strategy"] == "team" and prediction["error"] is None
        config = yaml.safe_load(layout.config.read_text())
        assert config["team"]["size"] == workers and config["team"]["sizing"] == "fixed"
        rows = Ledger.read(layout.task(TASK.instance_id).ledger)
        assert sorted({r.agent for r in rows if r.role == "worker"}) == [f"worker-{n}" for n in range(workers)]
        assert prediction["cost"]["worker"] == pytest.approx(2 * workers * REPLY_COST)
        # one worker fixes half the task; two or more, both files
        assert len(patch_per_file(prediction["model_patch"])) == (1 if workers == 1 else 2)
    solo = finished_predictions(RunLayout(root / SOLO).predictions)[TASK.instance_id]
    assert solo["strategy"] == "solo" and solo["cost"]["solo"] == pytest.approx(2 * REPLY_COST)
    assert yaml.safe_load((root / SOLO / "config.yaml").read_text())["models"]["solo"]["model"].endswith(
        "script.yaml")  # the lead model plays solo

    for figure in ("sweep-by-size.png", "sweep-by-cell.png"):
        png = (root / "figures" / figure).read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 10_000
    table = (root / "sweep.md").read_text()
    assert all(f"| runs/sw/{name} |" in table for name in [SOLO, *TEAM])
    assert "$0.0060" in table and "$0.0132" in table  # lead 3 replies + workers 2 each, at sizes 1 and 4
    assert "No per-test results" in table  # not scored: efficiency cannot be claimed
    assert "sweep sw" in done.stdout and "runs/sw/<cell>" in " ".join(done.stdout.split())

    paid = ledger_rows(root)
    again = swepipe(*sweep_args(), cwd=tmp_path, environment=env(tinyq_repo, SWEPIPE_TEST_REFUSE="1"))
    assert ledger_rows(root) == paid  # nothing paid, no workspace opened (the opener refuses)
    assert all(len(RunLayout(root / name).predictions.read_text().splitlines()) == 1 for name in [SOLO, *TEAM])
    assert "skipped" in again.stdout or "done" in again.stdout

    setup(tmp_path, limits={"max_steps": 9})  # another config for the same cells
    refused = swepipe(*sweep_args(), cwd=tmp_path, environment=env(tinyq_repo), check=False)
    assert refused.returncode == 2 and "ran with another config" in " ".join(refused.stderr.split())
    assert ledger_rows(root) == paid

    report_only = swepipe("sweep", "--report", "--sweep-id", "sw", cwd=tmp_path)
    assert SOLO in report_only.stdout and (root / "sweep.md").read_text() == table

    setup(tmp_path)  # an existing run as the baseline: no solo cell is run
    swepipe("sweep", "--config", "config.yaml", "--instance-ids", TASK.instance_id, "--sizes", "2", "--stages",
            "implementation", "--sweep-id", "against", "--baseline", f"runs/sw/{SOLO}", cwd=tmp_path,
            environment=env(tinyq_repo))
    manifest = json.loads((tmp_path / "runs" / "against" / "sweep.json").read_text())
    assert [c["kind"] for c in manifest["cells"]] == ["team"] and manifest["baseline"] == str(root / SOLO)
    assert f"Baseline for every team cell: {root / SOLO}" in (tmp_path / "runs" / "against" / "sweep.md").read_text()


@pytest.mark.slow
def test_a_stop_ends_the_sweep_and_the_rerun_finishes_it(tmp_path, tinyq_repo):
    setup(tmp_path, worker_sleep=4)
    command = [sys.executable, "-m", "pipeline.cli", *sweep_args()]
    root = tmp_path / "runs" / "sw"
    proc = subprocess.Popen(command, cwd=tmp_path, env=env(tinyq_repo), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = interrupt_when(proc, lambda: bool(list((root / TEAM[0]).glob("tasks/*/team/worker-0.trajectory.json*"))),
                              "a worker of the first team cell")  # stop while that worker sleeps
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "run the same command again (--sweep-id sw)" in " ".join(out.split())
    manifest = json.loads((root / "sweep.json").read_text())
    status = {c["name"]: c["status"] for c in manifest["cells"]}
    assert status == {SOLO: "done", TEAM[0]: "stopped", TEAM[1]: "pending", TEAM[2]: "pending"}
    assert not (root / TEAM[1]).exists()  # no cell starts after a stop
    assert finished_predictions(RunLayout(root / TEAM[0]).predictions) == {}  # work cut short is not a result

    swepipe(*sweep_args(), cwd=tmp_path, environment=env(tinyq_repo))
    manifest = json.loads((root / "sweep.json").read_text())
    assert [c["status"] for c in manifest["cells"]] == ["done"] * 4
    solo_rows = Ledger.read(RunLayout(root / SOLO).task(TASK.instance_id).ledger)
    assert len(solo_rows) == 2  # the baseline finished before the stop was not paid again


@pytest.mark.docker
@pytest.mark.slow
def test_a_scored_sweep_plots_reward_and_efficiency_against_solo_by_size(tmp_path, tinyq_repo):
    """The agents work in a local clone; the patches are scored with the task's hidden tests in its image."""
    setup(tmp_path)
    swepipe(*sweep_args("--evaluate"), cwd=tmp_path, environment=env(tinyq_repo))
    root = tmp_path / "runs" / "sw"
    from pipeline.report.sweep import cell_efficiency, load_sweep

    report = load_sweep(root)
    assert report.metric == "reward"
    by_name = {cell.name: cell for cell in report.cells}
    solo = by_name[SOLO].stats
    assert solo.rate == 0.0 and 0.0 < solo.reward < 1.0  # half the fix: some tests pass
    sizes = [by_name[name] for name in TEAM]
    assert [cell.stats.rate for cell in sizes] == [0.0, 1.0, 1.0]
    assert sizes[0].stats.reward == pytest.approx(solo.reward) and sizes[1].stats.reward == 1.0
    efficiency = [cell_efficiency(cell, "reward") for cell in sizes]
    assert efficiency[0] == pytest.approx(0.0)  # dearer, no better
    assert efficiency[1] > efficiency[2] > 0  # size 4 gains the same for more dollars
    gained = 1.0 - solo.reward
    assert efficiency[1] == pytest.approx(gained / (sizes[1].stats.dollars_per_task - solo.dollars_per_task))
    table = (root / "sweep.md").read_text()
    assert "Reward: the share of a task's FAIL_TO_PASS and PASS_TO_PASS tests" in table
    assert (root / "figures" / "sweep-by-size.png").stat().st_size > 10_000
    assert containers.client().containers.list(all=True, filters={"label": f"{containers.RUN_LABEL}={TEAM[1]}"}) == []
