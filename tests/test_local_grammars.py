"""The grammars that hold the local model's replies, and its chat format, without the server.

Each grammar carries the same language as a regular expression, so hypothesis draws replies from exactly the
language the grammar allows: every one must be something the role's own reader takes, and llama.cpp's grammar
engine must parse it, and what the local model writes under it (where the local extra is installed) must be of
that language and taken by the role's reader.
"""

import json
import re

import pytest
from conftest import LOCAL_EXTRA, import_promised
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.agent.actions import (
    BASH,
    EDIT,
    EDITOR,
    SUBMIT,
    VIEW,
    FormatError,
    parse_action,
    parse_tool_action,
    tools_for,
)
from pipeline.agent.edit_actions import editor_calls
from pipeline.edits.blocks import parse_edits
from pipeline.edits.editor import COMMANDS
from pipeline.models import grammars
from pipeline.models.gemma_chat import as_tool_call, gemma_prompt
from pipeline.models.local_server import LocalModelServer
from pipeline.models.role_grammars import LEAD_ACTIONS, MESSAGE, reply_grammar
from pipeline.senior.brief import parse_brief
from pipeline.settings.config import RunConfig

replies = settings(max_examples=40, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TEAM = ("delegate", "wait", "message")
KINDS = st.lists(st.sampled_from([EDIT, VIEW, *TEAM]), unique=True).map(lambda kinds: (BASH, *kinds))


def reply_in(grammar: grammars.Grammar, data) -> str:
    reply = data.draw(st.from_regex(grammar.regex, fullmatch=True))
    assert len(reply) <= grammar.longest < grammar.max_tokens and reply.isascii()
    return reply


@replies
@given(kinds=KINDS, data=st.data())
def test_every_text_reply_the_grammar_allows_is_one_action_the_agent_takes(kinds, data):
    grammar = grammars.action_reply(kinds)
    reply = reply_in(grammar, data)
    action = parse_action(reply, kinds)
    assert action.kind in (*kinds, SUBMIT)
    if action.kind in (EDIT, VIEW):  # the editor's blocks also hold a usable call
        assert editor_calls(action, COMMANDS)


@replies
@given(data=st.data())
def test_every_senior_reply_holds_its_brief_and_one_action(data):
    reply = reply_in(grammars.action_reply((BASH, VIEW), brief=True), data)
    assert parse_action(reply, (BASH, VIEW)).kind in (BASH, VIEW, SUBMIT)
    brief = parse_brief(reply)  # what submit hands in, and what is read from the last reply at the step limit
    assert brief.analysis  # and every span line is a span, or one whose numbers are the wrong way round
    lines = reply.split("SPANS:\n")[1].split("CANDIDATE:")[0].splitlines()
    assert len(brief.spans) + len(brief.problems) == len(lines)
    assert all("ends before it starts" in problem for problem in brief.problems)


@replies
@given(data=st.data())
def test_a_principal_reply_is_search_replace_edits(data):
    edits = parse_edits(reply_in(grammars.edit_reply(), data))
    assert 1 <= len(edits) <= grammars.PRINCIPAL_FILES and not any(edit.delete for edit in edits)


@replies
@given(editor=st.lists(st.sampled_from(COMMANDS), min_size=1, unique=True), others=st.sets(st.sampled_from(TEAM)),
       budget=st.integers(300, 3000), data=st.data())
def test_every_tool_reply_the_grammar_allows_is_one_call_the_agent_takes(editor, others, budget, data):
    allowed = (BASH, EDITOR, *sorted(others))
    tools = tools_for(allowed, tuple(editor))
    grammar = grammars.tool_call(tools, budget)
    assert grammar.longest <= budget  # the free text is sized to fit: no call is cut short
    call = json.loads(reply_in(grammar, data))
    response = as_tool_call({"id": "x", "choices": [{"message": {"content": json.dumps(call)}}]})
    action = parse_tool_action([{"id": "call", **response["choices"][0]["message"]["tool_calls"][0]["function"]}],
                               "", allowed)
    if action.kind == EDITOR:
        [call] = editor_calls(action, tuple(editor))
        assert call.command in editor


def test_a_reply_outside_the_grammar_is_refused_by_its_regex():
    grammar = grammars.action_reply((BASH, EDIT, VIEW))
    held = re.compile(grammar.regex)
    assert held.fullmatch("Look.\n```bash\nls -la\n```")
    for reply in ("```bash\nls\n```", "Two.\n```bash\nls\n```\n```bash\npwd\n```", "Empty.\n```bash\n\n```",
                  "Fence inside.\n```bash\n```\n```", "No block at all.", "Other.\n```python\nx\n```"):
        assert not held.fullmatch(reply), reply
        if reply != "```bash\nls\n```":  # (no thought: still one action for parse_action)
            with pytest.raises(FormatError):
                parse_action(reply, (BASH, EDIT, VIEW))


def test_each_role_gets_its_grammar_and_the_tool_format_none():
    config = RunConfig()
    assert reply_grammar("principal", config) == grammars.edit_reply()
    assert reply_grammar("senior", config) == grammars.action_reply((BASH, VIEW), brief=True)
    assert reply_grammar("junior", config) == grammars.action_reply((BASH, EDIT, VIEW))
    bash_only = RunConfig.model_validate({"limits": {"editor": False}})
    assert reply_grammar("solo", bash_only) == grammars.action_reply((BASH,))
    tools = RunConfig.model_validate({"limits": {"action_format": "tools"}})
    assert reply_grammar("junior", tools) is None and reply_grammar("principal", tools) == grammars.edit_reply()


def test_the_lead_grammar_offers_exactly_the_leads_actions():
    from types import SimpleNamespace

    from pipeline.team.lead import Lead

    for messages in (True, False):
        lead = Lead(SimpleNamespace(settings=SimpleNamespace(messages=messages)))
        offered = (*LEAD_ACTIONS, *((MESSAGE,) if messages else ()))
        assert set(lead.actions()) == set(offered)


def test_the_local_spec_sends_the_roles_grammar_and_room_for_its_longest_reply():
    server = LocalModelServer(threads=1)
    server.api_base = "http://127.0.0.1:1/v1"
    config = RunConfig()
    for role in ("junior", "senior", "principal"):
        spec = server.spec(role, config)
        grammar = reply_grammar(role, config)
        assert spec.extra == {"extra_body": {"grammar": grammar.text}} and spec.max_tokens == grammar.max_tokens
    tools = server.spec("junior", RunConfig.model_validate({"limits": {"action_format": "tools"}}))
    assert tools.extra == {} and tools.max_tokens == grammars.DEFAULT_TOOL_TOKENS


def test_the_prompt_is_gemmas_with_the_system_text_in_the_first_user_turn():
    messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "The issue."},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
                {"role": "tool", "tool_call_id": "1", "content": "a.py"},
                {"role": "user", "content": "3 steps left."}]
    assert gemma_prompt(messages) == (
        "<start_of_turn>user\nYou fix bugs.\n\nThe issue.<end_of_turn>\n"
        '<start_of_turn>model\n{"name": "bash", "arguments": {"command": "ls"}}<end_of_turn>\n'
        "<start_of_turn>user\na.py\n\n3 steps left.<end_of_turn>\n"
        "<start_of_turn>model\n")
    with_tools = gemma_prompt(messages[:2], tools_for((BASH,)))
    assert with_tools.startswith("<start_of_turn>user\nYou fix bugs.\n\nCall one tool per reply") and \
        '- bash: Run one shell command' in with_tools and "[INST]" not in with_tools


