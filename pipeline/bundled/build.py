"""Build the bundled SWE-Bench Pro style tasks from their sources.

Each task lives in ``tasks/<instance_id>/`` (see README.md). This module turns those
sources into

* a git repository whose history is reproducible to the byte (fixed author,
  committer and dates), with the base commit checked out and the gold commit
  (base + gold.patch + test.patch) reachable from ``refs/remotes/origin/fix``,
  as in the official images;
* dataset rows in the column layout of ``ScaleAI/SWE-bench_Pro`` (lists as real
  JSON lists), written to ``dataset.jsonl``;
* a docker build context per task (``swepipe-bundled:<dockerhub_tag>``).

Only the standard library, PyYAML and the ``git`` executable are needed, so
``python -m pipeline.bundled.build`` runs without the rest of swepipe installed.

    python -m pipeline.bundled.build                 # (re)write dataset.jsonl
    python -m pipeline.bundled.build --check         # exit 1 if dataset.jsonl is stale
    python -m pipeline.bundled.build context TASK DEST
    python -m pipeline.bundled.build materialise TASK DEST
    python -m pipeline.bundled.build make-patches TASK AFTER_DIR
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

import yaml

# Where the bundled tasks, images and dataset live: defined with the dataset's name, for the readers too.
from pipeline.tasks.datasets import BUNDLED_DATASET as DATASET_PATH
from pipeline.tasks.datasets import BUNDLED_DIR as BUNDLED_ROOT  # noqa: F401 - build.BUNDLED_ROOT
from pipeline.tasks.datasets import BUNDLED_IMAGE_REPOSITORY as IMAGE_REPOSITORY
from pipeline.tasks.datasets import BUNDLED_IMAGES_DIR as IMAGES_ROOT  # noqa: F401 - build.IMAGES_ROOT (images.py)
from pipeline.tasks.datasets import BUNDLED_TASKS_DIR as TASKS_ROOT
from pipeline.tasks.task import TaskRow

# Identity and clock of every commit, so that shas do not depend on who builds or when.
AUTHOR_NAME = "swepipe bundled tasks"
AUTHOR_EMAIL = "bundled@swepipe.invalid"
EPOCH = 1704704400  # 2024-01-08 09:00:00 UTC
COMMIT_SPACING = 2 * 86400 + 3 * 3600 + 17 * 60  # a little over two days between commits

GOLD_REF = "refs/remotes/origin/fix"
BASE_BRANCH = "main"

# repo_language (as in the dataset) -> language image tag (swepipe-lang:<tag>).
LANGUAGE_IMAGES = {"python": "python", "go": "go", "js": "node", "ts": "node"}

# Column order of ScaleAI/SWE-bench_Pro.
ROW_COLUMNS = (
    "repo",
    "instance_id",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "requirements",
    "interface",
    "repo_language",
    "fail_to_pass",
    "pass_to_pass",
    "issue_specificity",
    "issue_categories",
    "before_repo_set_cmd",
    "selected_test_files_to_run",
    "dockerhub_tag",
)

class TaskYaml(TypedDict):
    """A bundled task's task.yaml (``load_task`` checks it): the dataset's columns a task states itself."""

    instance_id: str
    repo: str
    repo_language: str
    problem_statement: str
    requirements: str
    interface: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    selected_test_files_to_run: list[str]
    dockerhub_tag: str
    issue_specificity: list[str]
    issue_categories: list[str]
    gold_message: NotRequired[str]  # the gold commit's message (else the problem statement's first line)


class HistoryCommit(TypedDict):
    """A commit of a bundled task's history.yaml: its message, and the paths of the files it adds."""

    message: str
    paths: NotRequired[list[str]]


TASK_FIELDS = (
    "instance_id",
    "repo",
    "repo_language",
    "problem_statement",
    "requirements",
    "interface",
    "fail_to_pass",
    "pass_to_pass",
    "selected_test_files_to_run",
    "dockerhub_tag",
    "issue_specificity",
    "issue_categories",
)


