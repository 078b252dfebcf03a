"""One role's model client: a reservation of the worst case, litellm call with retries, price, ledger row.

A caller that saves replies (an agent's trajectory, the principal's replies) passes a journal: the paid reply
is written there before its ledger row, so a process killed before the caller saved it does not pay for the
same conversation position again; the resumed caller asks again and gets the journal's reply.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pipeline.control import stopping
from pipeline.control.outages import BREAKERS
from pipeline.errors import InfrastructureFault, ModelUnavailable, StorageFault, describe
from pipeline.models.budget import Budget, CostLimitExceeded, Reservation
from pipeline.models.ledger import Ledger, LedgerRow
from pipeline.models.pricing import resolve_prices
from pipeline.models.prompt_cache import needs_markers, with_cache_markers
from pipeline.records.chat import ChatMessage, ReplyToolCall, ToolSpec
from pipeline.records.trajectory import ExitReason
from pipeline.rundir.storage import write_failure, write_json_atomic
from pipeline.settings.model_spec import METADATA_KEY, ModelSpec
from pipeline.text.secrets import redact

if TYPE_CHECKING:
    from litellm.types.llms.openai import ChatCompletionToolParam

DEFAULT_MAX_TOKENS = 4096  # the longest reply of a model litellm knows no output limit for
MAX_DEFAULT_TOKENS = 8192  # the most a known model's own output limit is taken as, unless the config says more


class ModelCallFailed(Exception):
    """The provider refused this very request (the model's own outcome, final): its context window is exceeded,
    it is malformed or against the provider's policy. ``reason`` is the agent's exit reason for it."""

    def __init__(self, message: str, billed: Usage | None = None, reason: ExitReason = ExitReason.MODEL_ERROR):
        super().__init__(message)
        self.billed = billed or Usage()  # what the failed attempts were billed, as the provider reported it
        self.reason = reason  # model_error or context_window


@dataclass
class Usage:
    """Tokens and dollars of one or more attempts of a call."""

    input: int = 0
    cached: int = 0  # of input: read from the provider's prompt cache
    output: int = 0
    cost: float = 0.0
    error: str = ""  # the last failed attempt's error
    cache_write: int = 0  # of input: written to the prompt cache

    def add(self, other: Usage, cost: float, error: str = "") -> None:
        self.input, self.cached, self.output = self.input + other.input, self.cached + other.cached, \
            self.output + other.output
        self.cache_write += other.cache_write
        self.cost += cost
        self.error = error or self.error


@dataclass
class Completion:
    content: str
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    cost: float
    latency: float
    retries: int
    tool_calls: list[ReplyToolCall] = field(default_factory=list)
    cache_write_tokens: int = 0


def default_max_tokens(model: str) -> int:
    """The reply length assumed (and sent) when the config gives no ``max_tokens``: litellm's output limit for
    the model when it knows one, at most MAX_DEFAULT_TOKENS (8192; a frontier model's full limit, up to 100k
    tokens, would make one call's worst case larger than ordinary budgets), else DEFAULT_MAX_TOKENS (4096).
    Set ``models.<role>.max_tokens`` for another bound: the reservation before each call follows it."""
    from pipeline.models.litellm_setup import litellm

    try:
        info = litellm.get_model_info(model)
        known = info.get("max_output_tokens") or info.get("max_tokens")
    except InfrastructureFault:
        raise
    except Exception:  # noqa: BLE001 - litellm raises several types for "not in the map"
        known = None
    return min(int(known), MAX_DEFAULT_TOKENS) if known else DEFAULT_MAX_TOKENS


def count_input_tokens(model: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> int:
    """Input tokens of a call, counted high: the larger of litellm's token counter (the model's tokenizer,
    or a default one for a model it does not know) and about 4 characters a token of the whole request."""
    from pipeline.models.litellm_setup import litellm

    try:
        # the tools are OpenAI's tool objects, the shape litellm's typed dict describes
        sent_tools = cast("list[ChatCompletionToolParam] | None", tools or None)
        counted = int(litellm.token_counter(model=model, messages=messages, tools=sent_tools))
    except InfrastructureFault:
        raise
    except Exception:  # noqa: BLE001 - an unknown model or message shape: the character estimate stands
        counted = 0
    text = json.dumps([messages, tools or []], ensure_ascii=False, default=str)
    return max(counted, len(text) // 4 + 1)


def usage_of(source: Any, depth: int = 0) -> Usage | None:
    """The token counts in a usage object or mapping, a response, an error body, or an HTTP response's JSON."""
    if source is None or depth > 3:
        return None
    if hasattr(source, "model_dump") and not hasattr(source, "prompt_tokens"):
        source = source.model_dump()
    if isinstance(source, dict):
        if any(key in source for key in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")):
            return _usage_counts(source.get)
        return usage_of(source.get("usage"), depth + 1)
    if hasattr(source, "prompt_tokens") or hasattr(source, "completion_tokens"):
        def attribute(key: str, default: Any = None) -> Any:
            return getattr(source, key, default)

        return _usage_counts(attribute)
    if callable(getattr(source, "json", None)):  # an httpx.Response: a provider's error body may hold usage
        try:
            return usage_of(source.json(), depth + 1)
        except InfrastructureFault:
            raise
        except Exception:  # noqa: BLE001 - no JSON body, or one not read
            return None
    return usage_of(getattr(source, "usage", None), depth + 1)


def _usage_counts(get: Callable[[str, Any], Any]) -> Usage:
    def number(value: Any) -> int:
        try:
            return max(0, int(value or 0))
        except (TypeError, ValueError):
            return 0

    details = get("prompt_tokens_details", None)
    detail = (details.get if isinstance(details, dict) else lambda key: getattr(details, key, 0))
    cached, written = detail("cached_tokens"), detail("cache_creation_tokens")
    return Usage(input=number(get("prompt_tokens", None) or get("input_tokens", None)),
                 cached=number(cached or get("cache_read_input_tokens", None)),
                 output=number(get("completion_tokens", None) or get("output_tokens", None)),
                 cache_write=number(get("cache_creation_input_tokens", None) or written))


def reported_usage(error: Exception) -> Usage:
    """What the provider billed for a failed call, if the error carries it (a usage, a body, a response with a
    JSON body); zero tokens otherwise."""
    for source in (getattr(error, "usage", None), getattr(error, "body", None), getattr(error, "response", None)):
        try:
            found = usage_of(source)
        except InfrastructureFault:
            raise
        except Exception:  # noqa: BLE001 - an odd error object: nothing reported
            found = None
        if found is not None:
            return found
    return Usage()


TRANSIENT, CONFIGURATION, FINAL = "transient", "configuration", "final"


def provider_fault(error: Exception) -> str:
    """What a provider's error is (pipeline.errors): TRANSIENT (rate limit, timeout, 5xx, overloaded, a
    connection that fails: retried, then infrastructure), CONFIGURATION (a rejected key, a model the provider does
    not know: every call would fail alike) or FINAL (this request itself refused: its context window, a bad
    request, content policy)."""
    from pipeline.models.litellm_setup import litellm

    if isinstance(error, (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError)):
        return CONFIGURATION
    if isinstance(error, (litellm.ContextWindowExceededError, litellm.BadRequestError)):
        return FINAL
    if isinstance(error, (litellm.RateLimitError, litellm.Timeout, litellm.APIConnectionError,
                          litellm.InternalServerError, litellm.ServiceUnavailableError, litellm.BadGatewayError)):
        return TRANSIENT
    status = getattr(error, "status_code", None)
    if isinstance(status, int) and (status == 429 or status >= 500):
        return TRANSIENT
    if isinstance(error, (ConnectionError, TimeoutError)):
        return TRANSIENT
    return FINAL


def _final_reason(error: Exception) -> ExitReason:
    from pipeline.models.litellm_setup import litellm

    if isinstance(error, litellm.ContextWindowExceededError):
        return ExitReason.CONTEXT_WINDOW
    return ExitReason.MODEL_ERROR


def endpoint_of(spec: ModelSpec) -> str:
    """The endpoint a model's calls share, and fail together on: its api_base, else its provider."""
    if spec.api_base:
        return f"model endpoint {spec.api_base}"
    from pipeline.models.litellm_setup import litellm

    try:
        provider = litellm.get_llm_provider(spec.model)[1]
    except InfrastructureFault:
        raise
    except Exception:  # noqa: BLE001 - a model string litellm cannot place: its prefix names the provider
        provider = spec.model.split("/", 1)[0]
    return f"model provider {provider}"


@dataclass
class _InFlight:
    """A call waiting for its provider: if a stop abandons it, its worst case is charged
    (``charge_abandoned_calls``)."""

    client: ModelClient
    agent: str
    started: float
    worst: float
    retries: int
    billed: Usage
    call: str


_IN_FLIGHT: dict[str, _InFlight] = {}
_IN_FLIGHT_LOCK = threading.Lock()


def _claim(call: str) -> _InFlight | None:
    """Take the call off the in-flight list; None when a stop's charge took it first."""
    with _IN_FLIGHT_LOCK:
        return _IN_FLIGHT.pop(call, None)


def charge_abandoned_calls() -> int:
    """At a stop, before the process exits: a ledger row at its worst case for every call still waiting for its
    provider, which may bill it whether or not anyone reads the reply (as a lost cluster node's calls are
    charged). The row has the call's id, so a reply that still arrives and is journaled is not charged again on
    resume. Returns how many were charged."""
    with _IN_FLIGHT_LOCK:
        abandoned = list(_IN_FLIGHT.values())
        _IN_FLIGHT.clear()
    for flight in abandoned:
        billed = flight.billed
        flight.client.ledger.append(LedgerRow(
            stage=flight.client.stage, role=flight.client.role, model=flight.client.spec.model,
            input_tokens=billed.input, cached_tokens=billed.cached, cache_write_tokens=billed.cache_write,
            output_tokens=billed.output, cost=billed.cost + flight.worst,
            latency=round(time.monotonic() - flight.started, 4), retries=flight.retries,
            error=ABANDONED, task=flight.client.task, agent=flight.agent, call=flight.call))
    return len(abandoned)


ABANDONED = "abandoned at a stop while the provider had it: charged its worst case"
stopping.at_exit(charge_abandoned_calls)  # also when a second Ctrl-C ends the process at once


class ModelClient:
    def __init__(self, spec: ModelSpec, role: str, ledger: Ledger, *, stage: str | None = None, task: str = "",
                 scope: str = "", backoff_base: float = 1.0, backoff_cap: float = 60.0):
        self.spec, self.role, self.ledger = spec, role, ledger
        self.stage, self.task, self.scope = stage or role, task, scope or task
        self.prices = resolve_prices(spec, role)  # fails before anything is spent
        self.endpoint = endpoint_of(spec)
        self.backoff_base, self.backoff_cap = backoff_base, backoff_cap
        # The worst case bounds a call only if the provider is held to it: a priced model is always sent its
        # max_tokens; a free one (nothing to bound) only the configured one.
        self.max_tokens = spec.max_tokens or default_max_tokens(spec.model)
        self.sent_max_tokens = spec.max_tokens or (self.max_tokens if self.prices.output > 0 else None)
        if spec.is_scripted:  # the test model is loaded only by the process that uses it
            from pipeline.models.litellm_setup import register_scripted

            register_scripted()

    def spent_by(self, agent: str) -> float:
        """What ``agent`` spent through this role in earlier sessions of the task (its ledger rows)."""
        return self.ledger.spent(self.stage, agent)

    def worst_case(self, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> float:
        """The most one call with ``messages`` can cost: its input tokens (``count_input_tokens``) at the highest
        input price (plain, cache read or cache write: ``Prices.highest_input``) plus ``max_tokens`` at the output
        price. 0 for a free model."""
        prices = self.prices
        input_price = prices.highest_input
        if not input_price and not prices.output:
            return 0.0
        tokens = count_input_tokens(self.spec.model, messages, tools) if input_price else 0
        return (tokens * input_price + self.max_tokens * prices.output) / 1e6

    def complete(self, messages: list[ChatMessage], budget: Budget, *, agent: str = "", agent_index: int = 0,
                 temperature: float | None = None, seed: int | None = None,
                 tools: list[ToolSpec] | None = None, journal: Path | None = None) -> Completion:
        """One reply. Raises CostLimitExceeded before a call the budget cannot pay; ModelCallFailed when the
        provider refuses this request (final: the agent's outcome); ModelUnavailable when the endpoint failed
        past the retries while it works for other calls (infrastructure: the task reruns); Stopped when the run
        stops, also for a fault every call would meet: the endpoint down past the outage time
        (pipeline.control.outages), or a configuration error (a rejected key, an unknown model: exit 2).

        Every attempt first reserves the call's worst case (``worst_case``) against ``budget`` and every
        budget above it, and is settled to what the provider reports afterwards, a failed attempt too.
        With ``journal``, the reply is written there before its ledger row, and a journal that holds the
        reply to these very messages is returned instead of calling again (``_journaled``).
        """
        stopping.check()  # no new call once the run is stopping
        params = dict(self.spec.extra)
        sent = with_cache_markers(messages) if needs_markers(self.spec) else messages
        params.update(model=self.spec.model, messages=sent, timeout=self.spec.timeout,
                      metadata={METADATA_KEY: {"scope": self.scope, "role": self.role, "agent": agent_index}})
        if self.spec.api_base and self.spec.model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
            params["api_key"] = "unused"  # self-hosted OpenAI-compatible servers want some key, not a secret
        if tools:
            params["tools"] = tools
        for name, value in (("api_base", self.spec.api_base), ("max_tokens", self.sent_max_tokens),
                            ("temperature", self.spec.temperature if temperature is None else temperature),
                            ("seed", seed)):
            if value is not None:
                params[name] = value
        # Keyed by the conversation, not by the cache markers it is sent with: they change no reply, so
        # prompt_cache may change on resume without paying a journaled reply again.
        key = _call_key({**params, "messages": messages}) if journal is not None else ""
        if journal is not None and (kept := self._journaled(journal, key, budget)) is not None:
            return kept
        worst = self.worst_case(sent, tools)
        attempt = _Attempt(time.monotonic(), agent)
        try:
            while True:
                response = self._attempt(params, worst, budget, attempt)
                if response is not None:
                    return self._record_success(response, attempt, journal, key)
        except BaseException:
            if not attempt.recorded and (attempt.retries or attempt.billed.cost):
                self._record_failure(attempt, attempt.billed.error or "stopped")  # a stop mid-retries
            raise

    def _attempt(self, params: dict[str, Any], worst: float, budget: Budget, attempt: _Attempt) -> Any:
        """One try of the call: the response, or None when it failed and is to be tried again; raises when the
        call is over (see ``complete``)."""
        from pipeline.models.litellm_setup import litellm

        probe = BREAKERS.admit(self.endpoint)  # waits while the endpoint is down; Stopped past the outage time
        try:
            reservation = budget.reserve(worst)
        except CostLimitExceeded as error:
            if probe:
                BREAKERS.released(self.endpoint)
            if attempt.retries:  # the call failed and cannot be tried again: its row says so
                self._record_failure(attempt, f"{attempt.billed.error}; not retried: {error}")
                error.billed = attempt.billed
            raise
        flight = _InFlight(self, attempt.agent, attempt.started, worst, attempt.retries, attempt.billed,
                           uuid.uuid4().hex)
        with _IN_FLIGHT_LOCK:
            _IN_FLIGHT[flight.call] = flight

        def abandoned() -> None:  # a stop in this thread, or a fault under the call: no reply to record
            if _claim(flight.call) is None:
                attempt.recorded = True
            reservation.release()
            if probe:
                BREAKERS.released(self.endpoint)

        try:
            response = litellm.completion(**params)
        except InfrastructureFault:
            abandoned()
            raise
        except Exception as error:  # noqa: BLE001 - sorted below; every provider error is recorded
            if _claim(flight.call) is None:  # a stop's charge wrote its row, at its worst case
                attempt.recorded = True
                reservation.release()
                raise stopping.Stopped("abandoned at a stop") from None
            return self._failed(error, reservation, attempt, probe)
        except BaseException:
            abandoned()
            raise
        attempt.call, attempt.charged = flight.call, _claim(flight.call) is None
        attempt.reservation = reservation
        BREAKERS.succeeded(self.endpoint)
        return response

    def _failed(self, error: Exception, reservation: Reservation, attempt: _Attempt, probe: bool) -> None:
        """A failed try: charged, then given up (ModelCallFailed, ModelUnavailable, a configuration stop) or
        left to be tried again (None)."""
        used = reported_usage(error)
        cost = self.prices.cost(used.input, used.cached, used.output, used.cache_write)
        attempt.billed.add(used, cost, _describe(error))
        reservation.settle(cost)  # should it fail, ``complete`` writes the row of what was billed
        kind = provider_fault(error)
        if kind == CONFIGURATION:
            BREAKERS.released(self.endpoint)
            self._record_failure(attempt, attempt.billed.error)
            problem = (f"the {self.role} model {self.spec.model} at {self.endpoint} refused the call: "
                       f"{attempt.billed.error}. Check the role's model name and its API key (from the "
                       "environment); every call to it would fail alike, so the run stops")
            stopping.fault(problem, 2)
            raise stopping.Stopped(problem)
        if kind == FINAL:
            BREAKERS.succeeded(self.endpoint)  # it answered: the endpoint works, this request does not
            self._record_failure(attempt, attempt.billed.error)
            raise ModelCallFailed(attempt.billed.error, attempt.billed, _final_reason(error)) from None
        BREAKERS.failed(self.endpoint, attempt.billed.error, probe)
        if attempt.retries < self.spec.max_retries:
            stopping.STOP.wait(self._backoff(attempt.retries))  # a stop cuts the wait short
            stopping.check()
        elif not BREAKERS.paused(self.endpoint):  # the endpoint works for others: this call alone fails
            self._record_failure(attempt, attempt.billed.error)
            raise ModelUnavailable(f"{attempt.billed.error} (after {attempt.retries} retries; "
                                   f"{self.endpoint})", self.endpoint, attempt.billed)
        attempt.retries += 1  # past its own retries while the endpoint is paused: the breaker paces it
        return None

    def _backoff(self, retries: int) -> float:
        delay = min(self.backoff_cap, self.backoff_base * 2**retries)
        return float(delay * random.uniform(0.5, 1.0))

    def _record_success(self, response: Any, attempt: _Attempt, journal: Path | None, key: str) -> Completion:
        """The reply's journal entry and ledger row, then the settlement: a settle that fails (a budget held on
        a cluster) comes after the paid reply is on record, so a resume reuses it instead of paying again.

        The reply was paid whatever happens here: a reply that cannot be read or saved still gets its row
        (when the ledger can be written) and settles its cost, and a write that fails (the disk full, an I/O
        error) is a StorageFault, infrastructure, never the caller's outcome."""
        used = usage_of(getattr(response, "usage", None)) or Usage()
        cost = self.prices.cost(used.input, used.cached, used.output, used.cache_write)
        billed, latency = attempt.billed, time.monotonic() - attempt.started
        row = LedgerRow(stage=self.stage, role=self.role, model=self.spec.model,
                        input_tokens=used.input + billed.input, cached_tokens=used.cached + billed.cached,
                        cache_write_tokens=used.cache_write + billed.cache_write,
                        output_tokens=used.output + billed.output, cost=cost + billed.cost,
                        latency=round(latency, 4), retries=attempt.retries, task=self.task, agent=attempt.agent,
                        call=attempt.call)
        reservation = attempt.reservation
        assert reservation is not None  # _attempt holds one for the try that answered
        try:
            message = response.choices[0].message
            calls: list[ReplyToolCall] = [
                {"id": call.id, "name": call.function.name, "arguments": call.function.arguments or "{}"}
                     for call in (getattr(message, "tool_calls", None) or [])]
            # The call's whole cost, failed attempts included, so an agent's record adds up to the ledger.
            completion = Completion(message.content or "", used.input + billed.input, used.cached + billed.cached,
                                    used.output + billed.output, cost + billed.cost, latency, attempt.retries,
                                    calls, used.cache_write + billed.cache_write)
            if journal is not None:  # first the reply, then its row: a kill in between loses no reply
                write_json_atomic(journal, {"key": key, "completion": asdict(completion), "row": asdict(row)})
        except BaseException as error:
            unwritten = self._write_row(row, attempt, quietly=True)
            reservation.settle(cost)
            if isinstance(error, OSError):
                raise self._save_fault(row, error, unwritten, journal) from error
            raise
        try:
            self._write_row(row, attempt)
        except OSError as error:
            reservation.settle(cost)
            raise self._save_fault(row, None, error, journal) from error
        reservation.settle(cost)
        return completion

    def _write_row(self, row: LedgerRow, attempt: _Attempt, quietly: bool = False) -> OSError | None:
        """The paid call's row in the ledger (unless a stop's charge wrote it, at its worst case); ``quietly``,
        a write that fails is returned rather than raised (the call is failing already)."""
        try:
            if not attempt.charged:
                self.ledger.append(row)
            attempt.recorded = True
        except OSError as error:
            if not quietly:
                raise
            return error
        except InfrastructureFault:  # written here, not sent on (a cluster's queue gone)
            attempt.recorded = True
            if not quietly:
                raise
        return None

    def _save_fault(self, row: LedgerRow, reply_error: OSError | None, row_error: OSError | None,
                    journal: Path | None) -> StorageFault:
        """A paid call whose reply or row could not be written, as the fault that stops its caller."""
        said = [f"a {self.role} call was paid (${row.cost:.4f})"]
        if reply_error is not None:
            said.append(f"its reply could not be saved to {journal} ({write_failure(reply_error)})")
        elif journal is not None:
            said.append("its reply is saved: a rerun of the same run id takes it from there and writes its row")
        if row_error is not None:
            said.append(f"its ledger row could not be written ({write_failure(row_error)})"
                        + ("; the ledger misses this spend" if reply_error is not None or journal is None else ""))
        else:
            said.append("its cost is in the ledger; a rerun of the same run id asks again")
        return StorageFault("; ".join(said))

    def _journaled(self, journal: Path, key: str, budget: Budget) -> Completion | None:
        """The reply ``journal`` holds for the call ``key``, if it does. A reply whose ledger row the kill
        came before gets its row now, and its cost is charged; one with its row was counted when the
        budgets were seeded from the ledger."""
        try:
            saved = json.loads(journal.read_text(encoding="utf-8"))
            if saved.get("key") != key:
                return None
            completion, row = Completion(**saved["completion"]), LedgerRow(**saved["row"])
        except (OSError, ValueError, TypeError, KeyError):
            return None
        if not self.ledger.has_call(row.call):
            budget.reserve(0.0).settle(row.cost)
            self.ledger.append(row)
        return completion

    def _record_failure(self, attempt: _Attempt, error: str) -> None:
        """A call that gave no reply, with the tokens and cost its attempts were billed (0 when the provider
        reported none)."""
        billed = attempt.billed
        attempt.recorded = True
        self.ledger.append(LedgerRow(stage=self.stage, role=self.role, model=self.spec.model,
                                     input_tokens=billed.input, cached_tokens=billed.cached,
                                     cache_write_tokens=billed.cache_write,
                                     output_tokens=billed.output, cost=billed.cost,
                                     latency=round(time.monotonic() - attempt.started, 4), retries=attempt.retries,
                                     error=error, task=self.task, agent=attempt.agent))


@dataclass
class _Attempt:
    """One call's tries so far."""

    started: float
    agent: str
    retries: int = 0
    billed: Usage = field(default_factory=Usage)  # what the failed tries cost
    recorded: bool = False  # its ledger row is written
    call: str = ""  # the id of the try that answered
    charged: bool = False  # a stop's charge wrote its row (``charge_abandoned_calls``)
    reservation: Reservation | None = None


def _call_key(params: dict[str, Any]) -> str:
    """What identifies a call's conversation position: the model and everything it is sent."""
    sent = {name: params.get(name) for name in ("model", "messages", "tools", "temperature", "seed")}
    return hashlib.sha256(json.dumps(sent, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _describe(error: Exception) -> str:
    return redact(describe(error))[:500]
