"""The reply fuzzer: generated hostile replies through every parser and applier of a model's text and through the
real agent loop (the scripted model via litellm, a local workspace). Invariants: no uncaught exception, no paid
reply lost, no candidate lost, no text changed on its way to a patch.

Each property runs tests/fuzzing.py's number of examples; scripts/fuzz_replies.py --examples N runs them long."""

from __future__ import annotations

import json
import os

import pytest
from conftest import git
from fuzzing import fuzz
from hypothesis import assume, example, given
from hypothesis import strategies as st
from reply_strategies import (
    INJECTED,
    brief_reply,
    edit_body,
    editor_arguments,
    hostile_text,
    path,
    text_reply,
    tool_reply,
    yaml_body,
)
from reply_strategies import body as body_text

from pipeline.agent.actions import (
    BASH,
    EDIT,
    EDITOR,
    SUBMIT,
    VIEW,
    Action,
    FormatError,
    parse_action,
    parse_tool_action,
)
from pipeline.agent.agent import Agent, prompt
from pipeline.agent.edit_actions import editor_calls
from pipeline.agent.settings import AgentSettings
from pipeline.edits.blocks import EditApplyError, EditFormatError, apply_edits, parse_edits
from pipeline.edits.editor import COMMANDS, Editor, EditorCall, EditorError
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.models.ledger import Ledger
from pipeline.principal.stage import UnusableEdits, apply_to_base
from pipeline.records.trajectory import ExitReason
from pipeline.runtime.base import CommandResult
from pipeline.runtime.local import LocalRuntime
from pipeline.senior.brief import BriefFormatError, parse_brief
from pipeline.settings.config import Limits
from pipeline.settings.model_spec import ModelSpec, Prices

