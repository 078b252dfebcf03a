"""A shell text as the simple commands it runs: their words (quotes removed), the text a here-document or here-string
feeds them, and the commands inside command and process substitutions (``$(...)``, backticks, ``<(...)``).

This is not a shell: it reads what any agent typed, whatever it is (an unclosed quote, a stray parenthesis, a
megabyte of text, bytes that were not UTF-8), never raises, and errs towards reading more as commands rather than
less. A quote left open runs to the end of the text; a substitution left open too. Control operators (``;``,
``&&``, ``||``, ``|``, ``&``, parentheses and line ends) end a simple command; the reserved words that open a
compound command (``if``, ``then``, ``do``, ``!`` ...) are dropped from the front of the one they open, and the
head of a ``for``/``case``/``select`` is no command. Redirections' targets are kept apart from the words.
Variables are not expanded. Nesting deeper than MAX_DEPTH is read as plain words, and a text is read up to
MAX_CHARS: the work is linear in the text, whatever it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_CHARS = 1_000_000
MAX_DEPTH = 8

_CONTROL = (";;", "&&", "||", "|&", ";", "&", "|", "(", ")", "\n")
_REDIRECTS = ("<<<", "<<-", "&>>", "<<", "<>", "<&", ">&", ">>", ">|", "&>", "<", ">")
_OPERATORS = sorted(_CONTROL + _REDIRECTS, key=len, reverse=True)
_WORD_END = frozenset(" \t\n;&|()<>")
_OPENING_WORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"})
_CLOSING_WORDS = frozenset({"fi", "done", "esac", "}"})
_LOOP_HEADS = frozenset({"for", "case", "select", "function"})


@dataclass
class SimpleCommand:
    """One simple command: its words, what a here-document or here-string feeds it, its redirections' targets."""

    words: list[str]
    stdin: str | None = None
    targets: list[str] = field(default_factory=list)


@dataclass
class _Token:
    text: str
    operator: bool = False


@dataclass
class _Heredoc:
    command: SimpleCommand
    delimiter: str
    strip_tabs: bool


