"""The ReAct loop against a real workspace (a local clone) and the real litellm path."""

import json
import time

import pytest
import yaml

from pipeline.agent.actions import FormatError, parse_action
from pipeline.agent.agent import Agent, prompt
from pipeline.agent.compact import compact_history
from pipeline.agent.settings import AgentSettings
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.models.ledger import Ledger
from pipeline.records import Rollout, read_trajectory
from pipeline.runtime.local import LocalRuntime
from pipeline.settings.config import Limits
from pipeline.settings.model_spec import ModelSpec, Prices

FIX = "I will fix the sign.\n```bash\nsed -i 's/a - b/a + b/' calc.py && cat calc.py\n```"
SUBMIT = "Done.\n```bash\nsubmit\n```"


def junior(tmp_path, replies, prices: Prices | None = None):
    prices = prices or Prices(input=1, output=1)
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump({"junior": [replies]}))
    return ModelClient(ModelSpec(model=f"scripted/{path}", prices=prices), "junior", Ledger(), task="t",
                       scope=str(tmp_path), backoff_base=0.001)


def run_agent(client, runtime, task_text, budget, limits, trajectory_path=None):
    """A junior-style agent on ``task_text``: resumed from ``trajectory_path`` when one is there."""
    system = "agent_system_tools.md.j2" if limits.action_format == "tools" else "agent_system.md.j2"
    messages = prompt(system, "agent_instance.md.j2", workdir=str(runtime.workdir), task_text=task_text,
                      command_timeout=int(limits.command_timeout), max_steps=limits.max_steps,
                      editor=limits.editor)
    agent = Agent(AgentSettings("junior", client, runtime, budget, limits, messages=messages,
                                trajectory_path=trajectory_path))
    agent.resume()
    return agent.record if agent.finished else agent.run()


@pytest.fixture
def workspace(leaky_repo):
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
        yield runtime


def test_parse_action_wants_exactly_one_bash_block():
    assert parse_action(FIX).command == "sed -i 's/a - b/a + b/' calc.py && cat calc.py"
    assert parse_action(SUBMIT).is_submit
    with pytest.raises(FormatError, match="no ```bash"):
        parse_action("I think the bug is in calc.py")
    with pytest.raises(FormatError, match="2 ```bash"):
        parse_action(FIX + "\n" + FIX)


def test_submitting_rollout_leaves_its_fix(tmp_path, workspace):
    trajectory = tmp_path / "t.json"
    run = run_agent(junior(tmp_path, [FIX, SUBMIT]), workspace, "fix add", Budget("r"), Limits(),
                    trajectory_path=trajectory)
    assert run.exit_reason == "submitted" and len(run.steps) == 2
    assert run.steps[0].exit_code == 0 and "a + b" in run.steps[0].output
    assert run.steps[1].command == "submit" and run.steps[1].exit_code is None  # intercepted, never run
    assert "+    return a + b" in workspace.diff()
    saved = json.loads(trajectory.read_text())
    assert saved["exit_reason"] == "submitted" and saved["messages"][-1]["content"] == SUBMIT


def test_step_limit_still_leaves_a_candidate(tmp_path, workspace):
    run = run_agent(junior(tmp_path, [FIX, "```bash\nls\n```", SUBMIT]), workspace, "fix", Budget("r"),
                    Limits(max_steps=2))
    assert run.exit_reason == "step_limit" and len(run.steps) == 2
    assert "a + b" in workspace.diff()


def test_replies_without_a_bash_block_are_corrected_then_end_the_rollout(tmp_path, workspace):
    run = run_agent(junior(tmp_path, ["no block", "still none", "```bash\nls\n```\n```bash\npwd\n```"]), workspace,
                    "fix", Budget("r"), Limits(max_format_errors=3))
    assert run.exit_reason == "format_errors"
    assert [s.format_error is not None for s in run.steps] == [True, True, True]
    assert run.messages[2]["content"] == "no block" and "Format error" in run.messages[3]["content"]


