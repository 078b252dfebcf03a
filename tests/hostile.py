"""Hostile text for property-based tests: what a model, a test, a file name or a provider may put in any text
field, and how a reader of each format swepipe writes (terminal, Markdown, HTML) finds it again.

Strategies:
    hostile_text(max_size=60, min_size=0)  text built from PIECES (Rich markup, emoji codes, HTML and script tags,
                                           Markdown, control and ANSI characters, surrogates, odd unicode, line
                                           breaks, template and format strings) and random unicode
    hostile_line(max_size=60, min_size=1)  the same without line breaks (a one-line field: an id, a status)
    file_name(max_size=40)                 a name a directory can have on Linux (a run id): hostile, but no "/" or
                                           NUL, and only the surrogates a non-UTF-8 byte becomes
    hostile_number                         NaN, infinities, huge and tiny floats, integers beyond a float's range
    json_scalar                            any JSON value that is no object or list, hostile text and numbers too
    verdict                                what a record may hold where true or false belongs ("false", "no", 1, ...)

Readers (each returns whether ``text`` is shown literally in ``output``; a text is first cleaned as swepipe shows
text anywhere, pipeline.text.printable.clean: no terminal codes or control characters, non-UTF-8 bytes as \\xXX):
    in_terminal(text, output)   every line of the text in what a console printed, whitespace and characters of no
                                width aside (a table pads its cells and folds its title to its width, a terminal
                                expands tabs; Rich drops a carriage return, and a cell that holds only characters
                                of no width, which no one sees anyway; Unicode's line separators break lines as a
                                newline does)
    in_markdown(text, markdown) the text in the Markdown rendered as CommonMark with GitHub's tables, its HTML
                                unescaped, <br> read as a line break, whitespace runs counted as one
    in_html(text, page)         the text in the page's text as an HTML parser reads it (so a tag in the text that
                                was not escaped is no text, and is not found), leading and trailing spaces aside (a
                                table cell shows its indent as non-breaking spaces)
"""

from __future__ import annotations

import html
import re
from functools import lru_cache
from html.parser import HTMLParser

from hypothesis import strategies as st
from rich.cells import cell_len

from pipeline.text.printable import clean

PIECES = (
    # Rich markup and emoji codes
    "[/i]", "[bold]", "[/]", "[/bold red]", "[link=https://example.com]here[/link]", "[red on blue]", "\\[", "[", "]",
    ":smile:", ":thumbs_up:", ":1st_place_medal:",
    # real names that look like markup
    "tinyq/[/i]queue.py", "tests/test_p.py::test_norm[/usr/lib]", "app/[slug]/page.tsx", "test_x[a-b]",
    # HTML
    "<script>alert(1)</script>", "</details>", "</pre>", "<b>", "<!--", "-->", "&amp;", "&lt;", "&#x41;", '"', "'",
    # Markdown
    "|", "`", "```", "**", "*", "_", "__init__", "_x_", "~~", "#", "> ", "- ", "+ ", "1. ", "2) ", "---", "===",
    "[x](https://example.com)", "![i](x.png)", "\\", "<https://example.com>",
    # control characters and terminal codes
    "\x1b[31m", "\x1b[0m", "\x1b[2J", "\x1b]8;;https://example.com\x07", "\x1b]52;c;aGk=\x07", "\x00", "\x07", "\x08",
    "\x7f", "\x9b", "\x85", "\r", "\r\n", "\n", "\n\n", "\t", "\x0b", "\x0c",
    # odd unicode: surrogate escapes of non-UTF-8 bytes, lone surrogates, bidi and zero-width characters
    "\udce9", "\udcff", "\ud800", "\udfff", "\u202e", "\u200b", "\ufeff", "\u2028", "é", "e\u0301", "’", "日本",
    "🙂", "👨\u200d👩\u200d👧", "\ufffd",
    # template and format strings
    "{{ x }}", "{% raw %}", "{task.description}", "{0}", "%s", "${HOME}",
)


def hostile_text(max_size: int = 60, min_size: int = 0):
    pieces = st.one_of(st.sampled_from(PIECES), st.text(max_size=10))
    return st.lists(pieces, min_size=1 if min_size else 0, max_size=max(1, max_size // 3)).map(
        lambda parts: "".join(parts)[:max_size]).filter(lambda text: len(text) >= min_size)


def hostile_line(max_size: int = 60, min_size: int = 1):
    return hostile_text(max_size, min_size).map(lambda text: re.sub(r"[\r\n]", " ", text))


def _can_name_a_directory(name: str) -> bool:
    if name in ("", ".", "..") or "/" in name or "\x00" in name:
        return False
    try:
        return len(name.encode("utf-8", "surrogateescape")) <= 200
    except UnicodeEncodeError:  # a surrogate no byte stands for
        return False


def file_name(max_size: int = 40):
    return hostile_text(max_size, min_size=1).map(lambda text: text.replace("/", "|").replace("\x00", "")).filter(
        _can_name_a_directory)


hostile_number = st.one_of(
    st.sampled_from((float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 5e-324, -0.0, 10 ** 400, -(10 ** 30))),
    st.floats(allow_nan=True, allow_infinity=True), st.integers())
json_scalar = st.one_of(st.none(), st.booleans(), hostile_number, hostile_text())
verdict = st.one_of(st.booleans(), st.none(), st.sampled_from(("false", "no", "true", "yes", "", 0, 1, 0.0)),
                    json_scalar)


# -- readers --------------------------------------------------------------------------------------------------

def _squashed(text: str) -> str:
    return " ".join(text.split())


@lru_cache(maxsize=None)
def _seen(character: str) -> bool:
    return not character.isspace() and cell_len(character) > 0


def _bare(text: str) -> str:
    return "".join(c for c in text if _seen(c))


def in_terminal(text: str, output: str) -> bool:
    shown = _bare(output)
    return all(_bare(line) in shown for line in re.split(r"[\n\u2028\u2029]", clean(text).replace("\r", "")))


def markdown_text(markdown: str) -> str:
    """What a reader of ``markdown`` sees: CommonMark with GitHub's tables, as text."""
    from markdown_it import MarkdownIt

    rendered = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)
    return html.unescape(re.sub(r"<(?!br>)[^>]*>", " ", rendered).replace("<br>", "\n"))


def in_markdown(text: str, markdown: str) -> bool:
    return _squashed(clean(text)) in _squashed(markdown_text(markdown))


class _PageText(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.chunks: list[str] = []

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)


def page_text(page: str) -> str:
    """The text of an HTML page as a browser shows it (its elements' text, references resolved), in one string."""
    parser = _PageText()
    parser.feed(page)
    parser.close()
    return "".join(parser.chunks)


def in_html(text: str, page: str) -> bool:
    return clean(text).strip(" ") in page_text(page)
