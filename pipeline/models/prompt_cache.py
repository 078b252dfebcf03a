"""Marking the stable start of a conversation for providers whose prompt cache needs explicit markers.

Every rollout of a task starts with the same system prompt and task text, and every step of an agent resends
its whole history, so most input a task sends has been sent before. OpenAI, DeepSeek and Gemini cache such a
prefix on their own; Anthropic's models (also through Bedrock and Vertex) cache only up to a block marked
``cache_control``, which litellm passes on. The marks go on the system prompt (shared by every rollout of the
task) and on the last message of each of the latest two turns' observations (the history so far, read back on
the agent's next step): three of the four breakpoints Anthropic allows. ``marked_indices`` is the one rule for
where they go: the calls follow it, and so does ``swepipe whatif``'s replay of a prompt cache. What the provider
reports as read from or written to its cache is priced as such (``Prices.cost``).
"""

from __future__ import annotations

from pipeline.records.chat import CacheMark, ChatMessage
from pipeline.settings.model_spec import ModelSpec

MARK: CacheMark = {"type": "ephemeral"}
MARKED_TURNS = 2  # the latest observations marked: this step's prefix, and the one before it
_OBSERVATIONS = ("user", "tool")


def needs_markers(spec: ModelSpec) -> bool:
    """Whether calls of ``spec`` carry cache markers: ``prompt_cache`` on, or auto and an Anthropic model."""
    if spec.prompt_cache != "auto":
        return spec.prompt_cache == "on"
    name = spec.model.lower()
    return not spec.is_scripted and (name.startswith("anthropic/") or "claude" in name)


def caches_at_markers(spec: ModelSpec) -> bool:
    """Whether ``spec``'s provider caches only at markers once caching is on (``needs_markers`` unless the config
    switched it off); the others cache every prefix on their own."""
    return needs_markers(spec.model_copy(update={"prompt_cache": "auto"})) or spec.prompt_cache == "on"


def marked_indices(messages: list[ChatMessage]) -> list[int]:
    """The messages a call's cache markers go on: the first system prompt, and the last message of each of the
    latest MARKED_TURNS runs of observations (a turn's user message in the text format; its tool results, and
    any note after them, in the tool-call format)."""
    system = [i for i, m in enumerate(messages) if m.get("role") == "system"][:1]
    ends = [i for i, m in enumerate(messages) if m.get("role") in _OBSERVATIONS
            and (i + 1 == len(messages) or messages[i + 1].get("role") not in _OBSERVATIONS)]
    return system + ends[-MARKED_TURNS:]


def with_cache_markers(messages: list[ChatMessage]) -> list[ChatMessage]:
    """A copy of ``messages`` with a cache marker on each of ``marked_indices``; the messages themselves are left
    as they are. A user or system message's text becomes one text block that carries it. A tool result keeps its
    text and carries the marker itself: litellm puts it on the tool_result block (Anthropic) or a cachePoint after
    it (Bedrock), and strips it for endpoints that take no markers."""
    marked = [message.copy() for message in messages]
    for index in marked_indices(marked):
        content = marked[index].get("content")
        if marked[index].get("role") == "tool":
            marked[index]["cache_control"] = MARK
        elif isinstance(content, str) and content:
            marked[index]["content"] = [{"type": "text", "text": content, "cache_control": MARK}]
        elif isinstance(content, list) and content and isinstance(content[-1], dict):
            marked[index]["content"] = [*content[:-1], {**content[-1], "cache_control": MARK}]
    return marked
