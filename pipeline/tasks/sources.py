"""Loading tasks from a local file (.jsonl, .json, .csv, .parquet), a named dataset or the Hugging Face Hub."""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pipeline.errors import DatasetError, InfrastructureFault

from .decode import CellError
from .task import Task

Rows = Iterable[tuple[str, Any]]  # (where in the source, e.g. "line 3" or "row 2"; the raw row)
NamedLoader = Callable[[], Iterable[Mapping[str, Any]] | str | os.PathLike]

_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_FIX_HINT = "Fix or remove that row and run again."


def _bundled_dataset() -> Path:
    """The bundled tasks' file; pipeline.tasks.datasets is imported on use, not with pipeline.tasks."""
    from pipeline.tasks.datasets import BUNDLED_DATASET

    return BUNDLED_DATASET


# Built-in names, known here so that `load_tasks("bundled")` works whatever the caller imported first
# ("bundled" is pipeline.tasks.datasets.BUNDLED; tests/test_imports.py checks they agree). Others register.
_NAMED_DATASETS: dict[str, NamedLoader] = {"bundled": _bundled_dataset}


def register_named_dataset(name: str, loader: NamedLoader) -> None:
    """Make `load_tasks(name)` call `loader()`, which returns raw rows or the path of a task file."""
    _NAMED_DATASETS[name] = loader


def load_tasks(dataset: str, split: str = "test") -> list[Task]:
    """All tasks of `dataset`: a named dataset, a local task file, or a Hub name such as ScaleAI/SWE-bench_Pro."""
    if dataset in _NAMED_DATASETS:
        return _load_named(dataset)
    path = Path(dataset).expanduser()
    if path.suffix.lower() in _READERS or path.exists():
        return load_task_file(path)
    if _HUB_NAME.fullmatch(dataset):
        return _load_hub(dataset, split)
    raise DatasetError(
        f"Dataset '{dataset}' is not a file that exists, not a registered dataset name and not a Hugging Face "
        f"Hub name (owner/name). Pass a {_formats()} file or a Hub name such as ScaleAI/SWE-bench_Pro."
    )


def load_task_file(path: str | os.PathLike) -> list[Task]:
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"Dataset file {path} does not exist. Check the path (it is relative to {Path.cwd()}).")
    if path.is_dir():
        raise DatasetError(f"Dataset path {path} is a directory; pass a {_formats()} file.")
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise DatasetError(
            f"Dataset file {path} has the unknown extension '{path.suffix}'. Supported: {_formats()}; "
            "rename or convert the file."
        )
    try:
        return tasks_from_rows(str(path), reader(path))
    except UnicodeDecodeError as error:
        raise DatasetError(f"Dataset file {path} is not UTF-8 text ({error}). Save it as UTF-8.") from None


def tasks_from_rows(source: str, rows: Rows) -> list[Task]:
    """Decode every row; any bad row stops the load with a DatasetError naming source, row, instance id, column."""
    tasks: list[Task] = []
    first_seen: dict[str, str] = {}
    for where, raw in rows:
        if not isinstance(raw, Mapping):
            raise DatasetError(
                f"Cannot load tasks from {source}, {where}: expected an object with the dataset's columns, "
                f"got {type(raw).__name__}. {_FIX_HINT}"
            )
        try:
            task = Task.from_row(raw)
        except CellError as error:
            raise DatasetError(
                f"Cannot load tasks from {source}, {where}{_id_note(raw)}, {error}. {_FIX_HINT}"
            ) from None
        if task.instance_id in first_seen:
            raise DatasetError(
                f"Cannot load tasks from {source}, {where}: duplicate instance_id '{task.instance_id}' "
                f"(first seen at {first_seen[task.instance_id]}). Each task must appear once; remove one of them."
            )
        first_seen[task.instance_id] = where
        tasks.append(task)
    if not tasks:
        raise DatasetError(f"Cannot load tasks from {source}: it contains no rows. Check that it is the right dataset.")
    return tasks


