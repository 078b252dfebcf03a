"""Reading history beyond the base commit: the git commands that look past what the base's own history holds.

Flagged:

- every ref at once, or the reflog: ``git log``/``rev-list``/``shortlog``/``whatchanged`` with ``--all``,
  ``--branches``, ``--remotes``, ``--tags``, ``--glob``, ``--reflog`` or ``-g``; ``git reflog``; ``git show-branch
  -a``; ``git branch -a``/``-r``;
- other refs and unreachable objects: ``git for-each-ref``, ``git show-ref``, ``git fsck --unreachable``/
  ``--lost-found``/``--dangling``, ``git cat-file --batch-all-objects``, ``git verify-pack``/``show-index``/
  ``unpack-objects``, and the files that hold refs and reflogs read directly (``.git/packed-refs``,
  ``.git/refs/remotes``, ``.git/refs/tags``, ``.git/logs``, ``.git/FETCH_HEAD``, ``.git/lost-found``);
- a revision that names another ref: ``origin/...``, ``upstream/...``, ``remotes/...``, ``FETCH_HEAD``, an
  upstream (``@{u}``) or a reflog entry (``HEAD@{2}``; a stash's ``stash@{0}`` is the agent's own);
- a commit named by its hash (``git show``/``diff``/``checkout``/``cherry-pick``/``cat-file``/``reset``/...
  ``<hash>``, ``<hash>:path``, ``<hash>..HEAD``) that is not known to be reachable from the base.

Which hashes are reachable is decided from the trajectory itself (``KnownHashes``): the base commit (and any
prefix of it), the hashes the task's own text names (an issue is written before its fix, so a commit it names is
older history, as django__django-14122's "commit [0ddb4ebf]" is), and every hash that appeared in the output of an
earlier step whose git commands were all honest (``git log``, ``git log -p -- file``, ``git blame``, ``git show
HEAD``, ``git stash``, ``git commit``: they show only the base's history and the agent's own commits). A hash
first seen in the output of a flagged command, or typed from nowhere, is not. A word of hexadecimal digits is read
as a hash when it has 7 to 40 of them and a letter among them or at least 12 (a number such as 20200101 is not).

Not flagged (the base's own history, or the agent's own work): ``git log``, ``git log -S x``, ``git log -p --
file``, ``git blame``, ``git show HEAD~2:path``, ``git diff``, ``git diff HEAD``, ``git stash``/``stash@{0}``,
``git checkout -- file``, ``git tag`` and ``git describe``. A bare name (``git show v2.0``, ``git checkout main``)
could be a tag, a branch or a path: it is not judged.
"""

from __future__ import annotations

import re

from pipeline.audit.invocations import Invocation
from pipeline.audit.project import HEX_HASH

MAX_OUTPUT_CHARS = 2_000_000

_GLOBAL_WITH_VALUE = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path",
                                "--super-prefix", "--config-env"})
_EVERY_REF = ("--all", "--branches", "--remotes", "--tags", "--glob", "--reflog", "--walk-reflogs",
              "--alternate-refs")
_LOG_LIKE = frozenset({"log", "rev-list", "shortlog", "whatchanged", "show", "diff-tree", "format-patch",
                       "name-rev", "fast-export", "bundle", "pack-objects"})
_LISTS_REFS = {"for-each-ref": "lists every ref of the repository",
               "show-ref": "lists every ref of the repository",
               "reflog": "reads the reflog: every commit a ref pointed at, beyond the base",
               "verify-pack": "lists every object of a pack, reachable or not",
               "show-index": "lists every object of a pack, reachable or not",
               "unpack-objects": "unpacks every object of a pack, reachable or not"}
_UNREACHABLE_FSCK = ("--unreachable", "--lost-found", "--dangling")
_REF_FILES = re.compile(r"\.git/(packed-refs|refs/remotes|refs/tags|logs|FETCH_HEAD|lost-found)(?![\w.-])")
# The subcommands whose positional arguments are revisions (or paths), read for hashes and other refs.
_TAKES_REVISIONS = frozenset({"show", "diff", "log", "shortlog", "whatchanged", "rev-list", "checkout", "switch",
                              "restore", "cherry-pick", "revert", "reset", "merge", "rebase", "cat-file", "ls-tree",
                              "archive", "format-patch", "diff-tree", "blame", "branch", "tag", "worktree",
                              "merge-base", "annotate", "range-diff", "notes", "bisect", "read-tree",
                              "checkout-index", "describe", "name-rev", "grep"})
# Options of those subcommands that take the next word as their value.
_WITH_VALUE = frozenset({"-S", "-G", "-n", "-L", "-O", "--grep", "--author", "--committer", "--since", "--until",
                         "--after", "--before", "--skip", "--max-count", "--min-parents", "--max-parents",
                         "--diff-filter", "--encoding", "--format", "--pretty", "-m", "-F", "--message", "--file",
                         "-b", "-B", "--orphan", "-c", "-C", "--abbrev", "--depth",
                         "--since-as-filter", "--find-object", "-e", "--prefix", "--output", "-o", "--remote",
                         "--exec", "--date", "--decorate-refs", "--decorate-refs-exclude", "-X", "--strategy",
                         "--strategy-option", "--upstream", "--reason"})
