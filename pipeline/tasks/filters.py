"""Choosing which tasks to run: by id, repo or language, then shuffle, slice and limit."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import DatasetError

from .task import Task

LANGUAGE_ALIASES = {
    "python": "python", "py": "python",
    "go": "go", "golang": "go",
    "js": "js", "javascript": "js",
    "ts": "ts", "typescript": "ts",
}
_SLICE = re.compile(r"\s*(-?\d+)?\s*:\s*(-?\d+)?\s*")


@dataclass
class TaskFilter:
    instance_ids: list[str] | None = None
    repo: str | None = None  # exact, case-insensitive, e.g. "qutebrowser/qutebrowser"
    language: str | None = None  # python, go, js, ts (javascript, typescript, golang also accepted)
    limit: int | None = None
    slice: str | None = None  # "A:B" with Python slice semantics, either side optional
    shuffle: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        # Validate up front so a typo fails before any dataset is loaded.
        if self.slice is not None:
            parse_slice(self.slice)
        if self.language is not None:
            normalize_language(self.language)
        if self.limit is not None and self.limit < 0:
            raise DatasetError(f"--limit must be 0 or more, got {self.limit}.")

    def apply(self, tasks: list[Task]) -> list[Task]:
        selected = self._select(tasks)
        if self.shuffle:
            selected = selected.copy()
            random.Random(self.seed).shuffle(selected)
        if self.slice is not None:
            selected = selected[parse_slice(self.slice)]
        if self.limit is not None:
            selected = selected[: self.limit]
        return selected

    def _select(self, tasks: list[Task]) -> list[Task]:
        selected = tasks
        if self.instance_ids is not None:
            known = {task.instance_id for task in tasks}
            unknown = [i for i in dict.fromkeys(self.instance_ids) if i not in known]
            if unknown:
                shown = ", ".join(unknown[:10]) + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
                raise DatasetError(
                    f"{len(unknown)} requested instance id(s) are not in the dataset: {shown}. "
                    "Check the spelling and that the right dataset was chosen."
                )
            wanted = set(self.instance_ids)
            selected = [task for task in selected if task.instance_id in wanted]
        if self.repo is not None:
            repo = self.repo.strip().lower()
            selected = [task for task in selected if task.repo.lower() == repo]
        if self.language is not None:
            language = normalize_language(self.language)
            selected = [task for task in selected if task.repo_language == language]
        return selected


def parse_slice(text: str) -> slice:
    match = _SLICE.fullmatch(text)
    if match is None:
        raise DatasetError(
            f"Bad slice '{text}': expected START:END with Python slice semantics, e.g. 0:50, 10:, :-5 or 100:200."
        )
    start, end = (int(part) if part is not None else None for part in match.groups())
    return slice(start, end)


def normalize_language(name: str) -> str:
    language = LANGUAGE_ALIASES.get(name.strip().lower())
    if language is None:
        raise DatasetError(f"Unknown language '{name}': expected one of python, go, js, ts.")
    return language


def parse_instance_ids(value: str) -> list[str]:
    """Ids from "a,b,c" or from "@FILE" (one id a line; blank lines and # comments skipped); duplicates dropped."""
    if value.startswith("@"):
        path = Path(value[1:]).expanduser()
        try:
            text = path.read_text(encoding="utf-8-sig")
        except OSError as error:
            raise DatasetError(f"Cannot read instance ids from {path}: {error.strerror or error}.") from None
        ids = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        source = f"file {path}"
    else:
        ids = [part.strip() for part in value.split(",")]
        source = f"'{value}'"
    ids = list(dict.fromkeys(i for i in ids if i))
    if not ids:
        raise DatasetError(f"No instance ids in {source}. Give ids separated by commas, or @FILE with one id a line.")
    return ids
