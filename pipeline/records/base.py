"""What every record type shares: its format version on disk, writing through the type, and reading a file back
as the record or as why it cannot be one (``Unreadable``).

Writing checks the record strictly: every field of the type its description gives (a writer that puts text where a
number belongs is a bug, found here and not by a report months later). Reading is of untrusted input (a run
directory someone else wrote, or an older swepipe): a file is unreadable when it is missing, not JSON, not a JSON
object, of a newer format than this swepipe knows, or of the wrong shape: an object or a list where a value belongs,
a value where an object or a list belongs, or an identity field (a prediction's instance id, its patch) that is not
text. A value of another kind than documented (text where a number belongs) is kept as it was read: the reports
show such values as they are and count them as nothing.

Unknown keys are allowed and kept, in both directions: a plug-in stage may add its own, a record of an older or
newer swepipe may hold keys this one does not name, and a record read and written again (a reused rollout) loses
none of them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from pipeline.rundir.storage import write_json_atomic

MISSING = "missing"
NOT_AN_OBJECT = "not a JSON object"
_READING = "reading"  # the validation context's key: the values of a file read back are untrusted input


def _kept_when_read(value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
    """A value of its documented type; reading, any other JSON value that is no object or list is kept as read."""
    try:
        return handler(value)
    except ValidationError:
        if info.context and info.context.get(_READING) and _is_scalar(value):
            return value
        raise


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def absent(description: str) -> Any:
    """A field a record may lack, None when it does (any field may be absent from a file: an older record's, a
    plug-in's). Typed ``Any`` so that a type checker takes the field's annotation as its type, as pydantic does."""
    return Field(None, description=description)


_KEPT = WrapValidator(_kept_when_read)
Text = Annotated[str, _KEPT]
Int = Annotated[int, _KEPT]
Number = Annotated[int | float, _KEPT]  # a JSON number: an int stays an int, a float a float
Flag = Annotated[bool, _KEPT]
_E = TypeVar("_E", bound=StrEnum)
# A closed vocabulary's field (``Word[AnEnum]``): its word as written (by a writer or on disk) becomes the enum's
# member; reading, a word the enum does not know is kept as read, as any value of another kind is.
Word = Annotated[_E, Field(strict=False), _KEPT]


class Part(BaseModel):
    """A part of a record (a candidate of the pool, a span of a brief): typed as records are, unknown keys kept."""

    model_config = ConfigDict(extra="allow", strict=True)

    def to_dict(self) -> dict[str, Any]:
        """The keys it was given (unknown ones too), as a dict."""
        data: dict[str, Any] = self.model_dump(exclude_unset=True, warnings=False)
        return data


class RecordError(ValueError):
    """A record that cannot be written as its type says (a writer's bug), or a file of the run's own that cannot
    be read back where the pipeline needs it; the message says which and why."""


@dataclass(frozen=True)
class Read:
    """A JSON file read back: its data, or None and why (``problem``: MISSING, or what was wrong with it)."""

    data: Any = None
    problem: str | None = None


def read_json(path: Path, errors: str = "strict") -> Read:
    """A run's JSON file, read as untrusted input. ``errors``: how bytes that are not UTF-8 are decoded ("strict":
    the file is unreadable; "surrogateescape" for a page, which shows such a byte as ``\\xXX``)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Read(problem=MISSING)
    except OSError as error:
        return Read(problem=f"cannot be read ({error})")
    try:
        return Read(json.loads(raw.decode("utf-8", errors=errors)))
    except ValueError as error:
        return Read(problem=f"not valid JSON, perhaps cut short by a kill ({len(raw):,} bytes; {error})")


@dataclass(frozen=True)
class Unreadable:
    """A record file that is no record: where it is and why (``why``: MISSING, "not valid JSON ...", NOT_AN_OBJECT,
    "of the wrong shape (...)", "of format N ..."), worded to follow "<file> is"."""

    path: Path | None
    why: str

    @property
    def missing(self) -> bool:
        return self.why == MISSING


class Record(Part):
    """A record of a run directory. A subclass names its file (``FILE``, a path pattern under runs/<run-id>/) and
    its current format (``FORMAT``); ``upgrade`` turns the data of an older format into the current one."""

    FORMAT: ClassVar[int] = 1
    FILE: ClassVar[str] = ""

    format: int = Field(0, description="the record's format version; records without it (written before "
                                       "records had versions) are format 0")

    # -- writing --------------------------------------------------------------------------------------------

    @classmethod
    def of(cls, data: Mapping[str, object]) -> Self:
        """The record of ``data`` (a writer's dict or TypedDict), checked strictly; RecordError names what does not
        fit."""
        try:
            record = cls.model_validate({**data, "format": cls.FORMAT})
        except ValidationError as error:
            raise RecordError(f"{cls.__name__} record: {describe(error)}") from None
        return record

    def to_dict(self) -> dict[str, Any]:
        """The record as a dict: the keys it was given (unknown ones too), without ``format`` (a matter of the
        file, not of the values stages pass on)."""
        data = super().to_dict()
        data.pop("format", None)
        return data

    def to_disk(self) -> dict[str, Any]:
        """What its file holds: the format first, then its keys as given."""
        return {"format": self.FORMAT, **self.to_dict()}

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.to_disk())

    # -- reading --------------------------------------------------------------------------------------------

    @classmethod
    def read(cls, path: Path, errors: str = "strict") -> Self | Unreadable:
        """The record in the file at ``path`` (an older format upgraded), or ``Unreadable`` saying why not.
        ``errors``: how bytes that are not UTF-8 are decoded (see ``read_json``)."""
        read = read_json(path, errors)
        if read.problem is not None:
            return Unreadable(path, read.problem)
        return cls.from_data(read.data, path)

    @classmethod
    def from_data(cls, data: Any, path: Path | None = None) -> Self | Unreadable:
        """The record of data read back (a file's, a line's), or ``Unreadable``: the one place a record's older
        formats are read."""
        if not isinstance(data, dict):
            return Unreadable(path, NOT_AN_OBJECT)
        version = data.get("format", 0)
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            return Unreadable(path, f"of the wrong shape (format: {version!r} is not a format version)")
        if version > cls.FORMAT:
            return Unreadable(path, f"of format {version}, newer than this swepipe reads ({cls.FORMAT}); "
                                    "upgrade swepipe to read it")
        data = cls.upgrade({**data, "format": version}, version, path)
        try:
            return cls.model_validate({**data, "format": cls.FORMAT}, context={_READING: True})
        except ValidationError as error:
            return Unreadable(path, f"of the wrong shape ({describe(error)})")

    @classmethod
    def upgrade(cls, data: dict[str, Any], version: int, path: Path | None) -> dict[str, Any]:
        """``data`` of format ``version`` in the current format. Format 0 differs from 1 only by having no
        ``format`` key, unless a subclass says otherwise."""
        return data

    @classmethod
    def load(cls, path: Path) -> Self:
        """The record at ``path``, for the pipeline resuming its own work: RecordError when it cannot be read."""
        record = cls.read(path)
        if isinstance(record, Unreadable):
            raise RecordError(f"{path} is {record.why}")
        return record


