"""Reading other harnesses' trajectories for a replay (pipeline.interop.trajectory_formats): one short trajectory of
each format, written here in the shape its harness saves, with the awkward parts real ones have; any file at all
gives a trajectory or NotReplayable; finding trajectories in a folder tree."""

import dataclasses
import json
from pathlib import Path

import pytest
from fuzzing import fuzz
from hostile import hostile_text, json_scalar
from hypothesis import given
from hypothesis import strategies as st

from pipeline.interop.recorded import NotReplayable, RecordedStep, RecordedTrajectory
from pipeline.interop.trajectory_formats import find_trajectories, read_trajectory_file

INSTANCE = "acme__widgets-17"
PATCH = "diff --git a/src/app.py b/src/app.py\n--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-a\n+b\n"


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return path


def bash(command: str) -> dict:
    return {"name": "bash", "arguments": {"command": command}}


def editor(**arguments) -> dict:
    return {"name": "str_replace_editor", "arguments": arguments}


SUBMIT = {"name": "submit", "arguments": {}}


def without_outputs(steps: list[RecordedStep]) -> list[RecordedStep]:
    """The steps as the actions they stand for (what each printed is checked apart, where a test says so)."""
    return [dataclasses.replace(step, output=None) for step in steps]


# -- mini-swe-agent 1.x ------------------------------------------------------------------------------------------


def observation(code: int, output: str = "") -> dict:
    return {"role": "user", "content": f"<returncode>{code}</returncode>\n<output>\n{output}</output>"}


def mini_1_file(messages: list, **info) -> dict:
    return {"info": {"exit_status": "Submitted", "submission": PATCH,
                     "model_stats": {"instance_cost": 0.42, "api_calls": 6},
                     "config": {"agent": {"step_limit": 250}, "model": {"model_name": "anthropic/claude-sonnet-4-5"},
                                "environment": {"cwd": "/testbed"}, "agent_type": "minisweagent.run.extra."
                                                                                  "swebench.ProgressTrackingAgent"},
                     "mini_version": "1.14.0", **info},
            "messages": messages, "trajectory_format": "mini-swe-agent-1"}


