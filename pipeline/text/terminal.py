"""The one way swepipe prints to a terminal: a console that shows every string literally.

Model replies, test names, file names and provider errors reach the terminal inside our own messages and tables.
Rich would read ``[/i]`` in them as markup (and stop with MarkupError), ``:smile:`` as an emoji code, and colour
what looks like numbers or paths; an escape character would reach the terminal as a control sequence. The console
made here has markup, emoji codes and highlighting off and cleans every string it renders (printable.clean), so a
string prints as the characters it holds (a control character among them as U+FFFD). Our own colours are given as
``style=`` or as ``literal(text, style)``.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from pipeline.text.printable import clean


class _LiteralConsole(Console):
    """A Console that renders every string it is given (a message, a table's cell or title) as plain text."""

    def render_str(self, text: str, *, style="", justify=None, overflow=None, **_interpreting) -> Text:
        # markup, emoji and highlighting stay off even when a caller asks for them
        return _measurable(super().render_str(_shown(text), style=style, justify=justify, overflow=overflow,
                                              markup=False, emoji=False, highlight=False))


def literal_console(**settings) -> Console:
    """A console for swepipe's output (``settings``: Rich's, e.g. ``stderr=True``, ``width``, ``record``)."""
    return _LiteralConsole(markup=False, emoji=False, highlight=False, **settings)


def literal(text, style: str = "") -> Text:
    """``text`` as a Rich Text that shows it literally on any console, in ``style``: for a styled piece of a
    message, or a renderable that may be printed by a console not made here."""
    return _measurable(Text(_shown(text), style=style))


def _shown(value) -> str:
    """``value`` as a terminal shows it: cleaned (printable.clean), Unicode's line and paragraph separators as the
    line breaks they are (Rich measures them as no width, and a table cell after one was cut)."""
    return clean(value).replace("\u2028", "\n").replace("\u2029", "\n")


def _measurable(text: Text) -> Text:
    """``text`` with its tabs as spaces: Rich measures a tab as no width, so a table cell would cut what follows."""
    text.expand_tabs()
    return text
