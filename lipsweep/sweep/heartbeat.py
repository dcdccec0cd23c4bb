"""The sweep owner's heartbeat on its MLflow parent run (imported only once Ray is).

A driver on remote storage (``s3://``) has no file lock that other hosts see; it tags its
parent run ``lipsweep.owner`` and refreshes ``lipsweep.heartbeat`` from Tune's event loop, so a
second driver can tell a live owner from a dead one (see :mod:`lipsweep.sweep.driver`).
"""

from __future__ import annotations

import time

from ray.tune import Callback

from lipsweep.sweep.handoff import Handoff
from lipsweep.tracking import Tracker


class Heartbeat(Handoff, Callback):
    """Every ``every_s`` seconds of Tune's loop, a buffered tag write (never blocks)."""

    def __init__(self, tracker: Tracker, parent: str, every_s: float) -> None:
        self.tracker = tracker
        self.parent = parent
        self.every_s = every_s
        self._last = time.monotonic()

    def on_step_end(self, iteration: int, trials: list, **info) -> None:
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self.tracker.heartbeat(self.parent)