MINI_1_MESSAGES = [
    {"role": "system", "content": "Reply with one command:\n\n```bash\nyour_command_here\n```"},
    {"role": "user", "content": "<pr_description>Widgets break.</pr_description>"},
    {"role": "assistant", "content": "THOUGHT: look around first.\n\n```bash\nls -la /testbed/src\n```"},
    observation(0, "app.py\n"),
    # An earlier block quoted inline (```bash in backticks, not followed by a line break): not a block to mini.
    {"role": "assistant", "content": "The `` ```bash `` block I sent listed it. Now the script:\n\n"
                                     "```bash\ncat /testbed/bin/run.sh\n```\n"},
    observation(1, "cat: permission denied\n"),
    # An earlier block quoted whole beside the new one: two blocks, which mini refused as a format error.
    {"role": "assistant",
     "content": "Earlier I ran:\n```bash\nls -la /testbed/src\n```\nNow:\n```bash\npytest -q\n```"},
    {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks, found 2 actions."},
    {"role": "assistant", "content": "Fix it.\n```bash\nsed -i 's/a/b/' /testbed/src/app.py\n```"},
    observation(0),
    {"role": "assistant", "content": [{"type": "text", "text": "Check.\n```bash\n  git diff  \n```"}]},
    {"role": "user", "content": "<exception>timed out</exception>\n<returncode>-1</returncode>\n<output>\n</output>"},
    {"role": "assistant", "content": "Done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A "
                                     "&& git diff --cached\n```"},
    {"role": "user", "content": PATCH},
]


def test_mini_1_replies_become_bash_steps_format_errors_and_the_submission(tmp_path):
    path = write(tmp_path / "out" / INSTANCE / f"{INSTANCE}.traj.json",
                 {**mini_1_file(MINI_1_MESSAGES), "instance_id": INSTANCE})

    trajectory = read_trajectory_file(path)

    assert without_outputs(trajectory.steps) == [
        RecordedStep("THOUGHT: look around first.\n\n", bash("ls -la /testbed/src"), 0),
        RecordedStep("The `` ```bash `` block I sent listed it. Now the script:\n\n\n", bash("cat /testbed/bin/run.sh"),
                     1),
        RecordedStep(MINI_1_MESSAGES[6]["content"], None),
        RecordedStep("Fix it.\n", bash("sed -i 's/a/b/' /testbed/src/app.py"), 0),
        RecordedStep("Check.\n", bash("git diff"), -1),  # stripped, as mini strips its commands
        RecordedStep("Done.\n\n", SUBMIT),
    ]
    assert (trajectory.format, trajectory.instance_id, trajectory.source) == ("mini-swe-agent-1", INSTANCE, path)
    assert (trajectory.submission, trajectory.exit_status, trajectory.cost) == (PATCH, "Submitted", 0.42)
    # What each command printed (the audit reads the hashes an honest git command showed), and the task as given.
    assert [step.output for step in trajectory.steps] == [MINI_1_MESSAGES[3]["content"], MINI_1_MESSAGES[5]["content"],
                                                          None, MINI_1_MESSAGES[9]["content"],
                                                          MINI_1_MESSAGES[11]["content"], None]
    assert trajectory.task_text == f"{MINI_1_MESSAGES[0]['content']}\n\n{MINI_1_MESSAGES[1]['content']}"
    assert (trajectory.model, trajectory.repo_root) == ("anthropic/claude-sonnet-4-5", "/testbed")
    assert trajectory.submitted_files is None  # git add -A: everything, no list
    assert trajectory.resolved is None


def test_mini_1_instance_id_comes_from_the_file_name_else_its_folder(tmp_path):
    named = write(tmp_path / "a" / f"{INSTANCE}.traj.json", mini_1_file(MINI_1_MESSAGES))
    unnamed = write(tmp_path / "django__django-1" / "trajectory.json", mini_1_file(MINI_1_MESSAGES))

    assert read_trajectory_file(named).instance_id == INSTANCE
    assert read_trajectory_file(unnamed).instance_id == "django__django-1"


def test_mini_1_submission_marker_mid_run_is_a_command_and_git_add_lists_the_files(tmp_path):
    messages = [
        {"role": "assistant", "content": "Try.\n```bash\necho MINI_SWE_AGENT_FINAL_OUTPUT > /tmp/marker\n```"},
        observation(0),
        {"role": "assistant", "content": "Probe.\n```bash\necho 'MINI_SWE_AGENT_FINAL_OUTPUT'; ls\n```"},
        observation(2),  # mini only ends on the marker when it is the first line of the output
        {"role": "assistant", "content": "Submit.\n```bash\ngit add src/app.py bin/tool && git diff --cached && "
                                         "echo MINI_SWE_AGENT_FINAL_OUTPUT\n```"},
    ]
    trajectory = read_trajectory_file(write(tmp_path / "x.traj.json", mini_1_file(messages)))

    assert [step.call for step in trajectory.steps] == [
        bash("echo MINI_SWE_AGENT_FINAL_OUTPUT > /tmp/marker"), bash("echo 'MINI_SWE_AGENT_FINAL_OUTPUT'; ls"),
        SUBMIT]
    assert trajectory.submitted_files == ["src/app.py", "bin/tool"]
    assert any("did not end there" in note for note in trajectory.notes)


def test_mini_1_reads_the_action_regex_its_config_names_and_refuses_one_it_cannot_run_safely(tmp_path):
    messages = [{"role": "assistant", "content": "Look.\n```mswea_bash_command\nls\n```\n```bash\nnot this\n```"},
                observation(0)]
    config = {"agent": {"action_regex": "```mswea_bash_command\\s*\\n(.*?)\\n```"}}
    data = mini_1_file(messages, exit_status="LimitsExceeded", config=config)
    trajectory = read_trajectory_file(write(tmp_path / "a.traj.json", data))
    assert without_outputs(trajectory.steps) == [RecordedStep("Look.\n\n```bash\nnot this\n```", bash("ls"), 0)]
    assert trajectory.exit_status == "LimitsExceeded"

    data["info"]["config"]["agent"]["action_regex"] = "(a+)+$(.*?)"
    with pytest.raises(NotReplayable, match=r"b\.traj\.json: its config's action_regex"):
        read_trajectory_file(write(tmp_path / "b.traj.json", data))


# -- mini-swe-agent 2.x ------------------------------------------------------------------------------------------


def tool_reply(text, *commands: tuple[str, str], **extra) -> dict:
    return {"role": "assistant", "content": text,
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
                           for command, call_id in commands],
            "extra": {"actions": [{"command": command, "tool_call_id": call_id} for command, call_id in commands],
                      "cost": 0.01, **extra}}


