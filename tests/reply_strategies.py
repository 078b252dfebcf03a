"""Hypothesis strategies for what a model may reply: prose, fenced blocks of every kind (closed, unclosed, nested,
four backticks), search/replace edits, briefs and tool calls, built from the hostile text real and careless models
write (tests/hostile.py) and the pieces our parsers look for. Used by test_fuzz_replies.py and
scripts/fuzz_replies.py."""

from __future__ import annotations

import json
import math

from hostile import hostile_text
from hypothesis import strategies as st

# What the parsers look for, to be found in the wrong places.
MARKERS = ("```", "````", "```bash", "```edit", "```view", "```json", "```python", "````edit", "submit",
           "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE", "ANALYSIS:", "SPANS:", "CANDIDATE:", "## SPANS",
           "**CANDIDATE:** 2", "none", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "DELETE FILE", "+++ b/", "--- a/",
           "@@ -1 +1 @@")
PATHS = ("calc.py", "/app/calc.py", "./calc.py", "a/calc.py", "pkg/../calc.py", "../outside.py", "/etc/passwd",
         "app/[slug]/page.tsx", "tinyq/[/i]queue.py", "dir with spaces/f.py", "calc.py\n", ".git/config", "~/x",
         "C:\\calc.py", "calc\x00.py", "", "new/deep/file.py", "calc.py 1-2", "\u202ecalc.py", "run.sh")
HUGE_NUMBERS = ("9" * 5000, "-" + "9" * 400, "1e309", "Infinity", "-Infinity", "NaN", "0", "-1", "2147483648",
                "18446744073709551616", "1.5", "0x10", "\u0661\u0662")
# Commands hidden in text: they must never run, wherever the text goes (test_fuzz_replies checks the file).
INJECTED = "/tmp/swepipe-fuzz-injected"
INJECTIONS = (f"$(touch {INJECTED})", f"`touch {INJECTED}`", f"; touch {INJECTED}", f"'; touch {INJECTED}; '")
prose = st.one_of(hostile_text(max_size=200), st.sampled_from(INJECTIONS))
path = st.one_of(st.sampled_from(PATHS), hostile_text(max_size=40))
number = st.one_of(st.sampled_from(HUGE_NUMBERS), st.integers(-10, 10**12).map(str))
body = st.lists(st.one_of(prose, st.sampled_from(MARKERS), path), max_size=6).map("\n".join)


def _lines(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


@st.composite
def fenced(draw) -> str:
    """A fenced block: a tag the agent knows or not, a body that may hold fences itself, closed or not."""
    fence = draw(st.sampled_from(("```", "````", "`````", "~~~")))
    tag = draw(st.one_of(st.sampled_from(("bash", "edit", "view", "json", "python", "submit", "delegate", "BASH",
                                          "", "bash extra")), hostile_text(max_size=10)))
    inner = draw(st.one_of(body, view_body(), edit_body()))
    closing = draw(st.sampled_from((fence, fence, "", "```", fence + fence)))
    return f"{fence}{tag}\n{_lines(inner)}{closing}"


@st.composite
def view_body(draw) -> str:
    return f"{draw(path)} {draw(number)}-{draw(st.one_of(number, st.sampled_from(('end', '$', ''))))}"


@st.composite
def edit_body(draw) -> str:
    """One or more search/replace edits, whole or broken."""
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        parts = [draw(path), "<<<<<<< SEARCH", draw(body), "=======", draw(body), ">>>>>>> REPLACE"]
        cut = draw(st.integers(len(parts) - 2, len(parts)))  # sometimes a marker is missing
        edits.append("\n".join(parts[:cut]))
    return "\n".join(edits)


text_reply = st.lists(st.one_of(prose, fenced(), st.sampled_from(MARKERS)), max_size=5).map("\n".join)

json_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
              hostile_text(max_size=60), st.sampled_from(PATHS)),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.sampled_from(("command", "path", "view_range", "insert_line",
                                                                "old_str", "new_str", "file_text", "text", "body")),
                                               children, max_size=5)),
    max_leaves=12)


@st.composite
def editor_arguments(draw) -> dict:
    """str_replace_editor arguments as models send them: the right keys with wrong, huge or hostile values."""
    arguments = {"command": draw(st.one_of(st.sampled_from(("view", "create", "str_replace", "insert", "undo_edit")),
                                           json_value)),
                 "path": draw(st.one_of(path, json_value))}
    for key in draw(st.sets(st.sampled_from(("view_range", "insert_line", "old_str", "new_str", "file_text")))):
        arguments[key] = draw(st.one_of(json_value, hostile_text(max_size=80),
                                        st.lists(st.one_of(st.integers(), st.floats(), number), max_size=3)))
    return arguments


def _raw_json(value) -> str:
    """JSON text as a provider may send it: NaN and Infinity as bare words, which Python's json also reads."""
    return json.dumps(value, allow_nan=True)


@st.composite
def tool_call(draw) -> dict:
    name = draw(st.one_of(st.sampled_from(("bash", "submit", "str_replace_editor", "delegate")),
                          hostile_text(max_size=12)))
    arguments = draw(st.one_of(
        editor_arguments(), st.dictionaries(st.sampled_from(("command", "text", "body")), json_value, max_size=2),
        json_value))
    raw = draw(st.one_of(st.just(_raw_json(arguments)), st.just(_raw_json(arguments)[: draw(st.integers(0, 40))]),
                         hostile_text(max_size=40)))
    return {"name": name, "arguments": raw}


tool_reply = st.fixed_dictionaries({"content": st.one_of(st.just(""), prose),
                                    "tool_calls": st.lists(tool_call(), max_size=2)})


@st.composite
def brief_reply(draw) -> str:
    """A senior's final reply: the text form's sections or a ```json brief, whole, partial or garbled."""
    if draw(st.booleans()):
        spans = draw(st.lists(st.builds(lambda p, a, b, r: f"{p}:{a}-{b} {r}", path, number, number, prose),
                              max_size=4))
        parts = ["ANALYSIS:", draw(prose), "SPANS:", *spans, f"CANDIDATE: {draw(st.one_of(number, prose))}"]
        return "\n".join(draw(st.permutations(parts)) if draw(st.booleans()) else parts)
    brief = {"analysis": draw(json_value), "spans": draw(st.one_of(json_value, st.lists(st.fixed_dictionaries(
        {"file": st.one_of(path, json_value), "start": json_value, "end": json_value, "reason": json_value}),
        max_size=3))), "candidate": draw(json_value)}
    return f"```json\n{_raw_json(brief)}\n```"


def is_finite_json(value) -> bool:
    """Whether ``value`` has no NaN or infinity anywhere (what a strict JSON reader would take)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(is_finite_json(v) for v in value.values())
    if isinstance(value, list):
        return all(is_finite_json(v) for v in value)
    return True


@st.composite
def yaml_body(draw) -> str:
    """A team action's YAML block: the keys it takes, with hostile, huge or nested values, or not YAML at all."""
    keys = ("stage", "task", "writable", "to", "text", "worker", "other")
    value = st.one_of(hostile_text(max_size=40).map(json.dumps), st.sampled_from(HUGE_NUMBERS), path,
                      st.sampled_from(("[", "{", "[[[[[[[[[[", "- - - -", "&a [*a]", "!!python/object:os.system",
                                       "implementation", "worker-" + "9" * 5000, "all", "~", "null")))
    lines = [f"{draw(st.sampled_from(keys))}: {draw(value)}" for _ in range(draw(st.integers(0, 4)))]
    text = "\n".join(lines)
    return "- " + text.replace("\n", "\n  ") if draw(st.booleans()) else text
