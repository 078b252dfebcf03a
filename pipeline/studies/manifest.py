"""A sweep's manifest, ``sweep.json`` in the sweep directory: the cells and how each ended. ``swepipe sweep``
(``pipeline.studies.sweep``) writes it; the sweep's report (``pipeline.report.sweep``) reads it here, without
importing the run path the sweep drives."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.errors import SwepipeError

MANIFEST = "sweep.json"


def read_manifest(root: Path) -> dict | None:
    try:
        data = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise SwepipeError(f"{root / MANIFEST} cannot be read ({error}); it lists the sweep's cells") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise SwepipeError(f"{root / MANIFEST} is not a sweep manifest (no list of cells)")
    return data