# Build debris that must never become part of a task's history.
IGNORED_PARTS = frozenset({".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "node_modules"})
IGNORED_SUFFIXES = (".pyc", ".pyo")


def _ignored(rel: Path) -> bool:
    return bool(IGNORED_PARTS.intersection(rel.parts)) or rel.name.endswith(IGNORED_SUFFIXES) or rel.name == ".DS_Store"


class BundledTaskError(Exception):
    """A bundled task's sources are inconsistent; the message names the task and the problem."""


# ---------------------------------------------------------------------------------------
# task sources


def task_dirs(tasks_root: Path = TASKS_ROOT) -> list[Path]:
    """Every task directory (one holding a task.yaml), sorted by instance id."""
    return sorted(p.parent for p in Path(tasks_root).glob("*/task.yaml"))


def load_task(task_dir: Path) -> TaskYaml:
    """task.yaml of one task, checked for the fields the dataset needs."""
    task_dir = Path(task_dir)
    with open(task_dir / "task.yaml", encoding="utf-8") as fh:
        task = yaml.safe_load(fh)
    if not isinstance(task, dict):
        raise BundledTaskError(f"{task_dir}: task.yaml is not a mapping")
    missing = [name for name in TASK_FIELDS if name not in task]
    if missing:
        raise BundledTaskError(f"{task_dir}: task.yaml lacks {', '.join(missing)}")
    if task["instance_id"] != task_dir.name:
        raise BundledTaskError(f"{task_dir}: instance_id {task['instance_id']!r} differs from the directory name")
    if task["repo_language"] not in LANGUAGE_IMAGES:
        raise BundledTaskError(f"{task_dir}: unsupported repo_language {task['repo_language']!r}")
    for name in ("fail_to_pass", "pass_to_pass", "selected_test_files_to_run", "issue_specificity", "issue_categories"):
        if not isinstance(task[name], list) or not all(isinstance(x, str) for x in task[name]):
            raise BundledTaskError(f"{task_dir}: {name} must be a list of strings")
    for name in ("instance_id", "repo", "problem_statement", "requirements", "interface", "dockerhub_tag"):
        if not isinstance(task[name], str):
            raise BundledTaskError(f"{task_dir}: {name} must be a string")
    if not isinstance(task.get("gold_message", ""), str):
        raise BundledTaskError(f"{task_dir}: gold_message must be a string")
    return cast(TaskYaml, task)  # every field checked above


def load_history(task_dir: Path) -> list[HistoryCommit]:
    with open(Path(task_dir) / "history.yaml", encoding="utf-8") as fh:
        history = yaml.safe_load(fh)
    if not isinstance(history, list) or not history:
        raise BundledTaskError(f"{task_dir}: history.yaml must be a non-empty list of commits")
    for i, commit in enumerate(history):
        if not isinstance(commit, dict) or not isinstance(commit.get("message"), str):
            raise BundledTaskError(f"{task_dir}: history.yaml commit {i} needs a message")
        paths = commit.get("paths", [])
        if not isinstance(paths, list) or not all(isinstance(path, str) for path in paths):
            raise BundledTaskError(f"{task_dir}: history.yaml commit {i}'s paths must be a list of strings")
    checked: list[HistoryCommit] = history
    return checked


def base_files(task_dir: Path) -> list[str]:
    """Paths (posix, relative to base/) of every file of the base tree, sorted."""
    base = Path(task_dir) / "base"
    if not base.is_dir():
        raise BundledTaskError(f"{task_dir}: no base/ directory")
    files = []
    for path in base.rglob("*"):
        if path.is_file() and not _ignored(path.relative_to(base)):
            files.append(path.relative_to(base).as_posix())
    return sorted(files)


def _matches(path: str, pattern: str) -> bool:
    pattern = pattern.strip()
    if pattern.endswith("/"):
        return path.startswith(pattern)
    return fnmatch.fnmatchcase(path, pattern) or path.startswith(pattern.rstrip("/") + "/")


def plan_history(task_dir: Path) -> list[tuple[str, list[str]]]:
    """(message, files first added in that commit) per commit; the last commit takes the rest."""
    history = load_history(task_dir)
    remaining = base_files(task_dir)
    plan = []
    for i, commit in enumerate(history):
        if i == len(history) - 1:
            chosen = remaining
        else:
            patterns = commit.get("paths") or []
            chosen = [p for p in remaining if any(_matches(p, pat) for pat in patterns)]
        if not chosen:
            raise BundledTaskError(f"{task_dir}: history commit {i} ({commit['message']!r}) adds no file")
        remaining = [p for p in remaining if p not in chosen]
        plan.append((commit["message"], chosen))
    return plan


def read_patch(task_dir: Path, name: str) -> str:
    path = Path(task_dir) / name
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise BundledTaskError(f"{path}: empty patch")
    return text


_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.MULTILINE)


def patch_paths(patch: str) -> list[str]:
    """Paths a unified git diff touches, in patch order (the post-image path for renames)."""
    paths = []
    for match in _DIFF_HEADER.finditer(patch):
        if match.group(2) not in paths:
            paths.append(match.group(2))
    return paths


def patch_deletes(patch: str) -> list[str]:
    deleted, current = [], None
    for line in patch.splitlines():
        header = _DIFF_HEADER.match(line)
        if header:
            current = header.group(1)
        elif line.startswith("deleted file mode") and current:
            deleted.append(current)
    return deleted


_TEST_PATTERNS = {
    "python": ("tests/*", "test/*", "*/tests/*", "test_*.py", "*/test_*.py", "*_test.py", "conftest.py",
               "*/conftest.py"),
    "go": ("*_test.go", "testdata/*", "*/testdata/*"),
    "js": ("test/*", "tests/*", "*/__tests__/*", "*.test.js", "*.spec.js", "*.test.mjs"),
    "ts": ("test/*", "tests/*", "*/__tests__/*", "*.test.ts", "*.spec.ts", "*.test.js"),
}


def is_test_path(path: str, language: str) -> bool:
    """Whether `path` is a test file (or test data) by the conventions of `language`."""
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in _TEST_PATTERNS[language])