def test_cost_limit_ends_the_rollout(tmp_path, workspace):
    costly = {"content": FIX, "usage": {"prompt_tokens": 1_000_000, "completion_tokens": 0}}
    run = run_agent(junior(tmp_path, [costly, costly, SUBMIT]), workspace, "fix", Budget("r", limit=1.5),
                    Limits())
    assert run.exit_reason == "cost_limit" and len(run.steps) == 2 and run.cost == pytest.approx(2.0)


def test_observation_shows_exit_code_and_cut_output(tmp_path, workspace):
    noisy = "```bash\nseq 1 200000; exit 4\n```"
    run = run_agent(junior(tmp_path, [noisy, SUBMIT]), workspace, "fix", Budget("r"),
                    Limits(observation_limit=2000))
    observation = run.messages[3]["content"]
    assert "exit code: 4" in observation and "bytes of output were cut" in observation
    assert len(observation) < 3000


def test_command_timeout_is_reported_and_the_loop_goes_on(tmp_path, workspace):
    run = run_agent(junior(tmp_path, ["```bash\nsleep 20\n```", SUBMIT]), workspace, "fix", Budget("r"),
                    Limits(command_timeout=1))
    assert run.exit_reason == "submitted" and run.steps[0].timed_out
    assert "timed out after 1 s" in run.messages[3]["content"]


def test_an_interrupted_rollout_resumes_without_paying_twice(tmp_path, leaky_repo):
    trajectory = tmp_path / "t.json"
    replies = [FIX, "```bash\ngrep -c return calc.py\n```", SUBMIT]
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as first:
        run_agent(junior(tmp_path, replies), first, "fix", Budget("r"), Limits(), trajectory_path=trajectory)
    saved = json.loads(trajectory.read_text())
    # As if the process died right after the model's second reply was paid for and saved.
    saved["exit_reason"], saved["steps"] = "", saved["steps"][:2]
    saved["steps"][1].update(exit_code=None, output=None, command=None)
    saved["messages"] = saved["messages"][:5]
    saved["cost"] = sum(step["cost"] for step in saved["steps"])
    trajectory.write_text(json.dumps(saved))
    assert saved["messages"][-1]["role"] == "assistant"

    again = junior(tmp_path, replies)
    budget = Budget("r")
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as second:
        run = run_agent(again, second, "fix", budget, Limits(), trajectory_path=trajectory)
        assert run.resumed and run.exit_reason == "submitted"
        assert "+    return a + b" in second.diff()  # the first command was replayed
    assert [s.command for s in run.steps] == ["sed -i 's/a - b/a + b/' calc.py && cat calc.py",
                                              "grep -c return calc.py", "submit"]
    assert run.steps[1].exit_code == 0  # the saved reply's command ran after the resume
    assert len(again.ledger.rows) == 1  # only the submit reply was asked for again
    # The budget is charged what this session paid; what the first paid is seeded by the resumer (from the
    # ledger for the task and run, from the trajectory for the agent's own), never charged again here.
    assert budget.spent == pytest.approx(run.cost - saved["cost"]) == pytest.approx(again.ledger.rows[0].cost)


class Killed(BaseException):
    """The process dying (a SIGKILL) at a chosen point, as far as the code after that point can tell."""


class DyingLedger(Ledger):
    """A ledger whose process dies at its ``at``-th row: just after the row is on disk, or just before."""

    def __init__(self, path, at, after_writing):
        super().__init__(path)
        self.at, self.after_writing, self.count = at, after_writing, 0

    def append(self, row):
        self.count += 1
        if self.count == self.at and not self.after_writing:
            raise Killed
        super().append(row)
        if self.count == self.at:
            raise Killed


