"""Dollars per task with and without prompt caching and history compaction, on the bundled benchmark (issue 17).

Every bundled task gets a scripted run whose replies carry no usage, so the scripted model bills the characters / 4
of the conversation it is really sent: the junior rollouts (K=4) explore with real observations from the task's
container (file list, history, a grep for a name the gold patch touches, the whole of every file it touches), then
rollout 0 and 2 apply the gold patch, rollout 1 only its first file, rollout 3 submits nothing. The senior looks
twice, then writes a brief covering the gold hunks; the principal replies with the gold patch as edit blocks.

Then ``swepipe eval RUN --candidates`` scores each junior candidate and ``swepipe whatif --json`` reprices the recorded
tokens at a real provider's published prices (litellm's map) and replays the histories: whole or compacted, with
or without a prompt cache. The table shows dollars per task, input tokens per rollout and resolve rates, each
history variant also as a ratio to "whole history, no cache" of the same run.

A scripted model serves one script per config, and one script cannot hold task-specific replies for every task, so
each task is run by its own ``swepipe run`` invocation with its own config into the same run directory (one task
at a time; the four rollouts of a task run side by side).

    .venv/bin/python scripts/bench_costs.py [--tasks N] [--runs-dir /tmp/bench-costs/runs]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm's bundled map: no fetch over the network

from scripted_pipeline import SUBMIT, apply_patch_command, bash, brief_from_patch, edits_from_patch, patch_per_file  # noqa: E402

from pipeline.tasks import load_tasks  # noqa: E402

PRICES = {"junior": "anthropic/claude-haiku-4-5", "senior": "anthropic/claude-sonnet-4-5-20250929",
          "principal": "anthropic/claude-opus-4-5"}  # anthropic/claude-opus-4-1 has no price in litellm's map
HISTORY = ("whole history, no cache", "whole history, prompt cache", "compact after 2, no cache",
           "compact after 2, prompt cache", "compact after 4, no cache", "compact after 4, prompt cache")
WORDS = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
COMMON = {"func", "self", "return", "import", "from", "const", "function", "string", "true", "false", "None",
          "def", "class", "this", "await", "async", "else", "elif", "err", "nil", "error", "export", "type"}


def no_usage(reply: dict) -> dict:
    """The reply without its usage, so the scripted model counts the conversation it is sent."""
    return {key: value for key, value in reply.items() if key != "usage"}


def name_in(patch: str) -> str:
    """An identifier the gold patch touches (from a hunk header, else a removed or context line), to grep for."""
    headers = re.findall(r"^@@ [^@]+ @@ ?(.*)$", patch, flags=re.M)
    removed = [line[1:] for line in patch.splitlines() if line.startswith(("-", " ")) and not line.startswith("---")]
    for text in headers + removed:
        words = [w for w in WORDS.findall(text) if w not in COMMON]
        if words:
            return max(words, key=len)
    return "TODO"


def script_for(task) -> dict:
    files = patch_per_file(task.patch)
    first = next(iter(files.values()))
    name = name_in(task.patch)
    explore = [bash("git ls-files | head -100"), bash("git log -3 --stat"),
               bash(f"git grep -n -e '{name}' | head -60")]
    explore += [bash(f"cat -n '{path}'") for path in files]
    whole = [bash(apply_patch_command(task.patch)), bash("git diff --stat")]
    half = [bash(apply_patch_command(first)), bash("git diff --stat")]
    junior = [explore + whole + [SUBMIT],
              explore + half + [SUBMIT],
              explore + whole + [SUBMIT],
              explore + [bash("git status --short"), SUBMIT]]
    senior = [bash(f"git grep -n -e '{name}' | head -40"), bash(f"cat -n '{next(iter(files))}' | head -200"),
              {"content": brief_from_patch(task.patch)}]
    return {"junior": [[no_usage(r) for r in rollout] for rollout in junior],
            "senior": [no_usage(r) for r in senior],
            "principal": [{"content": edits_from_patch(task.patch)}]}


def write_task_config(work: Path, task) -> Path:
    folder = work / task.repo.split("/")[-1]
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "script.yaml"
    script.write_text(yaml.safe_dump(script_for(task)))
    prices = {"input": 1.0, "output": 2.0}  # any: whatif reprices every role with --price
    config = {"models": {role: {"model": f"scripted/{script}", "prices": prices}
                         for role in ("junior", "senior", "principal")},
              "juniors": {"k": 4}, "limits": {"max_steps": 40}}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def swepipe(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pipeline.cli", *args]
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, "COLUMNS": "200"})
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def table(result: dict) -> str:
    by_name = {p["name"]: p for p in result["policies"]}
    base = by_name.get("principal, whole history, no cache", {}).get("dollars_per_task")
    lines = [f"{'policy':42} {'$/task':>9} {'x whole,no cache':>17} {'input tok/rollout':>18} {'resolved':>9}"]
    rows = [("principal (recorded, repriced)", by_name.get("principal"))]
    rows += [(f"principal, {name}", by_name.get(f"principal, {name}")) for name in HISTORY]
    k = max((p["k"] for p in result["policies"] if p["family"] == "vote@k"), default=None)
    rows += [(name.replace("@k", f"@{k}"), next((p for p in result["policies"] if p["name"] == name and p["k"] == k),
                                                None)) for name in ("vote@k", "vote@k, prompt cache", "pass@k")]
    for label, policy in rows:
        if policy is None:
            lines.append(f"{label:42} (not computed)")
            continue
        dollars = policy["dollars_per_task"]
        ratio = f"{dollars / base:.3f}" if base and dollars is not None else "-"
        tokens = policy.get("input_tokens_per_rollout")
        tokens = f"{tokens:,.0f}" if tokens is not None else "-"
        rate = policy["resolve_rate"]
        lines.append(f"{label:42} {dollars:>9.4f} {ratio:>17} {tokens:>18} "
                     f"{rate if rate is None else f'{rate:.3f}':>9}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=None, help="only the first N bundled tasks")
    parser.add_argument("--runs-dir", type=Path, default=Path("/tmp/bench-costs/runs"))
    parser.add_argument("--run-id", default=None, help="resume this run (default: bench-costs-<time>)")
    args = parser.parse_args()
    tasks = load_tasks("bundled")[: args.tasks]
    run_id = args.run_id or time.strftime("bench-costs-%Y%m%d-%H%M%S")
    runs_dir = args.runs_dir.resolve()
    work = runs_dir.parent / "configs" / run_id
    run_dir = runs_dir / run_id
    started = time.monotonic()
    for n, task in enumerate(tasks, 1):
        config = write_task_config(work, task)
        print(f"[{n}/{len(tasks)}] {task.instance_id} ({time.monotonic() - started:.0f}s)", flush=True)
        done = swepipe("run", "--instance-ids", task.instance_id, "--config", str(config), "--run-id", run_id,
                       "--runs-dir", str(runs_dir), "--evaluate")
        print("\n".join([line for line in done.stdout.splitlines() if line.startswith("spent:")][-1:]), flush=True)
    ran = time.monotonic() - started
    swepipe("eval", str(run_dir), "--candidates")
    prices = [arg for role, model in PRICES.items() for arg in ("--price", f"{role}={model}")]
    result = json.loads(swepipe("whatif", str(run_dir), "--json", *prices).stdout)
    print()
    print(f"run {run_dir}: {len(tasks)} task(s), K=4, runs {ran:.0f}s, all {time.monotonic() - started:.0f}s")
    print("priced at " + ", ".join(f"{role}={model}" for role, model in PRICES.items()))
    print(table(result))
    for run in result["runs"]:
        print(f"tasks in whatif: {run['tasks']}" + "".join(f"\nnote: {note}" for note in run["notes"]))
    print(f"figure: {result['figure']}")


if __name__ == "__main__":
    main()
