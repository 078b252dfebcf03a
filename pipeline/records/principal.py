"""The principal stage's result (pipeline.principal.stage.run_principal; pipeline.principal.choice.choose with the
principal model none; pipeline.principal.skip.SubmitTopCandidate when the skip rule held)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.records.base import Int, Number, Part, Record, Text, absent
from pipeline.records.brief import SkipDecision
from pipeline.rundir.layout import TASK, PrincipalFiles
from pipeline.text import patchtext


class Shown(Part):
    """The junior candidates as the principal was sent them (pipeline.principal.stage.ShownCandidates), named by
    their 1-based place in the pool."""

    tokens: Int = absent("the tokens of the candidates' block")
    shown: list[Int] = absent("the candidates shown")
    cut: list[Int] = absent("shown, but only the start of their patch (bigger than the budget)")
    over_budget: list[Int] = absent("left out: over principal.candidate_tokens")
    over_count: list[Int] = absent("left out by principal.show_candidates")


class PrincipalResult(Record):
    """The final patch and where it came from: the principal model's edits applied to a clean checkout of the base
    commit (checked to apply), a fallback, or a candidate submitted without a call. patch.diff beside it holds the
    same patch."""

    FILE = str(TASK.principal_files.result)

    source: Text = absent("principal, fallback:junior_top, senior_choice, junior_top, "
                          "skip:junior_top or none")
    error: Text | None = absent("why the principal's edits were not used, or why there is no patch")
    failed_attempts: list[Text] = absent("why each unusable reply was refused")
    calls: Int = absent("the principal model's calls (replies)")
    cost: Number = absent("dollars they cost")
    patch_lines: Int = absent("the patch's lines")
    candidates: Shown = absent("the candidates the principal was sent")
    candidate: Int | None = absent("without a call: the pool candidate (1-based) submitted")
    senior_candidate: Int | Text | None = absent("with the principal model none: the candidate the "
                                                 "brief named")
    senior_choice_problem: Text | None = absent("with the principal model none: why the brief's "
                                                "candidate was not used")
    skipped: SkipDecision = absent("when the skip rule held: its decision")
    patch: Text = absent("the final patch (format 0 results without it: patch.diff's)")

    @classmethod
    def upgrade(cls, data: dict[str, Any], version: int, path: Path | None) -> dict[str, Any]:
        """A result written before results held their patch: patch.diff beside it is the patch."""
        beside = PrincipalFiles(path.parent).patch if path is not None else None
        if "patch" not in data and beside is not None and beside.is_file():
            data["patch"] = patchtext.read(beside)
        return data
