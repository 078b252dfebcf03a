"""The local model's chat format: Gemma 3's turns, and tool calls, written by swepipe's server
(``pipeline.models.gemma_server``).

The GGUF carries no chat template, and servers fall back to another model's (llama-cpp-python's to llama-2's
``[INST]``, ``<<SYS>>``, which the model echoes); the usual "gemma" formats drop the system message and every tool
message, and leave a model turn that only called a tool open. So the prompt is written here.

The prompt is Gemma 3's template: ``<start_of_turn>user`` and ``<start_of_turn>model`` turns, each ended by
``<end_of_turn>``; Gemma has no system role, so the system text opens the first user turn, as its own template
does. A tool's answer is a user turn, turns of one role in a row are one turn, and a model turn that called a tool
holds the call as the JSON below. A request with tools is answered with one tool call: the reply is held by a
grammar (``pipeline.models.grammars.tool_call``) to ``{"name": ..., "arguments": {...}}`` of one of the request's
tools, and returned as that call.
"""

from __future__ import annotations

import json

from pipeline.records.chat import ChatCompletionReply, ChatMessage, MessageToolCall, ToolSpec

TURN, END = "<start_of_turn>", "<end_of_turn>"


def gemma_prompt(messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> str:
    """The prompt for ``messages`` (OpenAI chat messages), ending with the opened model turn; without ``<bos>``,
    which the tokenizer adds."""
    system = "\n\n".join(_text(m) for m in messages if m.get("role") == "system")
    if tools:
        system = "\n\n".join(part for part in (system, _tools_text(tools)) if part)
    turns: list[list[str]] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            continue
        if role == "assistant":
            speaker, text = "model", "\n".join(filter(None, [_text(message), *map(_call_text,
                                                                                    message.get("tool_calls") or [])]))
        else:  # user, and a tool's answer
            speaker, text = "user", _text(message)
        if turns and turns[-1][0] == speaker:
            turns[-1][1] += "\n\n" + text
        else:
            turns.append([speaker, text])
    if system:
        if turns and turns[0][0] == "user":
            turns[0][1] = system + "\n\n" + turns[0][1]
        else:
            turns.insert(0, ["user", system])
    return "".join(f"{TURN}{speaker}\n{text.strip()}{END}\n" for speaker, text in turns) + f"{TURN}model\n"


def _text(message: ChatMessage) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts: their text
        return "\n".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else "" if content is None else str(content)


def _call_text(call: MessageToolCall) -> str:
    """A tool call as the model writes it."""
    function = call.get("function") or {}
    arguments = function.get("arguments") or "{}"
    if isinstance(arguments, str):  # as OpenAI sends them: JSON text, or what the model wrote
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    return json.dumps({"name": function.get("name"), "arguments": arguments})


def _tools_text(tools: list[ToolSpec]) -> str:
    lines = ['Call one tool per reply: reply with only a JSON object {"name": <tool>, "arguments": {...}}. The tools:']
    for tool in tools:
        function = tool.get("function") or {}
        parameters = (function.get("parameters") or {}).get("properties") or {}
        lines.append(f"- {function.get('name')}: {function.get('description', '')} Arguments: "
                     f"{json.dumps(parameters)}")
    return "\n".join(lines)


def as_tool_call(response: ChatCompletionReply) -> ChatCompletionReply:
    """The grammar-held reply as the tool call it spells (a reply cut short stays text, for the agent to refuse)."""
    choice = response["choices"][0]
    try:
        content = choice["message"].get("content")
        call = json.loads(content if isinstance(content, str) else "")
        name, arguments = call["name"], call["arguments"]
    except (ValueError, TypeError, KeyError):
        return response
    choice["message"] = {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"call_{response['id']}", "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)}}]}
    choice["finish_reason"] = "tool_calls"
    return response
