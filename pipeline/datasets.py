"""Named datasets and the defaults that come with them (image template, run scripts)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.bundled import build as bundled
from pipeline.tasks import register_named_dataset

BUNDLED = "bundled"
BUNDLED_DIR = bundled.BUNDLED_ROOT
# The same names `swepipe images build` gives the bundled task images.
BUNDLED_IMAGE_TEMPLATE = f"{bundled.IMAGE_REPOSITORY}:{{dockerhub_tag}}"
DEFAULT_IMAGE_TEMPLATE = "jefzda/sweap-images:{dockerhub_tag}"  # the official SWE-Bench Pro images


@dataclass(frozen=True)
class DatasetDefaults:
    image_template: str
    run_scripts: Path | None


def defaults_for(dataset: str) -> DatasetDefaults:
    if dataset == BUNDLED:
        return DatasetDefaults(BUNDLED_IMAGE_TEMPLATE, bundled.scripts_dir())
    return DatasetDefaults(DEFAULT_IMAGE_TEMPLATE, None)


register_named_dataset(BUNDLED, lambda: bundled.DATASET_PATH)
