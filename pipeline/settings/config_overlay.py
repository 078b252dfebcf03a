"""The command line on top of the config file, one way: every flag that sets the config is an assignment of a value
to a dotted path (``--set team.mode=async``; ``-k 4`` is ``juniors.k=4``), applied to the file's data and then
checked by ``RunConfig`` once, as the file itself is. A path that names no option is refused before anything runs,
naming the key and the keys there are; a bad value is refused naming what the user typed.
"""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from pipeline.errors import SwepipeError
from pipeline.settings.model_spec import Role


@dataclass(frozen=True)
class Assignment:
    """``path`` set to ``value``; ``given`` is how the user said it (for errors)."""

    path: tuple[str, ...]
    value: Any
    given: str

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


def parse_set(text: str) -> Assignment:
    """``PATH=VALUE`` from ``--set``: the value read as YAML (4 is a number, true a bool, null unsets, [a, b] a
    list; anything else stays the text typed)."""
    path, sep, raw = text.partition("=")
    given = f"--set {text}"
    if not sep or not path.strip():
        raise SwepipeError(f"{given}: expected PATH=VALUE, e.g. --set team.mode=async or --set juniors.k=4")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, str):
        value = raw.strip()  # as typed: YAML would have read quotes and a leading '#' away
    return Assignment(tuple(part.strip() for part in path.split(".")), value, given)


def flag(path: str, value: Any, given: str) -> Assignment:
    """A shortcut flag (``--junior-model``, ``-k``) as the assignment it stands for."""
    return Assignment(tuple(path.split(".")), value, given)


def check_path(assignment: Assignment, config_type: type[BaseModel]) -> None:
    """Refuse a path that names no option of ``config_type``, naming the first unknown key and the keys there."""
    where: Any = config_type
    walked: list[str] = []
    for key in assignment.path:
        if _is_model(where):
            fields = where.model_fields
            if key not in fields:
                place = f"under {'.'.join(walked)}" if walked else "at the top"
                raise SwepipeError(f"{assignment.given}: no option {'.'.join([*walked, key])!r}; the keys {place} "
                                   f"are {', '.join(fields)}")
            where = _inner(fields[key].annotation)
        elif _is_dict(where):
            if walked == ["models"] and key not in set(Role):
                raise SwepipeError(f"{assignment.given}: no role {key!r} under models; roles are {', '.join(Role)}")
            where = _inner(typing.get_args(where)[1]) if typing.get_args(where) else Any
        else:
            if where is not Any:
                raise SwepipeError(f"{assignment.given}: {'.'.join(walked)} is a single value, it has no {key!r}")
        walked.append(key)


def overlay(data: dict, assignments: Iterable[Assignment], config_type: type[BaseModel]) -> dict:
    """``data`` (a config file's mapping) with the assignments on top, later ones winning; each path checked. A
    role given another model loses the old model's prices, unless the same command line sets them too."""
    merged = copy.deepcopy(data)
    assignments = list(assignments)
    for assignment in assignments:
        check_path(assignment, config_type)
        *parents, last = assignment.path
        node = merged
        for key in parents:  # each mapping on the way copied: a YAML alias shares it with another key
            child = node.get(key)
            child = node[key] = dict(child) if isinstance(child, dict) else {}
            node = child
        if parents[:1] == ["models"] and len(parents) == 2 and last == "model":
            old = node.get("model")
            prices_given = any(a.path[:3] == (*parents, "prices") for a in assignments)
            if old is not None and old != assignment.value and not prices_given:
                node.pop("prices", None)  # a new model's price is not the old one's
        node[last] = assignment.value
    return merged


def validation_problems(error, assignments: Iterable[Assignment], origin: str | None = None) -> str:
    """A pydantic ValidationError as one line, each problem naming the flag or --set that caused it, if one did,
    else where it is in the config (prefixed by ``origin``, the config file, when every problem is the file's)."""
    assignments = list(assignments)
    problems, from_file = [], True
    for item in error.errors():
        loc = tuple(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        cause = next((a for a in reversed(assignments) if loc[:len(a.path)] == a.path), None)
        where = ".".join(loc)
        if cause is not None:
            from_file = False
            problems.append(f"{cause.given}: {message}")
        else:
            problems.append(f"{where}: {message}" if where else message)
    joined = "; ".join(problems)
    return f"{origin}: {joined}" if origin and from_file else joined


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _is_dict(kind: Any) -> bool:
    return typing.get_origin(kind) is dict or kind is dict


def _inner(annotation: Any) -> Any:
    """The type an option holds, through Optional (``Prices | None`` -> Prices): a model, a dict, Any (anything
    goes below it), or None for a single value."""
    if annotation is Any:
        return Any
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(kinds) == 1:
            return _inner(kinds[0])
        return Any
    return annotation if (_is_model(annotation) or _is_dict(annotation)) else None
