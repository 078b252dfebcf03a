"""Import litellm once, configured for offline, quiet, reproducible use."""

from __future__ import annotations

import threading

import litellm
from litellm.types.llms.custom_llm import CustomLLMItem

litellm.suppress_debug_info = True
litellm.telemetry = False
litellm.drop_params = True  # a provider that lacks e.g. `seed` gets the call without it

_register_lock = threading.Lock()


def register_scripted() -> None:
    """Serve `scripted/...` model strings with the scripted test model (pipeline.models.scripted).

    ModelClient calls this for a scripted model, in the process that makes the calls, so a run with
    real models never imports the test model. Idempotent: one ScriptedModel per process.
    """
    with _register_lock:
        if any(entry.get("provider") == "scripted" for entry in litellm.custom_provider_map):
            return
        from pipeline.models.scripted import ScriptedModel

        entry: CustomLLMItem = {"provider": "scripted", "custom_handler": ScriptedModel()}
        litellm.custom_provider_map = [*litellm.custom_provider_map, entry]


__all__ = ["litellm", "register_scripted"]