def tool_result(call_id: str, code: int, output: str = "") -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": f"{output}[exit code {code}]",
            "extra": {"raw_output": output, "returncode": code}}


EDIT_SCRIPT = ("python - <<'EOF'\nfrom pathlib import Path\np = Path('/testbed/bin/tool')\n"
               "p.write_text(p.read_text().replace('a', 'b'))\nEOF")


def mini_2_file(messages: list) -> dict:
    return {"info": {"model_stats": {"instance_cost": 0.07, "api_calls": 5},
                     "config": {"agent": {}, "model": {"model_name": "openai/gpt-5-mini", "model_kwargs": {}},
                                "environment": {"cwd": "/testbed", "image": "swebench/sweb.eval"},
                                "agent_type": "minisweagent.agents.default.DefaultAgent"},
                     "mini_version": "2.1.0", "exit_status": "Submitted", "submission": PATCH},
            "messages": messages, "trajectory_format": "mini-swe-agent-1.1", "instance_id": INSTANCE}


def test_mini_2_tool_calls_become_steps_and_the_listed_files_are_submitted(tmp_path):
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Fix the widgets."},
        tool_reply("Look around.", ("ls /testbed", "call_1"), ("grep -rn widget /testbed/src", "call_2")),
        tool_result("call_2", 1),  # the results in another order than the calls
        tool_result("call_1", 0, "src\n"),
        # A reply mini could not parse is not kept: only its format error, with the provider's response.
        {"role": "user", "content": "Tool call error:\n<error>No tool calls found</error>",
         "extra": {"interrupt_type": "FormatError",
                   "response": {"choices": [{"message": {"content": "I will just think.", "tool_calls": None}}]}}},
        tool_reply([{"type": "text", "text": "Edit the executable script."}], (EDIT_SCRIPT, "call_3")),
        tool_result("call_3", 0),
        tool_reply("Write the patch.", ("git diff -- src/app.py bin/tool > patch.txt", "call_4")),
        tool_result("call_4", 0),
        tool_reply("", ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt", "call_5")),
        {"role": "exit", "content": PATCH, "extra": {"exit_status": "Submitted", "submission": PATCH}},
    ]
    trajectory = read_trajectory_file(write(tmp_path / INSTANCE / f"{INSTANCE}.traj.json", mini_2_file(messages)))

    assert without_outputs(trajectory.steps) == [
        RecordedStep("Look around.", bash("ls /testbed"), 0),
        RecordedStep("", bash("grep -rn widget /testbed/src"), 1),
        RecordedStep("I will just think.", None),
        RecordedStep("Edit the executable script.", bash(EDIT_SCRIPT), 0),
        RecordedStep("Write the patch.", bash("git diff -- src/app.py bin/tool > patch.txt"), 0),
        RecordedStep("", SUBMIT),
    ]
    assert trajectory.format == "mini-swe-agent-2"
    assert trajectory.submitted_files == ["src/app.py", "bin/tool"]
    assert (trajectory.instance_id, trajectory.submission, trajectory.exit_status) == (INSTANCE, PATCH, "Submitted")
    assert (trajectory.cost, trajectory.model, trajectory.repo_root) == (0.07, "openai/gpt-5-mini", "/testbed")
    assert any("ran 2 commands" in note for note in trajectory.notes)
    # Each command's own result, matched by its call's id whatever the order the results came in.
    assert [step.output for step in trajectory.steps[:2]] == ["src\n[exit code 0]", "[exit code 1]"]
    assert trajectory.task_text == "You are a helpful assistant.\n\nFix the widgets."


