"""Shorter histories: older observations cut to their head and tail in what the model is sent.

A rollout resends its whole history every step, so its input tokens grow with the square of its steps. With
``limits.compact_after`` set, only the last that many observations go whole; an older one longer than twice
``limits.compact_chars`` is sent as its start and end with a note of what was cut. The trajectory on disk
keeps every observation whole. An observation once cut stays cut the same way, so the cut history is a stable
prefix for the provider's prompt cache (it changes only where the window moves past a long observation).
"""

from __future__ import annotations

from pipeline.records.chat import ChatMessage

FIRST_OBSERVATION = 2  # messages[0] is the system prompt, messages[1] the task: never cut


def compact_history(messages: list[ChatMessage], keep_whole: int, keep_chars: int) -> list[ChatMessage]:
    """``messages`` as sent: observations (user and tool messages after the task) older than the last
    ``keep_whole`` cut to ``keep_chars`` characters at each end; the list itself is left as it is."""
    observations = [i for i, message in enumerate(messages)
                    if i >= FIRST_OBSERVATION and message.get("role") in ("user", "tool")]
    older = observations[:-keep_whole] if keep_whole > 0 else observations
    sent = list(messages)
    for index in older:
        content = messages[index].get("content")
        if isinstance(content, str) and len(content) > 2 * keep_chars + len(_note(0)):
            cut = len(content) - 2 * keep_chars
            sent[index] = {**messages[index],
                           "content": content[:keep_chars] + _note(cut) + content[len(content) - keep_chars:]}
    return sent


def _note(cut: int) -> str:
    return f"\n[... {cut} characters of this older observation left out to keep the history short ...]\n"
