"""The agent's record as it grows: paid replies become steps, answers become messages.

Other threads read the record (a team's lead reads its workers'), so every change goes through here, under
one lock.
"""

from __future__ import annotations

import threading

from pipeline.agent.agent_run import AgentRun, AgentStep
from pipeline.models.client import Completion, Usage
from pipeline.records.chat import ChatMessage


class Transcript:
    def __init__(self, record: AgentRun):
        self.record = record
        self.lock = threading.RLock()

    def add_reply(self, completion: Completion) -> AgentStep:
        """A paid reply: a new step, its cost and tokens counted, its message in the history."""
        message: ChatMessage = {"role": "assistant", "content": completion.content}
        if completion.tool_calls:
            message["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for c in completion.tool_calls]
        with self.lock:
            record = self.record
            step = AgentStep(index=len(record.steps), reply=completion.content,
                             model_seconds=round(completion.latency, 4), cost=completion.cost,
                             input_tokens=completion.input_tokens, output_tokens=completion.output_tokens,
                             tool_calls=completion.tool_calls)
            record.steps.append(step)
            record.cost += completion.cost
            record.input_tokens += completion.input_tokens
            record.output_tokens += completion.output_tokens
            record.messages.append(message)
        return step

    def add_billed(self, billed: Usage | None) -> None:
        """What a call that gave no reply was billed (the provider's report) still counts in the record."""
        if billed is not None and billed.cost:
            with self.lock:
                self.record.cost += billed.cost
                self.record.input_tokens += billed.input
                self.record.output_tokens += billed.output

    def tell(self, step: AgentStep, text: str) -> None:
        """The answer to a step: a tool result for each of its calls, else a user message."""
        if step.tool_calls:
            with self.lock:
                self.record.messages.extend({"role": "tool", "tool_call_id": call["id"], "content": text}
                                            for call in step.tool_calls)
        else:
            self.add_user_message(text)

    def add_user_message(self, text: str) -> None:
        """Shown before the next turn; joined to the last user message so roles keep alternating."""
        with self.lock:
            messages = self.record.messages
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "user":
                last["content"] = f"{last['content']}\n\n{text}"
            else:
                messages.append({"role": "user", "content": text})

    def new_session(self) -> None:
        """Limits count afresh from here."""
        with self.lock:
            self.record.session_step, self.record.session_seconds = len(self.record.steps), self.record.seconds