P = TypeVar("P", bound=Part)


def expect_record(value: object, record: type[P]) -> P:
    """``value``, which must be a ``record``: a plug-in that hands back anything else (the record's fields as a
    dict, as stages did before they returned records) is told what it must return."""
    if not isinstance(value, record):
        raise RecordError(f"expected a {record.__name__} record (pipeline.records), got {type(value).__name__}; "
                          f"build it with {record.__name__}.of(fields)")
    return value


def describe(error: ValidationError, most: int = 3) -> str:
    """What a validation error found, in a line: "exit_reason: Input should be a valid string; ..."."""
    found: dict[str, str] = {}
    for problem in error.errors(include_url=False):
        where = ".".join(str(part) for part in problem["loc"] if not _union_branch(str(part)))
        found.setdefault(where or "the record", problem["msg"])  # a union's branches: the first one's message
    parts = [f"{where}: {message}" for where, message in list(found.items())[:most]]
    more = len(found) - most
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _union_branch(part: str) -> bool:
    """Whether ``part`` of an error's location is the name pydantic gives a branch of a union ("int",
    "TestOutcome", "list[...]"), not a key."""
    return part in ("int", "float", "str", "bool", "none") or "[" in part or part in _part_names(Part)


def _part_names(cls: type[Part]) -> set[str]:
    subclasses: list[type[Part]] = cls.__subclasses__()
    return {name for sub in subclasses for name in (sub.__name__, *_part_names(sub))}
