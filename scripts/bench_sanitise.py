"""What the solution-leak guard costs: container start with and without sanitising, in one run.

Builds an image holding a synthetic repository with a long history (and a later 'gold' commit on
a remote branch, like official task images), then times
  - a plain container start (the baseline),
  - the first sanitised start (fetches the base history into a fresh .git, commits an image),
  - later sanitised starts (reuse that image),
and prints each as a ratio to the baseline.

    python scripts/bench_sanitise.py [--commits 3000] [--files 1500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from pipeline.runtime import containers
from pipeline.runtime.docker import DockerRuntime
from pipeline.runtime.images.debian_base import BASE_IMAGE
from pipeline.runtime.images.prepare import prepare_image

IMAGE = "swepipe-bench-history:latest"


def make_repo(path: Path, commits: int, files: int) -> tuple[str, str]:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    for index in range(files):
        sub = path / f"pkg{index % 40}"
        sub.mkdir(exist_ok=True)
        (sub / f"mod{index}.py").write_text("".join(f"def f{index}_{j}(x):\n    return x * {j}\n" for j in range(30)))
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(path), "commit", "-qm", "initial"], check=True, env=env)
    # Many small commits via fast-import: far quicker than one `git commit` each.
    stream = []
    for index in range(1, commits):
        target = f"pkg{index % 40}/mod{index % files}.py"
        body = f"# revision {index}\n" + "".join(f"def g{index}_{j}():\n    return {j}\n" for j in range(20))
        stream.append(f"commit refs/heads/main\ncommitter b <b@b> {1_600_000_000 + index} +0000\n"
                      f"data {len(f'change {index}')}\nchange {index}\n"
                      + ("from refs/heads/main^0\n" if index == 1 else "")
                      + f"M 100644 inline {target}\ndata {len(body.encode())}\n{body}\n")
    subprocess.run(["git", "-C", str(path), "branch", "-M", "main"], check=True)
    subprocess.run(["git", "-C", str(path), "fast-import", "--quiet"], input="".join(stream).encode(), check=True)
    subprocess.run(["git", "-C", str(path), "reset", "-q", "--hard", "main"], check=True)
    base = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (path / "fix.py").write_text("GOLD = True\n")
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(path), "commit", "-qm", "gold"], check=True, env=env)
    gold = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    subprocess.run(["git", "-C", str(path), "update-ref", "refs/remotes/origin/fix", gold], check=True)
    subprocess.run(["git", "-C", str(path), "reset", "-q", "--hard", base], check=True)
    subprocess.run(["git", "-C", str(path), "gc", "-q"], check=True)
    return base, gold


def timed_start(base: str, sanitise: bool) -> float:
    started = time.monotonic()
    image = prepare_image(IMAGE, base, sanitise=sanitise)
    runtime = DockerRuntime(image, base, run_id="bench-sanitise", server_in_image=sanitise)
    runtime.run("git status --short >/dev/null")
    elapsed = time.monotonic() - started
    runtime.stop()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--files", type=int, default=1500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        base, _ = make_repo(repo, args.commits, args.files)
        size = subprocess.run(["du", "-sh", str(repo / ".git")], capture_output=True, text=True).stdout.split()[0]
        context = Path(scratch) / "ctx"
        context.mkdir()
        shutil.move(str(repo), context / "repo")
        (context / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nCOPY repo /app\nWORKDIR /app\n")
        containers.client().images.build(path=str(context), tag=IMAGE, rm=True)
    containers.remove_sanitised_images()
    plain = statistics.median(timed_start(base, sanitise=False) for _ in range(args.repeats))
    first = timed_start(base, sanitise=True)
    cached = statistics.median(timed_start(base, sanitise=True) for _ in range(args.repeats))
    print(f"repository: {args.commits} commits, {args.files} files, .git {size}")
    print(f"plain start (baseline)      {plain:7.2f} s   1.00x")
    print(f"first sanitised start       {first:7.2f} s   {first / plain:5.2f}x  (once per image and base commit)")
    print(f"later sanitised starts      {cached:7.2f} s   {cached / plain:5.2f}x")


if __name__ == "__main__":
    main()
