"""GBNF grammars (llama.cpp's) that hold the local model's replies to the forms swepipe parses.

A tiny model left free rarely writes a reply the agent can act on. Sent with each request, these grammars make
every reply a usable one: in the text format one thought and exactly one action block of the kinds the agent
may use (``pipeline.agent.actions.parse_action``), for the senior with its brief as the thought
(``pipeline.senior.brief.parse_brief``), the principal's search/replace edits (``pipeline.edits.blocks``); in the
tool format one tool call of the request's tools, as JSON (the local server turns it into the call).

Every piece is bounded and every character is printable ASCII, so a reply has at most ``Grammar.longest``
characters, and, as llama.cpp never samples an empty token under a grammar, at most that many tokens: sent as
max_tokens, no reply is ever cut short into a broken one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pipeline.records.chat import ToolSpec

ASCII = "\t" + "".join(chr(code) for code in range(0x20, 0x7F))  # tab and the printable characters
BASH, SUBMIT, EDIT, VIEW, EDITOR = "bash", "submit", "edit", "view", "str_replace_editor"  # as pipeline.agent.actions

# Sized for a small model on a CPU, which may run a reply to every bound: the longest junior step is about 1,650
# tokens, the senior's 1,850, the principal's 2,150 (tests/test_local_grammars.py draws replies up to them).
THOUGHT_CHARS = 200
COMMAND_LINES, COMMAND_WIDTH = 3, 160
INDENT, CODE_WIDTH = 16, 100  # one line of code: its indentation, then the rest
EDIT_LINES = 5  # lines of SEARCH and of REPLACE in an agent's ```edit block
PRINCIPAL_LINES, PRINCIPAL_FILES, NOTE_LINES = 7, 1, 2
PATH_CHARS = 100
BRIEF_ANALYSIS, BRIEF_SPANS, BRIEF_REASON = 300, 4, 80
BODY_LINES = 6  # another action's block (```delegate, ```message, ...)
# A line that starts (after its indentation) like one of these would end an action block or an edit section early.
FENCE = "```"
EDIT_MARKERS = ("<<<<<", "=======", ">>>>>", FENCE)


@dataclass(frozen=True)
class Grammar:
    text: str  # GBNF; the start rule is ``root``
    longest: int  # characters (and so tokens) of the longest reply it allows
    regex: str  # the same language as a Python regular expression (for tests: re.fullmatch, hypothesis' from_regex)

    @property
    def max_tokens(self) -> int:
        return self.longest + 8  # the end-of-turn token and a little room


@dataclass(frozen=True)
class _Part:
    gbnf: str
    regex: str
    longest: int


class _Rules:
    """Named rules, built from parts that know how long their longest text is."""

    def __init__(self) -> None:
        self.defined: dict[str, _Part] = {}

    def rule(self, name: str, part: _Part) -> _Part:
        if name not in self.defined:
            self.defined[name] = part
        defined = self.defined[name]
        return _Part(name, defined.regex, defined.longest)

    def grammar(self, root: _Part) -> Grammar:
        self.defined["root"] = root
        text = "\n".join(f"{name} ::= {part.gbnf}" for name, part in reversed(self.defined.items()))
        return Grammar(text + "\n", root.longest, root.regex)


def lit(text: str) -> _Part:
    return _Part(json.dumps(text), re.escape(text), len(text))


def seq(*parts: _Part) -> _Part:
    return _Part("(" + " ".join(p.gbnf for p in parts) + ")", "(?:" + "".join(p.regex for p in parts) + ")",
                 sum(p.longest for p in parts))


def alt(*parts: _Part) -> _Part:
    return _Part("(" + " | ".join(p.gbnf for p in parts) + ")", "(?:" + "|".join(p.regex for p in parts) + ")",
                 max(p.longest for p in parts))


def rep(part: _Part, low: int, high: int) -> _Part:
    return _Part(f"{part.gbnf}{{{low},{high}}}", f"(?:{part.regex}){{{low},{high}}}", part.longest * high)


def opt(part: _Part) -> _Part:
    return rep(part, 0, 1)


def chars(allowed: str, low: int = 1, high: int = 1) -> _Part:
    """``low`` to ``high`` characters, each one of ``allowed``."""
    codes = sorted({ord(c) for c in allowed})
    ranges, start = [], codes[0]
    for previous, code in zip(codes, [*codes[1:], -1], strict=True):  # -1: past the last code
        if code != previous + 1:
            ranges.append(f"\\x{start:02X}" if start == previous else f"\\x{start:02X}-\\x{previous:02X}")
            start = code
    single = _Part("[" + "".join(ranges) + "]", "[" + "".join(ranges) + "]", 1)
    return single if (low, high) == (1, 1) else rep(single, low, high)


def but(*excluded: str) -> str:
    """ASCII without the ``excluded`` characters."""
    return "".join(c for c in ASCII if c not in "".join(excluded))


NO_BACKTICK = but("`")
WORD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
PATH_CHARS_SET = WORD + "_-."


def line_avoiding(rules: _Rules, name: str, prefixes: tuple[str, ...], *, indent: int = INDENT,
                  width: int = CODE_WIDTH) -> _Part:
    """One line's text (no newline) that does not begin, after its indentation, with any of ``prefixes``."""
    rest = rules.rule(f"{name}-rest", chars(but("\n"), 0, width))

    def node(typed: str) -> _Part:
        following = {p[len(typed)] for p in prefixes if p.startswith(typed) and len(p) > len(typed)}
        first = typed == ""
        other = but("\n", *following, " \t" if first else "")  # after the indentation: the line's first character
        choices = [lit(""), seq(chars(other), rest)]
        for char in sorted(following):
            if typed + char not in prefixes:
                choices.append(seq(lit(char), node(typed + char)))
        return rules.rule(f"{name}-{typed.encode().hex()}" if typed else f"{name}-start", alt(*choices))

    return rules.rule(name, seq(chars(" \t", 0, indent), node("")))