class _Reader:
    def __init__(self, text: str, depth: int, found: list[SimpleCommand]):
        self.text, self.depth, self.found = text, depth, found
        self.position = 0
        self.pending: list[_Heredoc] = []

    # -- words and operators ------------------------------------------------------------------------------------

    def _process_substitution(self) -> bool:
        return self.text.startswith(("<(", ">("), self.position)

    def _word(self) -> str:
        text, out = self.text, []
        start = self.position
        while self.position < len(text):
            char = text[self.position]
            if char in _WORD_END and not (self.position == start and self._process_substitution()):
                break
            if char == "\\":
                out.append(text[self.position + 1:self.position + 2])
                self.position += 2
            elif char == "'":
                out.append(self._until("'", self.position + 1))
            elif char == '"':
                out.append(self._double_quoted())
            elif char == "$" and text.startswith("$'", self.position):
                out.append(_ansi_c(self._until("'", self.position + 2)))
            elif char == "$" and text.startswith("$((", self.position):
                out.append(self._balanced(self.position + 3, "((", "))", run=False))
            elif char == "$" and text.startswith("$(", self.position):
                out.append(self._balanced(self.position + 2, "(", ")", run=True))
            elif char == "$" and text.startswith("${", self.position):
                out.append(self._balanced(self.position + 2, "{", "}", run=False))
            elif char in "<>" and self.position == start:  # <(...) or >(...)
                out.append(self._balanced(self.position + 2, "(", ")", run=True))
            elif char == "`":
                out.append(self._backticks())
            else:
                out.append(char)
                self.position += 1
        return "".join(out)

    def _until(self, closing: str, start: int) -> str:
        end = self.text.find(closing, start)
        end = len(self.text) if end < 0 else end
        self.position = end + len(closing)
        return self.text[start:end]

    def _double_quoted(self) -> str:
        text, out = self.text, []
        self.position += 1
        while self.position < len(text) and text[self.position] != '"':
            char = text[self.position]
            if char == "\\" and self.position + 1 < len(text):
                following = text[self.position + 1]
                out.append(following if following in '"\\$`\n' else "\\" + following)
                self.position += 2
            elif text.startswith("$(", self.position) and not text.startswith("$((", self.position):
                out.append(self._balanced(self.position + 2, "(", ")", run=True))
            elif char == "`":
                out.append(self._backticks())
            else:
                out.append(char)
                self.position += 1
        self.position += 1
        return "".join(out)

    def _backticks(self) -> str:
        inner = self._until("`", self.position + 1)
        self._run(inner.replace("\\`", "`"))
        return "`" + inner + "`"

    def _balanced(self, start: int, opening: str, closing: str, run: bool) -> str:
        """The text from ``start`` to the ``closing`` that matches (quotes skipped), read as commands when
        ``run``; the position past it. Unclosed: to the end of the text."""
        text, depth, position = self.text, 1, start
        while position < len(text):
            char = text[position]
            if char == "\\":
                position += 2
                continue
            if char in "'\"":
                end = text.find(char, position + 1)
                position = len(text) if end < 0 else end + 1
                continue
            if text.startswith(closing, position):
                depth -= 1
                if depth == 0:
                    break
                position += len(closing)
                continue
            if text.startswith(opening, position):
                depth += 1
                position += len(opening)
                continue
            position += 1
        inner = text[start:position]
        self.position = min(position + len(closing), len(text))
        if run:
            self._run(inner)
        return "$(" + inner + ")" if run else inner

    def _run(self, inner: str) -> None:
        if self.depth < MAX_DEPTH:
            self.found.extend(commands(inner, self.depth + 1))

    # -- here-documents -----------------------------------------------------------------------------------------

    def _heredoc_bodies(self) -> None:
        """The bodies of the here-documents opened on the line that just ended, each given to its command."""
        text = self.text
        while self.pending:
            heredoc = self.pending.pop(0)
            lines = []
            while self.position < len(text):
                end = text.find("\n", self.position)
                end = len(text) if end < 0 else end
                line = text[self.position:end]
                self.position = end + 1
                if (line.lstrip("\t") if heredoc.strip_tabs else line) == heredoc.delimiter:
                    break
                lines.append(line)
            heredoc.command.stdin = "\n".join(lines)

    # -- simple commands ----------------------------------------------------------------------------------------

    def read(self, found: list[SimpleCommand]) -> None:
        """Reads the text token by token into ``found``, building each simple command as it goes: a
        here-document's body is read at the end of the line that opened it, and given to its command."""
        text = self.text
        current = SimpleCommand([])
        expect_target: str | None = None
        while self.position < len(text):
            token = self._next_token()
            if token is None:
                continue
            if token.operator and token.text in _REDIRECTS:
                expect_target = token.text
                continue
            if token.operator:
                _finish(current, found)
                current = SimpleCommand([])
                if token.text == "\n":
                    self._heredoc_bodies()
                expect_target = None
                continue
            if expect_target in ("<<", "<<-"):
                self.pending.append(_Heredoc(current, token.text, expect_target == "<<-"))
            elif expect_target == "<<<":
                current.stdin = token.text
            elif expect_target is not None:
                current.targets.append(token.text)
            else:
                current.words.append(token.text)
            expect_target = None
        _finish(current, found)
        self._heredoc_bodies()

    def _next_token(self) -> _Token | None:
        text = self.text
        char = text[self.position]
        if char in " \t\r":
            self.position += 1
            return None
        if char == "\\" and text.startswith("\\\n", self.position):
            self.position += 2
            return None
        if char == "#" and (self.position == 0 or text[self.position - 1] in " \t\n;&|()"):
            end = text.find("\n", self.position)
            self.position = len(text) if end < 0 else end
            return None
        if char in ";&|()<>\n" and not self._process_substitution():
            operator = next(op for op in _OPERATORS if text.startswith(op, self.position))
            self.position += len(operator)
            return _Token(operator, operator=True)
        start = self.position
        word = self._word()
        if self.position < len(text) and text[self.position] in "<>" and text[start:self.position].isdigit():
            return None  # a file descriptor's number before a redirection (2>, 1>&2)
        return _Token(word)


def _finish(command: SimpleCommand, found: list[SimpleCommand]) -> None:
    words = command.words
    while words and words[0] in _OPENING_WORDS:
        words.pop(0)
    while words and words[-1] in _CLOSING_WORDS:
        words.pop()
    while words and _is_assignment(words[0]):
        words.pop(0)
    if words and words[0] in _LOOP_HEADS:
        words.clear()
    if words or command.stdin is not None or command.targets:
        found.append(command)


def _is_assignment(word: str) -> bool:
    name, equals, _ = word.partition("=")
    return bool(equals) and name.isidentifier()


def _ansi_c(text: str) -> str:
    return (text.replace("\\n", "\n").replace("\\t", "\t").replace("\\'", "'").replace('\\"', '"')
            .replace("\\\\", "\\"))


def commands(text: str, depth: int = 0) -> list[SimpleCommand]:
    """The simple commands of the shell text ``text`` (up to MAX_CHARS of it): those of its substitutions first,
    then its own, each group in the order they appear."""
    if not isinstance(text, str):
        return []
    found: list[SimpleCommand] = []
    reader = _Reader(text[:MAX_CHARS], depth, found)
    own: list[SimpleCommand] = []
    reader.read(own)
    return found + own