def test_mini_2_responses_api_and_text_based_replies(tmp_path):
    messages = [
        {"object": "response", "output": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Listing."}]},
            {"type": "function_call", "call_id": "fc_1", "name": "bash", "arguments": "{\"command\": \"ls\"}"}],
         "extra": {"actions": [{"command": "ls", "tool_call_id": "fc_1"}]}},
        {"type": "function_call_output", "call_id": "fc_1", "output": "a\n", "extra": {"returncode": 0}},
        # A text-based model, its parse not kept: read with the 2.x default regex, ```mswea_bash_command.
        {"role": "assistant", "content": "Run it:\n```mswea_bash_command\n./bin/tool --check\n```\n"},
        {"role": "user", "content": "<returncode>3</returncode>\n<output>\nbad\n</output>"},
        {"role": "assistant", "content": "```bash\nls\n```"},  # no ```mswea_bash_command block: refused
        {"role": "user", "content": "Please always provide EXACTLY ONE action", "extra": {
            "interrupt_type": "FormatError", "model_response": "```bash\nls\n```"}},
        {"role": "exit", "content": "", "extra": {"exit_status": "LimitsExceeded", "submission": ""}},
    ]
    data = mini_2_file(messages)
    del data["info"]["exit_status"], data["info"]["submission"]
    trajectory = read_trajectory_file(write(tmp_path / f"{INSTANCE}.traj.json", data))

    assert without_outputs(trajectory.steps) == [RecordedStep("Listing.", bash("ls"), 0),
                                RecordedStep("Run it:\n\n", bash("./bin/tool --check"), 3),
                                RecordedStep("```bash\nls\n```", None)]
    assert trajectory.exit_status == "LimitsExceeded" and trajectory.submitted_files is None


# -- SWE-agent ------------------------------------------------------------------------------------------------


def swe_agent_file(steps: list[dict], history_actions: list[dict], **info) -> dict:
    history = [{"role": "system", "content": "SETTING", "agent": "main", "message_type": "system_prompt"},
               {"role": "user", "content": "<uploaded_files>/testbed</uploaded_files>", "agent": "main",
                "message_type": "observation"}]
    for entry in history_actions:
        history += [{"role": "assistant", "content": entry.get("thought", ""), "agent": "main",
                     "message_type": "action", "tool_calls": None, **entry},
                    {"role": "user", "content": "OBSERVATION", "agent": "main", "message_type": "observation"}]
    replay = {"env": {"repo": {"repo_name": "testbed", "type": "preexisting"}},
              "agent": {"model": {"name": "claude-3-7-sonnet", "per_instance_cost_limit": 3.0}},
              "problem_statement": {"id": INSTANCE, "type": "swe_bench"}}
    return {"trajectory": [{"observation": "", "response": step.get("thought", ""), "execution_time": 0.1,
                            "state": {"working_dir": "/testbed"}, "query": [], "extra_info": {}, **step}
                           for step in steps],
            "history": history,
            "info": {"swe_agent_hash": "abc", "swe_agent_version": "1.1.0", "submission": PATCH,
                     "exit_status": "submitted", "model_stats": {"instance_cost": 1.25, "api_calls": 9}, **info},
            "replay_config": json.dumps(replay), "environment": "main"}


REPLACE = ("str_replace_editor str_replace /testbed/src/app.py   --old_str 'def f():\n    return \"a\"' "
           "--new_str 'def f():\n    return '\"'\"'b'\"'\"''")
SWE_AGENT_STEPS = [
    {"action": "str_replace_editor view /testbed/src/app.py  --view_range 1 40", "thought": "Look at it."},
    {"action": "", "thought": "I think the bug is in f."},  # no action: SWE-agent asked again
    {"action": "vim /testbed/src/app.py", "thought": "Edit it."},  # blocked: asked again, not run
    {"action": REPLACE, "thought": "Replace the return."},
    {"action": "str_replace_editor create /testbed/bin/tool --file_text '#!/bin/sh\necho hi\n'", "thought": ""},
    {"action": "str_replace_editor insert /testbed/src/app.py    --new_str 'x = 1' --insert_line 3",
     "thought": "Add x."},
    {"action": "str_replace_editor undo_edit /testbed/src/app.py", "thought": "Undo that."},
    {"action": "cd /testbed && python -m pytest -q tests/test_app.py", "thought": "Test."},
    {"action": "submit", "thought": "Submit."},
]