def _thought() -> _Part:
    """Free text before the action: no backtick, so no fence (and no second block) can hide in it."""
    return seq(chars(but("`", " \t")), chars(NO_BACKTICK + "\n", 0, THOUGHT_CHARS - 1))


def _file_path(rules: _Rules) -> _Part:
    """A file's path from the repository root, its name with an extension (pipeline.edits.blocks reads a bare word
    as prose); no part starts with a dot, so none is ``..``."""
    word = PATH_CHARS_SET.replace(".", "")
    segment = seq(chars(word.replace("-", "")), chars(PATH_CHARS_SET, 0, 30))
    name = seq(chars(word.replace("-", "")), chars(word, 0, 30), rep(seq(lit("."), chars(word, 1, 10)), 1, 2))
    return rules.rule("file-path", seq(rep(seq(segment, lit("/")), 0, 3), name))


def _number() -> _Part:
    return seq(chars("123456789"), chars("0123456789", 0, 5))


def _search_replace(rules: _Rules, lines: int) -> _Part:
    """SEARCH lines, =======, REPLACE lines, as pipeline.edits.blocks parses them; every line ends in \\n."""
    code = rules.rule("code-line", seq(line_avoiding(rules, "code", EDIT_MARKERS), lit("\n")))
    section = rep(code, 0, lines)
    return seq(lit("<<<<<<< SEARCH\n"), section, lit("=======\n"), section, lit(">>>>>>> REPLACE\n"))


