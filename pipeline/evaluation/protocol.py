"""The official SWE-Bench Pro scoring protocol, step for step (scaleapi/SWE-bench_Pro-os).

Only one thing is added to the official entry script: the exit status of `git apply` is written
to a file so a result can say whether the patch applied. Nothing the verdict depends on changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipeline.tasks import Task

WORKSPACE = "/workspace"
# The protocol as carried out here, on record in every result: raised when a change here could move a verdict.
PROTOCOL_VERSION = "swe-bench-pro-os/1"
_SECTION_START = re.compile(r"(?m)^(?=diff --git )")
_BINARY_MARKERS = re.compile(r"(?m)^(Binary files .* differ|GIT binary patch)$")


def strip_binary_sections(patch: str) -> str:
    """Drop every `diff --git` section that carries binary content; the rest stays byte for byte."""
    if not patch:
        return patch
    # As the official harness does, whitespace-only pieces go too.
    return "".join(s for s in _SECTION_START.split(patch) if s.strip() and not _BINARY_MARKERS.search(s))


def dockerfile_env_exports(*dockerfiles: str) -> list[str]:
    """`ENV` lines turned into `export` lines, exactly as the official harness does it."""
    exports = []
    for content in dockerfiles:
        for line in content.split("\n"):
            line = line.strip()
            if line.startswith("ENV"):
                exports.append(line.replace("ENV", "export", 1))
    return exports


def entry_script(task: Task, env_exports: list[str]) -> str:
    """The script the task's container runs: reset, apply, restore hidden tests, test, parse."""
    restore_tests = task.before_repo_set_cmd.strip().split("\n")[-1]
    test_files = ",".join(task.selected_test_files_to_run)
    env_lines = "\n".join(env_exports)
    return f"""
{env_lines}
# apply patch
cd /app
git reset --hard {task.base_commit}
git checkout {task.base_commit}
git apply -v {WORKSPACE}/patch.diff
echo $? > {WORKSPACE}/apply_status
{restore_tests}
# run test and save stdout and stderr to separate files
bash {WORKSPACE}/run_script.sh {test_files} > {WORKSPACE}/stdout.log 2> {WORKSPACE}/stderr.log
# run parsing script
python {WORKSPACE}/parser.py {WORKSPACE}/stdout.log {WORKSPACE}/stderr.log {WORKSPACE}/output.json
"""


@dataclass
class TestOutcome:
    """How the required tests of one group (FAIL_TO_PASS or PASS_TO_PASS) came out."""

    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # reported with another status
    missing: list[str] = field(default_factory=list)  # not reported at all


@dataclass
class Verdict:
    resolved: bool
    fail_to_pass: TestOutcome
    pass_to_pass: TestOutcome
    near_misses: dict[str, str]  # required name -> reported name equal to it once whitespace is stripped
    statuses: dict[str, str]


def parse_statuses(output: dict) -> dict[str, str]:
    """name -> status from a parser's output.json (`{"tests": [{"name", "status"}]}`); later entries win."""
    tests = output.get("tests")
    if not isinstance(tests, list):
        raise ValueError("output.json has no 'tests' list")
    statuses = {}
    for entry in tests:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            statuses[entry["name"]] = str(entry.get("status"))
    return statuses


def judge(task: Task, statuses: dict[str, str]) -> Verdict:
    """Resolved iff every FAIL_TO_PASS and PASS_TO_PASS name is reported PASSED, names compared exactly."""
    passed = {name for name, status in statuses.items() if status == "PASSED"}
    required = set(task.fail_to_pass) | set(task.pass_to_pass)
    stripped = {name.strip(): name for name in statuses}
    near_misses = {name: stripped[name.strip()] for name in sorted(required)
                   if name not in statuses and name.strip() in stripped}
    return Verdict(
        resolved=required <= passed,
        fail_to_pass=_outcome(task.fail_to_pass, statuses),
        pass_to_pass=_outcome(task.pass_to_pass, statuses),
        near_misses=near_misses,
        statuses=statuses,
    )


def _outcome(names: list[str], statuses: dict[str, str]) -> TestOutcome:
    outcome = TestOutcome()
    for name in names:
        status = statuses.get(name)
        bucket = outcome.missing if status is None else outcome.passed if status == "PASSED" else outcome.failed
        bucket.append(name)
    return outcome