# The options whose value is a revision (git restore --source / -s, git rebase --onto); read as one.
_REVISION_VALUE = frozenset({"--source", "-s", "--onto"})
_OTHER_REF = re.compile(r"^(?:refs/remotes/|remotes/|origin/|upstream/|refs/pull/)|^(?:origin|upstream)$|"
                        r"^FETCH_HEAD\b|@\{(?:u|upstream|push)\}|^(?!stash)[^@]*@\{[-\d]")


class KnownHashes:
    """The hashes known to be reachable from the base (see the module), with every prefix of 7 or more digits."""

    def __init__(self) -> None:
        self._prefixes: set[str] = set()
        self._given: set[str] = set()

    def add(self, commit: str) -> None:
        commit = commit.strip().lower()
        if HEX_HASH.fullmatch(commit):
            self._given.add(commit)
            self._prefixes.update(commit[:length] for length in range(7, len(commit) + 1))

    def add_text(self, text: str | None) -> None:
        if isinstance(text, str):
            for match in HEX_HASH.finditer(text[:MAX_OUTPUT_CHARS]):
                self.add(match.group())

    def __contains__(self, commit: str) -> bool:
        commit = commit.lower()
        return commit in self._prefixes or any(commit[:length] in self._given for length in range(7, len(commit)))


def git_subcommand(invocation: Invocation) -> tuple[str, list[str]] | None:
    """A git invocation's subcommand and its arguments (git's own options before it skipped); None for another
    program."""
    if invocation.program != "git":
        return None
    words = list(invocation.arguments)
    index = 0
    while index < len(words) and words[index].startswith("-"):
        index += 2 if words[index] in _GLOBAL_WITH_VALUE else 1
    if index >= len(words):
        return None
    return words[index], words[index + 1:]


def history_reason(invocation: Invocation, known: KnownHashes) -> str | None:
    """Why ``invocation`` reads history beyond the base, or None."""
    read = _ref_files(invocation)
    if read:
        return read
    parts = git_subcommand(invocation)
    if parts is None:
        return None
    subcommand, arguments = parts
    if subcommand in _LISTS_REFS and not (subcommand == "reflog" and arguments[:1] in (["expire"], ["delete"])):
        return _LISTS_REFS[subcommand]
    if subcommand == "fsck" and any(argument.startswith(_UNREACHABLE_FSCK) for argument in arguments):
        return "lists objects no ref reaches (unreachable, dangling or lost)"
    if subcommand == "cat-file" and "--batch-all-objects" in arguments:
        return "reads every object of the repository, reachable or not"
    if subcommand in ("branch", "show-branch") and any(_lists_other_branches(argument) for argument in arguments):
        return "lists remote-tracking branches, beyond the base"
    if subcommand in _LOG_LIKE or subcommand == "branch":
        every = next((argument for argument in arguments if argument.split("=", 1)[0] in _EVERY_REF
                      or argument == "-g"), None)
        if every is not None:
            return f"walks every ref ({every}), not only the base's history"
    if subcommand in _TAKES_REVISIONS:
        return _revision_reason(arguments, known, pattern_first=subcommand == "grep")
    return None


def _ref_files(invocation: Invocation) -> str | None:
    for word in (*invocation.words, *invocation.targets):
        found = _REF_FILES.search(word)
        if found:
            return f"reads the repository's {found.group()} directly: refs and reflogs beyond the base"
    return None


def _lists_other_branches(argument: str) -> bool:
    if argument in ("--all", "--remotes"):
        return True
    return argument.startswith("-") and not argument.startswith("--") and bool(set(argument[1:]) & {"a", "r"})


def _revision_reason(arguments: list[str], known: KnownHashes, pattern_first: bool = False) -> str | None:
    """The first revision of ``arguments`` that reaches beyond the base, and why; ``pattern_first``: the first
    positional word is a pattern (git grep), unless ``-e`` or ``-f`` gave one."""
    pattern_given = not pattern_first or any(argument in ("-e", "-f") for argument in arguments)
    index = 0
    while index < len(arguments):
        argument = arguments[index]
        index += 1
        if argument == "--":
            return None
        if argument.startswith("-"):
            name, equals, value = argument.partition("=")
            if name in _REVISION_VALUE:
                if not equals and index < len(arguments):
                    value, index = arguments[index], index + 1
                found = _revision_problem(value, known)
                if found:
                    return found
            elif not equals and (argument in _WITH_VALUE or name in _WITH_VALUE):
                index += 1
            continue
        if not pattern_given:
            pattern_given = True
            continue
        found = _revision_problem(argument, known)
        if found:
            return found
    return None


def _revision_problem(word: str, known: KnownHashes) -> str | None:
    """Why the revision ``word`` (a range's ends, a ``rev:path``'s revision) reaches beyond the base, or None."""
    for part in re.split(r"\.\.\.?", word):
        part = part.lstrip("^")
        if _OTHER_REF.search(part):
            return f"names another ref ({part[:80]}), beyond the base"
        revision = re.split(r"[:~^@]", part, maxsplit=1)[0]
        if _is_hash(revision) and revision.lower() not in known:
            return (f"names commit {revision}, which nothing the trajectory saw of the base's history holds "
                    "(not the base, not named by the task, not shown by an earlier honest git command)")
    return None


def _is_hash(word: str) -> bool:
    return bool(HEX_HASH.fullmatch(word.lower())) and (len(word) >= 12 or any(c in "abcdefABCDEF" for c in word))
