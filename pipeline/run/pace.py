"""How fast a run's session goes: tasks done of the total, tasks an hour, and at that rate the time and the
dollars the rest will take. Counted from this session's finished tasks only (an earlier session's took their own
time), and said only once one has finished."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field


@dataclass
class Pace:
    total: int  # the run's tasks, those finished by earlier sessions included
    done_before: int  # finished by earlier sessions
    started: float = field(default_factory=time.monotonic)
    finished: int = 0  # by this session: answered, or left unfinished by an infrastructure fault
    spent: float = 0.0  # dollars this session's finished tasks cost

    def add(self, cost: object) -> None:
        """A task this session finished, and its cost (a number that is no finite number counts as none)."""
        self.finished += 1
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost) and cost > 0:
            self.spent += cost

    @property
    def done(self) -> int:
        return min(self.total, self.done_before + self.finished)

    def line(self, now: float | None = None) -> str:
        """"7/20 done, 3.5 tasks/h, about 3 h 43 min and $1.20 left at this rate": the rate and what is left once
        this session finished a task."""
        return ", ".join([f"{self.done}/{self.total} done", *self.estimate(now)])

    def estimate(self, now: float | None = None) -> list[str]:
        """The rate and what is left at it (nothing before this session's first task ends)."""
        if self.finished == 0:
            return []
        elapsed = max((time.monotonic() if now is None else now) - self.started, 1e-6)
        per_task = elapsed / self.finished
        said = [f"{3600 / per_task:.3g} tasks/h"]
        left = self.total - self.done
        if left > 0:
            dollars = f" and ${self.spent / self.finished * left:.2f}" if self.spent else ""
            said.append(f"about {duration(per_task * left)}{dollars} left at this rate")
        return said


def duration(seconds: float) -> str:
    """A time left, to the minute: "under a minute", "12 min", "3 h 5 min", "2 d 4 h"."""
    minutes = round(seconds / 60)
    if minutes < 1:
        return "under a minute"
    hours, minutes = divmod(minutes, 60)
    if hours == 0:
        return f"{minutes} min"
    days, hours = divmod(hours, 24)
    if days == 0:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{days} d {hours} h" if hours else f"{days} d"
