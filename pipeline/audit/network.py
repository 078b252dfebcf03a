"""Fetching the repository, its fix or a newer release over the network.

Flagged:

- git's transfers: ``git clone`` of a remote (a URL, or ``host:path``; a clone of a local folder is not),
  ``git fetch``/``git pull`` (from a remote, a URL, or the configured one; not from a local folder), ``git
  ls-remote``, ``git remote update``/``remote show``/``remote add -f``, ``git archive --remote``, ``git submodule
  update --remote`` (a submodule updated to the commits its base pins is not); GitHub's CLI (``gh pr``, ``gh api``,
  ``gh repo clone`` ...); ``svn``/``hg`` checkouts of the project's hosting;
- a download from the project's hosting: ``curl``, ``wget`` (and httpie, aria2c, lynx/w3m ``-dump``) of a URL
  on github.com, raw.githubusercontent.com, codeload.github.com, api.github.com, gitlab.com, bitbucket.org (a path
  naming the project's repository, under any owner: a fork may hold the fix; any repository when the project is
  not known), or the project's own page on PyPI, npm or Go's module proxy; an inline program (``python -c``, a
  here-document to ``python``, ``node -e``) that calls the network (urllib, requests, httpx, fetch, axios ...)
  with such a URL in it;
- the project's own package from its registry: ``pip install``/``download``/``wheel`` of the project by name (any
  version) or from its hosting (``git+https://github.com/<owner>/<project>``), ``npm``/``yarn``/``pnpm``
  ``install``/``add``/``pack``/``view`` of it, ``go get``/``go install``/``go mod download`` of its module.

Not flagged: installing other packages (``pip install pytest``), installing the checkout itself (``pip install
-e .``), ``npm install``/``go mod download`` of the dependencies, URLs of other hosts (a reproduction fetching
httpbin.org), and any URL in a file's content, the task's text or a command's output.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pipeline.audit.history import git_subcommand
from pipeline.audit.invocations import Invocation, string_literals
from pipeline.audit.project import Subject, normalised

_REPOSITORY_HOSTS = frozenset({"github.com", "gitlab.com", "bitbucket.org", "codeberg.org", "gitee.com",
                               "raw.githubusercontent.com", "codeload.github.com", "objects.githubusercontent.com"})
_DOWNLOADERS = frozenset({"curl", "wget", "http", "https", "xh", "aria2c", "axel", "lynx", "w3m", "links", "elinks",
                          "lwp-download", "lwp-request", "GET", "fetch"})
_NETWORK_CALLS = re.compile(r"urlopen|urlretrieve|urllib\.request|urllib2|requests\.(?:get|post|head|request|Session|"
                            r"session)|httpx|http\.client|aiohttp|pycurl|"
                            r"\bfetch\s*\(|axios|https?\.get\s*\(|https?\.request\s*\(|got\s*\(|open-uri|Net::HTTP|"
                            r"LWP::|HTTP::Tiny|file_get_contents|curl_exec|wget|curl")
_URL = re.compile(r"(?:https?|git|ssh|ftp)://[^\s'\"`<>)\]]+|\b(?:www\.)?(?:github\.com|gitlab\.com|bitbucket\.org|"
                  r"raw\.githubusercontent\.com|codeload\.github\.com|api\.github\.com|pypi\.org|"
                  r"files\.pythonhosted\.org|registry\.npmjs\.org|proxy\.golang\.org)/[^\s'\"`<>)\]]*")
_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:|^[\w-]+(\.[\w-]+)+:[\w~]")
_PIP = frozenset({"pip", "pip3", "pip2", "pipx", "easy_install"})
_PIP_VALUE = frozenset({"-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
                        "-t", "--target", "--prefix", "--root", "--python-version", "--platform", "--abi",
                        "--implementation", "--only-binary", "--no-binary", "-d", "--dest", "--src", "--log",
                        "--cache-dir", "--progress-bar", "--upgrade-strategy", "-w", "--wheel-dir", "--python",
                        "--report", "--config-settings", "-C", "--global-option", "--proxy", "--retries",
                        "--timeout", "--exists-action", "--trusted-host", "--cert", "--client-cert"})
_NPM = frozenset({"npm", "yarn", "pnpm", "bun", "npx", "cnpm"})
_NPM_FETCHING = frozenset({"install", "i", "add", "pack", "view", "info", "show", "v", "fetch", "dlx", "exec",
                           "isntall", "in", "ins", "inst", "insta", "instal", "upgrade", "update", "up", "create"})
_GH = frozenset({"repo", "pr", "issue", "api", "release", "search", "gist", "browse", "run", "workflow"})


def network_reason(invocation: Invocation, subject: Subject) -> str | None:
    """Why ``invocation`` fetches the repository, its fix or a release of it over the network, or None."""
    program = invocation.program
    if program == "git":
        return _git_reason(invocation)
    if program in ("gh", "hub") and invocation.arguments[:1] and invocation.arguments[0] in _GH:
        return f"asks GitHub for the project's data ({program} {invocation.arguments[0]})"
    if program in _DOWNLOADERS or program in ("svn", "hg"):
        for word in invocation.arguments:
            for url in _URL.findall(word):
                why = hosting_reason(url, subject)
                if why:
                    return f"downloads {why}"
        return None
    if program in _PIP or (program in ("uv", "poetry", "pdm", "conda", "mamba", "micromamba", "rye")):
        return _package_reason(invocation, subject)
    if program in _NPM:
        return _npm_reason(invocation, subject)
    if program == "go":
        return _go_reason(invocation, subject)
    if invocation.code is not None:
        return _code_reason(invocation.code, subject)
    return None


# -- git ----------------------------------------------------------------------------------------------------------

def _is_remote(word: str) -> bool:
    return "://" in word or bool(_SCP_LIKE.match(word))


def _positionals(arguments: list[str]) -> list[str]:
    return [argument for argument in arguments if not argument.startswith("-")]


def _git_reason(invocation: Invocation) -> str | None:
    parts = git_subcommand(invocation)
    if parts is None:
        return None
    subcommand, arguments = parts
    positionals = _positionals(arguments)
    if subcommand == "clone":
        remote = next((word for word in positionals if _is_remote(word)), None)
        return f"clones a repository over the network ({remote[:120]})" if remote else None
    if subcommand in ("fetch", "pull"):
        source = positionals[0] if positionals else None
        if source is not None and source.startswith(("/", ".", "~")) and not _is_remote(source):
            return None  # a local repository
        verb = "fetches" if subcommand == "fetch" else "pulls"
        return f"{verb} from {source[:120] if source else 'the configured remote'}"
    if subcommand == "ls-remote":
        return "lists a remote's refs over the network"
    if subcommand == "remote" and positionals[:1] in (["update"], ["show"]) and "-n" not in arguments:
        return f"contacts the remote (git remote {positionals[0]})"
    if subcommand == "remote" and positionals[:1] == ["add"] and ("-f" in arguments or "--fetch" in arguments):
        return "adds a remote and fetches from it"
    if subcommand == "archive" and any(argument.startswith("--remote") for argument in arguments):
        return "reads an archive from a remote"
    if subcommand == "submodule" and "--remote" in arguments:
        return "updates submodules to their remotes' newest commits"
    return None


# -- URLs ---------------------------------------------------------------------------------------------------------

def hosting_reason(url: str, subject: Subject) -> str | None:
    """What the URL ``url`` is, when it is the project on its hosting or its registry (see the module); else None."""
    if "://" not in url:
        url = "https://" + url
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower().removeprefix("www.")
    except ValueError:
        return None
    segments = [segment for segment in parts.path.split("/") if segment]
    shown = url[:160]
    if host in _REPOSITORY_HOSTS:
        if len(segments) >= 2 and (subject.is_project(re.split(r"[@#]", segments[1])[0]) or not subject.known):
            return f"the repository from its hosting ({shown})"
        return None
    if host == "api.github.com":
        named = any(subject.is_project(segment) for segment in segments) or \
            any(subject.is_project(word) for word in re.split(r"[^\w.-]+", parts.query))
        if named or (not subject.known and segments[:1] in (["repos"], ["search"])):
            return f"the repository's data from GitHub's API ({shown})"
        return None
    if host in ("pypi.org", "pypi.python.org", "test.pypi.org", "files.pythonhosted.org"):
        return f"the project's release from PyPI ({shown})" if _names_package(segments, subject) else None
    if host in ("registry.npmjs.org", "npmjs.com", "npmjs.org", "registry.yarnpkg.com", "unpkg.com",
                "cdn.jsdelivr.net", "esm.sh", "skypack.dev"):
        return f"the project's release from npm ({shown})" if _names_package(segments, subject) else None
    if host in ("proxy.golang.org", "pkg.go.dev", "sum.golang.org", "goproxy.io", "goproxy.cn"):
        module = "/".join(segment for segment in segments if segment not in ("lookup", "@v", "@latest"))
        return f"the project's module from Go's proxy ({shown})" if subject.is_project_module(module) else None
    return None


def _names_package(segments: list[str], subject: Subject) -> bool:
    for segment in segments:
        name = re.split(r"-\d|@|\.tar|\.zip|\.whl|\.tgz", segment, maxsplit=1)[0]
        if subject.is_project(name):
            return True
    return False


# -- packages -----------------------------------------------------------------------------------------------------

def _package_reason(invocation: Invocation, subject: Subject) -> str | None:
    """pip (uv pip, pipx, easy_install), poetry/pdm/uv/rye add, conda install of the project itself."""
    arguments = list(invocation.arguments)
    if invocation.program in ("uv", "rye") and arguments[:1] == ["pip"]:
        arguments = arguments[1:]
    if not arguments:
        return None
    action, rest = arguments[0], arguments[1:]
    if invocation.program == "easy_install":
        action, rest = "install", arguments
    if action not in ("install", "download", "wheel", "add", "inject", "run", "update", "upgrade"):
        return None
    index = 0
    while index < len(rest):
        word = rest[index]
        index += 1
        if word in ("-e", "--editable"):
            if index < len(rest):
                word, index = rest[index], index + 1
            else:
                continue
        elif word.startswith("-"):
            name = word.split("=", 1)[0]
            value = word.split("=", 1)[1] if "=" in word else None
            if name in _PIP_VALUE and value is None and index < len(rest):
                value, index = rest[index], index + 1
            if name in ("-f", "--find-links", "-i", "--index-url", "--extra-index-url") and value:
                why = hosting_reason(value, subject) if _URL.search(value) else None
                if why:
                    return f"installs from {why}"
            continue
        why = _requirement_reason(word, subject)
        if why:
            return f"{action}s {why}"
    return None


def _requirement_reason(requirement: str, subject: Subject) -> str | None:
    url = _URL.search(requirement)
    if url:
        why = hosting_reason(url.group(), subject)
        return why
    if requirement.startswith((".", "/", "~")) or not subject.known:
        return None
    name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    if name and subject.is_project(name.group()):
        return f"the project's own package ({requirement[:120]}) from its registry"
    return None


def _npm_reason(invocation: Invocation, subject: Subject) -> str | None:
    arguments = [argument for argument in invocation.arguments if not argument.startswith("-")]
    if invocation.program == "npx":
        arguments = ["exec", *arguments]
    if not arguments or arguments[0] not in _NPM_FETCHING:
        return None
    for spec in arguments[1:]:
        url = _URL.search(spec)
        if url:
            why = hosting_reason(url.group(), subject)
            if why:
                return f"installs {why}"
            continue
        if not subject.known or spec.startswith((".", "/", "~", "file:")):
            continue
        shorthand = spec.removeprefix("github:").split("#", 1)[0]
        if "/" in shorthand and not shorthand.startswith("@") and subject.is_project(shorthand.split("/")[-1]):
            return f"installs the project from its hosting ({spec[:120]})"
        name = spec[1:].split("@", 1)[0] if spec.startswith("@") else spec.split("@", 1)[0]
        if subject.is_project(name.split("/")[-1]) and (not spec.startswith("@") or _scope_is_owner(name, subject)):
            return f"fetches the project's own package ({spec[:120]}) from its registry"
    return None


def _scope_is_owner(name: str, subject: Subject) -> bool:
    scope = name.split("/", 1)[0]
    return subject.owner is not None and normalised(scope) == normalised(subject.owner)


def _go_reason(invocation: Invocation, subject: Subject) -> str | None:
    arguments = list(invocation.arguments)
    if arguments[:1] in (["get"], ["install"]) or arguments[:2] == ["mod", "download"]:
        for word in _positionals(arguments[2 if arguments[0] == "mod" else 1:]):
            module = word.split("@", 1)[0]
            if subject.known and subject.is_project_module(module):
                return f"fetches the project's own module ({word[:120]}) from Go's proxy"
    return None


def _code_reason(code: str, subject: Subject) -> str | None:
    """An inline program that calls the network with a URL of the project's hosting in it."""
    if not _NETWORK_CALLS.search(code):
        return None
    for literal in string_literals(code):
        for url in _URL.findall(literal):
            why = hosting_reason(url, subject)
            if why:
                return f"downloads {why} from an inline program"
    return None
