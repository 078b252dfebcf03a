"""The local model's chat format: Gemma 3's turns, and tool calls, for llama-cpp-python's server.

The GGUF carries no chat template, so llama-cpp-python would fall back to llama-2's (``[INST]``, ``<<SYS>>``), which
the model echoes; and its built-in "gemma" format drops the system message and every tool message, and leaves a
model turn that only called a tool open. This module is the server's entry point instead (``python -m
pipeline.models.gemma_chat`` with llama_cpp.server's arguments): it registers the format below as ``swepipe-gemma``
and starts the server.

The prompt is Gemma 3's template: ``<start_of_turn>user`` and ``<start_of_turn>model`` turns, each ended by
``<end_of_turn>``; Gemma has no system role, so the system text opens the first user turn, as its own template
does. A tool's answer is a user turn, turns of one role in a row are one turn, and a model turn that called a tool
holds the call as the JSON below. A request with tools is answered with one tool call: the reply is held by a
grammar (``pipeline.models.grammars.tool_call``) to ``{"name": ..., "arguments": {...}}`` of one of the request's
tools, and returned as that call.
"""

from __future__ import annotations

import json
from typing import Any

from pipeline.models.grammars import tool_call

CHAT_FORMAT = "swepipe-gemma"
TURN, END = "<start_of_turn>", "<end_of_turn>"


def gemma_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
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


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts: their text
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def _call_text(call: dict[str, Any]) -> str:
    """A tool call as the model writes it."""
    function = call.get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        arguments = function.get("arguments")
    return json.dumps({"name": function.get("name"), "arguments": arguments})


def _tools_text(tools: list[dict[str, Any]]) -> str:
    lines = ['Call one tool per reply: reply with only a JSON object {"name": <tool>, "arguments": {...}}. The tools:']
    for tool in tools:
        function = tool.get("function") or {}
        parameters = (function.get("parameters") or {}).get("properties") or {}
        lines.append(f"- {function.get('name')}: {function.get('description', '')} Arguments: "
                     f"{json.dumps(parameters)}")
    return "\n".join(lines)


def _as_tool_call(response: dict[str, Any]) -> dict[str, Any]:
    """The grammar-held reply as the tool call it spells (a reply cut short stays text, for the agent to refuse)."""
    choice = response["choices"][0]
    try:
        call = json.loads(choice["message"]["content"] or "")
        name, arguments = call["name"], call["arguments"]
    except (ValueError, TypeError, KeyError):
        return response
    choice["message"] = {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"call_{response['id']}", "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)}}]}
    choice["finish_reason"] = "tool_calls"
    return response


def register() -> None:
    """Register the format with llama-cpp-python under CHAT_FORMAT."""
    from llama_cpp import LogitsProcessorList
    from llama_cpp.llama_chat_format import (
        ChatFormatterResponse,
        chat_formatter_to_chat_completion_handler,
        register_chat_completion_handler,
    )

    from pipeline.models.grammar_sampling import GrammarFilter

    def formatter(*, messages: Any, tools: list[dict[str, Any]] | None = None, **_: Any) -> ChatFormatterResponse:
        # No stop text: <end_of_turn> is an end-of-generation token, and a held reply may spell it out as text.
        return ChatFormatterResponse(prompt=gemma_prompt(messages, tools))

    plain = chat_formatter_to_chat_completion_handler(formatter)

    @register_chat_completion_handler(CHAT_FORMAT)  # type: ignore[untyped-decorator]  # llama_cpp's: unannotated
    def handler(*, llama: Any, tools: Any = None, tool_choice: Any = None, grammar: Any = None,
                max_tokens: int | None = None, stream: bool = False, logits_processor: Any = None, stop: Any = None,
                **options: Any) -> Any:  # llama_cpp's handler protocol: its values are llama_cpp's own types
        calling = bool(tools) and tool_choice != "none" and not stream
        held: str | None
        if calling:
            if isinstance(tool_choice, dict):  # one named tool
                named = tool_choice.get("function", {}).get("name")
                tools = [tool for tool in tools if tool["function"]["name"] == named] or tools
            held = tool_call(tools, max_tokens).text
        else:
            tools, held = None, grammar._grammar if grammar is not None else None
        if held is None:
            stop = [*([stop] if isinstance(stop, str) else stop or []), END]  # the model may write it as text
        else:
            logits_processor = LogitsProcessorList([*(logits_processor or []), GrammarFilter(llama, held)])
        response: Any = plain(llama=llama, tools=tools, tool_choice=None, grammar=None, max_tokens=max_tokens,
                              stream=stream, logits_processor=logits_processor, stop=stop, **options)
        return _as_tool_call(response) if calling else response


def main() -> None:
    register()
    from llama_cpp.server.__main__ import main as serve

    serve()  # type: ignore[no-untyped-call]  # llama_cpp's server entry point has no annotations


if __name__ == "__main__":
    main()