# ---------------------------------------------------------------------------------------
# git


def _git_env(commit_index: int | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME=AUTHOR_NAME,
        GIT_AUTHOR_EMAIL=AUTHOR_EMAIL,
        GIT_COMMITTER_NAME=AUTHOR_NAME,
        GIT_COMMITTER_EMAIL=AUTHOR_EMAIL,
        LC_ALL="C",
        TZ="UTC",
    )
    if commit_index is not None:
        stamp = f"{EPOCH + commit_index * COMMIT_SPACING} +0000"
        env.update(GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp)
    return env


def _git(repo: Path, *args: str, commit_index: int | None = None, stdin: str | None = None) -> str:
    cmd = ["git", "-c", "core.autocrlf=false", "-c", "core.fileMode=true", "-c", "commit.gpgsign=false", *args]
    proc = subprocess.run(
        cmd, cwd=repo, env=_git_env(commit_index), input=stdin, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise BundledTaskError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _copy_file(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)  # one mode for every file, whatever the checkout of swepipe did


def _commit(repo: Path, message: str, index: int) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--no-verify", "--allow-empty-message", "-F", "-", commit_index=index, stdin=message)
    return _git(repo, "rev-parse", "HEAD").strip()


def materialise_repo(task_dir: Path, dest: Path) -> tuple[str, str]:
    """Create the task's repository in `dest` (which must not exist or be empty).

    History: one commit per history.yaml entry on branch `main`, then a gold commit
    (base + gold.patch + test.patch) that only `refs/remotes/origin/fix` points at.
    HEAD and the work tree are left at the base commit. Returns (base_sha, gold_sha).
    """
    task_dir, dest = Path(task_dir), Path(dest)
    task = load_task(task_dir)
    if dest.exists() and any(dest.iterdir()):
        raise BundledTaskError(f"{dest} is not empty")
    dest.mkdir(parents=True, exist_ok=True)
    _git(dest, "init", "-q", f"--initial-branch={BASE_BRANCH}")

    base = task_dir / "base"
    plan = plan_history(task_dir)
    for index, (message, files) in enumerate(plan):
        for rel in files:
            _copy_file(base / rel, dest / rel)
        _commit(dest, message, index)
    base_sha = _git(dest, "rev-parse", "HEAD").strip()

    _git(dest, "checkout", "-q", "--detach")
    for name in ("gold.patch", "test.patch"):
        patch_file = (task_dir / name).resolve()
        _git(dest, "apply", "--index", "--whitespace=nowarn", str(patch_file))
    gold_message = task.get("gold_message") or task["problem_statement"].strip().splitlines()[0].lstrip("# ").strip()
    gold_sha = _commit(dest, gold_message, len(plan))
    _git(dest, "update-ref", GOLD_REF, gold_sha)
    _git(dest, "checkout", "-q", BASE_BRANCH)
    if _git(dest, "rev-parse", "HEAD").strip() != base_sha or _git(dest, "status", "--porcelain").strip():
        raise BundledTaskError(f"{dest}: work tree is not clean at the base commit")
    return base_sha, gold_sha


# ---------------------------------------------------------------------------------------
# dataset rows


def before_repo_set_cmd(base_sha: str, gold_sha: str, test_files: Iterable[str]) -> str:
    """The dataset's multi-line setup command; its last line checks the hidden tests out of gold."""
    return (
        f"git reset --hard {base_sha}\n"
        "git clean -fd \n"
        f"git checkout {base_sha} \n"
        f"git checkout {gold_sha} -- {' '.join(test_files)}"
    )


def build_row(task_dir: Path, workdir: Path | None = None) -> TaskRow:
    task_dir = Path(task_dir)
    task = load_task(task_dir)
    gold = read_patch(task_dir, "gold.patch")
    test = read_patch(task_dir, "test.patch")
    if patch_deletes(test):
        raise BundledTaskError(f"{task_dir}: test.patch deletes {patch_deletes(test)}; hidden tests cannot be deleted")
    with tempfile.TemporaryDirectory(prefix="swepipe-bundled-") as tmp:
        base_sha, gold_sha = materialise_repo(task_dir, Path(workdir or tmp) / "repo")
    return {  # in ROW_COLUMNS' order
        "repo": task["repo"], "instance_id": task["instance_id"], "base_commit": base_sha, "patch": gold,
        "test_patch": test, "problem_statement": task["problem_statement"], "requirements": task["requirements"],
        "interface": task["interface"], "repo_language": task["repo_language"], "fail_to_pass": task["fail_to_pass"],
        "pass_to_pass": task["pass_to_pass"], "issue_specificity": task["issue_specificity"],
        "issue_categories": task["issue_categories"],
        "before_repo_set_cmd": before_repo_set_cmd(base_sha, gold_sha, patch_paths(test)),
        "selected_test_files_to_run": task["selected_test_files_to_run"], "dockerhub_tag": task["dockerhub_tag"],
    }


def build_rows(tasks_root: Path = TASKS_ROOT) -> list[TaskRow]:
    """One dataset row per task under `tasks_root`, sorted by instance id."""
    return [build_row(task_dir) for task_dir in task_dirs(tasks_root)]


def render_dataset(rows: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(dict(row), ensure_ascii=False) + "\n" for row in rows)


def gold_sha_of(row: Mapping[str, Any]) -> str:
    """The gold commit named on the last line of a row's before_repo_set_cmd."""
    last = row["before_repo_set_cmd"].strip().split("\n")[-1]
    match = re.match(r"git checkout ([0-9a-f]{40}) -- ", last)
    if not match:
        raise BundledTaskError(f"{row['instance_id']}: unexpected before_repo_set_cmd last line {last!r}")
    return match.group(1)


# ---------------------------------------------------------------------------------------
# images


def scripts_dir(tasks_root: Path = TASKS_ROOT) -> Path:
    """Directory laid out like the official `run_scripts/`: <instance_id>/run_script.sh and parser.py."""
    return Path(tasks_root)


def language_image(language: str) -> str:
    return f"swepipe-lang:{LANGUAGE_IMAGES[language]}"


def image_name(task: Mapping[str, Any]) -> str:
    return f"{IMAGE_REPOSITORY}:{task['dockerhub_tag']}"


def docker_context(task_dir: Path, dest: Path) -> Path:
    """Prepare a docker build context in `dest` for the task's image; returns `dest`.

    The context holds the materialised repository (with its .git) as app/ and a
    Dockerfile that copies it to /app on top of the task's language image. Build it
    with `docker build -t swepipe-bundled:<dockerhub_tag> DEST`.
    """
    task_dir, dest = Path(task_dir), Path(dest)
    task = load_task(task_dir)
    dest.mkdir(parents=True, exist_ok=True)
    base_sha, gold_sha = materialise_repo(task_dir, dest / "app")
    dockerfile = (
        f"# Image for bundled task {task['instance_id']} (generated by pipeline/bundled/build.py)\n"
        f"FROM {language_image(task['repo_language'])}\n"
        f'LABEL swepipe.instance_id="{task["instance_id"]}" swepipe.base_commit="{base_sha}"\n'
        "COPY app /app\n"
        "WORKDIR /app\n"
        "RUN git config --system --add safe.directory /app\n"
    )
    (dest / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    (dest / ".dockerignore").write_text("Dockerfile\n", encoding="utf-8")
    return dest


# ---------------------------------------------------------------------------------------
# authoring helper


def make_patches(task_dir: Path, after_dir: Path) -> tuple[str, str]:
    """Diff base/ against a fixed-up copy `after_dir` and split the diff into (gold, test).

    Test files (by `is_test_path`) go to test.patch, everything else to gold.patch.
    Writes both files into the task directory and returns their text.
    """
    task_dir, after_dir = Path(task_dir), Path(after_dir)
    language = load_task(task_dir)["repo_language"]
    with tempfile.TemporaryDirectory(prefix="swepipe-patches-") as tmp:
        repo = Path(tmp)
        _git(repo, "init", "-q")
        for rel in base_files(task_dir):
            _copy_file(task_dir / "base" / rel, repo / rel)
        _commit(repo, "base", 0)
        for child in repo.iterdir():
            if child.name != ".git":
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        for path in sorted(after_dir.rglob("*")):
            relative = path.relative_to(after_dir)
            if path.is_file() and not _ignored(relative):
                _copy_file(path, repo / relative)
        _git(repo, "add", "-A")
        changed = [p for p in _git(repo, "diff", "--cached", "--name-only").splitlines() if p]
        tests = [p for p in changed if is_test_path(p, language)]
        sources = [p for p in changed if not is_test_path(p, language)]
        diff = ["diff", "--cached", "--no-color", "--no-ext-diff", "--"]
        gold = _git(repo, *diff, *sources) if sources else ""
        test = _git(repo, *diff, *tests) if tests else ""
    (task_dir / "gold.patch").write_text(gold, encoding="utf-8")
    (task_dir / "test.patch").write_text(test, encoding="utf-8")
    return gold, test


# ---------------------------------------------------------------------------------------
# command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.bundled.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if dataset.jsonl differs from the sources")
    parser.add_argument("--output", type=Path, default=DATASET_PATH, help="dataset file (default: %(default)s)")
    parser.add_argument("--tasks", type=Path, default=TASKS_ROOT, help="tasks directory (default: %(default)s)")
    sub = parser.add_subparsers(dest="command")
    ctx = sub.add_parser("context", help="prepare a docker build context for one task")
    ctx.add_argument("task_dir", type=Path)
    ctx.add_argument("dest", type=Path)
    mat = sub.add_parser("materialise", help="create one task's git repository")
    mat.add_argument("task_dir", type=Path)
    mat.add_argument("dest", type=Path)
    mk = sub.add_parser("make-patches", help="write gold.patch and test.patch from a fixed-up copy of base/")
    mk.add_argument("task_dir", type=Path)
    mk.add_argument("after_dir", type=Path)
    args = parser.parse_args(argv)

    try:
        if args.command == "context":
            task = load_task(args.task_dir)
            docker_context(args.task_dir, args.dest)
            print(image_name(task))
            return 0
        if args.command == "materialise":
            base_sha, gold_sha = materialise_repo(args.task_dir, args.dest)
            print(f"base {base_sha}\ngold {gold_sha}")
            return 0
        if args.command == "make-patches":
            gold, test = make_patches(args.task_dir, args.after_dir)
            print(f"gold.patch: {', '.join(patch_paths(gold)) or '(empty)'}")
            print(f"test.patch: {', '.join(patch_paths(test)) or '(empty)'}")
            return 0
        text = render_dataset(build_rows(args.tasks))
    except BundledTaskError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date; run: python -m pipeline.bundled.build", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date ({text.count(chr(10))} tasks)")
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output} ({text.count(chr(10))} tasks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
