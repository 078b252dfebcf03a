"""SWE-agent's windowed tools and its history-only files: a trajectory that opens, scrolls, edits line ranges,
creates and searches is read as bash calls of swepipe's own script of those tools (pipeline/interop/
trajectory_formats/windowed_tools.py), which keeps the open file and the window as SWE-agent 0.x's and 1.x's tools
define them; a demonstration that holds only ``history`` is read from it. Here the script runs in a local folder;
tests/test_replay_docker.py replays such trajectories in a task's image."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fuzzing import fuzz
from hostile import hostile_text
from hypothesis import given
from hypothesis import strategies as st
from test_trajectory_formats import INSTANCE, PATCH, swe_agent_file, write

from pipeline.interop.recorded import NotReplayable
from pipeline.interop.trajectory_formats import read_trajectory_file
from pipeline.interop.trajectory_formats.common import Refused
from pipeline.interop.trajectory_formats.windowed import SCRIPT_PATH, WindowSettings, windowed_command

SCRIPT = Path(__file__).parents[1] / "pipeline/interop/trajectory_formats/windowed_tools.py"


class Tools:
    """SWE-agent's tools as a replay runs them, in ``folder`` (the repository), with a state file of their own."""

    def __init__(self, folder: Path, generation: int, window: int = 10, overlap: int = 2):
        self.folder, self.settings = folder, WindowSettings(generation, window, overlap)
        self.state = folder.parent / f"state-{generation}.json"

    def __call__(self, action: str, observation: str | None = None) -> str:
        command = windowed_command(action, self.settings, observation, False, 1).replace(SCRIPT_PATH, str(SCRIPT))
        done = subprocess.run(["bash", "-c", command], cwd=self.folder, capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "SWEPIPE_WINDOW_STATE": str(self.state)}, timeout=30)
        assert not done.stderr, done.stderr
        return done.stdout

    def line(self) -> float:
        return json.loads(self.state.read_text())["line"]


@pytest.fixture
def repo(tmp_path):
    folder = tmp_path / "repo"
    (folder / "src").mkdir(parents=True)
    (folder / "src/app.py").write_text("".join(f"line {n}\n" for n in range(1, 31)))
    return folder


def test_1_x_edit_replaces_the_lines_it_names_and_moves_the_window_as_swe_agent_s_goto(repo):
    tools = Tools(repo, 1)
    shown = tools("open src/app.py 20")
    assert tools.line() == 17 and "[File: " in shown and "18:line 18" in shown  # top = 19 - int(10/6)
    tools("edit 3:4\nthree\n  four\nextra\nend_of_edit")
    lines = (repo / "src/app.py").read_text().split("\n")
    assert lines[1:6] == ["line 2", "three", "  four", "extra", "line 5"] and len(lines) == 32  # 31 lines, a newline
    assert tools.line() == 0  # goto(2): 2 - 10/6 -> 0
    tools("goto 30")
    assert tools.line() == 21  # kept within the file: 31 lines less a window of 10
    tools("scroll_up")
    assert tools.line() == 13  # a window less the overlap of 2
    tools("edit 32:32\nend_of_edit")  # an empty text deletes; line 32 is what follows the last newline in 1.x
    assert (repo / "src/app.py").read_text().endswith("line 29\nline 30")


def test_1_x_edit_with_search_and_replace_works_in_the_window_and_insert_at_a_line(repo):
    tools = Tools(repo, 1)
    tools('open "src/app.py"')
    out = tools("edit 'line 25' 'twenty-five'")  # below the window: not found there
    assert "not found in displayed lines" in out and "line 25\n" in (repo / "src/app.py").read_text()
    tools("edit 'line 2\nline 3' 'two and three'")
    text = (repo / "src/app.py").read_text()
    assert text.startswith("line 1\ntwo and three\nline 4\n")
    tools("edit 'line 1' 'first' False")  # argparse's bool("False") is True: every occurrence replaced
    assert "line 1" not in (repo / "src/app.py").read_text() and "first0" in (repo / "src/app.py").read_text()
    tools("insert 'new\n' 2")
    assert (repo / "src/app.py").read_text().split("\n")[:3] == ["first", "two and three", "new"]


