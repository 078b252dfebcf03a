"""What a shell text runs, as programs with their arguments: the simple commands of ``pipeline.audit.shell`` with
the wrappers that only run another command taken off (``sudo``, ``env``, ``timeout 30``, ``xargs``, ``conda run
-n env`` ...), the scripts a shell or ``eval`` is handed read as shell text in turn (``bash -c '...'``, ``sh <<EOF``),
and the programs an interpreter is handed inline (``python -c``, ``python - <<EOF``, ``node -e``, ``perl -e``) kept
as code, with the commands that code itself runs by name (``os.system("git fetch")``, ``subprocess.run(["git",
"log", "--all"])``, ``execSync('curl ...')``) read out of its string literals.

A script in a file (``python fetch.py``, ``bash run.sh``) is not read: only what the agent typed is. Nesting is
read to ``shell.MAX_DEPTH`` levels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.audit.shell import MAX_DEPTH, SimpleCommand, commands

MAX_CODE_CHARS = 200_000


@dataclass(frozen=True)
class Invocation:
    """A program as run: its words (the program first, as typed: ``/usr/bin/git`` stays so; ``program`` is its
    name), what its standard input was fed inline, its redirections' targets, and, for an interpreter handed a
    program inline, that program (``code``) and its language."""

    words: tuple[str, ...]
    stdin: str | None = None
    targets: tuple[str, ...] = ()
    code: str | None = None
    language: str | None = None

    @property
    def program(self) -> str:
        return program_name(self.words[0]) if self.words else ""

    @property
    def arguments(self) -> tuple[str, ...]:
        return self.words[1:]


def program_name(word: str) -> str:
    return word.rsplit("/", 1)[-1]


_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "ash", "mksh", "fish"})
_PYTHON = re.compile(r"(python|pypy)[0-9.]*(-dbg)?$|ipython3?$")
_CODE_FLAGS = {"python": ("-c",), "javascript": ("-e", "--eval", "-p", "--print"), "perl": ("-e", "-E"),
               "ruby": ("-e",), "php": ("-r",)}
_LANGUAGES = {"node": "javascript", "nodejs": "javascript", "bun": "javascript", "deno": "javascript",
              "perl": "perl", "ruby": "ruby", "php": "php"}
# Wrappers that run the command after their options, and those options of theirs that take a value.
_WRAPPERS: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "--user", "--group"}),
    "env": frozenset({"-u", "-C", "--unset", "--chdir"}),
    "nohup": frozenset(), "command": frozenset(), "builtin": frozenset(), "exec": frozenset({"-a"}),
    "time": frozenset({"-f", "-o", "--format", "--output"}), "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p", "--class", "--classdata"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}), "unbuffer": frozenset(), "chronic": frozenset(),
    "xargs": frozenset({"-I", "-i", "-n", "-P", "-L", "-l", "-d", "-s", "-E", "-e", "-a", "--max-args",
                        "--max-procs", "--max-lines", "--delimiter", "--arg-file", "--replace"}),
    "watch": frozenset({"-n", "-d", "--interval"}), "strace": frozenset({"-o", "-e", "-p", "-s"}),
    "catchsegv": frozenset(), "faketime": frozenset(), "flock": frozenset({"-w", "-E"}),
}
# "<tool> run <command>" wrappers, and the options of theirs that take a value.
_RUNNERS: dict[str, frozenset[str]] = {
    "conda": frozenset({"-n", "-p", "--name", "--prefix", "--cwd"}), "mamba": frozenset({"-n", "-p", "--name"}),
    "micromamba": frozenset({"-n", "-p", "--name"}), "uv": frozenset({"--python", "--with", "-p", "--project"}),
    "poetry": frozenset(), "pipenv": frozenset(), "pdm": frozenset(), "hatch": frozenset(), "rye": frozenset(),
}


def invocations(text: str, depth: int = 0) -> list[Invocation]:
    """Every program the shell text ``text`` runs, wrappers taken off and inline scripts read (see the module)."""
    found: list[Invocation] = []
    for command in commands(text, depth):
        found.extend(_unwrapped(command, depth))
    return found


def _unwrapped(command: SimpleCommand, depth: int) -> list[Invocation]:
    words = _without_wrappers(list(command.words))
    base = Invocation(tuple(words), command.stdin, tuple(command.targets))
    if not words:
        return [base] if command.stdin is not None or command.targets else []
    name = program_name(words[0])
    nested = depth + 1 <= MAX_DEPTH
    if name in _SHELLS:
        script = _shell_script(words[1:], command.stdin)
        return [base, *invocations(script, depth + 1)] if script is not None and nested else [base]
    if name == "eval":
        return [base, *invocations(" ".join(words[1:]), depth + 1)] if nested else [base]
    if name == "su" and "-c" in words:
        at = words.index("-c")
        script = words[at + 1] if at + 1 < len(words) else ""
        return [base, *invocations(script, depth + 1)] if nested else [base]
    language = "python" if _PYTHON.match(name) else _LANGUAGES.get(name)
    if language is None:
        return [base]
    if language == "python" and "-m" in words[1:]:
        at = words.index("-m", 1)
        if words[at + 1:at + 2] == ["pip"]:
            return [base, Invocation(("pip", *words[at + 2:]), command.stdin, tuple(command.targets))]
    code = _inline_code(language, words[1:], command.stdin)
    if code is None:
        return [base]
    program = Invocation(base.words, base.stdin, base.targets, code[:MAX_CODE_CHARS], language)
    return [program, *(_commands_in_code(code[:MAX_CODE_CHARS], depth + 1) if nested else [])]


def _without_wrappers(words: list[str]) -> list[str]:
    """``words`` without the wrappers in front of the command they run (and their options), nor the assignments
    ``env`` takes."""
    for _ in range(16):  # wrappers of wrappers, a few deep
        if not words:
            return words
        name = program_name(words[0])
        if name in _WRAPPERS:
            rest = _after_options(words[1:], _WRAPPERS[name])
            if name == "env":
                while rest and "=" in rest[0] and not rest[0].startswith("-"):
                    rest = rest[1:]
            if name == "timeout" and rest:
                rest = rest[1:]  # the duration
            words = rest
        elif name in _RUNNERS and len(words) > 1 and words[1] == "run":
            words = _after_options(words[2:], _RUNNERS[name])
        else:
            return words
    return words


def _after_options(words: list[str], taking_value: frozenset[str]) -> list[str]:
    index = 0
    while index < len(words) and words[index].startswith("-") and words[index] != "-":
        if words[index] == "--":
            return words[index + 1:]
        index += 2 if words[index] in taking_value else 1
    return words[index:]


def _shell_script(arguments: list[str], stdin: str | None) -> str | None:
    """The script a shell runs: its -c argument, else (no script file named) what its standard input holds."""
    index = 0
    while index < len(arguments):
        word = arguments[index]
        if word in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            index += 2
            continue
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            return arguments[index + 1] if index + 1 < len(arguments) else ""
        if word == "-s" or word == "-":
            return stdin
        if not word.startswith(("-", "+")):
            return None  # a script file
        index += 1
    return stdin


def _inline_code(language: str, arguments: list[str], stdin: str | None) -> str | None:
    """The program an interpreter is handed inline: the value of its code flag (``-c CODE``, ``-cCODE``,
    ``--eval=CODE``, a cluster ending in it such as perl's ``-ne``), else its standard input when it names no
    script file (or names ``-``)."""
    flags = _CODE_FLAGS[language]
    for index, word in enumerate(arguments):
        if word in flags:
            return arguments[index + 1] if index + 1 < len(arguments) else ""
        for flag in flags:
            if flag.startswith("--") and word.startswith(flag + "="):
                return word[len(flag) + 1:]
            if not flag.startswith("--") and word.startswith(flag) and len(word) > 2 and language == "python":
                return word[2:]
            if (not flag.startswith("--") and language in ("perl", "ruby") and word.startswith("-")
                    and not word.startswith("--") and word.endswith(flag[1])):
                return arguments[index + 1] if index + 1 < len(arguments) else ""
        if not word.startswith("-"):
            return stdin if word == "-" else None
    return stdin


# -- the commands a program runs by name ------------------------------------------------------------------------

_STRING = re.compile(r"""(?:[rRbBuUfF]{0,2})('''|\"\"\"|'|"|`)((?:\\.|(?!\1)[^\\])*?)\1""", re.DOTALL)
_LIST_OF_STRINGS = re.compile(r"""[\[(]\s*((?:[rRbBuUfF]{0,2}(?:'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")\s*,\s*)+"""
                              r"""[rRbBuUfF]{0,2}(?:'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")\s*,?\s*)[\])]""")
_ONE_STRING = re.compile(r"""'((?:\\.|[^'\\\n])*)'|"((?:\\.|[^"\\\n])*)\"""")
# The programs whose names open a string literal that is read as a command line.
COMMAND_NAMES = frozenset({"git", "curl", "wget", "pip", "pip3", "npm", "yarn", "pnpm", "npx", "go", "gh", "svn",
                           "hg", "bash", "sh", "cat", "ls", "cp", "rsync", "find", "http", "aria2c", "python",
                           "python3", "node", "uv"})


def string_literals(code: str) -> list[str]:
    """The string literals of ``code`` (Python's, JavaScript's, Perl's and Ruby's quotes; escapes kept as
    written)."""
    return [match.group(2) for match in _STRING.finditer(code)]


def _commands_in_code(code: str, depth: int) -> list[Invocation]:
    found: list[Invocation] = []
    for literal in string_literals(code):
        first = literal.strip().split(None, 1)[:1]
        if first and program_name(first[0]) in COMMAND_NAMES and " " in literal.strip():
            found.extend(invocations(literal, depth))
    for group in _LIST_OF_STRINGS.finditer(code):
        words = tuple(match.group(1) if match.group(1) is not None else match.group(2)
                      for match in _ONE_STRING.finditer(group.group(1)))
        if words and program_name(words[0]) in COMMAND_NAMES:
            found.extend(_unwrapped(SimpleCommand(list(words)), depth))
    return found
