"""The official SWE-Bench Pro scoring protocol, step for step (scaleapi/SWE-bench_Pro-os), with the grader kept out
of the tests' reach.

The official entry script runs the tests and then ``python /workspace/parser.py`` in one container, as root, with
/workspace writable: the tests can rewrite the parser, its input and its output. Here the same steps are split in
two (pipeline.evaluation.runner): the tests' container runs the entry script up to and including the tests, whose
stdout and stderr go to the container's own streams (which the Docker engine streams out to swepipe as they are
written: nothing in the container can rewrite them, pipeline.evaluation.capture); then the parser runs apart, from
the host's copy of parser.py, on those streams: on this machine's Python when it is a plain text program, as every
official parser is (pipeline.evaluation.host_parser), else in a second, fresh container of the same image
(pipeline.evaluation.parsing). The exit status of `git apply` and the canaries' status are printed on a marker line
before the tests start (so a result can say whether the patch applied), and that line ends what the setup printed
on each stream; the canaries (pipeline.evaluation.canaries) are planted after the hidden tests are restored.
Nothing else the verdict depends on changes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from pipeline.tasks import Task
from pipeline.text import patchtext

WORKSPACE = "/workspace"
# The official harness's files in the tests' /workspace. They name files in a container, not in the run directory;
# the scoring's folder keeps copies of some under the same names (pipeline.rundir.layout.ScoringFiles).
ENTRY_SCRIPT, RUN_SCRIPT, PARSER, PATCH = "entryscript.sh", "run_script.sh", "parser.py", "patch.diff"
PARSE_SCRIPT = "parse.sh"  # the parser's own container runs it (not the official harness's)
OUTPUT = "output.json"
TEST_LOGS = ("stdout.log", "stderr.log")
GRADER_FILES = (ENTRY_SCRIPT, RUN_SCRIPT, PARSER, PATCH)  # what the tests' /workspace holds
# The protocol as carried out here, on record in every result: raised when a change here could move a verdict.
# 2: the parser in a second container; 3: canaries beside the tests; 4: a text-program parser on this machine's Python
PROTOCOL_VERSION = "swe-bench-pro-os/4"
_BINARY_MARKERS = re.compile(r"(?m)^(Binary files .* differ|GIT binary patch)$")


def strip_binary_sections(patch: str) -> str:
    """Drop every `diff --git` section that carries binary content; the rest stays byte for byte."""
    if not patch:
        return patch
    # As the official harness does, whitespace-only pieces go too.
    return "".join(s for s in patchtext.sections(patch) if s.strip() and not _BINARY_MARKERS.search(s))


def dockerfile_env_exports(*dockerfiles: str) -> list[str]:
    """`ENV` lines turned into `export` lines, exactly as the official harness does it."""
    exports = []
    for content in dockerfiles:
        for line in content.split("\n"):
            line = line.strip()
            if line.startswith("ENV"):
                exports.append(line.replace("ENV", "export", 1))
    return exports


def entry_script(task: Task, env_exports: list[str], marker: str, plant: str = "canary_status=none\n",
                 planted_tests: Sequence[str] = ()) -> str:
    """The script the tests' container runs: reset, apply, restore the hidden tests, plant the canaries (``plant``:
    bash that sets ``canary_status``, pipeline.evaluation.canaries; ``planted_tests`` go to the run script after the
    selected tests), run them. Once the setup is done, a line ``<marker> <git apply's exit status>
    <canary_status>`` goes to stdout and to stderr: what follows it on each is the tests' output, the official
    stdout.log and stderr.log."""
    restore_tests = task.before_repo_set_cmd.strip().split("\n")[-1]
    test_files = ",".join([*task.selected_test_files_to_run, *planted_tests])
    env_lines = "\n".join(env_exports)
    return f"""
{env_lines}
# apply patch
cd /app
git reset --hard {task.base_commit}
git checkout {task.base_commit}
git apply -v {WORKSPACE}/patch.diff
apply_status=$?
{restore_tests}
# plant the canaries
{plant}
# run test: stdout and stderr go to the container's own streams, which swepipe reads out of it
echo "{marker} $apply_status $canary_status"
echo "{marker} $apply_status $canary_status" >&2
bash {WORKSPACE}/run_script.sh {test_files}
"""


def parser_script(env_exports: list[str]) -> str:
    """The script the parser's container runs: it first takes the tests' output, stdout.log and stderr.log, as a tar
    on its standard input (pipeline.evaluation.parsing), then runs the official last step on them, in the same
    environment (the Dockerfiles' exports, /app as the working directory)."""
    env_lines = "\n".join(env_exports)
    return f"""
# the tests' output, sent once they have ended
tar -x -C / || exit 3
{env_lines}
cd /app
# run parsing script
python {WORKSPACE}/parser.py {WORKSPACE}/stdout.log {WORKSPACE}/stderr.log {WORKSPACE}/output.json
"""


@dataclass
class TestGroupOutcome:
    """How the required tests of one group (FAIL_TO_PASS or PASS_TO_PASS) came out."""

    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # reported with another status
    missing: list[str] = field(default_factory=list)  # not reported at all


@dataclass
class Verdict:
    resolved: bool
    fail_to_pass: TestGroupOutcome
    pass_to_pass: TestGroupOutcome
    near_misses: dict[str, str]  # required name -> reported name equal to it once whitespace is stripped
    statuses: dict[str, str]


class OutputShapeError(ValueError):
    """A parser's output.json of another shape than ``{"tests": [{"name": text, "status": ...}, ...]}``."""


def parse_entries(output: object) -> list[tuple[str, str]]:
    """(name, status) of each entry of a parser's output.json, in order. OutputShapeError for any other shape (where
    the official harness's ``output["tests"]``, ``x["name"]``, ``x["status"]`` raise, or a name is not text). A
    status that is not text is kept as its JSON text (it is not PASSED either way)."""
    if not isinstance(output, dict):
        raise OutputShapeError(f"output.json holds {_kind(output)}, not an object")
    tests = output.get("tests")
    if not isinstance(tests, list):
        raise OutputShapeError("output.json has no 'tests' list" if tests is None else
                               f"output.json's 'tests' is {_kind(tests)}, not a list")
    entries = []
    for number, entry in enumerate(tests, start=1):
        if not isinstance(entry, dict) or "status" not in entry or not isinstance(entry.get("name"), str):
            raise OutputShapeError(f"output.json's test {number} is not an object with a text 'name' and a 'status'")
        status = entry["status"]
        entries.append((entry["name"], status if isinstance(status, str) else json.dumps(status)))
    return entries


def read_output(raw: bytes) -> list[tuple[str, str]]:
    """The entries of an output.json's bytes (``parse_entries``; bytes that are not UTF-8 replaced); OutputShapeError
    for anything else, however hostile (no JSON, too deeply nested, of another shape)."""
    try:
        return parse_entries(json.loads(raw.decode("utf-8", errors="replace")))
    except OutputShapeError:
        raise
    except (ValueError, RecursionError) as error:  # ValueError: no JSON, or a number of too many digits
        raise OutputShapeError(f"not valid JSON ({error})") from None


def parse_statuses(output: object) -> dict[str, str]:
    """name -> status from a parser's output.json (``parse_entries``); a name reported twice keeps its last."""
    return dict(parse_entries(output))


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def passed_names(entries: list[tuple[str, str]]) -> set[str]:
    """The names reported PASSED, as the official harness counts them: by any of their entries."""
    return {name for name, status in entries if status == "PASSED"}


def judge(task: Task, statuses: dict[str, str], passed: set[str] | None = None) -> Verdict:
    """Resolved iff every FAIL_TO_PASS and PASS_TO_PASS name is reported PASSED, names compared exactly.
    ``passed``: the names reported PASSED (``passed_names``: a name reported twice passes by either entry, as in
    the official harness); by default those whose status is PASSED."""
    if passed is None:
        passed = {name for name, status in statuses.items() if status == "PASSED"}
    required = set(task.fail_to_pass) | set(task.pass_to_pass)
    stripped = {name.strip(): name for name in statuses}
    near_misses = {name: stripped[name.strip()] for name in sorted(required)
                   if name not in statuses and name.strip() in stripped}
    return Verdict(
        resolved=required <= passed,
        fail_to_pass=_outcome(task.fail_to_pass, statuses, passed),
        pass_to_pass=_outcome(task.pass_to_pass, statuses, passed),
        near_misses=near_misses,
        statuses=statuses,
    )


def _outcome(names: list[str], statuses: dict[str, str], passed: set[str]) -> TestGroupOutcome:
    outcome = TestGroupOutcome()
    for name in names:
        bucket = outcome.passed if name in passed else outcome.missing if name not in statuses else outcome.failed
        bucket.append(name)
    return outcome