def test_0_x_tools_keep_the_middle_line_and_end_every_line_with_a_newline(repo):
    tools = Tools(repo, 0)
    (repo / "src/app.py").write_text("a\nb\nc")  # no last newline
    tools("open src/app.py")
    assert tools.line() == 5  # a file shorter than a window: the middle line stays half a window down
    tools("edit 2:2\nB\nend_of_edit")
    assert (repo / "src/app.py").read_text() == "a\nB\nc\n"  # mapfile and printf: every line ends with a newline
    tools("create notes.txt")
    assert (repo / "notes.txt").read_text() == "\n"
    tools("edit 1:1\nhello\nend_of_edit")
    assert (repo / "notes.txt").read_text() == "hello\n"
    (repo / "long.py").write_text("x\n" * 300)
    tools("open long.py 100")
    assert tools.line() == 100 + 5 - 1  # line + window/2 - floor(window/6)
    tools("goto 299")
    assert tools.line() == 300 - 5  # kept half a window from the end


def test_an_edit_the_recorded_linter_turned_back_is_not_written(repo):
    tools = Tools(repo, 1)
    tools("open src/app.py")
    before = (repo / "src/app.py").read_text()
    out = tools("edit 1:1\ndef broken(\nend_of_edit",
                "Your proposed edit has introduced new syntax error(s). ... Your changes have NOT been applied.")
    assert (repo / "src/app.py").read_text() == before and "not applied" in out


def test_the_search_tools_and_find_file_read_and_change_nothing(repo):
    tools = Tools(repo, 1)
    before = {path: path.read_bytes() for path in repo.rglob("*") if path.is_file()}
    assert "src/app.py" in tools("find_file app.py")
    assert f"1 {repo}/src/app.py" in " ".join(tools("search_dir 'line 17'").split())
    tools("open src/app.py")
    assert ":17:line 17" in tools("search_file 'line 17'")
    assert {path: path.read_bytes() for path in repo.rglob("*") if path.is_file()} == before


def test_windowed_steps_are_bash_calls_of_the_script_the_first_one_writes_it(tmp_path):
    steps = [{"action": "find_file app.py", "thought": "Find it."},
             {"action": "open src/app.py 20\n", "thought": "Open it."},
             {"action": "edit 20:21\n    return 'b'\nend_of_edit\n", "thought": "Edit.",
              "observation": "File updated."},
             {"action": "submit", "thought": ""}]
    data = swe_agent_file(steps, steps)
    data["info"]["swe_agent_version"] = "0.7.0"
    config = json.loads(data["replay_config"])
    config["agent"]["tools"] = {"env_variables": {"WINDOW": 50, "OVERLAP": 3}}
    data["replay_config"] = json.dumps(config)
    trajectory = read_trajectory_file(write(tmp_path / f"{INSTANCE}.traj", data))

    commands = [step.call["arguments"]["command"] for step in trajectory.steps[:3]]
    assert commands[0].startswith(f"mkdir -p /tmp/.swepipe && cat > {SCRIPT_PATH} <<'SWEPIPE_WINDOWED_TOOLS'\n")
    assert commands[0].endswith(f"python3 {SCRIPT_PATH} 0 50 3 find_file app.py")
    assert commands[1] == f"python3 {SCRIPT_PATH} 0 50 3 open src/app.py 20"
    assert commands[2].startswith(f"python3 {SCRIPT_PATH} 0 50 3 edit_range 20 21 ")
    assert trajectory.steps[3].call == {"name": "submit", "arguments": {}}


@pytest.mark.parametrize("action, why", [
    ("edit\nreturn 1\nend_of_edit", "cursor edit"),
    ("edit 'a' 'b' 'c' 'd'", "4 arguments"),
    ("open src/app.py ten", "line number is no number"),
    ("goto", "lacks its argument"),
    ("insert 'x' 'y'", "insert TEXT [LINE]"),
    ("open 'src/app.py", "unclosed quote"),
])
def test_a_windowed_call_swe_agent_s_tools_read_otherwise_is_refused_naming_the_step(tmp_path, action, why):
    steps = [{"action": "ls", "thought": ""}, {"action": action, "thought": ""}]
    path = write(tmp_path / f"{INSTANCE}.traj", swe_agent_file(steps, steps))
    with pytest.raises(NotReplayable) as refused:
        read_trajectory_file(path)
    assert "step 2" in str(refused.value) and why in str(refused.value)