@pytest.mark.parametrize("after_writing", [True, False], ids=["after-its-ledger-row", "before-its-ledger-row"])
def test_a_reply_paid_just_before_a_kill_is_not_paid_again(tmp_path, leaky_repo, after_writing):
    """The kill comes after the second reply was paid for, before the trajectory has it: the resumed agent
    gets that reply from its journal, and each conversation position has exactly one ledger row."""
    replies, trajectory, ledger = [FIX, "```bash\ngrep -c return calc.py\n```", SUBMIT], tmp_path / "t.json", \
        tmp_path / "ledger.jsonl"
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"junior": [replies]}))

    def client(rows):
        return ModelClient(ModelSpec(model=f"scripted/{script}", prices=Prices(input=1, output=1)), "junior", rows,
                           task="t", scope=str(tmp_path))

    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as first, pytest.raises(Killed):
        run_agent(client(DyingLedger(ledger, at=2, after_writing=after_writing)), first, "fix", Budget("r"),
                  Limits(), trajectory_path=trajectory)
    killed_at = time.time()
    assert len(read_trajectory(trajectory).data["steps"]) == 1  # the second reply is in no trajectory
    seeded = sum(row.cost for row in Ledger.read(ledger))  # what a resumed task's budget starts from
    budget = Budget("r")
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as second:
        run = run_agent(client(Ledger(ledger)), second, "fix", budget, Limits(), trajectory_path=trajectory)
    assert run.exit_reason == "submitted" and [s.reply for s in run.steps] == replies
    rows = Ledger.read(ledger)
    assert len(rows) == 3 and len({row.call for row in rows}) == 3  # one row per position, none paid twice
    assert rows[1].time < killed_at  # the second position's row is the first session's call, not a new one
    assert budget.spent + seeded == pytest.approx(sum(row.cost for row in rows)) == pytest.approx(run.cost)
    assert not list(tmp_path.glob("*.reply"))  # the journal goes once the trajectory holds its reply


def test_compact_history_cuts_only_older_long_observations_and_leaves_the_record_whole():
    long = "a" * 3000 + "MIDDLE" + "z" * 3000
    messages = [{"role": "system", "content": long}, {"role": "user", "content": long},
                {"role": "assistant", "content": "1"}, {"role": "user", "content": long},
                {"role": "assistant", "content": "2"}, {"role": "user", "content": "short"},
                {"role": "assistant", "content": "3"}, {"role": "tool", "content": long, "tool_call_id": "c"}]
    sent = compact_history(messages, keep_whole=2, keep_chars=100)
    assert sent[:3] == messages[:3] and sent[5:] == messages[5:]  # the task, and the last two observations
    assert sent[3]["content"].startswith("a" * 100) and sent[3]["content"].endswith("z" * 100)
    assert "MIDDLE" not in sent[3]["content"] and "5806 characters of this older observation left out" in \
        sent[3]["content"]
    assert messages[3]["content"] == long  # the record is not changed
    assert compact_history(messages, keep_whole=0, keep_chars=100)[7]["content"] != long


def test_a_compacted_rollout_sends_fewer_tokens_and_its_trajectory_keeps_every_output(tmp_path, leaky_repo):
    noisy = "```bash\npython3 -c \"print('x' * 6000)\"\n```"
    replies = [noisy, noisy, noisy, SUBMIT]
    inputs = {}
    for compact in (None, 1):
        with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
            (tmp_path / str(compact)).mkdir()
            client = junior(tmp_path / str(compact), replies)
            trajectory = tmp_path / f"{compact}.json"
            limits = Limits(compact_after=compact, compact_chars=200, observation_limit=20000)
            run = run_agent(client, runtime, "fix", Budget("r"), limits, trajectory_path=trajectory)
        assert run.exit_reason == "submitted"
        inputs[compact] = [row.input_tokens for row in client.ledger.rows]
        saved = json.loads(trajectory.read_text())
        assert sum("x" * 6000 in m["content"] for m in saved["messages"]) == 3  # whole on disk either way
    # The first two calls see at most one observation: the same. Then each older one is cut to 400 characters.
    assert inputs[1][:2] == inputs[None][:2]
    assert inputs[None][2] - inputs[1][2] > 1000 and inputs[None][3] - inputs[1][3] > 2 * 1000


def tool(name, **arguments):
    return {"content": "", "tool_calls": [{"name": name, "arguments": arguments}]}


