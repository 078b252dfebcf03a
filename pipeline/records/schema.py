"""The run directory's schema, from the record types: ``python -m pipeline.records.schema`` writes
docs/run-directory.md (``--check``: exit 1 when the file differs from what would be written), so the document
cannot drift from the types (tests/test_records.py checks it)."""

from __future__ import annotations

import enum
import inspect
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from pipeline.records import RECORDS
from pipeline.records.base import Part, Record
from pipeline.rundir.docgen import doc_main

DOC = Path(__file__).resolve().parents[2] / "docs" / "run-directory.md"
_SCALARS = {str: "text", int: "integer", float: "number", bool: "boolean", type(None): "null"}

INTRO = """\
Every file a run writes is described in docs/run-layout.md. Nine of them are typed records (`pipeline/records/`),
each with its format version on disk (`"format": 1`): the six that carry a task from stage to stage and into the
reports, and the solo and team baselines' results. A file without a `format` key was written before records had
versions: format 0, read as the same record (an older shape is upgraded in one place, the record type's
`upgrade`).

How a record is read back (reports, task pages, export, whatif, a resumed run): a file is unreadable when it is
missing, not valid JSON, not a JSON object, of a newer format than this swepipe reads, or of the wrong shape (an
object or a list where a value belongs, a value where an object or a list belongs, a prediction without its
instance id or with a patch that is not text); the report names it and goes on. A value of another kind than the
one below (text where a number belongs) is kept as it was read. Keys not listed here are kept: plug-in stages may
add their own. Any field may be absent from a file (an older record, a plug-in's); the descriptions say when a
writer of this version leaves one out.

Types: text, integer, number (an integer or a decimal), boolean, null; a list of values; an object: text keys to
values; a part (a nested object) links to its table.
"""


def render() -> str:
    """docs/run-directory.md: one section a record (its files, its format, each field), then the parts."""
    lines = ["# The run directory's records", "",
             "<!-- Generated from pipeline/records by `python -m pipeline.records.schema`: edit the record types, "
             "not this file. -->", "", INTRO]
    parts: list[type[Part]] = []
    for record in RECORDS:
        lines += _section(record, parts)
    lines += ["## Parts", "", "The objects the records hold.", ""]
    done: set[type] = set()
    while parts:
        part = parts.pop(0)
        if part not in done:
            done.add(part)
            lines += _section(part, parts, level="###")
    return "\n".join(lines).rstrip() + "\n"


def _section(model: type[BaseModel], parts: list[type[Part]], level: str = "##") -> list[str]:
    lines = [f"{level} {model.__name__}", ""]
    if issubclass(model, Record):
        files = "; ".join(_file(name.strip()) for name in model.FILE.split(";"))
        lines += [f"Files: {files}. Format {model.FORMAT}.", ""]
    lines += [_paragraph(inspect.getdoc(model) or ""), "", "| field | type | description |", "| --- | --- | --- |"]
    for name, info in model.model_fields.items():
        kind = _type(info.annotation, parts)
        if info.is_required():
            kind += ", required"
        lines.append(f"| `{name}` | {kind} | {_cell(info.description or '')} |")
    return lines + [""]


def _type(annotation: Any, parts: list[type[Part]]) -> str:
    """``annotation`` in words; the parts it names are added to ``parts``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0], parts)
    if origin in (typing.Union, types.UnionType):
        plain = [typing.get_args(arg)[0] if typing.get_origin(arg) is typing.Annotated else arg for arg in args]
        if int in plain and float in plain:  # a JSON number: an integer or a decimal
            args = tuple(float if arg is float else arg
                         for arg, bare in zip(args, plain, strict=True) if bare is not int)
        return " or ".join(_type(arg, parts) for arg in args)
    if origin is list:
        if not args:
            return "list"
        element = _type(args[0], parts)
        return f"list of ({element})" if " or " in element else f"list of {element}"
    if origin is dict:
        value = args[1] if len(args) > 1 else typing.Any
        return "object" if value is typing.Any else f"object of {_type(value, parts)}"
    if annotation is typing.Any:
        return "any value"
    if isinstance(annotation, type) and issubclass(annotation, Part):
        parts.append(annotation)
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if isinstance(annotation, type) and issubclass(annotation, enum.StrEnum):  # a closed vocabulary
        return "text: " + ", ".join(f"`{member.value}`" for member in annotation)
    raise TypeError(f"no words for the type {annotation!r}")


def _file(name: str) -> str:
    """A FILE entry: its path as code, a remark after it in parentheses as text."""
    path, _, remark = name.partition(" (")
    return f"`{path}`" + (f" ({remark}" if remark else "")


def _paragraph(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    return _paragraph(text).replace("|", "\\|")


def main(argv: list[str] | None = None) -> int:
    return doc_main(argv, module="pipeline.records.schema", doc=DOC, render=render, source="the record types")


if __name__ == "__main__":
    sys.exit(main())
