"""The senior's record (pipeline.senior.stage.run_senior, or pipeline.senior.skipped.SkippedBrief when the skip rule
held; ``swepipe coverage --senior-at`` writes the same record for the first k rollouts)."""

from __future__ import annotations

from pipeline.records.base import Flag, Int, Number, Part, Record, Text, absent
from pipeline.records.retrieval import RetrievalFinding
from pipeline.rundir.layout import NN, TASK


class Span(Part):
    """Lines of a file the fix depends on."""

    file: Text = absent("the file, from the repository root")
    start: Int = absent("its first line (1-based, in the base commit)")
    end: Int = absent("its last line")
    reason: Text = absent("why it matters (a span of the code expansion: its kind and reason)")


class SkipDecision(Part):
    """principal.skip_when's decision on the task's pool (pipeline.principal.skip.skip_decision)."""

    skip: Flag = absent("whether the senior and principal were skipped")
    top_share_needed: Number = absent("principal.skip_when.top_share")
    min_submitted: Int = absent("principal.skip_when.min_submitted")
    submitted: Int = absent("the rollouts that submitted")
    top_candidate: Text | None = absent("the key of the pool's top candidate")
    top_votes: Int = absent("its votes")
    top_submitted_votes: Int = absent("its votes among the submitted rollouts")
    top_share: Number = absent("those votes over the submitted rollouts")
    reason: Text = absent("why, in words")


class SeniorAt(Part):
    """What ``swepipe coverage --senior-at`` ran the senior on (in analysis/senior-at-NN/brief.json)."""

    k: Int = absent("the rollouts the senior was shown: the first k")
    rollouts: list[Int] = absent("their indices")
    K: Int = absent("the rollouts of the task")
    seconds: Number = absent("the senior's wall time")


class Brief(Record):
    """The senior's brief: its analysis and the code spans the fix depends on (checked: paths from the repository
    root, ranges within the files), the candidate it judged right or closest, and the context materialised from
    the spans under senior.context_tokens, as the principal is sent it (also in context.md beside it)."""

    FILE = f"{TASK.senior_files.brief}; {TASK.senior_at_files(NN).brief} (swepipe coverage --senior-at)"

    analysis: Text | SeniorAt = absent(f"the senior's analysis; in {TASK.relative(TASK.senior_at_files(NN).brief)}, "
                                       "what the senior was run on")
    spans: list[Span] = absent("the spans it named, as checked")
    source: Text = absent("senior (its own brief), expansion (the code around the candidates, "
                          "when the senior gave no usable brief) or skipped")
    problems: list[Text] = absent("span lines and spans dropped, and why; spans cut to the budget")
    candidate: Int | Text | None = absent("the pool candidate (1-based) the senior judged right or "
                                          "closest; null: none of them (older briefs: its key)")
    context_spans: list[Span] | None = absent("the spans the context holds (the senior's, then the "
                                              "candidates' hunks, within the budget); null when "
                                              "skipped")
    context_tokens: Int = absent("the context's tokens")
    senior_error: Text | None = absent("why the senior gave no brief of its own")
    senior_exit: Text | None = absent("how the senior agent ended (null: no agent ran)")
    senior_cost: Number = absent("dollars the senior agent's calls cost")
    senior_steps: Int = absent("its steps")
    senior_retrieval: list[RetrievalFinding] = absent("the retrieval audit's findings on the senior's exploration "
                                                      "(pipeline.audit); [] when none; absent when no agent ran or "
                                                      "it was not audited")
    context: Text = absent("the context text, as context.md holds it (absent when skipped, and in "
                           "analysis/senior-at-NN/)")
    skipped: SkipDecision = absent("when the skip rule held: its decision")
