"""The file editor against the bash idioms the prompts used to suggest, on the bundled tasks' gold patches.

Every hunk of every gold patch is written the ways real models write an edit, then made on a fresh checkout of the
task's base, once through the editor (pipeline/edits/editor.py: str_replace, create) and once through the bash
idiom (``python3 -c`` replacing the text, ``sed -i`` for a one-line change, a heredoc for a new file):

- exact: the hunk's old and new lines as they are;
- indented: both shifted by four spaces, as when a model quotes a method without its class's indentation right;
- numbered: the old lines with the editor view's line numbers copied along (``12<TAB>code``);
- stale: one old line as it was before someone changed it (a word of it altered): no tool may land this one.

Each edit ends one of three ways: it landed (the file is exactly what the hunk makes of it), it failed loudly (an
error, the file unchanged), or it went silently wrong (success claimed, the file not what the hunk makes). Prints
one row per way and tool, with the milliseconds per edit, from one run:

    python scripts/bench_edits.py [--tasks tinyq,cronlite]
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import unidiff  # noqa: E402

from pipeline.edits.editor import Editor, EditorCall  # noqa: E402
from pipeline.runtime.local import LocalRuntime  # noqa: E402

BUNDLED = Path(__file__).resolve().parent.parent / "pipeline" / "bundled" / "tasks"
WAYS = ("exact", "indented", "numbered", "stale")
OUTCOMES = ("landed", "failed loudly", "silently wrong")


def base_repository(task: Path, where: Path) -> tuple[Path, str]:
    repo = where / task.name
    subprocess.run(["cp", "-r", str(task / "base"), str(repo)], check=True)
    git = ["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    return repo, subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def hunks(task: Path):
    """(path, old lines, new lines, first old line, base text or None for a new file) per gold hunk."""
    for patched in unidiff.PatchSet((task / "gold.patch").read_text()):
        path = patched.path
        base = None if patched.is_added_file else (task / "base" / path).read_text()
        for hunk in patched:
            old = [line.value for line in hunk if not line.is_added]
            new = [line.value for line in hunk if not line.is_removed]
            yield path, old, new, hunk.source_start, base


def expected(base: str | None, old: list[str], new: list[str], start: int) -> str:
    if base is None:
        return "".join(new)
    lines = base.splitlines(keepends=True)
    at = max(0, start - 1)
    assert "".join(lines[at:at + len(old)]) == "".join(old), "the hunk does not sit where it says"
    return "".join(lines[:at] + new + lines[at + len(old):])


def written(way: str, old: list[str], new: list[str], start: int) -> tuple[str, str]:
    """The old and new text as a model writes them ``way``."""
    if way == "indented":
        shift = lambda lines: ["    " + line if line.strip() else line for line in lines]  # noqa: E731
        return "".join(shift(old)), "".join(shift(new))
    if way == "numbered":
        return "".join(f"{start + n}\t{line}" for n, line in enumerate(old)), "".join(new)
    if way == "stale":
        words = [n for n, line in enumerate(old) if any(c.isalpha() for c in line)]
        pick = words[len(words) // 2]
        stale = list(old)
        stale[pick] = stale[pick].replace(next(w for w in stale[pick].split() if any(c.isalpha() for c in w)),
                                          "previously", 1)
        return "".join(stale), "".join(new)
    return "".join(old), "".join(new)


def by_editor(runtime, path: str, old: str, new: str, create: bool) -> bool:
    call = EditorCall("create", path, file_text=new) if create else EditorCall("str_replace", path, old_str=old,
                                                                               new_str=new)
    return Editor(runtime)(call).ok


def by_bash(runtime, path: str, old: str, new: str, create: bool) -> bool:
    """The idiom a bash-only agent is told to use: a heredoc for a new file, sed for one line, else python3 -c."""
    quoted = shlex.quote(path)
    if create:
        command = f"mkdir -p \"$(dirname {quoted})\" && cat > {quoted} <<'SWEPIPE_EOF'\n{new}SWEPIPE_EOF"
    elif old.count("\n") == 1 and new.count("\n") == 1:
        escape = lambda text: text.rstrip("\n").replace("\\", "\\\\").replace("/", "\\/").replace("&", "\\&")  # noqa: E731
        pattern = "".join("\\" + c if c in ".[]*^$" else c for c in escape(old))
        command = f"sed -i {shlex.quote(f's/{pattern}/{escape(new)}/')} {quoted}"
    else:
        script = (f"import pathlib; p = pathlib.Path({path!r}); "
                  f"p.write_text(p.read_text().replace({old!r}, {new!r}))")
        command = f"python3 -c {shlex.quote(script)}"
    return runtime.run(command, timeout=60).ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", help="comma-separated short names (tinyq,cronlite); default all")
    options = parser.parse_args()
    chosen = [t for t in sorted(BUNDLED.iterdir())
              if not options.tasks or t.name.split("__")[1].rsplit("-", 1)[0] in options.tasks.split(",")]
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: dict.fromkeys(OUTCOMES, 0))
    seconds: dict[tuple[str, str], float] = defaultdict(float)
    with tempfile.TemporaryDirectory() as scratch:
        for task in chosen:
            repo, commit = base_repository(task, Path(scratch))
            with LocalRuntime(repo, commit) as runtime:
                for path, old, new, start, base in hunks(task):
                    want = expected(base, old, new, start)
                    for way in WAYS if base is not None else ("exact",):
                        text_old, text_new = written(way, old, new, start)
                        for tool, apply in (("editor", by_editor), ("bash", by_bash)):
                            runtime.run("git checkout -q -- . && git clean -fdq", timeout=60)
                            began = time.perf_counter()
                            ok = apply(runtime, path, text_old, text_new, base is None)
                            seconds[way, tool] += time.perf_counter() - began
                            now = Path(runtime.workdir, path)
                            after = now.read_text(errors="replace") if now.exists() else None
                            if ok and after == want:
                                outcome = "landed"
                            elif not ok and after == base:
                                outcome = "failed loudly"
                            else:
                                outcome = "silently wrong"
                            counts[way, tool][outcome] += 1
    print(f"{len(chosen)} task(s); each hunk on a fresh checkout; shares of edits per way and tool\n")
    print(f"| way | tool | edits | {' | '.join(OUTCOMES)} | ms per edit |")
    print("| --- | --- | ---: | " + " | ".join("---:" for _ in OUTCOMES) + " | ---: |")
    for way in WAYS:
        for tool in ("editor", "bash"):
            row = counts[way, tool]
            total = sum(row.values())
            if not total:
                continue
            shares = " | ".join(f"{row[o] / total:.0%}" for o in OUTCOMES)
            print(f"| {way} | {tool} | {total} | {shares} | {1000 * seconds[way, tool] / total:.1f} |")
    wrong = sum(counts[way, "editor"]["silently wrong"] for way in WAYS)
    print(f"\nThe editor went silently wrong {wrong} time(s).")


if __name__ == "__main__":
    main()
