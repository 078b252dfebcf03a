"""Text as report.md shows it: literally, once a Markdown reader (CommonMark with GitHub's tables) has rendered it.

A run id, a test's name, a model's error may hold ``<script>``, ``|``, ``*``, backticks or line breaks. Cleaned first
(printable.clean: report.md is also read in terminals), then: ``&``, ``<`` and ``>`` become entities (no raw HTML, in
any Markdown dialect); the characters that open CommonMark's inline constructs (code, emphasis, strikethrough, a
table's cell border, a heading's closing ``#``) are backslash-escaped; underscores only where they could emphasise
(an underscore between two letters or digits never does, so instance ids stay readable); a ``]`` only where a link
or an image would follow (``](`` or ``][``: report.md defines no link reference, and a line's opening ``[`` is
escaped so none can be defined), so that ``[33.3%, 66.7%]`` stays as it is; a line break becomes ``<br>``, so that a
text stays in its table cell, heading or paragraph.
"""

from __future__ import annotations

import re

from pipeline.text.printable import clean

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_SPECIAL = re.compile(r"[\\`*|~#]|\](?=[(\[])")
_UNDERSCORES = re.compile(r"_+")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# what starts a block when it opens a line: a list item (-, +, "1." or "1)"), a setext underline (=), a link
# reference definition ([), and an indent (a tab or four spaces: a code block)
_BLOCK_START = re.compile(r"^([-+=\[]|\d+(?=[.)]))")
_INDENT = re.compile(r"^[ \t]+")
# a line that is nothing but line breaks: as "<br>" alone it would open an HTML block, which shows the next lines'
# escapes as typed
_ONLY_BREAKS = re.compile(r"(?:<br>)+[ \t]*")


def inline(value) -> str:
    """``value`` for a table cell, a heading or inside a paragraph."""
    text = "".join(_ENTITIES.get(c, c) for c in clean(value))
    text = _SPECIAL.sub(lambda m: "\\" + m.group(), text)
    text = _UNDERSCORES.sub(_underscores, text)
    return _LINE_BREAK.sub("<br>", text)


def line(value) -> str:
    """``value`` as a line of its own (a paragraph's line): ``inline``, its indent as character references (a
    reader would drop it, or read a code block), and a marker that would start a block escaped."""
    text = inline(value)
    if _ONLY_BREAKS.fullmatch(text):
        return ""  # a reader sees an empty line either way
    text = _INDENT.sub(lambda m: "".join(f"&#{ord(c)};" for c in m.group()), text)
    return _BLOCK_START.sub(lambda m: m.group() + "\\" if m.group()[0].isdigit() else "\\" + m.group(), text)


def _underscores(match: re.Match) -> str:
    text, start, end = match.string, match.start(), match.end()
    between_words = start > 0 and end < len(text) and text[start - 1].isalnum() and text[end].isalnum()
    return match.group() if between_words else "\\_" * len(match.group())
