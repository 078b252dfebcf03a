"""Faults a long run meets, injected into one run of bundled tasks with scripted models, and what survived.

One run id, three sessions of `swepipe run`:
  1. rate limits, timeouts, 5xx and garbage replies from the model (scripted), Docker API errors
     (tests/faulty_opener.py), one junior container killed mid-command; then SIGTERM;
  2. the rerun resumes; then kill -9;
  3. after a torn last line is left in predictions.jsonl and in a ledger, the rerun finishes.
Prints one table: tasks, faults injected by kind and survived, tasks lost, conversation positions paid
twice, dollars over each budget, containers left. Every "must be 0" column must be 0.

    python scripts/bench_faults.py [--tasks 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from pipeline.layout import RunLayout
from pipeline.models.ledger import Ledger
from pipeline.runtime import containers
from pipeline.tasks import load_tasks

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


def swepipe(work: Path, env: dict, ids: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", ids, "--config", "config.yaml",
               "--run-id", RUN_ID, "--workers", "3"]
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
            top = container.top().get("Processes") or []
            if any("sleep 20" in " ".join(p) for p in top):
                container.kill()
                killed.append(container.name)
                return
        time.sleep(0.3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="keep the run here instead of a temporary folder")
    args = parser.parse_args()
    tasks = [t for t in load_tasks("bundled") if t.repo_language == "python"][:args.tasks]
    ids = ",".join(t.instance_id for t in tasks)
    work = args.keep or Path(tempfile.mkdtemp(prefix="swepipe-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "script.yaml").write_text(yaml.safe_dump(SCRIPT))
    spec = {"model": f"scripted/{work / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}, "max_tokens": 200}
    (work / "config.yaml").write_text(yaml.safe_dump({
        "models": {role: spec for role in ("junior", "senior", "principal")}, "juniors": {"k": 2},
        "limits": {"max_steps": 6}, "budgets": {"per_task": PER_TASK, "per_run": PER_RUN},
        "containers": {"impl": "faulty_opener:open_faulty"}}))
    faults = work / "docker-faults"
    faults.write_text("2")
    env = {**os.environ, "SWEPIPE_FAULT_FILE": str(faults), "COLUMNS": "120",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))}
    layout = RunLayout(work / "runs" / RUN_ID)
    injected = dict.fromkeys(KINDS, 0)
    survived = dict.fromkeys(KINDS, 0)

    # Session 1: model and Docker faults, a killed container, then SIGTERM.
    done, killed = threading.Event(), []
    watcher = threading.Thread(target=kill_one_container, args=(RUN_ID, done, killed), daemon=True)
    watcher.start()
    proc = swepipe(work, env, ids)
    wait_until(lambda: killed or proc.poll() is not None, 240)
    wait_until(lambda: paid_replies(layout) >= 12 or proc.poll() is not None, 120)
    done.set()
    injected["killed container"] = len(killed)
    if proc.poll() is None:
        injected["SIGTERM"] = 1
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        stopped_in = time.monotonic() - signalled
        if proc.returncode == 143 and stopped_in < 10 and not containers_left():
            survived["SIGTERM"] = 1
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
    subprocess.run([sys.executable, "-m", "pipeline.cli", "cleanup", "--run-id", RUN_ID], capture_output=True)

    # A torn last line in the predictions and in one task's ledger, as a kill mid-write leaves them.
    ledgers = sorted((layout.root / "tasks").glob("*/ledger.jsonl"))
    for path in (layout.predictions, *ledgers[:1]):
        with open(path, "a", encoding="utf-8") as handle:
            handle.write('{"instance_id": "torn-by-a-kill", "cos')
    injected["torn line"] = 1

    # Session 3: runs to the end.
    proc = swepipe(work, env, ids)
    proc.wait(timeout=900)
    output = (work / "sessions.log").read_text()
    finished = layout.finished()
    lost = [t.instance_id for t in tasks if t.instance_id not in finished]

    rows = {t.instance_id: Ledger.read(layout.task(t.instance_id).ledger) for t in tasks}
    all_rows = [row for task_rows in rows.values() for row in task_rows]
    injected["model API error"] = sum(row.retries for row in all_rows) + sum(1 for row in all_rows if row.error)
    injected["garbage reply"] = sum(_format_errors(layout.task(t.instance_id)) for t in tasks)
    injected["Docker API error"] = 2 - int(faults.read_text() or 0)
    paid_twice = sum(_paid_twice(layout.task(t.instance_id), rows[t.instance_id]) for t in tasks)
    over_task = max((sum(r.cost for r in task_rows) - PER_TASK for task_rows in rows.values()), default=0.0)
    over_run = sum(r.cost for r in all_rows) - PER_RUN
    left = containers_left()
    clean = not lost and not paid_twice and over_task <= 1e-9 and over_run <= 1e-9 and not left
    for kind in KINDS:
        if kind != "SIGTERM" and clean:
            survived[kind] = injected[kind]

    print(f"run directory: {layout.root}")
    print(f"{'tasks':>5} {'finished':>8} {'lost':>4}  {'paid twice':>10}  {'$ over task':>11}  {'$ over run':>10}  "
          f"{'containers left':>15}")
    print(f"{len(tasks):>5} {len(finished):>8} {len(lost):>4}  {paid_twice:>10}  {max(0.0, over_task):>11.6f}  "
          f"{max(0.0, over_run):>10.6f}  {len(left):>15}")
    print()
    print(f"{'fault':<18} {'injected':>8} {'survived':>8}")
    for kind in KINDS:
        print(f"{kind:<18} {injected[kind]:>8} {survived[kind]:>8}")
    if not clean:
        print("\nFAILED: a must-be-0 column is not 0\n" + output[-3000:])
        sys.exit(1)


def _format_errors(paths) -> int:
    """Replies that held no usable action or brief or edits: juniors', the senior's, the principal's."""
    count = 0
    for record_path in paths.junior.glob("rollout-[0-9][0-9].json"):
        steps = (json.loads(record_path.read_text()).get("trajectory") or {}).get("steps", [])
        count += sum(1 for step in steps if step.get("format_error"))
    senior = paths.senior / "trajectory.json"
    if senior.exists():
        count += sum(1 for step in json.loads(senior.read_text()).get("steps", []) if step.get("format_error"))
    principal = paths.principal / "result.json"
    if principal.exists():
        count += len(json.loads(principal.read_text()).get("failed_attempts", []))
    return count


def _paid_twice(paths, rows) -> int:
    """Conversation positions paid for more than once: paid replies beyond what the records hold."""
    extra = 0
    for record_path in paths.junior.glob("rollout-[0-9][0-9].json"):
        record = json.loads(record_path.read_text())
        agent = record_path.stem
        paid = sum(1 for r in rows if r.agent == agent and r.error is None)
        extra += max(0, paid - record.get("steps", 0))
    recorded = {"senior": paths.senior / "trajectory.json", "principal": paths.principal / "replies.json"}
    for stage, path in recorded.items():
        if path.exists():
            saved = json.loads(path.read_text())
            held = len(saved.get("steps", [])) if isinstance(saved, dict) else len(saved)
            paid = sum(1 for r in rows if r.stage == stage and r.error is None)
            extra += max(0, paid - held)
    return extra


def containers_left() -> list:
    return containers.client().containers.list(all=True, filters={"label": f"{containers.RUN_LABEL}={RUN_ID}"})


if __name__ == "__main__":
    main()
