"""Malformed actions as real models send them, after the fix is already in the tree: each is that step's error,
told to the agent, and the fix, the paid trajectory and the candidate all stay (issue 32, defect 2 and 3)."""

import json
import tracemalloc
from pathlib import Path

import pytest
import test_junior_rollouts
from test_agent_loop import junior, run_agent
from test_junior_rollouts import SUBMIT, TEMPLATES, USE_TEMPLATES, run_scripts

from pipeline.agent.actions import EDITOR, FormatError, parse_tool_action
from pipeline.edits.editor import Editor, EditorCall
from pipeline.juniors import rollout as rollout_module
from pipeline.models.budget import Budget
from pipeline.runtime.local import LocalRuntime
from pipeline.settings.config import Limits

shop_repo = test_junior_rollouts.shop_repo  # the fixture, shared

FIX = "Fixing the sign.\n```bash\nsed -i 's/a - b/a + b/' calc.py\n```"
TEXT_SUBMIT = "Done.\n```bash\nsubmit\n```"
LATIN1 = "Add a note.\n```bash\nprintf 'caf\\351 au lait\\n' > menu.txt\n```"


def raw_call(name: str, arguments: str) -> dict:
    """A tool call whose arguments are the provider's raw text, malformed JSON included."""
    return {"content": "", "tool_calls": [{"name": name, "arguments": arguments}]}


def call(name: str, **arguments) -> dict:
    return {"content": "", "tool_calls": [{"name": name, "arguments": arguments}]}


@pytest.fixture
def workspace(leaky_repo):
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
        yield runtime


HUGE = "9" * 5000

TEXT_REPLIES = {
    "a view block with a 5,000-digit line number": f"Look.\n```view\ncalc.py 1-{HUGE}\n```",
    "a view block with a 5,000-digit start": f"Look.\n```view\ncalc.py {HUGE}-3\n```",
    "an edit block whose text is not in the Latin-1 file's encoding":
        "Fix the note.\n```edit\nmenu.txt\n<<<<<<< SEARCH\ncaf\xe9 au lait\n=======\ncaf\xe9 \u2019au lait\u2019\n"
        ">>>>>>> REPLACE\n```",
}

TOOL_REPLIES = {
    "view_range [1, Infinity]": raw_call(EDITOR, '{"command": "view", "path": "calc.py", "view_range": [1, Infinity]}'),
    "view_range [NaN, 2]": raw_call(EDITOR, '{"command": "view", "path": "calc.py", "view_range": [NaN, 2]}'),
    "insert_line Infinity": raw_call(EDITOR, '{"command": "insert", "path": "calc.py", "insert_line": Infinity, '
                                             '"new_str": "x"}'),
    "insert_line -Infinity": raw_call(EDITOR, '{"command": "insert", "path": "calc.py", "insert_line": -Infinity, '
                                              '"new_str": "x"}'),
    "a 5,000-digit insert_line": raw_call(EDITOR, '{"command": "insert", "path": "calc.py", "insert_line": '
                                                  f'{HUGE}, "new_str": "x"}}'),
    "new_str with a curly quote for a Latin-1 file": call(EDITOR, command="str_replace", path="menu.txt",
                                                          old_str="au lait", new_str="\u2019au lait\u2019"),
    "file_text with a lone surrogate": raw_call(EDITOR, '{"command": "create", "path": "new.py", '
                                                        '"file_text": "x = \'\\ud800\'\\n"}'),
    "a path with a NUL": call(EDITOR, command="view", path="calc\x00.py"),
    "arguments that are a JSON list": raw_call(EDITOR, '["view", "calc.py"]'),
    "arguments cut short": raw_call(EDITOR, '{"command": "view", "path": "calc.'),
    "a view_range of three numbers": call(EDITOR, command="view", path="calc.py", view_range=[1, 2, 3]),
    "a bash command that is a list": call("bash", command=["ls", "-la"]),
}


@pytest.mark.parametrize("bad", sorted(TEXT_REPLIES))
def test_a_malformed_text_action_after_the_fix_is_corrected_and_the_fix_stays(tmp_path, workspace, bad):
    trajectory = tmp_path / "trajectory.json"
    run = run_agent(junior(tmp_path, [FIX, LATIN1, TEXT_REPLIES[bad], TEXT_SUBMIT]), workspace, "fix add",
                    Budget("r"), Limits(), trajectory_path=trajectory)
    assert run.exit_reason == "submitted", run.error
    step = run.steps[2]
    told = step.format_error or (step.edits and step.edits[-1].get("error"))
    assert told, step
    assert len(json.dumps(run.messages[-2]["content"])) < 12_000  # what it was told is bounded, not the reply again
    assert "+    return a + b" in workspace.diff()
    assert "caf\xe9 au lait" in workspace.read_file("menu.txt").decode("latin-1")
    assert json.loads(trajectory.read_text())["steps"][2]["reply"] == TEXT_REPLIES[bad]  # the paid reply kept