def test_a_reply_cut_short_stays_text_instead_of_a_broken_call():
    response = {"id": "x", "choices": [{"message": {"content": '{"name": "bash", "argu'}, "finish_reason": "length"}]}
    assert as_tool_call(response)["choices"][0]["message"]["content"] == '{"name": "bash", "argu'


# With llama.cpp itself: the grammars parse, and what the model writes under them is their language.

@pytest.fixture(scope="module")
def served():
    import_promised("xllamacpp", LOCAL_EXTRA)
    with LocalModelServer(slots=4) as started:
        yield started


def every_grammar() -> dict[str, grammars.Grammar]:
    tools = tools_for((BASH, EDITOR, *TEAM), COMMANDS)
    return {"bash": grammars.action_reply((BASH,)), "junior": grammars.action_reply((BASH, EDIT, VIEW)),
            "team": grammars.action_reply((BASH, EDIT, VIEW, *TEAM)),
            "senior": grammars.action_reply((BASH, VIEW), brief=True), "principal": grammars.edit_reply(),
            "tools": grammars.tool_call(tools), "tools-small": grammars.tool_call(tools, 300)}


def _held_completion(server: LocalModelServer, grammar: str, *, seed: int = 0, max_tokens: int = 1,
                     temperature: float = 0.0) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    body = {"messages": [{"role": "user", "content": "Fix the bug in queue.py, one step at a time."}],
            "grammar": grammar, "max_tokens": max_tokens, "temperature": temperature, "seed": seed}
    request = urllib.request.Request(f"{server.api_base}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=900) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.slow
def test_llama_cpp_parses_every_grammar_and_refuses_a_broken_one(served):
    for name, grammar in every_grammar().items():
        status, answer = _held_completion(served, grammar.text)
        assert status == 200, (name, answer)
    status, answer = _held_completion(served, grammars.action_reply((BASH,)).text[:-3])
    assert status >= 400 and "grammar" in answer["error"]["message"]


READERS = {"junior": lambda reply: parse_action(reply, (BASH, EDIT, VIEW)),
           "senior": lambda reply: parse_brief(reply).analysis and parse_action(reply, (BASH, VIEW)),
           "principal": parse_edits}


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a reply of up to ~2,000 tokens from the CPU, on a machine busy with the suite
@pytest.mark.parametrize("name", list(READERS))
def test_what_llama_cpp_writes_under_a_grammar_is_its_language_and_the_role_takes_it(served, name):
    """At a temperature where the free model rambles: every reply the sampler lets out
    is one the regex twin matches in full and the role's reader takes (llama.cpp checks each sampled token against
    the grammar, so a reply off the grammar cannot come out)."""
    grammar = every_grammar()[name]
    # One seed a role: a reply at this temperature runs to the grammar's longest (~2,000 tokens for the senior),
    # minutes of CPU under the suite's load.
    for status, answer in [_held_completion(served, grammar.text, seed=7, temperature=1.5,
                                            max_tokens=grammar.max_tokens)]:
        assert status == 200, answer
        choice = answer["choices"][0]
        assert choice["finish_reason"] == "stop", choice  # the grammar ended it, not max_tokens
        reply = choice["message"]["content"]
        assert re.fullmatch(grammar.regex, reply), reply
        assert READERS[name](reply)
