"""How the hidden tests score patches, as the user chose it: one value for swepipe run --evaluate, eval, replay
and sweep --evaluate, checked when it is made."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import SwepipeError
from pipeline.evaluation.logs import LOG_LIMIT
from pipeline.evaluation.profiles import DEFAULT_PROFILE, scoring_profile


@dataclass(frozen=True)
class ScoringOptions:
    run_scripts: Path | None = None
    dockerfiles: Path | None = None
    timeout: float | None = None  # None: the profile's
    scoring_profile: str = DEFAULT_PROFILE
    eval_network: bool = False
    eval_log_mb: float = LOG_LIMIT / 1e6

    def __post_init__(self) -> None:
        if (self.timeout is not None and self.timeout <= 0) or self.eval_log_mb <= 0:
            raise SwepipeError(f"--timeout ({self.timeout}) and --eval-log-mb ({self.eval_log_mb}) must be above 0")
        scoring_profile(self.scoring_profile)  # an unknown name is refused before anything runs

    @property
    def log_limit(self) -> int:
        return int(self.eval_log_mb * 1e6)