@pytest.mark.parametrize("bad", sorted(TOOL_REPLIES))
def test_a_malformed_tool_call_after_the_fix_is_corrected_and_the_fix_stays(tmp_path, workspace, bad):
    replies = [call("bash", command="sed -i 's/a - b/a + b/' calc.py"),
               call("bash", command="printf 'caf\\351 au lait\\n' > menu.txt"), TOOL_REPLIES[bad], call("submit")]
    trajectory = tmp_path / "trajectory.json"
    run = run_agent(junior(tmp_path, replies), workspace, "fix add", Budget("r"),
                    Limits(action_format="tools"), trajectory_path=trajectory)
    assert run.exit_reason == "submitted", run.error
    step = run.steps[2]
    assert step.format_error or (step.edits and not step.edits[-1]["ok"]), step
    assert "+    return a + b" in workspace.diff()
    assert not Path(workspace.workdir, "new.py").exists()
    assert workspace.read_file("menu.txt") == b"caf\xe9 au lait\n"  # nothing half-written


def test_arguments_that_are_not_an_object_are_told_the_shape_of_that_tool_s_arguments():
    for name, key in ((EDITOR, '"command": "view"'), ("bash", '"command": "ls"'), ("delegate", '"body"')):
        with pytest.raises(FormatError) as raised:
            parse_tool_action([{"name": name, "arguments": "[1, 2]"}], "", ("bash", EDITOR, "delegate"))
        assert key in str(raised.value), raised.value
    for calls in ([{"name": ["bash"], "arguments": "{}"}], ["bash"], None, [{"name": "bash", "arguments": 7}]):
        with pytest.raises(FormatError):
            parse_tool_action(calls, None, ("bash",))
    assert '"body"' not in str(pytest.raises(FormatError, parse_tool_action, [{"name": EDITOR, "arguments": "1"}],
                                             "", (EDITOR,)).value)


def test_an_agent_whose_own_code_fails_keeps_its_steps_and_says_why(tmp_path, workspace, monkeypatch):
    """A fault of swepipe's own under the loop (a bug, not the model's reply) ends the agent as runtime_error with
    the error on record; the paid steps are saved and the tree keeps the fix."""
    from pipeline.agent import agent as agent_module

    calls = []

    def broken(self):
        calls.append(1)
        if len(calls) == 2:
            raise KeyError("a bug in the bookkeeping")

    monkeypatch.setattr(agent_module.Agent, "note_steps_left", broken)
    trajectory = tmp_path / "trajectory.json"
    run = run_agent(junior(tmp_path, [FIX, "```bash\nls\n```", TEXT_SUBMIT]), workspace, "fix add", Budget("r"),
                    Limits(), trajectory_path=trajectory)
    assert run.exit_reason == "runtime_error" and "KeyError" in run.error and "a bug in the bookkeeping" in run.error
    saved = json.loads(trajectory.read_text())
    assert len(saved["steps"]) == 2 and saved["exit_reason"] == "runtime_error" and saved["cost"] == run.cost > 0
    assert saved["input_tokens"] == run.input_tokens > 0
    assert "+    return a + b" in workspace.diff()


def test_a_rollout_that_fails_after_its_agent_keeps_its_trajectory_diff_and_cost(shop_repo, tmp_path, run_id,
                                                                                  monkeypatch):
    """Taking the candidate fails (here: a bug after the diff was read): the rollout is runtime_error, and its
    record still holds the paid steps, their cost and the diff; the trajectory file is not thrown away before
    the record holds it."""
    def broken(runtime):
        raise RuntimeError("submodule listing broke")

    monkeypatch.setattr(rollout_module, "changed_submodules", broken)
    _, records = run_scripts(shop_repo, tmp_path, run_id, monkeypatch, [[TEMPLATES, USE_TEMPLATES, SUBMIT]], k=1)
    record = records[0]
    assert record.exit_reason == "runtime_error" and "submodule listing broke" in record.error
    assert record.steps == 3 and record.input_tokens == 30
    assert "render_item" in record.patch
    saved = json.loads((tmp_path / "junior" / "rollout-00.json").read_text())
    assert saved["patch"] == record.patch and len(saved["trajectory"]["steps"]) == 3


def test_a_rollout_whose_agent_fails_unexpectedly_keeps_its_diff(shop_repo, tmp_path, run_id, monkeypatch):
    from pipeline.agent.bash_action import BashAction

    original = BashAction.__call__

    def execute(self, step, action):
        if (step.command or "").startswith("sed -i"):
            original(self, step, action)
            raise ZeroDivisionError("the loop broke after the command ran")
        return original(self, step, action)

    monkeypatch.setattr(BashAction, "__call__", execute)
    _, records = run_scripts(shop_repo, tmp_path, run_id, monkeypatch, [[TEMPLATES, USE_TEMPLATES, SUBMIT]], k=1)
    record = records[0]
    assert record.exit_reason == "runtime_error" and "ZeroDivisionError" in record.error
    assert record.steps == 2 and record.input_tokens == 20
    assert "render_item(item)" in record.patch