def test_swe_agent_text_actions_become_editor_bash_and_submit_calls(tmp_path):
    ran = [step for step in SWE_AGENT_STEPS if step["action"] and not step["action"].startswith("vim")]
    path = write(tmp_path / INSTANCE / f"{INSTANCE}.traj", swe_agent_file(SWE_AGENT_STEPS, ran))

    trajectory = read_trajectory_file(path)

    assert without_outputs(trajectory.steps) == [
        RecordedStep("Look at it.", editor(command="view", path="/testbed/src/app.py", view_range=[1, 40])),
        RecordedStep("I think the bug is in f.", None),
        RecordedStep("Edit it.", None),
        RecordedStep("Replace the return.", editor(command="str_replace", path="/testbed/src/app.py",
                                                   old_str="def f():\n    return \"a\"",
                                                   new_str="def f():\n    return 'b'")),
        RecordedStep("", editor(command="create", path="/testbed/bin/tool", file_text="#!/bin/sh\necho hi\n")),
        RecordedStep("Add x.", editor(command="insert", path="/testbed/src/app.py", new_str="x = 1", insert_line=3)),
        RecordedStep("Undo that.", editor(command="undo_edit", path="/testbed/src/app.py")),
        RecordedStep("Test.", bash("cd /testbed && python -m pytest -q tests/test_app.py")),
        RecordedStep("Submit.", SUBMIT),
    ]
    assert all(step.exit_code is None for step in trajectory.steps)
    assert [step.output for step in trajectory.steps][:2] == ["", None]  # the observation; none for a rejected step
    assert trajectory.task_text == "SETTING\n\n<uploaded_files>/testbed</uploaded_files>"
    assert (trajectory.format, trajectory.instance_id, trajectory.repo_root) == ("swe-agent", INSTANCE, "/testbed")
    assert (trajectory.submission, trajectory.exit_status, trajectory.cost) == (PATCH, "submitted", 1.25)
    assert trajectory.model == "claude-3-7-sonnet"


def test_swe_agent_function_calls_give_the_editor_its_exact_strings(tmp_path):
    old, new = "    path = '$HOME\\\\x'  \n", "    path = \"$HOME/x\"\t\n"
    arguments = {"command": "str_replace", "path": "/testbed/src/app.py", "old_str": old, "new_str": new}
    # SWE-agent renders the call as a command line with shell quoting; the JSON arguments are what the model sent.
    action = f"str_replace_editor str_replace /testbed/src/app.py   --old_str {json.dumps(old)} --new_str x"
    steps = [{"action": action, "thought": "Fix the path."},
             {"action": "ls /testbed/bin", "thought": "List."},
             {"action": "submit", "thought": ""},
             {"action": "", "thought": "Exit due to cost limit", "response": "Exit due to cost limit"}]
    calls = [[{"id": "t1", "type": "function", "function": {"name": "str_replace_editor",
                                                            "arguments": json.dumps(arguments)}}],
             [{"id": "t2", "type": "function", "function": {"name": "bash",
                                                            "arguments": "{\"command\": \"ls /testbed/bin\"}"}}],
             [{"id": "t3", "type": "function", "function": {"name": "submit", "arguments": "{}"}}],
             None]
    ran = [{**step, "tool_calls": tool_calls} for step, tool_calls in zip(steps, calls, strict=True)]
    data = swe_agent_file(steps, ran, exit_status="submitted (exit_cost)")
    trajectory = read_trajectory_file(write(tmp_path / f"{INSTANCE}.traj", data))

    assert without_outputs(trajectory.steps) == [RecordedStep("Fix the path.", editor(**arguments)),
                                RecordedStep("List.", bash("ls /testbed/bin")),
                                RecordedStep("", SUBMIT)]
    assert trajectory.instance_id == INSTANCE
    assert any("SWE-agent's own ending" in note for note in trajectory.notes)


