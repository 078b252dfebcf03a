"""One SWE-Bench Pro task: the columns of ScaleAI/SWE-bench_Pro, already decoded."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypedDict

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from .decode import CellError, decode_list, decode_text, is_missing, json_encoded_string, unwrap_json_text

Language = Literal["python", "go", "js", "ts"]

# An instance id names the task's folder (runs/<id>/tasks/<instance_id>), container labels and eval
# results, so it must be a plain file name: SWE-Bench Pro's ids are
# instance_<owner>__<repo>-<sha>[-v<sha>|-vnan], letters, digits, _ - and . only.
MAX_INSTANCE_ID = 200
_ID_CHARS = re.compile(r"[A-Za-z0-9_.+@=~-]*")
# A base commit goes into git commands: a full or abbreviated hex sha only (SHA-1, or SHA-256 repositories).
_SHA = re.compile(r"[0-9a-fA-F]{7,40}|[0-9a-fA-F]{64}")


def check_instance_id(value: str) -> str:
    """``value`` when it can be an instance id: a plain file name (it names folders and files of a run and of a
    report); else ValueError saying what is wrong with it. Dataset rows and everything read back from a run
    directory are checked with it."""
    problem = None
    if not isinstance(value, str) or not value:
        problem = "it is not a non-empty text"
    elif len(value) > MAX_INSTANCE_ID:
        problem = f"it has {len(value)} characters, more than {MAX_INSTANCE_ID}"
    elif not _ID_CHARS.fullmatch(value):
        bad = next(c for c in value if not _ID_CHARS.fullmatch(c))
        problem = f"it contains {bad!r}"
    elif value[0] in ".-":
        problem = f"it starts with {value[0]!r}"
    elif ".." in value:
        problem = "it contains '..'"
    if problem:
        shown = repr(value if not isinstance(value, str) or len(value) <= 80 else value[:77] + "...")
        raise ValueError(f"{shown} is not a safe file name ({problem}); an instance id names the task's folder, "
                         "so it may hold only letters, digits and . _ - + @ = ~, must not start with a dot or a "
                         f"dash and has at most {MAX_INSTANCE_ID} characters")
    return value


class TaskRow(TypedDict):
    """A task as a dataset row of lists and texts (``Task.to_row``), its columns in the order of Task's fields."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    requirements: str
    interface: str
    repo_language: str
    patch: str
    test_patch: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    selected_test_files_to_run: list[str]
    before_repo_set_cmd: str
    dockerhub_tag: str
    issue_specificity: list[str]
    issue_categories: list[str]


class Task(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    # Identity columns must be non-empty: without them the task cannot be run or reported.
    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1)
    base_commit: str = Field(min_length=1)
    problem_statement: str = Field(min_length=1)
    requirements: str = ""
    interface: str = ""
    repo_language: Language
    patch: str = ""
    test_patch: str = ""
    fail_to_pass: list[str] = Field(validation_alias=AliasChoices("fail_to_pass", "FAIL_TO_PASS"))
    pass_to_pass: list[str] = Field(validation_alias=AliasChoices("pass_to_pass", "PASS_TO_PASS"))
    selected_test_files_to_run: list[str]
    before_repo_set_cmd: str
    dockerhub_tag: str = Field(min_length=1)
    issue_specificity: list[str] = Field(default_factory=list)
    issue_categories: list[str] = Field(default_factory=list)

    @field_validator("instance_id")
    @classmethod
    def _safe_file_name(cls, value: str) -> str:
        return check_instance_id(value)

    @field_validator("base_commit")
    @classmethod
    def _hex_sha(cls, value: str) -> str:
        stripped = value.strip()
        if not _SHA.fullmatch(stripped):
            shown = repr(value if len(value) <= 80 else value[:77] + "...")
            raise ValueError(f"{shown} is not a commit sha: expected 7 to 40 hexadecimal characters (the "
                             "dataset's rows hold the full 40)")
        return stripped

    @property
    def hidden_test_names(self) -> list[str]:
        """Every test the grader runs: those that must start passing and those that must keep passing."""
        return [*self.fail_to_pass, *self.pass_to_pass]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Task:
        """Decode one raw dataset row (string cells as on the Hub, or real lists); raises CellError."""
        values: dict[str, str | list[str]] = {}
        for key, value in row.items():
            column = COLUMN_ALIASES.get(key, key)
            if column not in COLUMNS or is_missing(value):
                continue
            if key != column and not is_missing(row.get(column)):
                continue  # the lower-case column wins over its upper-case alias
            try:
                values[column] = _DECODERS.get(column, decode_text)(value)
            except ValueError as error:
                raise CellError(column, str(error)) from None
        for column in REQUIRED_COLUMNS:
            if column not in values:
                keys = [column, *(alias for alias, name in COLUMN_ALIASES.items() if name == column)]
                present = any(key in row for key in keys)
                raise CellError(column, "the cell is empty (null)" if present else "required column is missing")
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            first = error.errors()[0]
            column = str(first["loc"][0]) if first["loc"] else "?"
            more = error.error_count() - 1
            message = str(first["ctx"]["error"]) if first["type"] == "value_error" else first["msg"]
            reason = message + (f" (and {more} more problem(s) in this row)" if more else "")
            raise CellError(column, reason) from None

    def to_row(self) -> TaskRow:
        """A JSON-serialisable row (lists stay lists) that `from_row` and `load_tasks` read back unchanged."""
        row: TaskRow = {
            "instance_id": self.instance_id, "repo": self.repo, "base_commit": self.base_commit,
            "problem_statement": self.problem_statement, "requirements": self.requirements,
            "interface": self.interface, "repo_language": self.repo_language, "patch": self.patch,
            "test_patch": self.test_patch, "fail_to_pass": list(self.fail_to_pass),
            "pass_to_pass": list(self.pass_to_pass),
            "selected_test_files_to_run": list(self.selected_test_files_to_run),
            "before_repo_set_cmd": self.before_repo_set_cmd, "dockerhub_tag": self.dockerhub_tag,
            "issue_specificity": list(self.issue_specificity), "issue_categories": list(self.issue_categories)}
        for column in TEXT_COLUMNS:
            # The loader unwraps JSON-encoded text, so text that merely looks encoded is wrapped once more.
            if json_encoded_string(row[column]) is not None:
                row[column] = json.dumps(row[column])
        return row


COLUMNS: tuple[str, ...] = tuple(Task.model_fields)
REQUIRED_COLUMNS: tuple[str, ...] = tuple(n for n, f in Task.model_fields.items() if f.is_required())
LIST_COLUMNS: tuple[str, ...] = tuple(n for n, f in Task.model_fields.items() if f.annotation == list[str])
# Columns the dataset sometimes stores JSON-encoded (a leading quote and literal \n escapes).
TEXT_COLUMNS: tuple[Literal["problem_statement", "requirements", "interface"], ...] = (
    "problem_statement", "requirements", "interface")
# Upper-case names used by swebench-style datasets.
COLUMN_ALIASES: dict[str, str] = {"FAIL_TO_PASS": "fail_to_pass", "PASS_TO_PASS": "pass_to_pass"}

_DECODERS: dict[str, Callable[[Any], str | list[str]]] = {
    **{column: decode_list for column in LIST_COLUMNS},
    **{column: unwrap_json_text for column in TEXT_COLUMNS},
}
