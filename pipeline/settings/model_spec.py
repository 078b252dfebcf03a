"""How a role's model is configured."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipeline.text.secrets import is_secret_name, looks_like_secret

SECRET_KEYS = {"api_key", "api_keys", "key", "token", "secret", "password", "authorization"}
KEYS_FROM_ENVIRONMENT = ("API keys come only from the environment (e.g. OPENAI_API_KEY, or the variables litellm "
                         "reads for the provider), so they never reach a file, log or container")
# Every call's litellm `metadata` carries {"scope": str, "role": str, "agent": int} under this key; the
# scripted model (pipeline.models.scripted) picks its script by it.
METADATA_KEY = "swepipe_scripted"
NO_MODEL = "none"  # as a role's model: the role is switched off (an ablation), no call is made


class Role(StrEnum):
    """Who calls a model: each role has its model under ``models:`` in the config."""

    JUNIOR = "junior"
    SENIOR = "senior"
    PRINCIPAL = "principal"
    SOLO = "solo"
    LEAD = "lead"
    WORKER = "worker"


class Prices(BaseModel):
    """Dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")
    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0, description="input read from the provider's prompt "
                                       "cache (default: the input price)")
    cache_write_input: float | None = Field(default=None, ge=0, description="input written to the prompt cache, "
                                            "where the provider charges for that (Anthropic: 1.25 x input; "
                                            "default: the input price)")
    cache_min_tokens: int | None = Field(default=None, gt=0, description="the shortest prompt prefix the provider "
                                         "caches (litellm's map: 1024 for most, 4096 for Claude Haiku and Opus 4.5); "
                                         "used by swepipe whatif's replay, default 1024")

    def cost(self, input_tokens: int, cached_tokens: int, output_tokens: int, cache_write_tokens: int = 0) -> float:
        """Dollars for a call; ``input_tokens`` counts all input, the cached and cache-written ones included."""
        cached_price = self.input if self.cached_input is None else self.cached_input
        write_price = self.input if self.cache_write_input is None else self.cache_write_input
        uncached = max(input_tokens - cached_tokens - cache_write_tokens, 0)
        return (uncached * self.input + cached_tokens * cached_price + cache_write_tokens * write_price
                + output_tokens * self.output) / 1e6

    @property
    def highest_input(self) -> float:
        """The most one input token can cost (read, written to the cache, or neither): what a worst case uses."""
        return max(self.input, self.cached_input or 0.0, self.cache_write_input or 0.0)


class ModelSpec(BaseModel):
    """One role's model: a litellm model string and how to call it."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="litellm model string, e.g. openai/gpt-4o-mini or scripted/path/to/script.yaml; "
                       "none switches the role off (senior, principal: an ablation)")
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
    prompt_cache: Literal["auto", "on", "off"] = Field(
        default="auto", description="mark the stable start of each conversation for the provider's prompt cache: "
        "auto marks it where the provider needs markers (Anthropic, also on Bedrock and Vertex) and relies on "
        "automatic caching elsewhere (OpenAI, DeepSeek, Gemini); on marks it always; off never")

    @field_validator("extra")
    @classmethod
    def _no_secrets(cls, extra: dict[str, Any]) -> dict[str, Any]:
        leaked = _secrets_in(extra, "extra")
        if leaked:
            raise ValueError(f"{', '.join(leaked)} must not be in the config: {KEYS_FROM_ENVIRONMENT}")
        return extra

    @field_validator("api_base")
    @classmethod
    def _no_secret_in_url(cls, api_base: str | None) -> str | None:
        if not api_base:
            return api_base
        try:
            url = urlsplit(api_base)
            userinfo = url.username is not None or url.password is not None
        except ValueError as error:
            raise ValueError(f"api_base is not a URL ({error})") from None
        query_keys = [key for key, _ in parse_qsl(url.query, keep_blank_values=True) if is_secret_name(key)]
        if userinfo or query_keys or looks_like_secret(api_base):
            where = ("a user or password before the host" if userinfo else
                     f"the query parameter {query_keys[0]!r}" if query_keys else "something shaped like a key")
            raise ValueError(f"api_base holds {where}, which must not be in the config: {KEYS_FROM_ENVIRONMENT}")
        return api_base

    @property
    def is_none(self) -> bool:
        """The role is switched off (``--senior-model none``, ``--principal-model none``): an ablation."""
        return self.model.strip().lower() == NO_MODEL

    @property
    def is_scripted(self) -> bool:
        return self.model.startswith("scripted/")


def _secrets_in(value: Any, where: str) -> list[str]:
    """The paths (extra.extra_headers.Authorization) of secrets anywhere inside ``value``: a key named
    like a secret (api_key, Authorization, x-api-key, aws_secret_access_key, ...) or a value shaped like
    one (a provider key, a bearer token, a JWT, a URL with credentials)."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}"
            if isinstance(key, str) and (key.lower() in SECRET_KEYS or is_secret_name(key)) and item not in (None, ""):
                found.append(path)
            else:
                found += _secrets_in(item, path)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found += _secrets_in(item, f"{where}[{index}]")
    elif isinstance(value, str) and looks_like_secret(value):
        found.append(where)
    return found
