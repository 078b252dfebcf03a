"""An agent's trajectory on disk grows by appending what each save changed (pipeline.agent.journal), and reads back,
with its journal folded in, as the very record the agent held (pipeline.records.trajectory): after any sequence
of changes, after the session's whole file was written over it, and after a kill cut the journal anywhere."""

from __future__ import annotations

import json

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.agent.agent import Agent, prompt
from pipeline.agent.agent_run import AgentRun
from pipeline.agent.journal import TrajectoryJournal
from pipeline.agent.settings import AgentSettings
from pipeline.agent.transcript import Transcript
from pipeline.models.budget import Budget
from pipeline.models.client import Completion, ModelClient, Usage
from pipeline.models.ledger import Ledger
from pipeline.records.trajectory import fold_journal, read_trajectory
from pipeline.rundir import storage
from pipeline.rundir.layout import trajectory_journal
from pipeline.runtime.local import LocalRuntime
from pipeline.settings.config import Limits
from pipeline.settings.model_spec import ModelSpec
from tests.fuzzing import fuzz

TEXT = st.text(max_size=40)


def _reply(content: str, calls: int) -> Completion:
    tool_calls = [{"id": f"c{i}", "name": "bash", "arguments": json.dumps({"command": content})} for i in range(calls)]
    return Completion(content=content, input_tokens=7, cached_tokens=0, output_tokens=3, cost=0.25, latency=0.5,
                      retries=0, tool_calls=tool_calls)


def _act(transcript: Transcript, operation: tuple) -> None:
    kind, text, number = operation
    record = transcript.record
    if kind == "reply":
        transcript.add_reply(_reply(text, number % 3))
    elif kind == "answer" and record.steps:
        step = record.steps[-1]
        output = (text or "x") * (number % 97)  # long ones are kept once, in the step (SHARED_OUTPUT)
        step.command, step.action, step.exit_code, step.output = text, "bash", number, output
        step.edits.append({"command": "view", "path": text, "ok": number % 2 == 0})
        transcript.tell(step, f"exit code {number}\n{output}\n{text}")
    elif kind == "note":
        transcript.add_user_message(text)
    elif kind == "billed":
        transcript.add_billed(Usage(input=number, output=1, cost=number / 8))
    elif kind == "session":
        transcript.new_session()
    elif kind == "end":
        record.exit_reason, record.error, record.submission = "stopped", text or None, text


OPERATIONS = st.lists(st.tuples(st.sampled_from(["reply", "answer", "note", "billed", "session", "end"]), TEXT,
                                st.integers(0, 2**40)), max_size=25)


@settings(deadline=None)  # each example writes files: its time is the disk's, not the code's
@given(operations=OPERATIONS, saves=st.lists(st.booleans(), min_size=25, max_size=25), whole_at_end=st.booleans())
def test_the_journal_reads_back_as_the_record_after_any_changes(tmp_path_factory, operations, saves, whole_at_end):
    path = tmp_path_factory.mktemp("t") / "trajectory.json"
    journal = TrajectoryJournal(path, whole_at_end=whole_at_end)
    transcript = Transcript(AgentRun(name="a", messages=[{"role": "system", "content": "s"}]))
    for operation, save in zip(operations, saves, strict=False):
        _act(transcript, operation)
        if save:
            journal.save(transcript, 1.5)
            assert read_trajectory(path).data == transcript.record.to_dict()
    journal.end_session(transcript, 2.0)
    assert read_trajectory(path).data == transcript.record.to_dict()
    assert trajectory_journal(path).exists() is not whole_at_end
    if whole_at_end:
        return
    # A kill between the whole file and the journal's removal: folding the journal over the file changes nothing.
    storage.write_json_atomic(path, transcript.record.to_dict())
    assert read_trajectory(path).data == transcript.record.to_dict()