def test_the_tool_call_format_runs_bash_and_submits(tmp_path, workspace):
    replies = [tool("bash", command="sed -i 's/a - b/a + b/' calc.py && cat calc.py"), tool("submit")]
    run = run_agent(junior(tmp_path, replies), workspace, "fix add", Budget("r"),
                    Limits(action_format="tools"))
    assert run.exit_reason == "submitted" and run.steps[0].exit_code == 0
    assert "+    return a + b" in workspace.diff()
    assert "through the `bash` and `str_replace_editor` tools" in run.messages[0]["content"]  # the tool format's
    call = run.messages[2]["tool_calls"][0]
    assert call["function"]["name"] == "bash"
    observation = run.messages[3]
    assert observation["role"] == "tool" and observation["tool_call_id"] == call["id"]
    assert "exit code: 0" in observation["content"]


def test_the_tool_call_format_wants_exactly_one_call(tmp_path, workspace):
    two = {"content": "", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}},
                                         {"name": "bash", "arguments": {"command": "pwd"}}]}
    replies = [two, {"content": "I think it is fixed."}, tool("bash", command=""), tool("submit")]
    run = run_agent(junior(tmp_path, replies), workspace, "fix", Budget("r"),
                    Limits(action_format="tools", max_format_errors=5))
    assert run.exit_reason == "submitted"
    assert [s.format_error is not None for s in run.steps] == [True, True, True, False]
    answers = [m for m in run.messages[3:5]]
    assert [m["role"] for m in answers] == ["tool", "tool"]  # every call of the bad reply is answered
    assert "exactly one" in answers[0]["content"]
    assert run.messages[6]["role"] == "user" and "Format error" in run.messages[6]["content"]