def _id_note(raw: Mapping[str, Any]) -> str:
    instance_id = raw.get("instance_id")
    if not isinstance(instance_id, str) or not instance_id:
        return ""
    if len(instance_id) > 200 or not instance_id.isprintable():  # the cell error shows such an id, cut short
        return ""
    return f" (instance_id '{instance_id}')"


def _read_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open(encoding="utf-8-sig") as lines:
        for number, line in enumerate(lines, start=1):
            if line.strip():
                yield f"line {number}", _json_line(path, number, line)


def _json_line(path: Path, number: int, line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError as error:
        raise DatasetError(
            f"Cannot load tasks from {path}, line {number}: not valid JSON ({error}). Each line of a .jsonl "
            "file must be one JSON object; fix or remove that line."
        ) from None


def _read_json(path: Path) -> Iterator[tuple[str, Any]]:
    text = path.read_text(encoding="utf-8-sig")
    if text.lstrip().startswith("{"):
        # Dataset.to_json() writes JSON Lines even when the file is named .json.
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                yield f"line {number}", _json_line(path, number, line)
        return
    try:
        data = json.loads(text)
    except ValueError as error:
        raise DatasetError(f"Cannot load tasks from {path}: not valid JSON ({error}).") from None
    if not isinstance(data, list):
        raise DatasetError(
            f"Cannot load tasks from {path}: a .json dataset must be a list of row objects, "
            f"got {type(data).__name__}."
        )
    for number, row in enumerate(data, start=1):
        yield f"row {number}", row


def _read_csv(path: Path) -> Iterator[tuple[str, Any]]:
    # Patches are often longer than the csv module's default 128 KiB field limit.
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    with path.open(encoding="utf-8-sig", newline="") as handle:
        try:
            for number, row in enumerate(csv.DictReader(handle), start=1):
                yield f"row {number}", row
        except csv.Error as error:
            raise DatasetError(f"Cannot load tasks from {path}: not a readable CSV file ({error}).") from None


def _read_parquet(path: Path) -> Iterator[tuple[str, Any]]:
    import pyarrow
    import pyarrow.parquet

    try:
        parquet = pyarrow.parquet.ParquetFile(path)
    except (pyarrow.ArrowException, OSError) as error:
        raise DatasetError(f"Cannot load tasks from {path}: not a readable parquet file ({error}).") from None
    number = 0
    for batch in parquet.iter_batches():
        for row in batch.to_pylist():
            number += 1
            yield f"row {number}", row


_READERS: dict[str, Callable[[Path], Iterator[tuple[str, Any]]]] = {
    ".jsonl": _read_jsonl,
    ".json": _read_json,
    ".csv": _read_csv,
    ".parquet": _read_parquet,
}


def _formats() -> str:
    return ", ".join(_READERS)


def _load_named(name: str) -> list[Task]:
    result = _NAMED_DATASETS[name]()
    if isinstance(result, (str, os.PathLike)):
        return load_task_file(result)
    return tasks_from_rows(f"dataset '{name}'", ((f"row {n}", row) for n, row in enumerate(result, start=1)))


def _load_hub(name: str, split: str) -> list[Task]:
    try:
        import datasets

        rows = datasets.load_dataset(name, split=split)
    except InfrastructureFault:
        raise
    except Exception as error:  # the Hub client raises many unrelated types for "offline" / "not found"
        reason = (str(error).strip().splitlines() or [""])[0]
        raise DatasetError(
            f"Could not load the Hugging Face dataset '{name}' (split '{split}'): the Hub could not be reached, "
            f"or the dataset or split does not exist ({type(error).__name__}: {reason}). No local file named "
            f"'{name}' exists either. Without internet, export it once elsewhere, e.g. "
            f"datasets.load_dataset('{name}', split='{split}').to_parquet('swebench_pro.parquet'), "
            "and pass that local file (.jsonl, .json, .csv or .parquet) instead."
        ) from None
    source = f"Hugging Face dataset {name} (split {split})"
    return tasks_from_rows(source, ((f"row {n}", row) for n, row in enumerate(rows, start=1)))