@settings(deadline=None)  # each example writes files: its time is the disk's, not the code's
@given(operations=OPERATIONS, cut=st.floats(0, 1))
def test_a_journal_cut_anywhere_by_a_kill_reads_as_an_earlier_save_and_resumes(tmp_path_factory, operations, cut):
    path = tmp_path_factory.mktemp("t") / "trajectory.json"
    journal = TrajectoryJournal(path, whole_at_end=False)
    transcript = Transcript(AgentRun(name="a", messages=[{"role": "system", "content": "s"}]))
    saved = []
    for operation in operations:
        _act(transcript, operation)
        journal.save(transcript, 1.0)
        saved.append(transcript.record.to_dict())
    if not saved:
        return
    raw = trajectory_journal(path).read_bytes()
    trajectory_journal(path).write_bytes(raw[:int(len(raw) * cut)])
    read = read_trajectory(path)
    assert read.problem is not None or read.data in saved  # exactly one of the states a save left
    again = TrajectoryJournal(path, whole_at_end=False)
    record = again.load()
    if record is None:
        return
    resumed = Transcript(record)
    _act(resumed, ("note", "after the kill", 0))
    again.save(resumed, 3.0)
    assert read_trajectory(path).data == resumed.record.to_dict()


LINES = st.lists(st.one_of(
    st.text(max_size=30),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                 lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                     st.sampled_from(["whole", "set", "messages", "extend", "steps", "journal", "content", "x"]),
                     inner, max_size=4), max_leaves=12).map(json.dumps)), max_size=8)


@fuzz
@given(lines=LINES)
def test_any_journal_someone_else_wrote_folds_without_an_error(lines):
    """A run directory is untrusted input: a journal of any lines folds to a dict, or says why it cannot."""
    folded, problem = fold_journal({"messages": [{"role": "user", "content": "x"}], "steps": [{}]}, lines)
    assert isinstance(folded, dict) and (problem is None or "newer" in problem)


def test_bytes_written_stay_within_twice_the_final_trajectory_at_fifty_steps(tmp_path, leaky_repo):
    """Every save appends what changed: 50 steps whose commands print about 8 KB each write the journal once and
    the whole file once at the end, not the whole file after every step (which wrote 52x its final size)."""
    commands = [f"```bash\nseq {i} {i + 1700}\n```" for i in range(49)] + ["```bash\nsubmit\n```"]
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"junior": [commands]}))
    trajectory = tmp_path / "run" / "trajectory.json"
    written: dict[str, int] = {}

    def count(op: str, relative: str, data: bytes) -> None:
        written[relative] = written.get(relative, 0) + len(data)

    storage.set_mirror(tmp_path / "run", count)
    try:
        with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
            client = ModelClient(ModelSpec(model=f"scripted/{script}", free=True), "junior", Ledger(), task="t")
            messages = prompt("agent_system.md.j2", "agent_instance.md.j2", workdir=str(runtime.workdir),
                              command_timeout=60, max_steps=50, task_text="fix it", tools=False, editor=False)
            run = Agent(AgentSettings("a", client, runtime, Budget("r"), Limits(max_steps=50), messages=messages,
                                      trajectory_path=trajectory)).run()
    finally:
        storage.clear_mirror()
    assert run.exit_reason == "submitted" and len(run.steps) == 50
    final = trajectory.stat().st_size
    assert final > 50 * 8000 and not trajectory_journal(trajectory).exists()
    assert set(written) <= {"trajectory.json", "trajectory.jsonl", "trajectory.reply"}
    assert sum(written.values()) <= 2 * final, (written, final)


def test_a_whole_record_whose_messages_or_steps_are_no_list_folds_as_holding_none():
    """Found by the 5000-example fuzz: {"whole": {"messages": 1}} stopped the fold with a TypeError."""
    from pipeline.records.trajectory import fold_journal

    state, problem = fold_journal({"steps": "x"}, ['{"whole": {"messages": 1, "name": "a"}}'])
    assert problem is None and state["messages"] == [] and state["steps"] == [] and state["name"] == "a"
    assert fold_journal({"messages": {"0": 1}}, [])[0]["messages"] == []
