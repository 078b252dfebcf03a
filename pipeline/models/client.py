"""One role's model client: budget check, litellm call with retries, price, ledger row."""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field

from pipeline.models.budget import Budget
from pipeline.models.ledger import Ledger, LedgerRow
from pipeline.models.pricing import resolve_prices
from pipeline.models.spec import METADATA_KEY, ModelSpec
from pipeline.secrets import redact


class ModelCallFailed(Exception):
    """The provider did not give a usable reply (after retries, where retrying makes sense)."""


@dataclass
class Completion:
    content: str
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    cost: float
    latency: float
    retries: int
    tool_calls: list[dict] = field(default_factory=list)  # [{id, name, arguments (JSON text)}]


def _retryable_errors():
    from pipeline.models.litellm_setup import litellm

    return (litellm.RateLimitError, litellm.Timeout, litellm.APIConnectionError, litellm.InternalServerError,
            litellm.ServiceUnavailableError, litellm.BadGatewayError)


def _never_retried():
    from pipeline.models.litellm_setup import litellm

    return (litellm.AuthenticationError, litellm.NotFoundError, litellm.ContextWindowExceededError,
            litellm.BadRequestError, litellm.PermissionDeniedError)


class ModelClient:
    def __init__(self, spec: ModelSpec, role: str, ledger: Ledger, *, stage: str | None = None, task: str = "",
                 scope: str = "", backoff_base: float = 1.0, backoff_cap: float = 60.0):
        self.spec, self.role, self.ledger = spec, role, ledger
        self.stage, self.task, self.scope = stage or role, task, scope or task
        self.prices = resolve_prices(spec, role)  # fails before anything is spent
        self.backoff_base, self.backoff_cap = backoff_base, backoff_cap
        if spec.is_scripted:  # the test model is loaded only by the process that uses it
            from pipeline.models.litellm_setup import register_scripted

            register_scripted()

    def complete(self, messages: list[dict], budget: Budget, *, agent: str = "", agent_index: int = 0,
                 temperature: float | None = None, seed: int | None = None,
                 tools: list[dict] | None = None) -> Completion:
        """One reply; raises CostLimitExceeded before a call the budget cannot pay, ModelCallFailed after."""
        from pipeline.models.litellm_setup import litellm

        budget.check()
        params = dict(self.spec.extra)
        params.update(model=self.spec.model, messages=messages, timeout=self.spec.timeout,
                      metadata={METADATA_KEY: {"scope": self.scope, "role": self.role, "agent": agent_index}})
        if self.spec.api_base and self.spec.model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
            params["api_key"] = "unused"  # self-hosted OpenAI-compatible servers want some key, not a secret
        if tools:
            params["tools"] = tools
        for name, value in (("api_base", self.spec.api_base), ("max_tokens", self.spec.max_tokens),
                            ("temperature", self.spec.temperature if temperature is None else temperature),
                            ("seed", seed)):
            if value is not None:
                params[name] = value
        started, retries = time.monotonic(), 0
        while True:
            try:
                response = litellm.completion(**params)
                break
            except _never_retried() as error:
                self._record_failure(agent, started, retries, error)
                raise ModelCallFailed(_describe(error)) from None
            except _retryable_errors() as error:
                if retries >= self.spec.max_retries:
                    self._record_failure(agent, started, retries, error)
                    raise ModelCallFailed(f"{_describe(error)} (after {retries} retries)") from None
                time.sleep(self._backoff(retries))
                retries += 1
            except Exception as error:  # noqa: BLE001 - anything else from a provider: record, no retry
                self._record_failure(agent, started, retries, error)
                raise ModelCallFailed(_describe(error)) from None
        return self._record_success(response, agent, started, retries, budget)

    def _backoff(self, retries: int) -> float:
        delay = min(self.backoff_cap, self.backoff_base * 2**retries)
        return delay * random.uniform(0.5, 1.0)

    def _record_success(self, response, agent: str, started: float, retries: int, budget: Budget) -> Completion:
        usage = getattr(response, "usage", None)
        input_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        output_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        details = getattr(usage, "prompt_tokens_details", None)
        cached_tokens = int(getattr(details, "cached_tokens", 0) or 0)
        cost = self.prices.cost(input_tokens, cached_tokens, output_tokens)
        latency = time.monotonic() - started
        budget.charge(cost)
        self.ledger.append(LedgerRow(stage=self.stage, role=self.role, model=self.spec.model, input_tokens=input_tokens,
                                     cached_tokens=cached_tokens, output_tokens=output_tokens, cost=cost,
                                     latency=round(latency, 4), retries=retries, task=self.task, agent=agent))
        message = response.choices[0].message
        calls = [{"id": call.id, "name": call.function.name, "arguments": call.function.arguments or "{}"}
                 for call in (getattr(message, "tool_calls", None) or [])]
        return Completion(message.content or "", input_tokens, cached_tokens, output_tokens, cost, latency, retries,
                          calls)

    def _record_failure(self, agent: str, started: float, retries: int, error: Exception) -> None:
        self.ledger.append(LedgerRow(stage=self.stage, role=self.role, model=self.spec.model,
                                     latency=round(time.monotonic() - started, 4), retries=retries,
                                     error=_describe(error), task=self.task, agent=agent))


def _describe(error: Exception) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return redact(f"{type(error).__name__}: {text}")[:500]
