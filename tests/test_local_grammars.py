"""The grammars that hold the local model's replies, and its chat format, without the server.

Each grammar carries the same language as a regular expression, so hypothesis draws replies from exactly the
language the grammar allows: every one must be something the role's own reader takes, and llama.cpp's grammar
engine (with the local model's vocabulary, where the local extra is installed) must take it too.
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
from pipeline.config import RunConfig
from pipeline.edits.blocks import parse_edits
from pipeline.edits.editor import COMMANDS
from pipeline.models import grammars
from pipeline.models.gemma_chat import _as_tool_call, gemma_prompt
from pipeline.models.local_server import LocalModelServer
from pipeline.models.role_grammars import LEAD_ACTIONS, MESSAGE, reply_grammar
from pipeline.senior.brief import parse_brief

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
    response = _as_tool_call({"id": "x", "choices": [{"message": {"content": json.dumps(call)}}]})
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
    assert _as_tool_call(response)["choices"][0]["message"]["content"] == '{"name": "bash", "argu'


# With llama.cpp itself: the grammars parse, and they take what their regex twins take.

@pytest.fixture(scope="module")
def vocabulary():
    llama_cpp = import_promised("llama_cpp", LOCAL_EXTRA)
    from pipeline.models.local_server import local_model_path

    return llama_cpp.Llama(str(local_model_path()), vocab_only=True, verbose=False)


def every_grammar() -> dict[str, grammars.Grammar]:
    tools = tools_for((BASH, EDITOR, *TEAM), COMMANDS)
    return {"bash": grammars.action_reply((BASH,)), "junior": grammars.action_reply((BASH, EDIT, VIEW)),
            "team": grammars.action_reply((BASH, EDIT, VIEW, *TEAM)),
            "senior": grammars.action_reply((BASH, VIEW), brief=True), "principal": grammars.edit_reply(),
            "tools": grammars.tool_call(tools), "tools-small": grammars.tool_call(tools, 300)}


@pytest.mark.parametrize("name", list(every_grammar()))
def test_llama_cpp_parses_every_grammar(vocabulary, name):
    assert _grammar_sampler(vocabulary, every_grammar()[name].text)


@replies
@given(name=st.sampled_from(["junior", "team", "senior", "principal", "tools"]), data=st.data())
def test_llama_cpp_takes_what_the_regex_takes(vocabulary, name, data):
    grammar = every_grammar()[name]
    assert _llama_cpp_takes(vocabulary, grammar.text, data.draw(st.from_regex(grammar.regex, fullmatch=True)))


def test_llama_cpp_refuses_what_the_grammar_does_not_allow(vocabulary):
    text = grammars.action_reply((BASH,)).text
    assert _llama_cpp_takes(vocabulary, text, "Look.\n```bash\nls\n```")
    for reply in ("Look.\n```view\na.py\n```", "[INST] <<SYS>>", "Look.\n```bash\nls\n```\n```bash\nls\n```"):
        assert not _llama_cpp_takes(vocabulary, text, reply)


@pytest.mark.parametrize("seed", range(3))
def test_the_servers_grammar_filter_leaves_only_tokens_the_grammar_allows(vocabulary, seed):
    """Whatever the model's logits (random here), writing the likeliest token the filter leaves, step by step,
    gives a reply of the grammar's language; the filter checks the likeliest tokens first, all of them only when
    it must (here often: random logits rarely favour what the grammar allows)."""
    import llama_cpp
    import numpy as np

    from pipeline.models.grammar_sampling import GrammarFilter

    grammar = grammars.action_reply((BASH, VIEW))
    held, random = GrammarFilter(vocabulary, grammar.text), np.random.default_rng(seed)
    written = [vocabulary.token_bos()]
    for _ in range(grammar.max_tokens):
        logits = held(np.array(written), random.normal(size=vocabulary.n_vocab()).astype(np.float32))
        token = int(np.argmax(logits))
        if llama_cpp.llama_vocab_is_eog(vocabulary._model.vocab, token):
            break
        written.append(token)
    reply = vocabulary.detokenize(written[1:]).decode()
    assert re.fullmatch(grammar.regex, reply) and parse_action(reply, (BASH, VIEW))


def _grammar_sampler(llama, text: str):
    import llama_cpp

    return llama_cpp.llama_sampler_init_grammar(llama._model.vocab, text.encode(), b"root")


def _llama_cpp_takes(llama, grammar: str, reply: str) -> bool:
    """Whether llama.cpp's grammar sampler lets the model write ``reply`` (as the tokenizer splits it) and then
    end its turn."""
    import ctypes

    import llama_cpp

    sampler = _grammar_sampler(llama, grammar)
    assert sampler, "llama.cpp could not parse the grammar"
    try:
        def allowed(token: int) -> bool:
            data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(id=token, logit=0.0, p=0.0))
            array = llama_cpp.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
            return data[0].logit != float("-inf")

        for token in llama.tokenize(reply.encode(), add_bos=False, special=False):
            if not allowed(token):
                return False
            llama_cpp.llama_sampler_accept(sampler, token)  # only a token it allows: llama.cpp aborts on others
        return allowed(llama.token_eos())
    finally:
        llama_cpp.llama_sampler_free(sampler)
