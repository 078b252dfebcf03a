"""Reading predictions in the three forms people have them in."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import DatasetError
from pipeline.text.printable import clean


@dataclass(frozen=True)
class PatchToScore:
    instance_id: str
    patch: str
    model: str = ""


def load_predictions(path: str | Path) -> list[PatchToScore]:
    """Our predictions.jsonl, the official JSON list of {instance_id, patch | model_patch, prefix},
    or the swebench JSON/JSONL of {instance_id, model_patch, model_name_or_path}."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"Predictions file {path} does not exist.")
    text = path.read_text(encoding="utf-8")
    entries = _entries(path, text)
    predictions: dict[str, PatchToScore] = {}
    for where, entry in entries:
        prediction = _prediction(path, where, entry)
        if prediction.instance_id in predictions:
            raise DatasetError(f"{path}, {where}: instance {prediction.instance_id} has a second prediction; "
                               "keep one per instance.")
        predictions[prediction.instance_id] = prediction
    return list(predictions.values())


def _entries(path: Path, text: str) -> list[tuple[str, object]]:
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise DatasetError(f"{path} is not valid JSON ({error}).") from None
        return [(f"entry {n}", entry) for n, entry in enumerate(data, start=1)]
    if stripped.startswith("{") and path.suffix == ".json":
        try:  # a swebench-style {instance_id: {...}} mapping
            data = json.loads(text)
            if isinstance(data, dict) and "instance_id" not in data:
                return [(f"key {key}", {"instance_id": key, **value}) if isinstance(value, dict)
                        else (f"key {key}", value) for key, value in data.items()]
        except json.JSONDecodeError:
            pass  # JSON Lines in a .json file
    entries = []
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entries.append((f"line {number}", json.loads(line)))
        except json.JSONDecodeError as error:
            if number == len(lines) and not text.endswith("\n"):
                # A write cut short by a killed `swepipe run`: that task has no prediction yet.
                print(clean(f"swepipe: {path}, line {number} was cut short (no newline at its end: a killed "
                            "write); it is skipped. `swepipe run` with the same --run-id repairs the file and "
                            "finishes that task."), file=sys.stderr, flush=True)
                continue
            raise DatasetError(f"{path}, line {number} is not valid JSON ({error}).") from None
    return entries


def _prediction(path: Path, where: str, entry: object) -> PatchToScore:
    if not isinstance(entry, dict):
        raise DatasetError(f"{path}, {where}: expected an object with instance_id and model_patch (or patch).")
    instance_id = entry.get("instance_id")
    if not isinstance(instance_id, str) or not instance_id:
        raise DatasetError(f"{path}, {where}: 'instance_id' is missing or not a string.")
    # The official harness prefers model_patch and falls back to patch.
    patch = entry.get("model_patch", entry.get("patch", ""))
    if patch is None:
        patch = ""
    if not isinstance(patch, str):
        raise DatasetError(f"{path}, {where} ({instance_id}): the patch is not a string.")
    model = entry.get("model_name_or_path") or entry.get("prefix") or entry.get("model") or ""
    return PatchToScore(instance_id=instance_id, patch=patch, model=str(model))