def test_the_senior_hands_in_its_brief_through_the_submit_tool(tmp_path, workspace, leaky_repo):
    """Tool format, with the imperfect replies a real senior gives: prose instead of JSON, then a brief with
    a ./-prefixed path inside the submit call's text."""
    from pipeline.juniors.pool import build_pool
    from pipeline.senior.stage import run_senior
    from pipeline.settings.config import RunConfig, SeniorConfig
    from pipeline.tasks import Task

    brief = '```json\n{"analysis": "add() subtracts.", "spans": [{"file": "./calc.py", "start": 1, "end": 2, ' \
            '"reason": "the bug"}]}\n```'
    replies = [tool("bash", command="grep -n return calc.py"),
               tool("submit", text="The bug is in calc.py, line 2."),
               {"content": "Here it is.", "tool_calls": [{"name": "submit", "arguments": {"text": brief}}]}]
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump({"senior": replies}))
    client = ModelClient(ModelSpec(model=f"scripted/{path}", prices=Prices(input=1, output=1)), "senior", Ledger(),
                         task="t", scope=str(tmp_path))
    candidate = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
    pool = build_pool("t", [Rollout(index=0, patch="diff --git a/calc.py b/calc.py\n" + candidate)])
    task = Task(instance_id="t", repo="demo/calc", base_commit=leaky_repo["base"], problem_statement="add() subtracts.",
                repo_language="python", fail_to_pass=[], pass_to_pass=[], selected_test_files_to_run=[],
                before_repo_set_cmd="", dockerhub_tag="unused")
    config = RunConfig(limits=Limits(action_format="tools"), senior=SeniorConfig(max_steps=5))
    record = run_senior(task, pool, client, Budget("t"), workspace, config, tmp_path / "senior",
                        lambda text: len(text) // 4)
    assert record.source == "senior" and record.senior_exit == "submitted", record.senior_error
    assert [s.file for s in record.spans] == ["calc.py"] and "return a - b" in record.context
    saved = json.loads((tmp_path / "senior" / "trajectory.json").read_text())
    assert "ANALYSIS:" in saved["steps"][1]["format_error"]
    assert "through function calls" in saved["messages"][0]["content"]


EXPLORE = "Let me look.\n```bash\ngrep -n return calc.py\n```"


def test_the_agent_is_told_how_many_steps_remain_and_the_notes_survive_a_resume(tmp_path, leaky_repo):
    """Notes at 3 replies left and at the last one, saved with the messages: a resumed agent is not told twice."""
    trajectory = tmp_path / "t.json"
    replies = [EXPLORE, EXPLORE, {"error": "bad_request"}, EXPLORE, EXPLORE, FIX, SUBMIT]
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as first:
        run = run_agent(junior(tmp_path, replies), first, "fix", Budget("r"), Limits(max_steps=5),
                        trajectory_path=trajectory)
        assert run.exit_reason == "model_error" and len(run.steps) == 2  # a refused request is not retried
    told = [m["content"] for m in run.messages if m["role"] == "user"]
    assert "you have 3 replies left (5 in all)" in told[-1] and "Step limit" not in "".join(told[:-1])
    saved = json.loads(trajectory.read_text())
    saved["exit_reason"] = ""  # as if the process had died there
    trajectory.write_text(json.dumps(saved))

    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as second:
        run = run_agent(junior(tmp_path, replies), second, "fix", Budget("r"), Limits(max_steps=5),
                        trajectory_path=trajectory)
    assert run.resumed and run.exit_reason == "step_limit" and len(run.steps) == 5
    users = [m["content"] for m in run.messages if m["role"] == "user"]
    assert sum("3 replies left" in text for text in users) == 1
    assert sum("2 replies left" in text for text in users) == 0  # only at 3 and at the last
    assert "your next reply is your last one (5 in all)" in users[-2] and "submit block" in users[-2]
    assert "Step limit" not in users[-1] + users[-3]  # the last reply's observation; the one before the last note
    saved = json.loads(trajectory.read_text())
    assert saved["messages"] == run.messages  # the notes are part of the saved trajectory


def test_the_tool_format_gets_the_notes_after_the_tool_results(tmp_path, workspace):
    replies = [tool("bash", command="ls"), tool("bash", command="ls"), tool("submit")]
    run = run_agent(junior(tmp_path, replies), workspace, "fix", Budget("r"), Limits(action_format="tools",
                                                                                     max_steps=3))
    assert run.exit_reason == "submitted"
    roles = [m["role"] for m in run.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "user", "assistant"]
    assert "last one" in run.messages[6]["content"] and "call submit" in run.messages[6]["content"]


def senior_setup(tmp_path, leaky_repo, replies, patches=None, **config):
    from pipeline.juniors.pool import build_pool
    from pipeline.settings.config import RunConfig, SeniorConfig
    from pipeline.tasks import Task

    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump({"senior": replies}))
    client = ModelClient(ModelSpec(model=f"scripted/{path}", prices=Prices(input=1, output=1)), "senior", Ledger(),
                         task="t", scope=str(tmp_path))
    candidate = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
    if patches is None:
        patches = ["diff --git a/calc.py b/calc.py\n" + candidate]
    pool = build_pool("t", [Rollout(index=i, patch=p, exit_reason="submitted") for i, p in enumerate(patches)])
    task = Task(instance_id="t", repo="demo/calc", base_commit=leaky_repo["base"], problem_statement="add() subtracts.",
                repo_language="python", fail_to_pass=[], pass_to_pass=[], selected_test_files_to_run=[],
                before_repo_set_cmd="", dockerhub_tag="unused")
    return client, pool, task, RunConfig(senior=SeniorConfig(**{"max_steps": 4, **config}))