# -- swepipe's own export ---------------------------------------------------------------------------------------


def exported(tmp_path: Path, run, kind: str = "solo") -> Path:
    from pipeline.interop.export import _from_agent_run, write_trajectory

    path = tmp_path / "export" / INSTANCE / f"{kind}.traj.json"
    record = _from_agent_run(kind, kind, run.to_dict(), submission=PATCH, is_patch=True,
                             model={"model_name": "local/gemma-3-270m"})
    write_trajectory(path, record, run_id="r1", instance_id=INSTANCE)
    return path


def test_swepipe_export_reads_the_actions_its_agent_recorded(tmp_path):
    from pipeline.agent.agent_run import AgentRun, AgentStep

    replies = [("Look.\n\n```bash\nls /app/src\n```", dict(action="bash", command="ls /app/src", exit_code=0)),
               ("No block here.", dict(format_error="your reply had no ```bash blocks; it must have exactly one")),
               ("View it.\n```view\nsrc/app.py 1-20\n```\n", dict(action="view", command="src/app.py 1-20")),
               ("Fix.\n```edit\nsrc/app.py\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```",
                dict(action="edit", command="src/app.py\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE")),
               ("Run the tool.\n```bash\n./bin/tool\n```", dict(action="bash", command="./bin/tool", exit_code=126)),
               ("Done.\n```bash\nsubmit\n```", dict(action="submit", command="submit"))]
    run = AgentRun(name="solo", exit_reason="submitted", cost=0.03,
                   messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "T"}])
    for index, (reply, step) in enumerate(replies):
        run.messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "exit code: 0"}]
        run.steps.append(AgentStep(index=index, reply=reply, **step))

    trajectory = read_trajectory_file(exported(tmp_path, run))

    assert without_outputs(trajectory.steps) == [
        RecordedStep("Look.\n\n", bash("ls /app/src"), 0),
        RecordedStep("No block here.", None),
        RecordedStep("View it.\n\n", editor(command="view", path="src/app.py", view_range=[1, 20])),
        RecordedStep("Fix.\n", editor(command="str_replace", path="src/app.py", old_str="a\n", new_str="b\n")),
        RecordedStep("Run the tool.\n", bash("./bin/tool"), 126),
        RecordedStep("Done.\n", SUBMIT),
    ]
    assert (trajectory.format, trajectory.instance_id, trajectory.model) == ("swepipe", INSTANCE,
                                                                            "local/gemma-3-270m")
    assert (trajectory.submission, trajectory.exit_status, trajectory.cost) == (PATCH, "submitted", 0.03)
    assert (trajectory.steps[0].output, trajectory.task_text) == ("exit code: 0", "S\n\nT")


def test_swepipe_export_in_the_tool_call_format(tmp_path):
    from pipeline.agent.agent_run import AgentRun, AgentStep

    arguments = {"command": "create", "path": "bin/tool", "file_text": "#!/bin/sh\nexit 0\n"}
    run = AgentRun(name="junior", exit_reason="submitted")
    for index, (name, args) in enumerate([("str_replace_editor", arguments), ("submit", {})]):
        call = {"id": f"c{index}", "name": name, "arguments": json.dumps(args)}
        run.messages += [{"role": "assistant", "content": "", "tool_calls": [
            {"id": call["id"], "type": "function", "function": {"name": name, "arguments": call["arguments"]}}]},
            {"role": "tool", "tool_call_id": call["id"], "content": "ok"}]
        command = json.dumps(args) if name == "str_replace_editor" else "submit"
        run.steps.append(AgentStep(index=index, reply="", action=name, command=command, tool_calls=[call]))

    trajectory = read_trajectory_file(exported(tmp_path, run, "senior"))

    assert without_outputs(trajectory.steps) == [RecordedStep("", editor(**arguments)), RecordedStep("", SUBMIT)]


# -- files that are no trajectory --------------------------------------------------------------------------------


