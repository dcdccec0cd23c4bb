"""The hooks a trial calls (:class:`TrialCallbacks`), torch-free.

They live apart from ``trial/run.py`` so that what implements them (the Tune reporter in
``sweep/trainable.py``) can be imported by the sweep driver without importing torch: the
driver only schedules trials, and torch costs it ~3-4 s of start-up and ~300 MB.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

EVALUATION_LOGGERS = ("lipsweep.trial.evaluation", "lipsweep.attacks", "lipsweep.lipschitz")
"""The loggers of a trial's final evaluation: what a sweep's worker shows of it (its
progress), where every other INFO line of the trial stays quiet."""


class TrialCallbacks:
    """Hooks a trial calls; override what you need (all no-ops here)."""

    def on_epoch_end(
        self, epoch: int, metrics: dict[str, float], checkpoint: Optional[Path]
    ) -> None:
        """After epoch ``epoch`` (1-based) is trained and evaluated; ``checkpoint`` is the
        folder written for it, or None when ``checkpoint_every`` skipped this epoch."""

    def on_trial_end(self, metrics: dict[str, float], artifacts: Path) -> None:
        """After the final evaluation; ``artifacts`` holds the Lipschitz arrays and figures."""