def run_senior_with(tmp_path, workspace, leaky_repo, replies, patches=None, **config):
    from pipeline.senior.stage import run_senior

    client, pool, task, run_config = senior_setup(tmp_path, leaky_repo, replies, patches, **config)
    record = run_senior(task, pool, client, Budget("t"), workspace, run_config, tmp_path / "senior",
                        lambda text: len(text) // 4)
    return record, json.loads((tmp_path / "senior" / "trajectory.json").read_text())


def test_a_senior_that_explores_to_its_limit_is_asked_for_its_brief_on_the_last_step(tmp_path, workspace, leaky_repo):
    root = str(workspace.workdir)
    brief = (f"I have run out of commands; here is what I know.\n\nANALYSIS:\nadd() returns \"a - b\"; it must be "
             f"a + b.\n\nSPANS:\n- `{root}/calc.py:1-2` add, the line to fix\n\nCANDIDATE: 1\n```bash\nsubmit\n```")
    record, saved = run_senior_with(tmp_path, workspace, leaky_repo, [EXPLORE, EXPLORE, EXPLORE, brief])
    assert record.source == "senior" and record.senior_exit == "submitted", record.senior_error
    assert [s.to_dict() for s in record.spans] == [{"file": "calc.py", "start": 1, "end": 2,
                                                    "reason": "add, the line to fix"}]
    assert record.candidate == 1 and record.problems == []
    assert "### calc.py:1-2" in record.context
    asked = saved["messages"][-2]["content"]  # what the senior was told before its last reply
    assert "your next reply is your last one" in asked and "Write your brief now" in asked
    assert "3 replies left" not in asked and any("3 replies left" in m["content"] for m in saved["messages"][:-2]
                                                  if m["role"] == "user")


def test_a_senior_out_of_steps_still_gives_the_brief_of_its_last_reply(tmp_path, workspace, leaky_repo):
    """The last reply holds a brief but runs a command instead of submitting: the brief is read from it."""
    last = ("ANALYSIS:\nadd() subtracts.\nSPANS:\n./calc.py:1-2 add\nCANDIDATE: none\n"
            "```bash\ncat calc.py\n```")
    record, _ = run_senior_with(tmp_path, workspace, leaky_repo, [EXPLORE, last], max_steps=2)
    assert record.senior_exit == "step_limit" and record.source == "senior"
    assert [s.file for s in record.spans] == ["calc.py"] and record.candidate is None
    assert "ended with step_limit without submitting" in record.problems[0]


def test_a_senior_with_no_usable_span_is_asked_again_then_its_analysis_is_kept(tmp_path, workspace, leaky_repo):
    no_span = "ANALYSIS:\nadd() subtracts; flip the sign.\nSPANS:\n/etc/calc.py:1-2 add\n```bash\nsubmit\n```"
    record, saved = run_senior_with(tmp_path, workspace, leaky_repo, [no_span, no_span], max_steps=2)
    assert "no usable span" in saved["steps"][0]["format_error"] and "outside the repository" in \
        saved["steps"][0]["format_error"]
    assert record.senior_exit == "step_limit" and record.source == "senior"
    assert record.analysis == "add() subtracts; flip the sign." and record.spans == []
    assert any("outside the repository" in p for p in record.problems)
    assert "return a - b" in record.context  # the candidates' hunks, the safety net behind the brief


def test_a_senior_alone_is_told_to_find_the_code_itself(tmp_path, workspace, leaky_repo):
    """k = 0 (an ablation): no candidate, so no candidate text over an empty list."""
    brief = "ANALYSIS:\nadd() subtracts.\nSPANS:\ncalc.py:1-2 add\nCANDIDATE: none\n```bash\nsubmit\n```"
    record, saved = run_senior_with(tmp_path, workspace, leaky_repo, [brief], patches=[])
    system, instance = (" ".join(m["content"].split()) for m in saved["messages"][:2])
    assert "you explore the repository at" in system and "find the code the fix lives in yourself" in system
    assert "No junior ran on this task" in instance and "Candidate 1" not in instance
    assert "candidate patches are below" not in system and "<related_code>" not in instance
    assert record.source == "senior" and record.candidate is None and "### calc.py:1-2" in record.context


def test_the_senior_is_told_what_the_principal_sees_and_its_budget(tmp_path, workspace, leaky_repo):
    other = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n" \
            "-    return a - b\n+    return b + a\n"
    brief = "ANALYSIS:\nx\nSPANS:\ncalc.py:1-2 add\nCANDIDATE: 7\n```bash\nsubmit\n```"
    record, saved = run_senior_with(tmp_path, workspace, leaky_repo, [brief], patches=[other],
                                    context_tokens=3000)
    system, instance = (" ".join(m["content"].split()) for m in saved["messages"][:2])
    assert "the code you select and the distinct junior candidates (most-voted first, with their vote counts)" \
        in system
    assert "cut to 3000 tokens" in system and "import block" in system and "CANDIDATE:" in system
    assert "## Candidate 1: proposed by 1 rollout(s) (submitted); touches calc.py" in instance
    assert record.candidate is None and "numbered 1 to 1" in record.problems[0]


def test_a_senior_whose_principal_is_shown_no_candidates_is_told_so(tmp_path, workspace, leaky_repo):
    """principal.show_candidates 0: the brief is all the principal gets, and the senior must not count on it
    seeing a junior patch."""
    from pipeline.senior.stage import run_senior

    brief = "ANALYSIS:\nx\nSPANS:\ncalc.py:1-2 add\nCANDIDATE: 1\n```bash\nsubmit\n```"
    client, pool, task, config = senior_setup(tmp_path, leaky_repo, [brief])
    config = config.model_copy(update={"principal": config.principal.model_copy(update={"show_candidates": 0})})
    run_senior(task, pool, client, Budget("t"), workspace, config, tmp_path / "senior", lambda text: len(text) // 4)
    saved = json.loads((tmp_path / "senior" / "trajectory.json").read_text())
    system = " ".join(saved["messages"][0]["content"].split())
    assert "It sees the issue, your analysis, the code you select, nothing else" in system
    assert "junior candidates" not in system.split("nothing else")[0]


# -- the file editor (pipeline/edits/editor.py) as an agent's action, in both formats ------------------------

EDIT_FIX = ("The sign is wrong; replacing it.\n```edit\ncalc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n"
            "    return a + b\n>>>>>>> REPLACE\n```")


def test_a_text_format_agent_fixes_the_bug_with_edit_and_view_blocks_only(tmp_path, workspace):
    """What a real model writes around the block (prose, an /app-style absolute path, a stale SEARCH first) is
    answered the way the editor answers it; the steps record each edit."""
    stale = EDIT_FIX.replace("    return a - b", "    return a-b")
    absolute = EDIT_FIX.replace("calc.py\n<<<", f"{workspace.workdir}/calc.py\n<<<")
    replies = ["Let me look first.\n```view\ncalc.py\n```", stale, absolute, "```view\ncalc.py 2-2\n```", SUBMIT]
    run = run_agent(junior(tmp_path, replies), workspace, "fix add", Budget("r"), Limits())
    assert run.exit_reason == "submitted", [s.output for s in run.steps]
    assert [s.action for s in run.steps] == ["view", "edit", "edit", "view", "submit"]
    assert "1\tdef add(a, b):" in run.steps[0].output
    assert run.steps[1].edits == [{"command": "str_replace", "path": "calc.py", "ok": False,
                                   "error": run.steps[1].output}]
    assert "does not occur" in run.steps[1].output and "2 |     return a - b" in run.steps[1].output
    assert run.steps[2].edits[0]["ok"] and run.steps[2].changed_files == ["calc.py"]  # the path as it was given
    assert run.steps[3].output.endswith("2\t    return a + b")
    assert "+    return a + b" in workspace.diff()
    assert "```edit" in run.messages[0]["content"]  # the prompt says how (juniors get it with the editor on)


def test_an_edit_whose_text_holds_a_fence_goes_in_a_four_backtick_block(tmp_path, workspace):
    """A Markdown file with a ``` example cuts a three-backtick block short: a format error that says what to do;
    the same edit in ````edit lands whole."""
    docs = ("Documenting.\n{fence}edit\nUSAGE.md\n<<<<<<< SEARCH\n=======\n# Usage\n\n```python\n"
            "add(1, 2)\n```\n>>>>>>> REPLACE\n{fence}")
    replies = [docs.format(fence="```"), docs.format(fence="````"), SUBMIT]
    run = run_agent(junior(tmp_path, replies), workspace, "document add", Budget("r"), Limits())
    assert "````edit block, four backticks" in run.steps[0].format_error
    assert run.steps[1].edits[0]["ok"], run.steps[1].output
    assert workspace.read_file("USAGE.md") == b"# Usage\n\n```python\nadd(1, 2)\n```\n"


def test_a_tool_format_agent_fixes_the_bug_with_str_replace_editor_and_undoes_a_slip(tmp_path, workspace):
    replies = [tool("str_replace_editor", command="view", path="calc.py", view_range=[1, 2]),
               tool("str_replace_editor", command="str_replace", path="calc.py", old_str="a - b", new_str="a * b"),
               tool("str_replace_editor", command="undo_edit", path="calc.py"),
               tool("str_replace_editor", command="str_replace", path="calc.py", old_str="a - b", new_str="a + b"),
               tool("str_replace_editor", command="delete", path="calc.py"),  # no such command: a format error
               tool("submit")]
    run = run_agent(junior(tmp_path, replies), workspace, "fix add", Budget("r"), Limits(action_format="tools"))
    assert run.exit_reason == "submitted", [s.output for s in run.steps]
    assert [e["command"] for s in run.steps for e in s.edits] == ["view", "str_replace", "undo_edit", "str_replace"]
    assert "command must be one of" in run.steps[4].format_error
    assert "+    return a + b" in workspace.diff() and "a * b" not in workspace.diff()


def test_the_senior_s_editor_only_views(tmp_path, workspace):
    from pipeline.agent.actions import tools_for

    replies = [EDIT_FIX, "```view\ncalc.py\n```", SUBMIT]
    agent = Agent(AgentSettings("senior", junior(tmp_path, replies), workspace, Budget("r"), Limits(),
                                editor=("view",),
                                messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]))
    run = agent.run()
    assert run.steps[0].format_error and "```edit" not in run.steps[0].format_error  # not an action it has
    assert "1\tdef add(a, b):" in run.steps[1].output and workspace.diff() == ""
    schema = next(t for t in tools_for(("bash",), ("view",)) if t["function"]["name"] == "str_replace_editor")
    assert schema["function"]["parameters"]["properties"]["command"]["enum"] == ["view"]
    assert "old_str" not in schema["function"]["parameters"]["properties"]


def test_with_the_editor_off_an_edit_block_is_no_action(tmp_path, workspace):
    run = run_agent(junior(tmp_path, [EDIT_FIX, FIX, SUBMIT]), workspace, "fix", Budget("r"), Limits(editor=False))
    assert run.steps[0].format_error and "no ```bash blocks" in run.steps[0].format_error
    assert run.exit_reason == "submitted" and "+    return a + b" in workspace.diff()


def test_a_resumed_agent_replays_its_edits_and_pays_for_no_reply_twice(tmp_path, leaky_repo):
    create = ("New helper.\n```edit\nhelpers/sign.py\n<<<<<<< SEARCH\n=======\nSIGN = 1\n>>>>>>> REPLACE\n```")
    replies = [create, EDIT_FIX, "```bash\nls\n```", SUBMIT]
    trajectory = tmp_path / "t.json"
    client = junior(tmp_path, replies)
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as first:
        run = run_agent(client, first, "fix", Budget("r"), Limits(max_steps=2), trajectory_path=trajectory)
        assert run.exit_reason == "step_limit" and all(s.edits[0]["ok"] for s in run.steps)
    paid = len(client.ledger.rows)
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as second:  # a fresh workspace, as after a crash
        saved = json.loads(trajectory.read_text())
        saved["exit_reason"] = ""  # cut off mid-rollout
        trajectory.write_text(json.dumps(saved))
        agent = Agent(AgentSettings("junior", client, second, Budget("r"), Limits(max_steps=4),
                                    trajectory_path=trajectory, messages=saved["messages"]))
        assert agent.resume()
        diff = second.diff()
        assert "+    return a + b" in diff and "+SIGN = 1" in diff  # the edits replayed
        run = agent.run()
    assert run.exit_reason == "submitted" and len(client.ledger.rows) == paid + 2  # ls and submit, nothing twice


def test_docker_failing_under_an_edit_is_infrastructure_never_the_agent_s_outcome(tmp_path, workspace, monkeypatch):
    """The editor reads through the runtime: Docker's API failing there (dockerd restarting) is retried by the task,
    as under a command, not recorded as the rollout's runtime_error."""
    import requests

    from pipeline.errors import RuntimeUnavailable

    def engine_gone(path):
        raise requests.exceptions.ConnectionError("('Connection aborted.', ConnectionResetError(104))")

    monkeypatch.setattr(workspace, "read_file", engine_gone)
    with pytest.raises(RuntimeUnavailable, match="the workspace's runtime failed: ConnectionError"):
        run_agent(junior(tmp_path, [EDIT_FIX, SUBMIT]), workspace, "fix add", Budget("r"), Limits())
