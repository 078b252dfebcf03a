"""The retrieval audit (issue 42): every trajectory swepipe writes, replays or imports is read for the agent
reaching for the answer instead of deriving it (``pipeline.audit.retrieval`` says what is read and how). A package of
its own below the stages and the readers of runs, so that both import it: it imports nothing of swepipe's."""

from pipeline.audit.project import Subject, task_subject
from pipeline.audit.retrieval import (
    KINDS,
    AgentAction,
    FindingData,
    Reaching,
    agent_actions,
    audit,
    audit_agent,
    finding_dicts,
    reached_line,
)

__all__ = ["KINDS", "AgentAction", "FindingData", "Reaching", "Subject", "agent_actions", "audit", "audit_agent",
           "finding_dicts", "reached_line", "task_subject"]
