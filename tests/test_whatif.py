"""swepipe whatif on hand-built runs whose answers are known: pass@k, vote@k, the recorded principal, skip rules,
schedules, compacted histories and prompt caching, from the files a run leaves (no model, no container)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.analysis.repricing import HistoryVariant, reprice_task
from pipeline.analysis.whatif import Pricer, pareto_front, what_if
from pipeline.analysis.whatif_data import read_run
from pipeline.rundir.layout import RunLayout

PRICES = {"input": 1.0, "output": 2.0}  # dollars per million tokens
TASK = "instance_demo__two-files-0001"


def _row(agent: str, stage: str, cost: float, *, input_tokens: int = 0, output_tokens: int = 0, at: float = 0.0):
    return {"stage": stage, "role": stage, "model": f"scripted/{stage}.yaml", "input_tokens": input_tokens,
            "cached_tokens": 0, "cache_write_tokens": 0, "output_tokens": output_tokens, "cost": cost,
            "latency": 1.0, "retries": 0, "error": None, "task": TASK, "agent": agent, "time": at, "call": ""}


def make_run(root: Path, *, votes: list[str | None], verdicts: dict[str, bool | None], principal_resolved: bool,
             exits: list[str] | None = None, rollout_cost=lambda i: i + 1.0, after_cost: float = 10.0,
             conversations: dict[int, list[dict]] | None = None, rows: list[dict] | None = None,
             config: dict | None = None, instance_id: str = TASK) -> Path:
    """A run directory as swepipe run leaves it: rollout i votes for candidate ``votes[i]`` (None: no source edit),
    ``verdicts`` are the hidden tests' on each candidate (``swepipe eval --candidates``), rollout i costs
    ``rollout_cost(i)`` and the senior and principal ``after_cost`` together (unless ``rows`` gives the ledger)."""
    exits = exits or ["submitted"] * len(votes)
    layout = RunLayout(root)
    paths = layout.task(instance_id)
    paths.junior.mkdir(parents=True, exist_ok=True)
    conversations = conversations or {}
    for index in range(len(votes)):
        trajectory = {"name": f"rollout-{index:02d}", "messages": conversations.get(index, [])}
        (paths.junior / f"rollout-{index:02d}.json").write_text(json.dumps(
            {"instance_id": instance_id, "index": index, "exit_reason": exits[index], "patch": "",
             "cost": rollout_cost(index), "trajectory": trajectory}))
    candidates = []
    for key in dict.fromkeys(k for k in votes if k):
        rollouts = [i for i, k in enumerate(votes) if k == key]
        candidates.append({"key": key, "patch": f"diff for {key}\n", "test_patch": "", "votes": len(rollouts),
                           "rollouts": rollouts, "exit_reasons": [exits[i] for i in rollouts],
                           "files": [f"{key}.py"], "hunks": [], "functions": []})
    candidates.sort(key=lambda c: (-c["votes"], c["rollouts"][0]))
    (paths.junior / "pool.json").write_text(json.dumps({"instance_id": instance_id, "candidates": candidates,
                                                         "rollouts": len(votes), "empty": [], "unparsable": []}))
    for key, verdict in verdicts.items():
        result = paths.candidate_result(key)
        result.parent.mkdir(parents=True, exist_ok=True)
        result.write_text(json.dumps({"instance_id": instance_id, "key": key, "resolved": bool(verdict),
                                      "category": "infra_error" if verdict is None else
                                      ("resolved" if verdict else "tests_failed")}))
    if rows is None:
        rows = [_row(f"rollout-{i:02d}", "junior", rollout_cost(i)) for i in range(len(votes))]
        rows += [_row("senior", "senior", after_cost / 2), _row("", "principal", after_cost / 2)]
    paths.ledger.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with layout.predictions.open("a") as out:
        out.write(json.dumps({"instance_id": instance_id, "strategy": "pipeline", "source": "principal",
                              "model_patch": "x", "resolved": principal_resolved}) + "\n")
    base = {"models": {role: {"model": f"scripted/{role}.yaml", "prices": PRICES}
                       for role in ("junior", "senior", "principal")}}
    layout.config.write_text(yaml.safe_dump(config or base))
    return root


def policies(root: Path, **prices) -> dict[tuple[str, float | None], dict]:
    run = read_run(root)
    result = what_if(run, Pricer.for_run(run.config, prices))
    return {(p.name, p.k): p for p in result.policies}, result


def test_two_half_fixes_neither_resolves_but_the_principal_does(tmp_path):
    """The issue's example: two candidates each fix half of a two-file task."""
    run = make_run(tmp_path / "run", votes=["left", "right"], verdicts={"left": False, "right": False},
                   principal_resolved=True)
    found, result = policies(run)
    for k in (1, 2):
        assert found[("pass@k", k)].resolve_rate == 0.0
        assert found[("vote@k", k)].resolve_rate == 0.0
    principal = found[("principal", 2.0)]
    assert principal.resolve_rate == 1.0 and principal.dollars_per_task == pytest.approx(1 + 2 + 10)
    assert found[("vote@k", 2)].dollars_per_task == pytest.approx(3.0)
    assert found[("pass@k", 1)].dollars_per_task == pytest.approx(1.5)  # one rollout, the mean of 1 and 2
    assert result.tasks == 1 and result.notes == ["no agent conversation is on record: history compaction and caching "
                                                  "cannot be replayed"]


