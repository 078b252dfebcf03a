"""The agents' calls of a recorded task priced again from their conversations: with history compaction or without,
with a provider's prompt cache or without (``swepipe whatif``).

- **Which calls.** A junior rollout's or the senior's k-th successful ledger row is the call that produced the k-th
  assistant message of its recorded conversation, so its prompt was the messages before that one. Rows that failed,
  rows beyond the conversation and the principal's single call are priced as recorded (their tokens, the stage's
  price): neither lever changes them.
- **Tokens.** Each agent's recorded input tokens calibrate characters to tokens: the sum of its paired rows' input
  tokens over the characters of the prompts the run sent (compacted as the run's own ``limits`` compacted them).
  A variant's prompt is then counted in characters and scaled by that factor, so it follows the recorded counts.
  Output tokens are the recorded ones: neither lever changes what the model wrote (an assumption: a model shown a
  compacted history could act differently; the verdicts stay the recorded ones).
- **Compaction** is ``pipeline.agent.compact.compact_history``, exactly as the agent applies it.
- **Prompt cache.** What a call reads is a prefix of whole messages that a call of the same model in the same task
  wrote before this call started (the ledger's times; rollouts run side by side, so their first calls rarely find
  the shared system prompt and task already written). A model whose provider caches every prefix on its own
  (OpenAI, DeepSeek, Gemini) writes its whole prompt, and a call reads the longest prefix it shares with one
  written. A model that caches only at markers (Anthropic; ``prompt_cache.caches_at_markers``) writes the prefixes
  ending at the messages the run marks (``prompt_cache.marked_indices``, the rule the calls follow), and a call
  reads the longest written prefix ending at one of its own marks or up to LOOKBACK_BLOCKS content blocks before
  one (as Anthropic looks back from each breakpoint); what follows its last mark is plain input. Only a prefix of
  at least the model's cache minimum is written (``Prices.cache_min_tokens``, from litellm's map: 1024 for most,
  4096 for Claude Haiku 4.5 and Opus 4.5; 1024 when unknown), so a prompt shorter than that is neither read from
  nor written to the cache. What a call writes is priced at the cache-write price where the model has one
  (Anthropic: 1.25 x input), else as input. Cache entries are assumed to live as long as the task (providers keep
  them 5 minutes after the last hit).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.analysis.whatif_data import WhatIfTask
from pipeline.records.chat import ChatMessage
from pipeline.records.ledger import LedgerRow

if TYPE_CHECKING:
    from pipeline.settings.model_spec import Prices

MIN_CACHE_TOKENS = 1024
LOOKBACK_BLOCKS = 20  # how far before a breakpoint Anthropic finds an earlier one's cache entry
_CHARS_PER_TOKEN = 4.0  # only when an agent's rows record no input tokens at all


@dataclass(frozen=True)
class HistoryVariant:
    cache: bool = False
    compact_after: int | None = None  # None: every observation whole
    compact_chars: int = 1000

    @property
    def label(self) -> str:
        parts = [f"compact after {self.compact_after}" if self.compact_after is not None else "whole history",
                 "prompt cache" if self.cache else "no cache"]
        return ", ".join(parts)


@dataclass
class RepricedSpend:
    """Tokens and dollars of some calls."""

    input_tokens: float = 0.0
    cached_tokens: float = 0.0
    written_tokens: float = 0.0
    output_tokens: float = 0.0
    dollars: float = 0.0

    def add(self, other: RepricedSpend) -> None:
        for name in ("input_tokens", "cached_tokens", "written_tokens", "output_tokens", "dollars"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class _Call:
    row: LedgerRow
    agent: str
    messages: list[ChatMessage]  # the full prompt (whole observations)
    factor: float  # tokens per character of this agent's prompts

    @property
    def start(self) -> float:
        return self.row.time - self.row.latency


def reprice_task(task: WhatIfTask, variant: HistoryVariant, price_of, sent: HistoryVariant) -> dict[str, RepricedSpend]:
    """Spend by agent (``rollout-NN``, ``senior``; every other call under its stage's name) of ``task``'s calls under
    ``variant``. ``price_of(row)`` gives the Prices a replayed call is charged at, ``price_of.row_cost(row)`` what a
    call that is not replayed cost, ``price_of.at_markers(row)`` whether its model caches only at markers
    (``whatif.Pricer``); ``sent`` is how the run itself compacted (its ``limits``), for calibrating characters to
    tokens."""
    replayed, paired = _replayable(task, sent)
    spend: dict[str, RepricedSpend] = {}
    for row in task.calls:
        if id(row) not in paired:
            recorded = RepricedSpend(row.input_tokens, row.cached_tokens, row.cache_write_tokens, row.output_tokens,
                                     price_of.row_cost(row))
            _book(spend, row.agent or row.stage, recorded)
    # seen: id(message) -> (size, fingerprint), as prompts share most message objects (each prompt is kept in
    # prepared, so no id is reused by another message meanwhile)
    prepared = []
    seen: dict[int, tuple[int, tuple[Any, ...]]] = {}
    for call in replayed:
        prompt = _compacted(call.messages, variant)
        measured = [seen.get(id(m)) or seen.setdefault(id(m), (_size(m), _fingerprint(m))) for m in prompt]
        prepared.append((call, [size for size, _ in measured], [fingerprint for _, fingerprint in measured], prompt))
    plans = [_CachePlan(call, sizes, prompt, price_of) for call, sizes, _, prompt in prepared] if variant.cache \
        else []
    written_by_model: dict[str, _PrefixIndex] = {}
    # What each call wrote, from the time it finished (no plans, nothing written, without a cache).
    for plan, (call, _, prints, _) in zip(plans, prepared, strict=False):
        if plan.writes:
            written_by_model.setdefault(call.row.model, _PrefixIndex()).add(prints, call.row.time, plan.writes)
    for number, (call, sizes, prints, _) in enumerate(prepared):
        prices = price_of(call.row)
        tokens = sum(sizes) * call.factor
        cached = written = 0.0
        if plans:
            index = written_by_model.get(call.row.model)
            read = plans[number].read(index.written(prints, call.start) if index else [])
            cached = plans[number].tokens(read)
            written = max(0.0, plans[number].tokens(plans[number].last_write) - cached)
        dollars = prices.cost(tokens, cached, call.row.output_tokens, written)  # (token counts may be fractional)
        _book(spend, call.agent, RepricedSpend(tokens, cached, written, call.row.output_tokens, dollars))
    return spend


class _CachePlan:
    """Where one replayed call's prompt can be read from and written to the cache, as numbers of leading messages
    (a prefix of n messages ends at message n - 1)."""

    def __init__(self, call: _Call, sizes: list[int], prompt: list[ChatMessage], price_of):
        self._chars = list(itertools.accumulate(sizes, initial=0))  # characters of each prefix
        self._blocks = list(itertools.accumulate(map(_blocks, prompt), initial=0))
        self.factor = call.factor
        from pipeline.models.prompt_cache import marked_indices  # the rule the recorded calls followed

        minimum = _cache_minimum(price_of(call.row))
        self.marks = [i + 1 for i in marked_indices(prompt)] if price_of.at_markers(call.row) else None
        ends = self.marks if self.marks is not None else range(1, len(prompt) + 1)  # automatic: every prefix
        self.writes = [n for n in ends if self.tokens(n) >= minimum]  # a shorter prefix is not cached
        self.last_write = max(self.writes, default=0)

    def tokens(self, count: int) -> float:
        return self._chars[count] * self.factor

    def read(self, written: list[int]) -> int:
        """The longest prefix this call reads, of the prefixes ``written`` before it started."""
        if self.marks is None:
            return max(written, default=0)
        return max((n for n in written if any(n <= mark and self._blocks[mark] - self._blocks[n] <= LOOKBACK_BLOCKS
                                             for mark in self.marks)), default=0)


def _cache_minimum(prices: Prices) -> int:
    return prices.cache_min_tokens or MIN_CACHE_TOKENS


def _replayable(task: WhatIfTask, sent: HistoryVariant) -> tuple[list[_Call], set[int]]:
    """The calls that can be replayed (paired with the prompt that produced their reply), and their rows' ids."""
    calls, paired = [], set()
    for agent, messages in task.conversations.items():
        stage = "senior" if agent == "senior" else "junior"
        rows = [r for r in task.calls if r.stage == stage and r.agent == agent and not r.error]
        prompts = [messages[:i] for i, m in enumerate(messages) if m.get("role") == "assistant"]
        count = min(len(rows), len(prompts))
        if not count:
            continue
        sent_chars = sum(_chars(_compacted(p, sent)) for p in prompts[:count])
        recorded = sum(r.input_tokens for r in rows[:count])
        factor = recorded / sent_chars if recorded and sent_chars else 1 / _CHARS_PER_TOKEN
        for row, prompt in zip(rows[:count], prompts[:count], strict=True):
            calls.append(_Call(row, agent, prompt, factor))
            paired.add(id(row))
    return calls, paired


def _compacted(messages: list[ChatMessage], variant: HistoryVariant) -> list[ChatMessage]:
    if variant.compact_after is None:
        return messages
    from pipeline.agent.compact import compact_history  # the agent's own compaction, replayed

    return compact_history(messages, variant.compact_after, variant.compact_chars)


def _size(message: ChatMessage) -> int:
    content = message.get("content")
    size = len(content) if isinstance(content, str) else len(json.dumps(content, default=str))
    if message.get("tool_calls"):
        size += len(json.dumps(message["tool_calls"], default=str))
    return size


def _chars(messages: list[ChatMessage]) -> int:
    return sum(_size(m) for m in messages)


def _fingerprint(message: ChatMessage) -> tuple:
    """Equal for equal messages (string hashes are cached by Python, so the prompts' shared messages are cheap)."""
    content = message.get("content")
    calls = message.get("tool_calls")
    return (message.get("role"), content if isinstance(content, str) else json.dumps(content, default=str),
            json.dumps(calls, sort_keys=True, default=str) if calls else None, message.get("tool_call_id"))


def _blocks(message: ChatMessage) -> int:
    """The content blocks ``message`` is sent as (an assistant's text and each of its tool calls)."""
    if message.get("role") != "assistant":
        return 1
    return (1 if message.get("content") else 0) + len(message.get("tool_calls") or [])


class _PrefixIndex:
    """Every written prompt of one model as a path of message fingerprints; each node keeps the earliest time the
    prefix ending there was written, so the prefixes in the cache at a time are one walk down."""

    def __init__(self) -> None:
        self.root: dict = {}

    def add(self, prints: list[tuple], finished: float, writes: list[int]) -> None:
        """The prefixes of ``prints`` of the lengths ``writes``, written at ``finished``."""
        node, depth, ends = self.root, 0, set(writes)
        for fingerprint in prints[:max(ends, default=0)]:
            child = node.setdefault(fingerprint, [float("inf"), {}])
            depth += 1
            if depth in ends:
                child[0] = min(child[0], finished)
            node = child[1]

    def written(self, prints: list[tuple], started: float) -> list[int]:
        """The lengths of the prefixes of ``prints`` written by ``started``."""
        node, found = self.root, []
        for depth, fingerprint in enumerate(prints, start=1):
            child = node.get(fingerprint)
            if child is None:
                break
            if child[0] <= started:
                found.append(depth)
            node = child[1]
        return found


def _book(spend: dict[str, RepricedSpend], agent: str, amount: RepricedSpend) -> None:
    spend.setdefault(agent, RepricedSpend()).add(amount)