# -- a ranged view of a huge file ------------------------------------------------------------------


def test_a_ranged_view_of_a_huge_file_reads_only_the_lines_shown(tmp_path, workspace, monkeypatch):
    big = Path(workspace.workdir, "data.log")
    line = "x" * 99 + "\n"
    with open(big, "w") as out:
        out.write("first line\nsecond line\n")
        for _ in range(300_000):  # 30 MB
            out.write(line)
        out.write("last line, no newline")
    editor = Editor(workspace, output_limit=10_000)

    def no_whole_reads(path):
        raise AssertionError(f"the whole of {path} was read")

    monkeypatch.setattr(workspace, "read_file", no_whole_reads)
    tracemalloc.start()
    try:
        head = editor(EditorCall("view", "data.log", view_range=(1, 2)))
        tail = editor(EditorCall("view", "data.log", view_range=(300_003, -1)))
        middle = editor(EditorCall("view", "data.log", view_range=(10, 10_000)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert head.ok and head.observation.endswith("1\tfirst line\n2\tsecond line")
    assert "lines 1-2 of 300003" in head.observation
    assert tail.ok and tail.observation.endswith("300003\tlast line, no newline"), tail.observation[-200:]
    assert middle.ok and "cut" in middle.observation and len(middle.observation.encode()) < 11_000
    assert peak < 2_000_000, peak  # a few bounded outputs, never the 30 MB file
    beyond = editor(EditorCall("view", "data.log", view_range=(400_000, 400_001)))
    assert not beyond.ok and "300003 lines" in beyond.observation
    whole = editor(EditorCall("view", "data.log"))
    assert not whole.ok and "view a part of it with view_range" in whole.observation


# -- the senior's brief and the principal's edits ------------------------------------------------------------


@pytest.mark.parametrize("reply", [
    f"ANALYSIS:\nthe bug\nSPANS:\ncalc.py:1-2 add\nCANDIDATE: {HUGE}",
    f"ANALYSIS:\nthe bug\nSPANS:\ncalc.py:{HUGE}-{HUGE} add\nCANDIDATE: 1",
    f"ANALYSIS:\nthe bug\nSPANS:\n`calc.py#L1-L{HUGE}` add\nCANDIDATE: none",
    '```json\n{"analysis": "the bug", "spans": [{"file": "calc.py", "start": 1, "end": Infinity}], '
    f'"candidate": {HUGE}}}\n```',
    '```json\n{"analysis": "the bug", "spans": [{"file": "calc.py", "lines": "' + HUGE + '"}], "candidate": NaN}\n```',
])
def test_a_brief_with_numbers_past_reading_keeps_what_it_can_and_names_the_rest(reply):
    """Found by the fuzzer: a CANDIDATE or span line number of 5,000 digits raised ValueError out of the
    senior's brief parser (int() refuses more than 4,300 digits, json.loads too), Infinity an OverflowError."""
    from pipeline.senior.brief import BriefFormatError, parse_brief

    try:
        brief = parse_brief(reply)
    except BriefFormatError as error:  # JSON with a number past reading: the senior is asked to write it again
        assert reply.startswith("```json") and "not valid JSON" in str(error)
        return
    assert brief.analysis == "the bug"
    assert all(abs(span.start) < 10**13 and abs(span.end) < 10**13 for span in brief.spans)
    assert brief.candidate is None or brief.candidate == 1
    assert brief.problems or brief.candidate == 1


def test_a_principal_edit_holding_a_lone_surrogate_is_refused_not_rewritten(workspace):
    """Found by the fuzzer: a REPLACE holding U+D800 (a provider's JSON can send one) was written as '?' into
    the file and the patch; it is now an unusable reply, which the principal's one retry is told about."""
    from pipeline.principal.stage import UnusableEdits, apply_to_base

    reply = ("```edit\ncalc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b  # \ud800\n"
             ">>>>>>> REPLACE\n```")
    with pytest.raises(UnusableEdits, match="lone surrogate .U\\+D800. on line 1"):
        apply_to_base(reply, workspace)
    assert "?" not in workspace.diff()


@pytest.mark.parametrize(("kind", "body"), [
    ("delegate", f"stage: {HUGE}\ntask: fix"), ("delegate", f"task: {HUGE}"), ("delegate", "[" * 2000),
    ("resume", f"worker: worker-{HUGE}\ntext: go on"), ("wait", f"worker-{HUGE}")])
def test_a_team_block_with_a_number_past_reading_is_a_format_error(kind, body):
    """Found by the fuzzer: YAML reading a 5,000-digit number raised ValueError, not YAMLError, out of the lead's
    delegate, and a worker-<5,000 digits> name did the same in int()."""
    from pipeline.team.actions import parse_delegations, parse_names, parse_resume

    parse = {"delegate": lambda b: parse_delegations(b, None), "resume": parse_resume, "wait": parse_names}[kind]
    with pytest.raises(FormatError) as raised:
        parse(body)
    assert len(str(raised.value)) < 500
