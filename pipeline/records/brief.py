"""The senior's record (pipeline.senior.stage.run_senior, or pipeline.principal.skip.SkippedSenior when the skip rule
held; ``swepipe coverage --senior-at`` writes the same record for the first k rollouts)."""

from __future__ import annotations

from pydantic import Field

from pipeline.layout import NN, TASK
from pipeline.records.base import Flag, Int, Number, Part, Record, Text


class Span(Part):
    """Lines of a file the fix depends on."""

    file: Text = Field(None, description="the file, from the repository root")
    start: Int = Field(None, description="its first line (1-based, in the base commit)")
    end: Int = Field(None, description="its last line")
    reason: Text = Field(None, description="why it matters (a span of the code expansion: its kind and reason)")


class SkipDecision(Part):
    """principal.skip_when's decision on the task's pool (pipeline.principal.skip.skip_decision)."""

    skip: Flag = Field(None, description="whether the senior and principal were skipped")
    top_share_needed: Number = Field(None, description="principal.skip_when.top_share")
    min_submitted: Int = Field(None, description="principal.skip_when.min_submitted")
    submitted: Int = Field(None, description="the rollouts that submitted")
    top_candidate: Text | None = Field(None, description="the key of the pool's top candidate")
    top_votes: Int = Field(None, description="its votes")
    top_submitted_votes: Int = Field(None, description="its votes among the submitted rollouts")
    top_share: Number = Field(None, description="those votes over the submitted rollouts")
    reason: Text = Field(None, description="why, in words")


class SeniorAt(Part):
    """What ``swepipe coverage --senior-at`` ran the senior on (in analysis/senior-at-NN/brief.json)."""

    k: Int = Field(None, description="the rollouts the senior was shown: the first k")
    rollouts: list[Int] = Field(None, description="their indices")
    K: Int = Field(None, description="the rollouts of the task")
    seconds: Number = Field(None, description="the senior's wall time")


class Brief(Record):
    """The senior's brief: its analysis and the code spans the fix depends on (checked: paths from the repository
    root, ranges within the files), the candidate it judged right or closest, and the context materialised from
    the spans under senior.context_tokens, as the principal is sent it (also in context.md beside it)."""

    FILE = f"{TASK.senior_files.brief}; {TASK.senior_at_files(NN).brief} (swepipe coverage --senior-at)"

    analysis: Text | SeniorAt = Field(None, description="the senior's analysis; in analysis/senior-at-NN/brief.json, "
                                                        "what the senior was run on")
    spans: list[Span] = Field(None, description="the spans it named, as checked")
    source: Text = Field(None, description="senior (its own brief), expansion (the code around the candidates, "
                                           "when the senior gave no usable brief) or skipped")
    problems: list[Text] = Field(None, description="span lines and spans dropped, and why; spans cut to the budget")
    candidate: Int | Text | None = Field(None, description="the pool candidate (1-based) the senior judged right or "
                                                           "closest; null: none of them (older briefs: its key)")
    context_spans: list[Span] | None = Field(None, description="the spans the context holds (the senior's, then the "
                                                               "candidates' hunks, within the budget); null when "
                                                               "skipped")
    context_tokens: Int = Field(None, description="the context's tokens")
    senior_error: Text | None = Field(None, description="why the senior gave no brief of its own")
    senior_exit: Text | None = Field(None, description="how the senior agent ended (null: no agent ran)")
    senior_cost: Number = Field(None, description="dollars the senior agent's calls cost")
    senior_steps: Int = Field(None, description="its steps")
    context: Text = Field(None, description="the context text, as context.md holds it (absent when skipped, and in "
                                            "analysis/senior-at-NN/)")
    skipped: SkipDecision = Field(None, description="when the skip rule held: its decision")
