"""A sweep's manifest (``SweepLayout.manifest``): the cells and how each ended. ``swepipe sweep``
(``pipeline.studies.sweep``) writes it; the sweep's report (``pipeline.report.sweep``) reads it here, without
importing the run path the sweep drives."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.errors import SwepipeError
from pipeline.rundir.layout import SweepLayout


def read_manifest(root: Path) -> dict | None:
    path = SweepLayout(root).manifest
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise SwepipeError(f"{path} cannot be read ({error}); it lists the sweep's cells") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise SwepipeError(f"{path} is not a sweep manifest (no list of cells)")
    return data
