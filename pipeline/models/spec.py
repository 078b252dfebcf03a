"""How a role's model is configured."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

ROLES = ("junior", "senior", "principal", "solo", "lead", "worker")
SECRET_KEYS = {"api_key", "api_keys", "key", "token", "secret", "password", "authorization"}
# Every call's litellm `metadata` carries {"scope": str, "role": str, "agent": int} under this key; the
# scripted model (pipeline.models.scripted) picks its script by it.
METADATA_KEY = "swepipe_scripted"


class Prices(BaseModel):
    """Dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")
    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0, description="defaults to the input price")

    def cost(self, input_tokens: int, cached_tokens: int, output_tokens: int) -> float:
        cached_price = self.input if self.cached_input is None else self.cached_input
        uncached = max(input_tokens - cached_tokens, 0)
        return (uncached * self.input + cached_tokens * cached_price + output_tokens * self.output) / 1e6


class ModelSpec(BaseModel):
    """One role's model: a litellm model string and how to call it."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="litellm model string, e.g. openai/gpt-4o-mini or scripted/path/to/script.yaml")
    api_base: str | None = Field(default=None, description="OpenAI-compatible endpoint for self-hosted models")
    temperature: float | None = Field(default=None,
                                      description="sampling temperature (juniors: see juniors.temperatures)")
    max_tokens: int | None = Field(default=None, gt=0, description="longest reply, in tokens; it bounds the "
                                   "cost reserved before each call (default: litellm's output limit for the model, "
                                   "at most 8192, else 4096)")
    timeout: float = Field(default=300, gt=0, description="seconds per request; always sent")
    max_retries: int = Field(default=4, ge=0, description="retries of rate limits, timeouts, connection errors, 5xx")
    extra: dict[str, Any] = Field(default_factory=dict, description="further litellm.completion parameters")
    prices: Prices | None = Field(default=None, description="for models litellm's price map does not know")
    free: bool = Field(default=False, description="declare the model costs nothing (self-hosted)")

    @field_validator("extra")
    @classmethod
    def _no_secrets(cls, extra: dict[str, Any]) -> dict[str, Any]:
        leaked = sorted(k for k in extra if k.lower() in SECRET_KEYS)
        if leaked:
            raise ValueError(f"{', '.join(leaked)} must not be in the config: API keys come only from the "
                             "environment (e.g. OPENAI_API_KEY), so they never reach a file, log or container")
        return extra

    @property
    def is_scripted(self) -> bool:
        return self.model.startswith("scripted/")
