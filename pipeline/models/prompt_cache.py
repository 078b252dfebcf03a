"""Marking the stable start of a conversation for providers whose prompt cache needs explicit markers.

Every rollout of a task starts with the same system prompt and task text, and every step of an agent resends
its whole history, so most input a task sends has been sent before. OpenAI, DeepSeek and Gemini cache such a
prefix on their own; Anthropic's models (also through Bedrock and Vertex) cache only up to a block marked
``cache_control``, which litellm passes on. The marks go on the system prompt (shared by every rollout of the
task) and on the latest user messages (the history so far, read back on the agent's next step): three of the
four breakpoints Anthropic allows. What the provider reports as read from or written to its cache is priced
as such (``Prices.cost``).
"""

from __future__ import annotations

from pipeline.models.spec import ModelSpec

MARK = {"type": "ephemeral"}
MARKED_USER_MESSAGES = 2  # the latest user messages marked: this step's prefix, and the one before it


def needs_markers(spec: ModelSpec) -> bool:
    """Whether calls of ``spec`` carry cache markers: ``prompt_cache`` on, or auto and an Anthropic model."""
    if spec.prompt_cache != "auto":
        return spec.prompt_cache == "on"
    name = spec.model.lower()
    return not spec.is_scripted and (name.startswith("anthropic/") or "claude" in name)


def with_cache_markers(messages: list[dict]) -> list[dict]:
    """A copy of ``messages`` whose system prompt and latest user messages end in a cache marker (text content
    turned into one text block); the messages themselves are left as they are."""
    marked = [dict(message) for message in messages]
    targets = [i for i, m in enumerate(marked) if m.get("role") == "system"][:1]
    targets += [i for i, m in enumerate(marked) if m.get("role") == "user"][-MARKED_USER_MESSAGES:]
    for index in targets:
        content = marked[index].get("content")
        if isinstance(content, str) and content:
            marked[index]["content"] = [{"type": "text", "text": content, "cache_control": MARK}]
        elif isinstance(content, list) and content and isinstance(content[-1], dict):
            marked[index]["content"] = [*content[:-1], {**content[-1], "cache_control": MARK}]
    return marked