def _block(rules: _Rules, kind: str) -> _Part:
    """One fenced action block: ```kind, its lines, ``` (parse_action's form)."""
    if kind == BASH:  # a command starts with a name or a path (not with a placeholder such as <command>)
        first = seq(chars(WORD + "_./("), chars(but("\n"), 0, COMMAND_WIDTH - 1), lit("\n"))
        more = seq(line_avoiding(rules, "command", (FENCE,), indent=8, width=COMMAND_WIDTH), lit("\n"))
        body = seq(first, rep(more, 0, COMMAND_LINES - 1))
    elif kind == VIEW:
        view_path = seq(chars(PATH_CHARS_SET.replace("-", "") + "/"), chars(PATH_CHARS_SET + "/", 0, PATH_CHARS - 1))
        line_range = seq(lit(" "), _number(), lit("-"), alt(_number(), lit("end")))
        body = seq(view_path, opt(line_range), lit("\n"))
    elif kind == EDIT:
        body = seq(_file_path(rules), lit("\n"), _search_replace(rules, EDIT_LINES))
    else:
        body = rep(seq(line_avoiding(rules, "body", (FENCE,)), lit("\n")), 0, BODY_LINES)
    return rules.rule(f"block-{kind}", seq(lit(f"{FENCE}{kind}\n"), body, lit(FENCE)))


def _brief(rules: _Rules) -> _Part:
    """The senior's brief as its thought: ANALYSIS: on one line, SPANS: path:START-END why, CANDIDATE:."""
    span = seq(_file_path(rules), lit(":"), _number(), lit("-"), _number(), lit(" "),
               chars(but("`", "\n"), 1, BRIEF_REASON), lit("\n"))
    candidate = alt(lit("none"), seq(chars("123456789"), chars("0123456789", 0, 1)))
    return rules.rule("brief", seq(
        lit("ANALYSIS: "), chars(WORD), chars(but("`", "\n"), 0, BRIEF_ANALYSIS - 1),
        lit("\nSPANS:\n"), rep(span, 1, BRIEF_SPANS), lit("CANDIDATE: "), candidate, lit("\n")))


def action_reply(kinds: tuple[str, ...], *, brief: bool = False) -> Grammar:
    """A text-format reply: one thought, then exactly one block of ``kinds`` (bash first; ```bash submit is a
    bash block). With ``brief`` (the senior) the thought is the brief so far, so the reply that submits, or the
    last one at the step limit, holds a brief: a tiny model never turns from exploring to briefing by itself."""
    rules = _Rules()
    thought = _brief(rules) if brief else rules.rule("thought", _thought())
    return rules.grammar(seq(thought, lit("\n"), opt(lit("\n")),
                             alt(*(_block(rules, kind) for kind in dict.fromkeys(kinds)))))


def edit_reply() -> Grammar:
    """The principal's reply: an optional short note, then search/replace edits, each file's in its fence."""
    rules = _Rules()
    # Outside the blocks a line such as "DELETE a.py" deletes a file: the note's lines start otherwise.
    note_line = seq(line_avoiding(rules, "note", (*EDIT_MARKERS, "DELETE", "-", "*"), indent=0), lit("\n"))
    note = seq(rep(note_line, 1, NOTE_LINES), lit("\n"))
    language = chars("abcdefghijklmnopqrstuvwxyz", 0, 12)
    edits = rules.rule("file-edit", seq(_file_path(rules), lit(f"\n{FENCE}"), language, lit("\n"),
                                        _search_replace(rules, PRINCIPAL_LINES), lit(f"{FENCE}\n")))
    more = [rep(seq(lit("\n"), edits), 0, PRINCIPAL_FILES - 1)] if PRINCIPAL_FILES > 1 else []
    return rules.grammar(seq(opt(note), edits, *more))


# The tool format. The editor's arguments per command (pipeline.edits.editor): one variant each, so a call never
# lacks what its command needs; a trailing "?" marks an optional one.
EDITOR_ARGUMENTS = {"view": ("path", "view_range?"), "create": ("path", "file_text"),
                    "str_replace": ("path", "old_str", "new_str"), "insert": ("path", "insert_line", "new_str"),
                    "undo_edit": ("path",)}
VIEW_RANGE = {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}
VISIBLE = ("command", "path", "old_str")  # arguments that are refused blank (pipeline.agent.actions, the editor)
DEFAULT_TOOL_TOKENS = 1024


