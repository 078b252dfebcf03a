"""Which grammar holds a role's replies when the local model plays it (pipeline.models.grammars)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.models.grammars import BASH, EDIT, VIEW, Grammar, action_reply, edit_reply
from pipeline.settings.model_spec import Role

if TYPE_CHECKING:  # models is below config
    from pipeline.settings.config import RunConfig

# The team's actions besides bash and the editor (pipeline.team.lead.Lead.actions, pipeline.team.workers.Worker).
LEAD_ACTIONS = ("delegate", "wait", "check", "stop", "resume", "directory")
MESSAGE, DIRECTORY = "message", "directory"


def reply_grammar(role: str, config: RunConfig) -> Grammar | None:
    """The grammar of ``role``'s replies under ``config``; None in the tool format, where the local server holds
    every request with tools to one call of them (pipeline.models.gemma_chat)."""
    if role == Role.PRINCIPAL:
        return edit_reply()
    limits = config.limits
    if limits.action_format == "tools":
        return None
    if role == Role.SENIOR:  # it only views; its last reply is the brief
        return action_reply((BASH, VIEW) if limits.editor else (BASH,), brief=True)
    editor = (EDIT, VIEW) if limits.editor else ()
    messages = (MESSAGE,) if config.team.messages else ()
    team = {"lead": (*LEAD_ACTIONS, *messages),
            "worker": (*((DIRECTORY,) if config.team.directory else ()), *messages)}.get(role, ())
    return action_reply((BASH, *editor, *team))