@pytest.mark.parametrize("content, reason", [
    (b"not json {", "is not JSON"),
    (b"\xff\xfe\x00garbage", "is not JSON"),
    (b"[1, 2]", "its JSON is a list"),
    (b'{"messages": [], "trajectory_format": "openhands-3"}', "trajectory_format 'openhands-3'"),
    (b'{"id": {"model_patch": ""}}', "no trajectory of a known format"),
    (b'{"attempts": [{"info": {}}]}', "without steps"),
    (b'{"info": {"swepipe": {"role": "principal"}}, "messages": []}', "principal"),
])
def test_files_that_are_no_trajectory_are_refused_by_name(tmp_path, content, reason):
    path = tmp_path / "odd.json"
    path.write_bytes(content)
    with pytest.raises(NotReplayable) as refused:
        read_trajectory_file(path)
    assert str(refused.value).startswith(f"{path}: ") and reason in str(refused.value)


def test_a_missing_file_is_refused_by_name(tmp_path):
    with pytest.raises(NotReplayable, match="cannot be read"):
        read_trajectory_file(tmp_path / "gone.traj")


# -- any file at all ---------------------------------------------------------------------------------------------


json_value = st.recursive(json_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(hostile_text(max_size=12), inner, max_size=4)), max_leaves=12)


def shaped(value):
    """``value``, or any of its parts, replaced by any JSON value: trajectories of every format, broken anywhere."""
    if isinstance(value, dict):
        shape = st.fixed_dictionaries({key: shaped(part) for key, part in value.items()})
    elif isinstance(value, list):
        shape = st.tuples(*[shaped(part) for part in value]).map(list)
    else:
        shape = st.just(value)
    return st.one_of(shape, json_value)


WINDOWED_STEPS = [{"action": "open src/a.py 20", "thought": "a"}, {"action": "edit 2:3\nx\nend_of_edit", "thought": ""},
                  {"action": "insert 'y' 4", "thought": ""}, {"action": "search_file 'x'", "thought": ""},
                  {"action": "submit", "thought": ""}]


