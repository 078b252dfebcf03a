"""Which price a model is charged at, decided before anything is spent."""

from __future__ import annotations

from pipeline.errors import InfrastructureFault, SwepipeError
from pipeline.settings.model_spec import ModelSpec, Prices


def resolve_prices(spec: ModelSpec, role: str) -> Prices:
    """Config prices first, then litellm's price map; a model with neither is an error unless free."""
    if spec.prices is not None:
        return spec.prices
    if spec.free or spec.is_scripted:
        return Prices(input=0, output=0, cached_input=0, cache_write_input=0)
    from pipeline.models.litellm_setup import litellm

    try:
        info = litellm.get_model_info(spec.model)
    except InfrastructureFault:
        raise
    except Exception:  # noqa: BLE001 - litellm raises several types for "not in the map"
        info = None
    # litellm also answers for a model its map does not list (a provider's defaults: $0 a token); only a model
    # whose entry is in the map has a price, or a run of it would spend with no dollar counted against its budget
    input_price = info.get("input_cost_per_token") if info else None
    output_price = info.get("output_cost_per_token") if info else None
    if info and info.get("key") in litellm.model_cost and input_price is not None and output_price is not None:
        cached, written = info.get("cache_read_input_token_cost"), info.get("cache_creation_input_token_cost")
        return Prices(input=input_price * 1e6, output=output_price * 1e6,
                      cached_input=None if cached is None else cached * 1e6,
                      cache_write_input=None if written is None else written * 1e6,
                      cache_min_tokens=info.get("prompt_cache_min_tokens"))
    raise SwepipeError(
        f"the {role} model {spec.model!r} has no known price: litellm's price map does not list it. "
        f"Give prices in the config (models.{role}.prices: {{input: ..., output: ..., cached_input: ...}}, "
        f"dollars per million tokens), or declare it free (models.{role}.free: true) for a self-hosted model."
    )
