"""Named datasets and the defaults that come with them (image template, run scripts)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.tasks import register_named_dataset

BUNDLED = "bundled"
BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"
BUNDLED_IMAGE_TEMPLATE = "swepipe-bundled:{dockerhub_tag}"
DEFAULT_IMAGE_TEMPLATE = "jefzda/sweap-images:{dockerhub_tag}"  # the official SWE-Bench Pro images


@dataclass(frozen=True)
class DatasetDefaults:
    image_template: str
    run_scripts: Path | None


def defaults_for(dataset: str) -> DatasetDefaults:
    if dataset == BUNDLED:
        return DatasetDefaults(BUNDLED_IMAGE_TEMPLATE, BUNDLED_DIR / "tasks")
    return DatasetDefaults(DEFAULT_IMAGE_TEMPLATE, None)


register_named_dataset(BUNDLED, lambda: BUNDLED_DIR / "dataset.jsonl")
