"""The local model's front, without the model: what any request body becomes (llama.cpp's completion request, or a
RequestError the caller reads as 400), and what llama.cpp's answer becomes."""

import json

import pytest
from fuzzing import fuzz
from hostile import hostile_number, hostile_text, json_scalar
from hypothesis import given
from hypothesis import strategies as st

from pipeline.agent.actions import BASH, EDITOR, tools_for
from pipeline.edits.editor import COMMANDS
from pipeline.models.gemma_chat import END, gemma_prompt
from pipeline.models.gemma_server import RequestError, chat_response, completion_request

MESSAGES = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "The issue."}]
TOOLS = tools_for((BASH, EDITOR), COMMANDS)

json_values = st.recursive(json_scalar | hostile_number | hostile_text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text(12), inner,
                                                                                       max_size=4), max_leaves=12)
call = st.fixed_dictionaries({"function": st.fixed_dictionaries({}, optional={"name": json_values,
                                                                             "arguments": json_values})})
message = st.fixed_dictionaries({}, optional={"role": st.sampled_from(["system", "user", "assistant", "tool"])
                                              | hostile_text(10), "content": json_values,
                                              "tool_calls": st.lists(call, max_size=2) | json_values})


@fuzz
@given(body=st.dictionaries(st.sampled_from(["messages", "tools", "tool_choice", "grammar", "max_tokens", "stop",
                                             "stream", "temperature", "seed"]), json_values)
       | st.fixed_dictionaries({"messages": st.lists(message, max_size=5)},
                               optional={"tools": st.just(TOOLS) | json_values, "tool_choice": json_values,
                                         "max_tokens": json_values, "stop": json_values}))
def test_any_request_body_is_a_completion_request_or_a_clear_refusal(body):
    try:
        request, calling = completion_request(body)
    except RequestError as error:
        assert str(error)
        return
    assert isinstance(request["prompt"], str) and request["prompt"].endswith("<start_of_turn>model\n")
    assert request["n_predict"] == -1 or request["n_predict"] > 0
    assert calling == ("grammar" in request and bool(body.get("tools")) and body.get("tool_choice") != "none")
    json.dumps(request, allow_nan=True)  # it can be sent


def test_a_request_with_tools_is_held_to_one_call_and_answered_as_that_call():
    request, calling = completion_request({"messages": MESSAGES, "tools": TOOLS, "max_tokens": 300})
    assert calling and request["n_predict"] == 300 and '\\"name\\": \\"bash\\"' in request["grammar"]
    assert request["prompt"] == gemma_prompt(MESSAGES, TOOLS) and "stop" not in request
    completion = {"id": "c1", "choices": [{"text": '{"name": "bash", "arguments": {"command": "ls"}}',
                                           "finish_reason": "stop"}], "usage": {"prompt_tokens": 9}}
    answer = chat_response(completion, "gemma", calling)
    [call] = answer["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "bash", "arguments": '{"command": "ls"}'}
    assert answer["choices"][0]["finish_reason"] == "tool_calls" and answer["usage"] == {"prompt_tokens": 9}


def test_a_named_tool_choice_holds_the_call_to_that_tool_and_none_to_text():
    named, _ = completion_request({"messages": MESSAGES, "tools": TOOLS,
                                   "tool_choice": {"type": "function", "function": {"name": EDITOR}}})
    assert EDITOR in named["grammar"] and '\\"bash\\"' not in named["grammar"]
    free, calling = completion_request({"messages": MESSAGES, "tools": TOOLS, "tool_choice": "none"})
    assert not calling and "grammar" not in free and free["stop"] == [END]
    assert free["prompt"] == gemma_prompt(MESSAGES)  # no tools offered in the prompt either


def test_a_free_reply_stops_at_the_end_of_turn_written_as_text_and_a_held_one_at_its_grammar():
    free, _ = completion_request({"messages": MESSAGES, "stop": "STOP", "temperature": 0.5, "seed": 3})
    assert free["stop"] == ["STOP", END] and free["temperature"] == 0.5 and free["seed"] == 3
    held, _ = completion_request({"messages": MESSAGES, "grammar": 'root ::= "ok"'})
    assert held["grammar"] == 'root ::= "ok"' and "stop" not in held


@pytest.mark.parametrize(("body", "named"), [
    ({"messages": "hi"}, "'messages'"), ({"messages": [1]}, "'messages'"),
    ({"messages": MESSAGES, "tools": [{"type": "function"}]}, "'tools'"),
    ({"messages": MESSAGES, "max_tokens": 1e309}, "'max_tokens'"),
    ({"messages": MESSAGES, "max_tokens": 0}, "'max_tokens'"),
    ({"messages": MESSAGES, "stream": True}, "streaming")])
def test_a_request_it_cannot_serve_is_refused_naming_the_field(body, named):
    with pytest.raises(RequestError, match=named):
        completion_request(body)


def test_a_reply_cut_short_under_tools_stays_text():
    completion = {"choices": [{"text": '{"name": "bash", "argu', "finish_reason": "length"}]}
    answer = chat_response(completion, "gemma", True)
    assert answer["choices"][0]["message"]["content"] == '{"name": "bash", "argu'
    assert answer["choices"][0]["finish_reason"] == "length" and answer["id"]
