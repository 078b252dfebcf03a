"""The shape of the chat an agent holds with its model: messages, the tool calls in them, the tools offered.

They are OpenAI's chat format, which litellm takes and every provider is translated from, and they are saved as
they are (an agent's trajectory, its journal, an export): plain dicts at run time, typed here so that what
swepipe reads and writes of them is checked. Other harnesses' files are read as the JSON they are
(pipeline.interop) and handed on as records, not as these.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict, cast


class CacheMark(TypedDict):
    """Where a provider's prompt cache may end (pipeline.models.prompt_cache)."""

    type: Literal["ephemeral"]


class ContentBlock(TypedDict, total=False):
    """One part of a message's content given as a list (a text carrying a cache mark)."""

    type: str
    text: str
    cache_control: CacheMark


class FunctionCall(TypedDict):
    name: str
    arguments: str  # JSON text, as providers send it (or what the model wrote)


class MessageToolCall(TypedDict):
    """A tool call as an assistant message holds it."""

    id: str
    type: Literal["function"]
    function: FunctionCall


class ChatMessage(TypedDict, total=False):
    """One message of a conversation: system, user, assistant (its text, its tool calls) or a tool's answer."""

    role: str
    content: str | list[ContentBlock] | None
    tool_calls: list[MessageToolCall]
    tool_call_id: str  # a tool's answer: the call it answers
    cache_control: CacheMark  # a tool's answer marked for the prompt cache


class ReplyChoice(TypedDict, total=False):
    index: int
    message: ChatMessage
    finish_reason: str


class ChatCompletionReply(TypedDict, total=False):
    """A chat completion as an OpenAI-compatible endpoint answers it (the local model's server,
    pipeline.models.gemma_server)."""

    id: str
    object: str
    created: int
    model: str
    choices: list[ReplyChoice]
    usage: dict[str, int]  # the token counts


class ReplyToolCall(TypedDict):
    """A tool call of a model's reply as the client hands it on (``Completion.tool_calls``, an agent step's)."""

    id: str
    name: str
    arguments: str  # JSON text


class FunctionSpec(TypedDict):
    name: str
    description: str
    parameters: dict[str, Any]  # a JSON schema


class ToolSpec(TypedDict):
    """A tool offered to the model (an OpenAI function tool)."""

    type: Literal["function"]
    function: FunctionSpec


def recorded_messages(messages: object) -> list[ChatMessage]:
    """The messages of a saved conversation (a trajectory's ``messages``, a request's): the JSON objects of the
    list, as they are. A file may hold anything there, so readers take each key with ``.get`` and check its type."""
    return cast("list[ChatMessage]", [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else [])
