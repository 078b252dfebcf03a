"""Named datasets: where the bundled one lives, and the defaults each dataset comes with (image template,
run scripts).

Plain constants and one function, importing nothing from pipeline, so that both the task loader
(pipeline.tasks.sources, which knows the name "bundled") and the bundled builder (pipeline.bundled.build,
which writes the dataset) can take them from here without loading each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BUNDLED = "bundled"  # the name `load_tasks` and `--dataset` accept for the tasks shipped with swepipe
BUNDLED_DIR = Path(__file__).resolve().parents[1] / "bundled"
BUNDLED_TASKS_DIR = BUNDLED_DIR / "tasks"  # one folder per task; also laid out like the official run_scripts/
BUNDLED_IMAGES_DIR = BUNDLED_DIR / "images"
BUNDLED_DATASET = BUNDLED_DIR / "dataset.jsonl"
BUNDLED_IMAGE_REPOSITORY = "swepipe-bundled"
# The same names `swepipe images build` gives the bundled task images.
BUNDLED_IMAGE_TEMPLATE = f"{BUNDLED_IMAGE_REPOSITORY}:{{dockerhub_tag}}"
DEFAULT_IMAGE_TEMPLATE = "jefzda/sweap-images:{dockerhub_tag}"  # the official SWE-Bench Pro images


@dataclass(frozen=True)
class DatasetDefaults:
    image_template: str
    run_scripts: Path | None


def defaults_for(dataset: str) -> DatasetDefaults:
    if dataset == BUNDLED:
        return DatasetDefaults(BUNDLED_IMAGE_TEMPLATE, BUNDLED_TASKS_DIR)
    return DatasetDefaults(DEFAULT_IMAGE_TEMPLATE, None)
