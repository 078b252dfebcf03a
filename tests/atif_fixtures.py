"""ATIF trajectories written the way Harbor and OpenHands write theirs (from the ATIF RFC 0001 and their published
examples; written here, not copied): Harbor's trial folder for its mini-swe-agent (``bash_command`` calls, the
submission printed by mini's submit command, ``<trial>/result.json`` naming the task and its reward), and OpenHands'
CodeAct agent (``execute_bash``, ``str_replace_editor``, ``think`` and ``finish`` calls, the final diff as
``extra.git_patch``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SUBMIT_COMMAND = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cd /testbed && git add -A && git diff --cached"
USAGE = {"prompt_tokens": 2400, "completion_tokens": 180, "cached_tokens": 2000}


def _agent_step(step_id: int, message: str, calls: list[tuple[str, dict[str, Any]]], outputs: list[str | None],
                cost: float, model: str) -> dict[str, Any]:
    tool_calls = [{"tool_call_id": f"call_{step_id}_{n + 1}", "function_name": name, "arguments": arguments}
                  for n, (name, arguments) in enumerate(calls)]
    results = [{"source_call_id": call["tool_call_id"], "content": output}
               for call, output in zip(tool_calls, outputs, strict=True) if output is not None]
    return {"step_id": step_id, "timestamp": f"2026-03-02T10:{step_id:02d}:00Z", "source": "agent",
            "model_name": model, "message": message, **({"tool_calls": tool_calls} if tool_calls else {}),
            **({"observation": {"results": results}} if results else {}),
            "metrics": {**USAGE, "cost_usd": cost}}


def _opening(system: str, task: str) -> list[dict[str, Any]]:
    return [{"step_id": 1, "timestamp": "2026-03-02T10:00:00Z", "source": "system", "message": system},
            {"step_id": 2, "timestamp": "2026-03-02T10:00:01Z", "source": "user", "message": task}]


def harbor_mini_trial(folder: Path, task_name: str, commands: list[tuple[str, str]], submission: str,
                      cost_per_step: float = 0.002, reward: float = 1.0, trial: str | None = None) -> Path:
    """Harbor's trial folder for mini-swe-agent: ``<trial>/agent/trajectory.json`` (one ``bash_command`` call a
    reply, the observation mini's ``<returncode>`` template; the last reply mini's submit command, which printed
    the diff) and ``<trial>/result.json`` (the task's name, the verifier's reward). Returns the trajectory's path.
    ``commands``: each command and its output."""
    model = "anthropic/claude-sonnet-4-5"
    steps = _opening("You are a helpful assistant that can interact with a computer.",
                     "Please solve this issue: add() subtracts instead of adding. The repository is in /testbed.")
    for command, output in commands:
        steps.append(_agent_step(len(steps) + 1, f"THOUGHT: next.\n\n```bash\n{command}\n```",
                                 [("bash_command", {"command": command})],
                                 [f"<returncode>0</returncode>\n<output>\n{output}</output>"], cost_per_step, model))
    steps.append(_agent_step(len(steps) + 1, f"THOUGHT: done.\n\n```bash\n{SUBMIT_COMMAND}\n```",
                             [("bash_command", {"command": SUBMIT_COMMAND})],
                             [f"COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n{submission}"], cost_per_step, model))
    agent_steps = len(commands) + 1
    trajectory = {
        "schema_version": "ATIF-v1.5", "session_id": "7f1c2b9e-harbor", "agent": {
            "name": "mini-swe-agent", "version": "1.14.2", "model_name": model},
        "steps": steps,
        "final_metrics": {"total_prompt_tokens": USAGE["prompt_tokens"] * agent_steps,
                          "total_completion_tokens": USAGE["completion_tokens"] * agent_steps,
                          "total_cached_tokens": USAGE["cached_tokens"] * agent_steps,
                          "total_cost_usd": round(cost_per_step * agent_steps, 6), "total_steps": len(steps)},
    }
    trial_dir = folder / (trial or f"{task_name}__aB3xY9")
    (trial_dir / "agent").mkdir(parents=True, exist_ok=True)
    path = trial_dir / "agent" / "trajectory.json"
    path.write_text(json.dumps(trajectory, indent=2))
    (trial_dir / "result.json").write_text(json.dumps({
        "id": "b0e6c1d2", "task_name": task_name, "trial_name": trial_dir.name,
        "agent_info": {"name": "mini-swe-agent", "version": "1.14.2"},
        "verifier_result": {"rewards": {"reward": reward}}}))
    return path


def openhands_trajectory(path: Path, instance_id: str, calls: list[tuple[str, str, dict[str, Any], str | None]],
                         git_patch: str, cost_per_step: float = 0.003) -> Path:
    """OpenHands' CodeAct agent as ATIF: each reply one tool call (``execute_bash``, ``str_replace_editor``,
    ``think``, ``finish``) with its thought and its observation; the instance and the final diff in ``extra``.
    ``calls``: (thought, function, arguments, observation)."""
    model = "openai/gpt-5-mini"
    steps = _opening("You are OpenHands agent, a helpful AI assistant that can interact with a computer.",
                     "<uploaded_files>\n/testbed\n</uploaded_files>\nadd() subtracts instead of adding.")
    for thought, name, arguments, observation in calls:
        steps.append(_agent_step(len(steps) + 1, thought, [(name, arguments)], [observation], cost_per_step, model))
    trajectory = {
        "schema_version": "ATIF-v1.8", "session_id": f"{instance_id}-oh", "trajectory_id": f"{instance_id}-oh-1",
        "agent": {"name": "openhands", "version": "0.59.0", "model_name": model,
                  "tool_definitions": [{"type": "function", "function": {"name": name}}
                                       for name in ("execute_bash", "str_replace_editor", "think", "finish")]},
        "steps": steps,
        "final_metrics": {"total_cost_usd": round(cost_per_step * len(calls), 6), "total_steps": len(steps)},
        "extra": {"instance_id": instance_id, "git_patch": git_patch, "agent_class": "CodeActAgent"},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(trajectory, indent=2))
    return path
