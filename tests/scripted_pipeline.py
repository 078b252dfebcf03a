"""Scripted replies for whole-pipeline tests, made from a bundled task's gold patch."""

from __future__ import annotations

import json

import yaml
from unidiff import PatchSet

USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}


def reply(content: str, usage: dict = USAGE) -> dict:
    return {"content": content, "usage": usage}


def bash(command: str) -> dict:
    return reply(f"Next.\n```bash\n{command}\n```")


SUBMIT = bash("submit")


def patch_per_file(patch: str) -> dict[str, str]:
    return {f.path: str(f) for f in PatchSet(patch)}


def apply_patch_command(patch: str) -> str:
    return (f"cat > /tmp/part.diff <<'SWEPIPE_PATCH'\n{patch}SWEPIPE_PATCH\n"
            "git apply /tmp/part.diff && git status --short")


def hunk_edits(patch: str):
    """(path, old text, new text, a new file) per hunk of ``patch``: the lines it replaces and those instead."""
    for patched in PatchSet(patch):
        for hunk in patched:
            yield (patched.path, "".join(line.value for line in hunk if not line.is_added),
                   "".join(line.value for line in hunk if not line.is_removed), patched.is_added_file)


def edits_from_patch(patch: str) -> str:
    """The gold patch written as search/replace blocks (what a perfect principal would reply)."""
    blocks = [f"{path}\n```\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n```\n"
              for path, search, replace, _ in hunk_edits(patch)]
    return "I checked both places; here is the whole fix.\n\n" + "\n".join(blocks)


def edit_block_from_patch(patch: str) -> str:
    """The patch as one agent's ```edit block (its hunks as search/replace edits; a new file with an empty SEARCH),
    with the prose a real model writes around it."""
    edits = [f"{path}\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"
             for path, search, replace, _ in hunk_edits(patch)]
    return "Making the change in every place at once.\n```edit\n" + "".join(edits) + "```\nThen I will check it."


def editor_calls_from_patch(patch: str) -> list[dict]:
    """The patch as str_replace_editor tool calls, one per hunk (create for a new file)."""
    calls = []
    for path, old, new, added in hunk_edits(patch):
        arguments = ({"command": "create", "path": path, "file_text": new} if added else
                     {"command": "str_replace", "path": path, "old_str": old, "new_str": new})
        calls.append({"content": "", "tool_calls": [{"name": "str_replace_editor", "arguments": arguments}],
                      "usage": USAGE})
    return calls


def brief_from_patch(patch: str, margin: int = 5) -> str:
    """A senior's final reply whose spans cover every hunk of the patch."""
    spans = []
    for patched in PatchSet(patch):
        for hunk in patched:
            spans.append({"file": patched.path, "start": max(1, hunk.source_start - margin),
                          "end": hunk.source_start + hunk.source_length + margin,
                          "reason": f"{patched.path} must change here"})
    brief = {"analysis": "Both candidates fix half of the bug each; the fix needs both files.", "spans": spans}
    return f"```json\n{json.dumps(brief)}\n```\n```bash\nsubmit\n```"


def write_config(path, script_path, **extra) -> None:
    prices = {"input": 1.0, "output": 2.0}
    config = {"models": {role: {"model": f"scripted/{script_path}", "prices": prices}
                         for role in ("junior", "senior", "principal")},
              "juniors": {"k": 2}, "limits": {"max_steps": 6}, **extra}
    path.write_text(yaml.safe_dump(config))