SKELETONS = [
    {**mini_1_file(MINI_1_MESSAGES[2:7]), "instance_id": INSTANCE},
    mini_2_file([tool_reply("Look.", ("ls", "c1"), ("pwd", "c2")), tool_result("c1", 0),
                 {"role": "user", "content": "e", "extra": {"interrupt_type": "FormatError", "model_response": "x"}},
                 tool_reply("", ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt", "c3")),
                 {"role": "exit", "content": "", "extra": {"exit_status": "Submitted", "submission": ""}}]),
    swe_agent_file(SWE_AGENT_STEPS[:5], SWE_AGENT_STEPS[:1] + SWE_AGENT_STEPS[3:5]),
    {"info": {"swepipe": {"instance_id": INSTANCE, "role": "solo"}, "model_stats": {"instance_cost": 1},
              "config": {"model": {"model_name": "m"}}},
     "messages": [{"role": "assistant", "content": "```view\nsrc/a.py 1-2\n```",
                   "extra": {"action": "view", "command": "src/a.py 1-2"}},
                  {"role": "assistant", "content": "e", "extra": {
                      "action": "edit", "command": "a.py\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE"}},
                  {"role": "assistant", "content": "x", "extra": {"action": "str_replace_editor",
                                                                  "command": "{\"command\": \"view\"}"}}],
     "trajectory_format": "mini-swe-agent-1"},
    swe_agent_file(WINDOWED_STEPS, WINDOWED_STEPS),
    {"history": [{"role": "user", "content": "Fix it."},
                 {"role": "assistant", "content": "a", "thought": "a", "action": "open 'src/a.py' 3",
                  "message_type": "action"},
                 {"role": "tool", "content": "x\n(Open file: /r/src/a.py)\n(Current directory: /r)\nbash-$"},
                 {"role": "assistant", "content": "b", "thought": "b", "action": "submit", "message_type": "action"},
                 {"role": "tool", "content": "\r\ndiff --git a/x b/x\r\n"}]},
]


def read_or_refuse(path: Path) -> None:
    try:
        trajectory = read_trajectory_file(path)
    except NotReplayable as refused:
        assert str(refused).startswith(f"{path}: ")
    else:
        assert isinstance(trajectory, RecordedTrajectory)
        assert all(isinstance(step.thought, str) for step in trajectory.steps)
        assert all(step.call is None or step.call["name"] in ("bash", "str_replace_editor", "submit")
                   for step in trajectory.steps)


@fuzz
@given(value=st.one_of(json_value, st.sampled_from(SKELETONS).flatmap(shaped)))
def test_any_json_file_gives_a_trajectory_or_not_replayable(tmp_path, value):
    path = tmp_path / f"{INSTANCE}.traj.json"  # named for the task the skeletons record: read on, not refused
    path.write_text(json.dumps(value))  # NaN, infinities and lone surrogates as JSON writes them
    read_or_refuse(path)


@fuzz
@given(content=st.one_of(st.binary(max_size=200), st.sampled_from(SKELETONS).map(
    lambda data: json.dumps(data).encode()).flatmap(lambda raw: st.integers(0, len(raw)).map(lambda cut: raw[:cut]))))
def test_any_bytes_give_a_trajectory_or_not_replayable(tmp_path, content):
    path = tmp_path / f"{INSTANCE}.traj"
    path.write_bytes(content)
    read_or_refuse(path)


# -- which task a file belongs to --------------------------------------------------------------------------------


@pytest.mark.parametrize("name, data", [
    ("other__task-2.traj.json", {**mini_1_file(MINI_1_MESSAGES), "instance_id": INSTANCE}),
    ("other__task-2.traj", swe_agent_file(SWE_AGENT_STEPS[:1], SWE_AGENT_STEPS[:1])),
], ids=["mini-swe-agent", "swe-agent"])
def test_one_rule_for_the_task_of_a_file_and_a_file_named_for_another_task_is_refused_naming_both(tmp_path, name,
                                                                                                  data):
    """The recorded id when there is one, the file's name otherwise, for every format; a file named for one task
    that records another is not replayed as either."""
    with pytest.raises(NotReplayable) as refused:
        read_trajectory_file(write(tmp_path / name, data))
    assert str(refused.value) == (f"{tmp_path / name}: is named for task 'other__task-2' but records task "
                                  f"'{INSTANCE}': which task it belongs to is not clear, so it is left out (rename "
                                  "the file or correct its id)")
    suffix = ".traj.json" if name.endswith(".traj.json") else ".traj"
    assert read_trajectory_file(write(tmp_path / f"{INSTANCE}{suffix}", data)).instance_id == INSTANCE
    assert read_trajectory_file(write(tmp_path / "some" / "run.json", data)).instance_id == INSTANCE  # no task name
    unrecorded = json.loads(json.dumps(data))
    unrecorded.pop("instance_id", None)
    unrecorded["replay_config"] = unrecorded.get("replay_config", "{}").replace(INSTANCE, "")
    assert read_trajectory_file(write(tmp_path / name, unrecorded)).instance_id == "other__task-2"



# -- finding trajectories ------------------------------------------------------------------------------------------


def test_find_trajectories_in_a_folder_tree(tmp_path):
    root = tmp_path / "runs"
    mini = write(root / "mini" / INSTANCE / f"{INSTANCE}.traj.json", mini_1_file(MINI_1_MESSAGES))
    swe = write(root / "swe" / "deep" / "er" / "x.traj", swe_agent_file(SWE_AGENT_STEPS[:1], SWE_AGENT_STEPS[:1]))
    named_json = write(root / "other" / "last_run.json", mini_1_file(MINI_1_MESSAGES))
    write(root / "mini" / "preds.json", {INSTANCE: {"model_patch": PATCH}})
    (root / "other" / "broken.json").write_text("{not json")
    (root / "other" / "notes.txt").write_text("not a trajectory")
    given_file = write(tmp_path / "loose" / "anything.data", {"x": 1})  # given by name: kept, whatever it is

    found = find_trajectories([root, given_file, mini])

    assert found == sorted([mini, swe, named_json, given_file])