ALLOWED = st.sampled_from([(BASH,), (BASH, EDIT, VIEW), (BASH, VIEW), (BASH, EDITOR), (BASH, EDIT, VIEW, "delegate")])
FILES = {"calc.py": "def add(a, b):\n    return a - b\n", "run.sh": "#!/bin/sh\necho run\n",
         "menu.txt": "caf\xe9 au lait\n", "pkg/mod.py": "X = 1\n\n\ndef f():\n    return X\n"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz") / "repo"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(text.encode("latin-1" if name == "menu.txt" else "utf-8"))
    (root / "run.sh").chmod(0o755)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return {"path": root, "base": git(root, "rev-parse", "HEAD")}


@pytest.fixture(scope="module")
def workspace(repo):
    with LocalRuntime(repo["path"], repo["base"]) as runtime:
        yield runtime


def clean(runtime) -> None:
    assert runtime.run("git reset -q --hard && git clean -fdxq").ok


@pytest.fixture(autouse=True)
def nothing_injected():
    """Text that hides a command (reply_strategies.INJECTED) never runs, wherever it went."""
    if os.path.exists(INJECTED):
        os.remove(INJECTED)
    yield
    assert not os.path.exists(INJECTED), "a command hidden in a reply's text was run"


class CommandsNotRun:
    """The workspace as the agent sees it, with the model's bash commands recorded instead of run: generated
    commands are not for this machine's shell. The editor gets the real workspace (its own probes and writes)."""

    def __init__(self, runtime):
        self.runtime, self.workdir, self.base_commit = runtime, runtime.workdir, runtime.base_commit
        self.commands: list[str] = []

    def run(self, command, timeout=60, output_limit=None):
        self.commands.append(command)
        return CommandResult(exit_code=0, output=f"(not run) {command[:200]}", timed_out=False, duration=0.0,
                             total_bytes=0, cut_bytes=0)

    def read_file(self, path):
        return self.runtime.read_file(path)

    def write_file(self, path, data):
        self.runtime.write_file(path, data)

    def diff(self, max_bytes=None):
        return self.runtime.diff(max_bytes)

    def open_editor(self, output_limit):
        return Editor(self.runtime, output_limit=output_limit)


# -- parsers: an action or the reply's format error, nothing else --------------------------------------


@fuzz
@given(reply=text_reply, allowed=ALLOWED)
def test_a_text_reply_is_one_action_or_a_format_error(reply, allowed):
    try:
        action = parse_action(reply, allowed)
    except FormatError as error:
        assert str(error)
        return
    assert action.kind in (*allowed, SUBMIT)
    if action.kind != SUBMIT:
        assert action.body in reply  # the block's text, as the model wrote it


@fuzz
@given(reply=tool_reply, allowed=ALLOWED)
def test_a_tool_call_reply_is_one_action_or_a_format_error(reply, allowed):
    try:
        action = parse_tool_action(reply["tool_calls"], reply["content"], allowed)
    except FormatError as error:
        assert str(error)
        return
    assert action.kind in (*allowed, SUBMIT)


@fuzz
@given(kind=st.sampled_from((EDIT, VIEW, EDITOR)), data=st.data())
def test_an_editor_action_is_calls_or_a_format_error(kind, data):
    body = data.draw({EDIT: edit_body(), VIEW: path, EDITOR: editor_arguments().map(json.dumps)}[kind])
    try:
        calls = editor_calls(Action(kind, body), COMMANDS)
    except FormatError as error:
        assert str(error)
        return
    assert calls and all(call.command in COMMANDS for call in calls)


@fuzz
@given(reply=st.one_of(brief_reply(), text_reply))
def test_a_senior_reply_is_a_brief_or_a_brief_format_error(reply):
    try:
        brief = parse_brief(reply)
    except BriefFormatError as error:
        assert str(error)
        return
    assert brief.analysis.strip()
    for span in brief.spans:
        assert isinstance(span.file, str) and isinstance(span.start, int) and isinstance(span.end, int)


@fuzz
@given(reply=st.one_of(edit_body(), text_reply))
def test_principal_edits_parse_and_apply_in_memory_or_say_why(reply):
    try:
        edits = parse_edits(reply)
        apply_edits(edits, FILES.get, list(FILES), roots=("/app",))
    except (EditFormatError, EditApplyError) as error:
        assert str(error)


@fuzz
@given(body=st.one_of(body_text, yaml_body()), parser=st.sampled_from(("delegate", "message", "resume", "names")))
def test_a_team_action_s_block_is_understood_or_a_format_error(body, parser):
    from pipeline.team.actions import parse_delegations, parse_message, parse_names, parse_resume

    parse = {"delegate": lambda b: parse_delegations(b, None, "/app"), "message": parse_message,
             "resume": parse_resume, "names": parse_names}[parser]
    try:
        parse(body)
    except FormatError as error:
        assert str(error)


# -- the editor and the principal on a real workspace ---------------------------------------------------


@fuzz
@given(arguments=editor_arguments())
@example(arguments={"command": "view", "path": "[/i]\x85\udce9"})  # found at 5000 examples: a surrogate in a path
def test_the_editor_answers_every_call_and_a_failed_call_changes_nothing(workspace, arguments):
    clean(workspace)
    try:
        call = EditorCall.from_arguments(arguments)
    except EditorError:
        return
    before = workspace.run("git status --porcelain --untracked-files=all; git diff; stat -c '%n %a' run.sh").output
    result = Editor(workspace)(call)
    assert result.observation and len(result.observation.encode()) < 11_000
    if not result.ok:
        after = workspace.run("git status --porcelain --untracked-files=all; git diff; stat -c '%n %a' run.sh")
        assert after.output == before, (call, result.observation)
    assert "old mode" not in workspace.diff()  # an edit never changes a file's mode


@fuzz
@given(replacement=hostile_text(max_size=120), target=st.sampled_from(("calc.py", "run.sh", "/app/pkg/mod.py")))
def test_a_principal_edit_s_text_reaches_the_patch_unchanged(workspace, replacement, target):
    """A REPLACE of one exact line with any text: the file then holds that text byte for byte (in the file's
    encoding), or the reply is refused as unusable. Never a crash, never a rewritten text."""
    clean(workspace)
    name = target.removeprefix("/app/")
    line = FILES[name].splitlines()[1]
    replacement = replacement.replace("\r", "")  # line endings follow the file's, by design
    lines_of = replacement.split("\n")
    assume(lines_of[0].strip() and lines_of[-1].strip())  # blank edge lines are the format's slack, not text
    if any(marker in replacement for marker in ("<<<<<<<", "=======", ">>>>>>>", "```")):
        replacement = replacement.replace("<", "(").replace("=", "-").replace(">", ")").replace("`", "'")
    reply = f"```edit\n{target}\n<<<<<<< SEARCH\n{line}\n=======\n{replacement}\n>>>>>>> REPLACE\n```"
    try:
        patch = apply_to_base(reply, workspace)
    except UnusableEdits as error:
        assert str(error)
        return
    assert patch.strip()
    workspace.write_file(".fuzz.patch", patch)  # the patch, applied to the base, gives the file
    applied = workspace.run("git apply .fuzz.patch && rm .fuzz.patch")
    assert applied.ok, applied.output
    written = workspace.read_file(name).decode("utf-8", errors="surrogateescape")
    lines = FILES[name].splitlines(keepends=True)
    assert written == "".join(lines[:1]) + replacement + "\n" + "".join(lines[2:])
    assert "old mode" not in patch


# -- the agent loop ------------------------------------------------------------------------------------


@fuzz
@given(replies=st.lists(st.one_of(text_reply, tool_reply), min_size=1, max_size=4),
       action_format=st.sampled_from(("text", "tools")))
def test_the_agent_loop_survives_any_replies_and_keeps_every_paid_one(tmp_path_factory, workspace, replies,
                                                                      action_format):
    """Through litellm (the scripted model) and a real workspace: the agent ends by one of its own reasons
    (never runtime_error: that would be swepipe's own fault), every reply paid for is in its steps and on disk
    as it was sent, the ledger has one row per step, and what it did to the tree is a diff that can be taken."""
    clean(workspace)
    directory = tmp_path_factory.mktemp("agent")
    script = directory / "script.json"
    script.write_text(json.dumps({"junior": [[r if isinstance(r, dict) else {"content": r} for r in replies]]}))
    # What the provider sends is this JSON read back: a high and a low surrogate escape in a row read as one
    # character, as any JSON reader takes them.
    replies = json.loads(script.read_text())["junior"][0]
    ledger = Ledger(directory / "ledger.jsonl")
    client = ModelClient(ModelSpec(model=f"scripted/{script}", prices=Prices(input=1, output=1)), "junior", ledger,
                         task="t", scope=str(directory), backoff_base=0.001)
    limits = Limits(max_steps=len(replies), max_format_errors=len(replies) + 1, action_format=action_format,
                    command_timeout=10)
    system = "agent_system_tools.md.j2" if action_format == "tools" else "agent_system.md.j2"
    messages = prompt(system, "agent_instance.md.j2", workdir=str(workspace.workdir), task_text="fix add",
                      command_timeout=10, max_steps=limits.max_steps, editor=True)
    trajectory = directory / "trajectory.json"
    hands = CommandsNotRun(workspace)
    agent = Agent(AgentSettings("junior", client, hands, Budget("r"), limits, messages=messages,
                                trajectory_path=trajectory))
    run = agent.run()
    assert run.exit_reason in list(ExitReason), (run.exit_reason, run.error)
    assert run.exit_reason != ExitReason.RUNTIME_ERROR, (run.exit_reason, run.error)
    sent = replies[:len(run.steps)]
    assert [step.reply for step in run.steps] == [str(r.get("content", "")) for r in sent]
    saved = json.loads(trajectory.read_text())
    assert [step["reply"] for step in saved["steps"]] == [step.reply for step in run.steps]
    assert len(Ledger.read(directory / "ledger.jsonl")) == len(run.steps)
    assert [s.command for s in run.steps if s.action == BASH and s.exit_code is not None] == hands.commands
    workspace.diff()  # the candidate can be taken, whatever the replies did
