"""Where a task's patch and a senior's brief came from: the words swepipe's own stages write as a record's
``source``. A plug-in principal or strategy may write a word of its own (``merge``), and a replay names its
trajectory file, so the records' fields stay text; swepipe's writers and readers name these members instead of
spelling the words."""

from __future__ import annotations

from enum import StrEnum


class PatchSource(StrEnum):
    """A prediction's and a principal result's ``source``: which stage's patch was submitted."""

    PRINCIPAL = "principal"  # the principal's edits, applied
    FALLBACK_JUNIOR_TOP = "fallback:junior_top"  # the principal's edits unusable: the most-voted candidate
    SENIOR_CHOICE = "senior_choice"  # principal off: the candidate the senior's brief names
    JUNIOR_TOP = "junior_top"  # principal off and no candidate named: the most-voted candidate that applies
    SKIP_JUNIOR_TOP = "skip:junior_top"  # principal.skip_when skipped the senior and principal: the top candidate
    SOLO = "solo"
    TEAM = "team"
    VOTE = "vote"
    NONE = "none"  # no patch


class BriefSource(StrEnum):
    """A brief's ``source``: who wrote what the principal was given."""

    SENIOR = "senior"  # the senior's own brief
    EXPANSION = "expansion"  # the senior gave nothing usable: the code around the candidates
    SKIPPED = "skipped"  # principal.skip_when skipped the senior
