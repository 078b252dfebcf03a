"""Every model call: litellm with one model per role, a price, a budget and a ledger row."""

import os

# Set before anything imports litellm: otherwise importing it downloads the price map, and offline
# it waits through retries first.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
