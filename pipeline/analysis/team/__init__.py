"""The team analysis of team runs: records (what tasks/<id>/team/ holds, read), summaries (the numbers over
tasks, and a task's timeline before it is drawn) and cells (those numbers as the report's table cells and team
tables); pipeline.report.team_figures draws them. The names below are the package's public surface."""

from pipeline.analysis.team.cells import lead_model_table, team_by_task, team_overview
from pipeline.analysis.team.records import (
                                          ABSOLUTE,
                                          DIRECTIONS,
                                          NOT_NAMED,
                                          OTHER,
                                          STAGES,
                                          DelegationHistory,
                                          LostWork,
                                          Message,
                                          Session,
                                          TeamRun,
                                          TeamTask,
                                          team_runs,
                                          team_task,
)
from pipeline.analysis.team.summaries import Bar, TeamSummary, TimelineRow, by_lead_model, summarise, timeline

__all__ = [
    "ABSOLUTE", "Bar", "DIRECTIONS", "DelegationHistory", "LostWork", "Message", "NOT_NAMED", "OTHER", "STAGES",
    "Session",
    "TeamRun", "TeamSummary", "TeamTask", "TimelineRow", "by_lead_model", "lead_model_table", "summarise",
    "team_by_task", "team_overview", "team_runs", "team_task", "timeline",
]