def test_a_file_of_history_alone_is_read_its_submission_from_the_submit_step_and_its_root_from_the_state(tmp_path):
    """SWE-agent's demonstration shape (trajectories/demonstrations/function_calling_simple.traj): ``history``
    only, function calls beside each action, the state after each output, the patch printed by submit."""
    def reply(thought, action, name, arguments):
        return {"role": "assistant", "content": thought, "thought": thought, "action": action, "agent": "main",
                "message_type": "action", "tool_calls": [{"id": "c", "type": "function",
                                                          "function": {"name": name,
                                                                       "arguments": json.dumps(arguments)}}]}

    def output(text):
        return {"role": "tool", "content": text + "\n(Open file: n/a)\n(Current directory: /acme__widgets)\nbash-$",
                "agent": "main", "message_type": "observation"}

    history = [{"role": "system", "content": "SETTING", "agent": "main", "message_type": "system_prompt"},
               {"role": "user", "content": "Fix it.", "agent": "main", "message_type": "observation"},
               reply("Open.", 'open "src/app.py"', "open", {"path": "src/app.py"}), output("[File: ...]"),
               reply("Fix.", "edit 'a' 'b'", "edit", {"search": "a", "replace": "b"}), output("Text replaced."),
               reply("Done.", "submit", "submit", {}), output("\r\n" + PATCH.replace("\n", "\r\n"))]
    trajectory = read_trajectory_file(write(tmp_path / f"{INSTANCE}.traj", {"history": history}))

    assert [step.thought for step in trajectory.steps] == ["Open.", "Fix.", "Done."]
    assert trajectory.steps[1].call["arguments"]["command"].startswith(f"python3 {SCRIPT_PATH} 1 100 2 edit_replace ")
    assert trajectory.steps[2].call == {"name": "submit", "arguments": {}}
    assert trajectory.submission == PATCH and trajectory.repo_root == "/acme__widgets"
    assert trajectory.task_text == "SETTING\n\nFix it."


@pytest.mark.parametrize("repo, root", [
    ({"github_url": "https://github.com/SWE-agent/test-repo/", "type": "github"}, "/SWE-agent__test-repo"),
    ({"github_url": "https://github.com/acme/widgets.git", "type": "github"}, "/acme__widgets"),
    ({"path": "/home/u/my repo", "type": "local"}, "/my-repo"),
    ({"repo_name": "testbed", "type": "preexisting"}, "/testbed"),
])
def test_the_repository_root_is_where_swe_agent_puts_each_kind_of_repository(tmp_path, repo, root):
    steps = [{"action": "ls", "thought": ""}]
    data = swe_agent_file(steps, steps)
    config = json.loads(data["replay_config"])
    config["env"]["repo"] = repo
    data["replay_config"] = json.dumps(config)
    assert read_trajectory_file(write(tmp_path / f"{INSTANCE}.traj", data)).repo_root == root


@fuzz
@given(action=st.one_of(hostile_text(), st.builds(lambda tool, rest: f"{tool} {rest}", st.sampled_from(
    ["open", "goto", "edit", "insert", "create", "search_dir", "search_file", "find_file", "scroll_up"]),
    hostile_text())), generation=st.sampled_from([0, 1]), observation=st.one_of(st.none(), hostile_text()))
def test_any_windowed_action_becomes_a_command_or_is_refused(action, generation, observation):
    if not action.split():
        return
    try:
        command = windowed_command(action, WindowSettings(generation), observation, True, 3)
    except Refused as refused:
        assert "step 3" in str(refused)
        return
    # the script is written whole, and the call follows it: no action's text reaches inside the heredoc
    assert command.count("\nSWEPIPE_WINDOWED_TOOLS\n") == 1
    assert f"\nSWEPIPE_WINDOWED_TOOLS\npython3 {SCRIPT_PATH} {generation} 100 2 " in command