def test_pass_and_vote_at_k_average_over_every_subset_of_rollouts(tmp_path):
    """Four rollouts, four distinct candidates, only rollout 2's resolves: pass@k = 1 - C(3,k)/C(4,k); vote@k
    submits the earliest rollout's candidate on a tie, so it resolves only on the subsets where 2 is earliest."""
    run = make_run(tmp_path / "run", votes=["a", "b", "c", "d"],
                   verdicts={"a": False, "b": False, "c": True, "d": False}, principal_resolved=False)
    found, _ = policies(run)
    assert [found[("pass@k", k)].resolve_rate for k in (1, 2, 3, 4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert [found[("vote@k", k)].resolve_rate for k in (1, 2, 3, 4)] == pytest.approx([0.25, 1 / 6, 0.0, 0.0])
    mean_rollout = (1 + 2 + 3 + 4) / 4
    for k in (1, 2, 3, 4):
        assert found[("vote@k", k)].dollars_per_task == pytest.approx(k * mean_rollout)
        assert found[("pass@k", k)].dollars_per_task == pytest.approx(k * mean_rollout)
        assert found[("pass@k", k)].oracle and not found[("vote@k", k)].oracle


def test_skip_rule_and_schedule_pay_only_for_what_they_would_have_run(tmp_path):
    """Rollouts 0-2 agree on a resolving candidate, rollout 3 proposes another; the principal failed."""
    run = make_run(tmp_path / "run", votes=["good", "good", "good", "bad"], verdicts={"good": True, "bad": False},
                   principal_resolved=False)
    found, _ = policies(run)
    juniors = 1 + 2 + 3 + 4
    skip = found[("skip when top >= 0.6 of >= 3 submitted", 4.0)]
    assert skip.resolve_rate == 1.0 and skip.dollars_per_task == pytest.approx(juniors) and skip.exact
    strict = found[("skip when top >= 1 of >= 3 submitted", 4.0)]  # 3 of 4 is not all: the principal as recorded
    assert strict.resolve_rate == 0.0 and strict.dollars_per_task == pytest.approx(juniors + 10)
    assert found[("vote@k", 4)].resolve_rate == 1.0
    # first wave of 2: both vote "good", 2 of 2 submitted >= min_submitted 2: the schedule stops at 2 rollouts
    to_vote = found[("schedule 2+2, top share 1.0 -> vote", 2.0)]
    assert to_vote.resolve_rate == 1.0 and to_vote.dollars_per_task == pytest.approx(1 + 2) and to_vote.exact
    to_principal = found[("schedule 2+2, top share 1.0 -> principal", 2.0)]
    assert to_principal.dollars_per_task == pytest.approx(1 + 2 + 10) and not to_principal.exact
    front = pareto_front(list(found.values()))
    assert all(not p.oracle for p in front) and front[0].dollars_per_task <= front[-1].dollars_per_task


def test_failed_rollouts_and_unscored_candidates_are_handled_not_guessed(tmp_path):
    """A rollout with no source edit is no vote; a candidate whose scoring failed (infra error) takes its task out
    of the candidate policies, with a note that says what to run."""
    run = make_run(tmp_path / "one", votes=[None, "x"], exits=["format_errors", "submitted"],
                   verdicts={"x": True}, principal_resolved=True)
    found, _ = policies(run)
    assert found[("vote@k", 1)].resolve_rate == pytest.approx(0.5)  # {0}: nothing to submit; {1}: x
    unscored = make_run(tmp_path / "two", votes=["x", "y"], verdicts={"x": True, "y": None}, principal_resolved=True)
    found, result = policies(unscored)
    assert ("vote@k", 1) not in found and result.tasks == 0
    assert any("eval --candidates" in note for note in result.notes)
    never = make_run(tmp_path / "three", votes=["x"], verdicts={}, principal_resolved=True)
    found, result = policies(never)
    assert ("principal", 1.0) in found and ("pass@k", 1) not in found
    assert any("no candidate has a verdict" in note for note in result.notes)


def _conversation(steps: int, observation: int) -> list[dict]:
    messages = [{"role": "system", "content": "s" * 4000}, {"role": "user", "content": "t" * 4000}]
    for step in range(steps):
        messages += [{"role": "assistant", "content": f"{step}" * 400},
                     {"role": "user", "content": chr(ord("a") + step) * observation}]
    return messages


def _chars(messages):
    return sum(len(m["content"]) for m in messages)


def test_history_replay_follows_recorded_tokens_and_prices_the_cache_by_hand(tmp_path):
    """One rollout of 4 steps whose ledger records 1 token per 4 characters. Without compaction or cache the replay
    is the recorded spend; with the cache, call j reads call j-1's whole prompt (finished before j started) and
    writes the rest; compaction shortens the older observations."""
    messages = _conversation(4, 8000)
    prompts = [messages[:i] for i, m in enumerate(messages) if m["role"] == "assistant"]
    rows = [_row("rollout-00", "junior", (_chars(p) // 4 * 3.0 + 100 * 15.0) / 1e6, input_tokens=_chars(p) // 4,
                 output_tokens=100, at=10.0 * (j + 1)) for j, p in enumerate(prompts)]  # what those prices charge
    prices = {"input": 3.0, "output": 15.0, "cached_input": 0.3, "cache_write_input": 3.75}
    config = {"models": {role: {"model": f"scripted/{role}.yaml", "prices": prices}
                         for role in ("junior", "senior", "principal")}}
    run = make_run(tmp_path / "run", votes=["x"], verdicts={"x": True}, principal_resolved=True, rows=rows,
                   conversations={0: messages}, config=config)
    replay = read_run(run)
    task = replay.tasks[0]
    pricer = Pricer.for_run(replay.config, {})
    plain = reprice_task(task, HistoryVariant(), pricer, HistoryVariant())["rollout-00"]
    tokens = [_chars(p) / 4 for p in prompts]
    assert plain.input_tokens == pytest.approx(sum(tokens))
    assert plain.dollars == pytest.approx((sum(tokens) * 3.0 + 400 * 15.0) / 1e6)
    cached = reprice_task(task, HistoryVariant(cache=True), pricer, HistoryVariant())["rollout-00"]
    expected_cached = sum(tokens[:-1])  # call j+1 reads all of call j's prompt
    assert cached.cached_tokens == pytest.approx(expected_cached)
    expected = (expected_cached * 0.3 + (sum(tokens) - expected_cached) * 3.75 + 400 * 15.0) / 1e6
    assert cached.dollars == pytest.approx(expected) and cached.dollars < plain.dollars
    compact = reprice_task(task, HistoryVariant(compact_after=1, compact_chars=500), pricer,
                          HistoryVariant())["rollout-00"]
    # call 3 sends observations 1 and 2, call 4 observations 1-3: all but the last cut to 500 + note + 500
    assert compact.input_tokens < plain.input_tokens - 2 * (8000 - 1200) / 4
    found, result = policies(run)
    assert found[("principal, whole history, no cache", None)].dollars_per_task == pytest.approx(
        found[("principal", 1.0)].dollars_per_task)
    with_both = found[("principal, compact after 2, prompt cache", None)]
    assert with_both.input_tokens_per_rollout < found[("principal, whole history, prompt cache", None)].\
        input_tokens_per_rollout and not with_both.exact


def test_rollouts_started_together_do_not_read_each_others_first_prompt(tmp_path):
    """Two rollouts whose first calls overlap in time share the system prompt and task, but neither was written
    when the other started: no cache read; a later call of rollout 1 reads what rollout 0 wrote."""
    first = _conversation(1, 100)[:3]
    rows = [_row("rollout-00", "junior", 0.0, input_tokens=2000, output_tokens=10, at=5.0),
            _row("rollout-01", "junior", 0.0, input_tokens=2000, output_tokens=10, at=5.5)]
    prices = {"input": 1.0, "output": 1.0, "cached_input": 0.1}
    config = {"models": {role: {"model": f"scripted/{role}.yaml", "prices": prices}
                         for role in ("junior", "senior", "principal")}}
    run = make_run(tmp_path / "run", votes=["x", "x"], verdicts={"x": True}, principal_resolved=True, rows=rows,
                   conversations={0: first, 1: first}, config=config)
    replay = read_run(run)
    spend = reprice_task(replay.tasks[0], HistoryVariant(cache=True), Pricer.for_run(replay.config, {}),
                        HistoryVariant())
    assert spend["rollout-00"].cached_tokens == 0 and spend["rollout-01"].cached_tokens == 0
    rows[1]["time"] = 8.0  # rollout 1 starts at 7.0, after rollout 0 finished at 5.0: it reads the shared prefix
    (RunLayout(run).task(TASK).ledger).write_text("".join(json.dumps(r) + "\n" for r in rows))
    replay = read_run(run)
    spend = reprice_task(replay.tasks[0], HistoryVariant(cache=True), Pricer.for_run(replay.config, {}),
                        HistoryVariant())
    assert spend["rollout-01"].cached_tokens == pytest.approx(2000)  # its first prompt is the shared prefix


def _swepipe(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"COLUMNS": "250", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MPLCONFIGDIR": str(tmp_path / "mpl"),
           "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=env, timeout=120)


def test_whatif_command_prints_json_and_writes_the_figure(tmp_path):
    run = make_run(tmp_path / "run", votes=["left", "right"], verdicts={"left": False, "right": False},
                   principal_resolved=True)
    done = _swepipe(tmp_path, "whatif", str(run), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    by_name = {}
    for policy in data["policies"]:
        by_name.setdefault(policy["name"], []).append(policy)
    assert [p["k"] for p in by_name["pass@k"]] == [1, 2] and [p["k"] for p in by_name["vote@k"]] == [1, 2]
    assert all(p["resolve_rate"] == 0 for p in by_name["pass@k"] + by_name["vote@k"])
    assert by_name["principal"][0]["resolve_rate"] == 1.0
    assert Path(data["figure"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = _swepipe(tmp_path, "whatif", str(run), "--price", "junior=anthropic/claude-haiku-4-5")
    assert table.returncode == 0, table.stderr
    # The fixture's config.yaml has no limits.editor: a run from before the editor, its agents bash only.
    assert "What if: run (1 tasks, file editor off (bash only))" in table.stdout and "vote@k" in table.stdout
    assert [r["editor"] for r in data["runs"]] == ["off (bash only)"]


def test_whatif_says_which_runs_had_the_file_editor(tmp_path):
    """Two runs of one task, the editor on in one and off in the other: each policy table says which it is."""
    base = {"models": {role: {"model": f"scripted/{role}.yaml", "prices": PRICES}
                       for role in ("junior", "senior", "principal")}}
    runs = [make_run(tmp_path / name, votes=["x"], verdicts={"x": True}, principal_resolved=True,
                     config={**base, "limits": {"editor": on}}) for name, on in (("with", True), ("without", False))]
    done = _swepipe(tmp_path, "whatif", *map(str, runs))
    assert done.returncode == 0, done.stderr
    assert "What if: with (1 tasks, file editor on)" in done.stdout
    assert "What if: without (1 tasks, file editor off (bash only))" in done.stdout


def test_whatif_refuses_bad_prices_by_name(tmp_path):
    run = make_run(tmp_path / "run", votes=["x"], verdicts={"x": True}, principal_resolved=True)
    shape = _swepipe(tmp_path, "whatif", str(run), "--price", "junior")
    assert shape.returncode != 0 and "ROLE=MODEL" in shape.stdout + shape.stderr
    unknown = _swepipe(tmp_path, "whatif", str(run), "--price", "junior=nobody/no-such-model")
    assert unknown.returncode != 0 and "no-such-model" in unknown.stdout + unknown.stderr
    missing = _swepipe(tmp_path, "whatif", str(tmp_path / "nothing"))
    assert missing.returncode != 0 and "unknown run" in missing.stdout + missing.stderr


def test_rollouts_reused_from_another_run_are_priced_from_their_records(tmp_path):
    """A rollout taken from an earlier run has no row in this run's ledger (it was paid there): its record's cost
    and tokens stand in, so vote@k and the recorded principal still pay for it."""
    rows = [_row("rollout-00", "junior", 1.0), _row("senior", "senior", 5.0), _row("", "principal", 5.0)]
    run = make_run(tmp_path / "run", votes=["x", "y"], verdicts={"x": True, "y": False}, principal_resolved=True,
                   rows=rows, conversations={1: _conversation(2, 100)})
    record_path = RunLayout(run).task(TASK).junior / "rollout-01.json"
    record = json.loads(record_path.read_text())
    record.update(reused_from="runs/earlier/tasks/x/junior", cost=4.0, input_tokens=3000, output_tokens=200)
    record_path.write_text(json.dumps(record))
    found, _ = policies(run)
    assert found[("principal", 2.0)].dollars_per_task == pytest.approx(1 + 4 + 10)
    assert found[("vote@k", 2)].dollars_per_task == pytest.approx(5.0)
    replay = read_run(run)
    reused = [row for row in replay.tasks[0].calls if row.agent == "rollout-01"]
    assert len(reused) == 2 and sum(r.input_tokens for r in reused) == pytest.approx(3000, abs=1)
    assert reused[1].input_tokens > reused[0].input_tokens  # the second prompt holds the first


def test_prompts_under_the_models_cache_minimum_are_neither_read_nor_written(tmp_path):
    """Claude Haiku 4.5 caches prefixes of 4,096 tokens or more (litellm's prompt_cache_min_tokens): the first
    prompts of a rollout, shorter, pay plain input, not the cache-write price; a prompt past the minimum whose
    shared prefix is still under it writes all and reads nothing."""
    messages = _conversation(3, 8000)  # prompts of 2,000, 4,100 and 6,200 tokens at 4 characters a token
    replay, pricer, prompts = _replayed(tmp_path, messages, "anthropic/claude-haiku-4-5", 0)
    assert pricer.prices["junior"].cache_min_tokens == 4096
    spend = reprice_task(replay.tasks[0], HistoryVariant(cache=True), pricer, HistoryVariant())["rollout-00"]
    tokens = [_chars(p) / 4 for p in prompts]
    # call 1 (2,000) is under the minimum: plain input, nothing written; call 2 (4,100) reads nothing (call 1 was
    # never written) and writes itself; call 3 reads call 2's 4,100 tokens and writes the rest
    assert spend.cached_tokens == pytest.approx(tokens[1])
    assert spend.written_tokens == pytest.approx(tokens[1] + tokens[2] - tokens[1])
    expected = (tokens[0] * 1.0 + tokens[1] * 1.25 + tokens[1] * 0.1 + (tokens[2] - tokens[1]) * 1.25) / 1e6
    assert spend.dollars == pytest.approx(expected)
    lower = Pricer.for_run(replay.config, {"junior": "anthropic/claude-sonnet-4-5-20250929"})  # minimum 1,024
    assert reprice_task(replay.tasks[0], HistoryVariant(cache=True), lower, HistoryVariant())[
        "rollout-00"].cached_tokens == pytest.approx(tokens[0] + tokens[1])


def test_vote_at_k_with_a_prompt_cache_is_priced_like_the_cached_principal(tmp_path):
    conversations = {i: _conversation(4, 8000) for i in range(2)}
    rows = []
    for index, messages in conversations.items():
        prompts = [messages[:i] for i, m in enumerate(messages) if m["role"] == "assistant"]
        rows += [_row(f"rollout-{index:02d}", "junior", (_chars(p) // 4 + 200) / 1e6, input_tokens=_chars(p) // 4,
                      output_tokens=100, at=10.0 * (j + 1) + index) for j, p in enumerate(prompts)]
    rows += [_row("senior", "senior", 0.01), _row("", "principal", 0.01)]
    prices = {**PRICES, "cached_input": 0.1}
    config = {"models": {role: {"model": f"scripted/{role}.yaml", "prices": prices}
                         for role in ("junior", "senior", "principal")}}
    run = make_run(tmp_path / "run", votes=["x", "y"], verdicts={"x": True, "y": False}, principal_resolved=True,
                   rows=rows, conversations=conversations, config=config)
    found, _ = policies(run)
    plain, cached = found[("vote@k", 2)], found[("vote@k, prompt cache", 2)]
    assert plain.resolve_rate == cached.resolve_rate == 1.0
    assert plain.dollars_per_task == pytest.approx(sum(r["cost"] for r in rows if r["stage"] == "junior"))
    assert cached.dollars_per_task < 0.5 * plain.dollars_per_task  # four growing prompts, three read from cache
    whole_cached = found[("principal, whole history, prompt cache", None)]
    assert whole_cached.dollars_per_task == pytest.approx(cached.dollars_per_task + 0.02)


def test_a_run_with_the_senior_switched_off_still_replays_its_juniors(tmp_path):
    """An ablation run (--senior-model none) has no senior to price: its rollouts' histories are replayed anyway."""
    config = {"models": {"junior": {"model": "scripted/junior.yaml", "prices": PRICES},
                         "senior": {"model": "none"}, "principal": {"model": "scripted/p.yaml", "prices": PRICES}}}
    run = make_run(tmp_path / "run", votes=["x"], verdicts={"x": True}, principal_resolved=True, config=config,
                   conversations={0: _conversation(2, 100)})
    found, result = policies(run)
    assert ("principal, whole history, prompt cache", None) in found and not result.notes


def _chars_with_calls(messages):
    """Characters of ``messages`` as the replay counts them (a tool call's JSON included)."""
    return sum(len(m["content"]) + (len(json.dumps(m["tool_calls"])) if m.get("tool_calls") else 0)
               for m in messages)


def _tool_turn(step: int, command: str, output: str) -> list[dict]:
    call = {"id": f"call_{step}", "type": "function", "function": {"name": "bash",
                                                                  "arguments": json.dumps({"command": command})}}
    return [{"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{step}", "content": output}]


def test_the_cache_replay_reads_and_writes_only_where_the_run_marks(tmp_path):
    """A Claude model caches only at the markers the run sends (pipeline.models.prompt_cache): in the tool-call
    format, the system prompt and the latest tool results. Rollout 0 runs three steps; rollout 1, started after it,
    runs the same first command but gets another output. Its second prompt shares the system prompt, the task and
    that command with rollout 0's, but only the system prompt and task were ever marked (an assistant message never
    is), so that is all it reads; every prefix of rollout 0 ending at a marked tool result is read on its next step."""
    from pipeline.models.prompt_cache import marked_indices, with_cache_markers

    start = [{"role": "system", "content": "s" * 4000}, {"role": "user", "content": "t" * 4000}]
    ran = start + _tool_turn(0, "x" * 8000, "a" * 8000) + _tool_turn(1, "ls", "b" * 8000) + \
        [{"role": "assistant", "content": "", "tool_calls": [{"id": "call_2", "type": "function",
                                                                  "function": {"name": "submit", "arguments": "{}"}}]}]
    other = start + _tool_turn(0, "x" * 8000, "c" * 8000) + ran[-1:]
    prompts = {0: [ran[:i] for i, m in enumerate(ran) if m["role"] == "assistant"],
               1: [other[:i] for i, m in enumerate(other) if m["role"] == "assistant"]}
    assert [marked_indices(p) for p in prompts[0]] == [[0, 1], [0, 1, 3], [0, 3, 5]]
    sent = with_cache_markers(prompts[0][2])
    assert "cache_control" in sent[3] and "cache_control" in sent[5] and "cache_control" not in sent[2]
    chars = [_chars_with_calls(p) for p in prompts[0]] + [_chars_with_calls(p) for p in prompts[1]]
    rows = [_row("rollout-00", "junior", 0.0, input_tokens=c // 4, output_tokens=10, at=10.0 * (j + 1))
            for j, c in enumerate(chars[:3])]
    rows += [_row("rollout-01", "junior", 0.0, input_tokens=c // 4, output_tokens=10, at=100.0 + 10 * j)
             for j, c in enumerate(chars[3:])]
    run = make_run(tmp_path / "run", votes=["x", "x"], verdicts={"x": True}, principal_resolved=True, rows=rows,
                   conversations={0: ran, 1: other})
    replay = read_run(run)
    pricer = Pricer.for_run(replay.config, {"junior": "anthropic/claude-sonnet-4-5-20250929"})  # minimum 1,024
    assert pricer.at_markers(replay.tasks[0].calls[0])
    spend = reprice_task(replay.tasks[0], HistoryVariant(cache=True), pricer, HistoryVariant())
    tokens = [c / 4 for c in chars]
    near = lambda value: pytest.approx(value, rel=1e-3)  # noqa: E731 - the ledger's tokens are whole
    task_prefix = 2000  # system prompt and task: the first marks past the minimum
    through_first_result = _chars_with_calls(ran[:4]) / 4
    # rollout 0: call 1 writes the task prefix; call 2 reads it and writes to its tool result; call 3 reads that
    assert spend["rollout-00"].cached_tokens == near(task_prefix + through_first_result)
    assert spend["rollout-00"].written_tokens == near(tokens[2])
    # rollout 1: both calls read only the task prefix (the shared command after it was never marked)
    assert spend["rollout-01"].cached_tokens == near(2 * task_prefix)
    assert spend["rollout-01"].written_tokens == near(tokens[4] - task_prefix)
    # a provider that caches every prefix on its own (no markers) reads the shared command too
    automatic = reprice_task(replay.tasks[0], HistoryVariant(cache=True), Pricer.for_run(replay.config, {}),
                            HistoryVariant())
    assert automatic["rollout-01"].cached_tokens == near(task_prefix + _chars_with_calls(other[:3]) / 4)


def test_a_cache_entry_further_back_than_anthropics_lookback_is_not_read(tmp_path):
    """Anthropic finds an earlier breakpoint's entry only up to 20 content blocks before one of the call's own.
    Compacting after N observations cuts one more older observation at each step past N, so such a call's prompt
    matches what earlier calls wrote only up to the task (no compacted turn was ever marked). With N = 10 the first
    call past N finds the task's entry exactly 20 blocks before its second-to-last mark; the later ones, and every
    one past N = 11, find nothing (the system prompt alone is under the model's minimum), where a provider that
    caches every prefix on its own reads up to the observation cut last."""
    messages = _conversation(14, 4000)
    replay, pricer, prompts = _replayed(tmp_path, messages, "anthropic/claude-sonnet-4-5-20250929", 10)  # min 1,024

    def cached(after: int, price=pricer) -> float:
        variant = HistoryVariant(cache=True, compact_after=after, compact_chars=100)
        return reprice_task(replay.tasks[0], variant, price, HistoryVariant())["rollout-00"].cached_tokens

    # Calls with at most N observations cut nothing: each reads its predecessor's whole prompt.
    whole_reads = {after: sum(_chars(p) / 4 for p in prompts[:after]) for after in (10, 11)}
    assert cached(11) == pytest.approx(whole_reads[11])  # the two calls past N = 11 read nothing
    assert cached(10) == pytest.approx(whole_reads[10] + 2000)  # of the three past N = 10, the first reads the task
    automatic = Pricer.for_run(replay.config, {})
    assert cached(11, automatic) > whole_reads[11] + 2 * 2000


def _replayed(tmp_path, messages, model: str, output_tokens: int):
    """A run whose one rollout had ``messages``, a call at each of its replies; its replay, a pricer for ``model``
    as the junior, and the prompts of those calls."""
    prompts = [messages[:i] for i, m in enumerate(messages) if m["role"] == "assistant"]
    rows = [_row("rollout-00", "junior", 0.0, input_tokens=_chars(p) // 4, output_tokens=output_tokens,
                 at=10.0 * (j + 1)) for j, p in enumerate(prompts)]
    run = make_run(tmp_path / "run", votes=["x"], verdicts={"x": True}, principal_resolved=True, rows=rows,
                   conversations={0: messages})
    replay = read_run(run)
    return replay, Pricer.for_run(replay.config, {"junior": model}), prompts