def tool_call(tools: list[ToolSpec], max_tokens: int | None = None) -> Grammar:
    """One call of one of ``tools`` (OpenAI function tools) as ``{"name": ..., "arguments": {...}}``, the
    arguments as the tool's JSON schema has them; each call's free text is sized so it fits in ``max_tokens``."""
    budget = max_tokens or DEFAULT_TOOL_TOKENS
    variants = []
    for tool in tools:
        function = tool["function"]
        for members in _argument_variants(function.get("parameters") or {}, function["name"]):
            def build(cap: int, name: str = function["name"],
                      members: list[tuple[str, dict[str, Any], bool]] = members) -> _Part:
                arguments = _object([(key, _json_value(schema, cap, key in VISIBLE), required)
                                     for key, schema, required in members])
                return seq(lit(f'{{"name": {json.dumps(name)}, "arguments": '), arguments, lit("}"))

            slope = build(2).longest - build(1).longest  # characters per character of each free text
            fixed = build(1).longest - slope
            variants.append(build(max(1, (budget - 8 - fixed) // slope) if slope else 1))
    return _Rules().grammar(alt(*variants))


def _argument_variants(parameters: dict[str, Any], name: str) -> list[list[tuple[str, dict[str, Any], bool]]]:
    """The argument objects a call may have: (key, schema, required) in the schema's order, one list per
    command for the editor."""
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    if name == EDITOR and "command" in properties:
        variants: list[list[tuple[str, dict[str, Any], bool]]] = []
        for command in properties["command"].get("enum") or EDITOR_ARGUMENTS:
            members: list[tuple[str, dict[str, Any], bool]] = [("command", {"enum": [command]}, True)]
            for argument in EDITOR_ARGUMENTS.get(command, ("path",)):
                key = argument.rstrip("?")
                schema = VIEW_RANGE if key == "view_range" else properties.get(key, {"type": "string"})
                members.append((key, schema, not argument.endswith("?")))
            variants.append(members)
        return variants
    return [[(key, schema, key in required) for key, schema in properties.items()]]


def _json_value(schema: dict[str, Any], cap: int, visible: bool = False) -> _Part:
    """A JSON value of ``schema`` (enum, string, integer, number, boolean, array, object); strings of at most
    ``cap`` characters, starting with a visible one if ``visible``; numbers of at most 6 digits."""
    if "enum" in schema:
        return alt(*(lit(json.dumps(value)) for value in schema["enum"]))
    kind = schema.get("type", "string")
    digits = alt(lit("0"), seq(chars("123456789"), chars("0123456789", 0, 5)))
    if kind == "integer":
        return seq(opt(lit("-")), digits)
    if kind == "number":
        return seq(opt(lit("-")), digits, opt(seq(lit("."), chars("0123456789", 1, 6))))
    if kind == "boolean":
        return alt(lit("true"), lit("false"))
    if kind == "array":
        item = _json_value(schema.get("items") or {}, cap)
        low, high = schema.get("minItems", 0), schema.get("maxItems", 4)
        items = seq(item, rep(seq(lit(", "), item), max(low - 1, 0), high - 1))
        return seq(lit("["), items if low else opt(items), lit("]"))
    if kind == "object":
        required = set(schema.get("required") or ())
        return _object([(key, _json_value(value, cap), key in required)
                        for key, value in (schema.get("properties") or {}).items()])
    # JSON text without raw control characters: a tab or newline is written escaped
    character = alt(chars(but('"', "\\", "\t")), seq(lit("\\"), chars('"\\nt')))
    if visible:
        return seq(lit('"'), chars(but('"', "\\", " \t")), rep(character, 0, max(cap - 1, 0)), lit('"'))
    return seq(lit('"'), rep(character, 0, cap), lit('"'))


def _object(members: list[tuple[str, _Part, bool]]) -> _Part:
    """A JSON object with ``members`` in order, the optional ones possibly left out."""
    def after(index: int, first: bool) -> _Part:
        if index == len(members):
            return lit("")
        key, value, required = members[index]
        member = seq(lit(("" if first else ", ") + json.dumps(key) + ": "), value, after(index + 1, False))
        return member if required else alt(member, after(index + 1, first))

    return seq(lit("{"), after(0, True), lit("}"))
