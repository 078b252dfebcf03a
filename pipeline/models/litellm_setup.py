"""Import litellm once, configured for offline, quiet, reproducible use."""

from __future__ import annotations

import litellm

from pipeline.models.scripted import ScriptedModel

litellm.suppress_debug_info = True
litellm.telemetry = False
litellm.drop_params = True  # a provider that lacks e.g. `seed` gets the call without it

_SCRIPTED = ScriptedModel()
if not any(entry.get("provider") == "scripted" for entry in litellm.custom_provider_map):
    litellm.custom_provider_map = [*litellm.custom_provider_map, {"provider": "scripted", "custom_handler": _SCRIPTED}]

__all__ = ["litellm"]
