"""Live sweep progress: counts, ETA and the best trial so far, fed by trial events.

Pure bookkeeping, no Ray: :class:`lipsweep.sweep.callbacks.ConsoleProgress` feeds it Tune's
trial events and prints :meth:`SweepProgress.status_lines` every ``--status-every`` seconds
and at each trial end, e.g.::

    running 2 · pending 27 · finished 2 · failed 0 · ETA 3h10m
    best acc_clean (max): 3a1f_00003 [none seed=0] 27.00

Once the scheduler has stopped trials, the counts show the compute saved so far: the epochs the
stopped trials did not run, out of the epochs of the whole sweep run in full
(``stopped 3 · saved 14/40 epochs (35%)``).

The ETA assumes the remaining trials take as long as the mean ended (finished, stopped or
failed) trial and run as many at a time as have run at once so far: (the running trials'
remainders + pending x mean) / parallel, and no less than the longest remainder. It is a rough
guide. Until a timed trial has ended there is none, and the line says instead what it waits
for and how far the furthest running trial is (``waiting for the first trial to end
(furthest: epoch 3/4 done)``, then ``(furthest: evaluating for 2m)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from lipsweep.core.metric_names import ACC_CLEAN

FINISHED = "finished"
STOPPED = "stopped"  # stopped early by the scheduler: it ended, on purpose
FAILED = "failed"
END_STATES = (FINISHED, STOPPED, FAILED)
SEP = " · "


def format_duration(seconds: float) -> str:
    """Compact duration: ``45s``, ``12m``, ``3h10m``, ``2d4h``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    m = s // 60
    if m < 60:
        return f"{m}m"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h}h"


@dataclass
class _Trial:
    label: str
    started: Optional[float] = None
    state: str = "pending"
    duration: Optional[float] = None
    epoch: int = 0
    """Its last reported epoch (0: none yet)."""
    epochs: int = 0
    """Its epochs in full (0: unknown)."""
    evaluating_since: Optional[float] = None
    """When its final evaluation started (None: not evaluating)."""


@dataclass
class SweepProgress:
    """State of a sweep of ``total`` trials, built from start/end events.

    ``objective`` is (metric, "max" | "min"); the best trial is the best finished trial on it.
    Times are seconds from any monotonic clock (the caller passes ``now``).
    """

    total: int
    objective: tuple[str, str] = (ACC_CLEAN, "max")
    trials: dict[str, _Trial] = field(default_factory=dict)
    best: Optional[tuple[str, float]] = None
    max_running: int = 0
    total_epochs: int = 0
    """Epochs of the whole sweep run in full (0: unknown, the saved compute is not shown)."""
    saved: dict[str, int] = field(default_factory=dict)
    """Epochs each stopped trial did not run."""

    def started(self, trial_id: str, now: float, label: str = "") -> None:
        """A trial started, restarted after a failure, or was restored by ``--resume``."""
        t = self.trials.setdefault(trial_id, _Trial(label or trial_id))
        if t.state != "running":
            t.started, t.state = now, "running"
            t.evaluating_since = None
        self.max_running = max(self.max_running, self.count("running"))

    def ended(
        self,
        trial_id: str,
        state: str,
        now: float,
        metrics: Optional[dict[str, float]] = None,
        label: str = "",
    ) -> None:
        """A trial ended as ``finished``, ``stopped`` (early, by the scheduler) or ``failed``."""
        if state not in END_STATES:
            raise ValueError(f"state must be one of {END_STATES}, got {state!r}")
        t = self.trials.setdefault(trial_id, _Trial(label or trial_id))
        if t.started is not None and t.state == "running":
            t.duration = now - t.started
        t.state = state
        self._offer(trial_id, state, metrics)

    def _offer(self, trial_id: str, state: str, metrics: Optional[dict[str, float]]) -> None:
        """Make a finished trial the best one if its objective value is finite and better."""
        value = (metrics or {}).get(self.objective[0])
        if state == FINISHED and isinstance(value, (int, float)) and math.isfinite(value):
            if self.best is None or self._better(float(value), self.best[1]):
                self.best = (trial_id, float(value))

    def epoch_done(
        self, trial_id: str, epoch: int, epochs: int, now: float, evaluating: bool = False
    ) -> None:
        """A running trial reported epoch ``epoch`` of ``epochs``; ``evaluating``: its final
        evaluation starts now."""
        t = self.trials.get(trial_id)
        if t is None or t.state != "running":
            return
        t.epoch, t.epochs = int(epoch), int(epochs)
        if evaluating:
            t.evaluating_since = now

    def stopped_at(self, trial_id: str, epochs_done: int, epochs_full: int) -> None:
        """A trial stopped early after ``epochs_done`` of its ``epochs_full`` epochs."""
        self.saved[trial_id] = max(0, int(epochs_full) - int(epochs_done))

    def ended_before(
        self,
        trial_id: str,
        state: str,
        label: str = "",
        metrics: Optional[dict[str, float]] = None,
    ) -> None:
        """A trial that ended before this driver started (``--resume``): counted, not timed;
        a finished one competes for the best with its last ``metrics``."""
        if trial_id not in self.trials or self.trials[trial_id].state == "pending":
            self.trials[trial_id] = _Trial(label or trial_id, state=state)
            self._offer(trial_id, state, metrics)

    def _better(self, a: float, b: float) -> bool:
        return a > b if self.objective[1] == "max" else a < b

    @property
    def ran(self) -> int:
        """Trials this driver started or continued (not those that ended before a resume)."""
        return sum(t.started is not None for t in self.trials.values())

    def count(self, state: str) -> int:
        return sum(t.state == state for t in self.trials.values())

    @property
    def pending(self) -> int:
        seen = sum(t.state != "pending" for t in self.trials.values())
        return max(0, self.total - seen)

    def eta(self, now: float) -> Optional[float]:
        """Seconds until the last trial ends, or None before any timed trial has ended."""
        durations = [t.duration for t in self.trials.values() if t.duration is not None]
        if not durations:
            return None
        mean = sum(durations) / len(durations)
        running = [t for t in self.trials.values() if t.state == "running"]
        left_running = [
            max(mean - (now - t.started), 0.0) if t.started is not None else mean / 2
            for t in running
        ]
        parallel = max(self.max_running, 1)
        # the work left, shared by `parallel` slots, but no less than the longest remainder
        work = sum(left_running) + self.pending * mean
        return max(max(left_running, default=0.0), work / parallel)

    def counts_line(self, now: float) -> str:
        eta = self.eta(now)
        parts = [
            f"running {self.count('running')}",
            f"pending {self.pending}",
            f"finished {self.count(FINISHED)}",
        ]
        if self.count(STOPPED):
            parts.append(f"stopped {self.count(STOPPED)}")
            if self.total_epochs > 0 and self.saved:
                saved = sum(self.saved.values())
                share = 100 * saved / self.total_epochs
                parts.append(f"saved {saved}/{self.total_epochs} epochs ({share:.0f}%)")
        if eta is None:  # no ETA yet: what it waits for instead
            eta_text = self.waiting_for(now)
        elif eta < 1 and self.count("running"):  # running past the mean ended trial's time
            eta_text = "ETA soon"
        else:
            eta_text = f"ETA {format_duration(eta)}"
        parts += [f"failed {self.count(FAILED)}", eta_text]
        return SEP.join(parts)

    def waiting_for(self, now: float) -> str:
        """What the ETA waits for before a timed trial has ended, and how far the furthest
        running trial is."""
        running = [t for t in self.trials.values() if t.state == "running"]
        if not running:
            return "waiting for a trial to start"
        first = not any(t.state in END_STATES for t in self.trials.values())
        which = "the first trial" if first else "a trial of this run"
        ahead = max(running, key=lambda t: (t.evaluating_since is not None, t.epoch))
        if ahead.evaluating_since is not None:
            where = f"evaluating for {format_duration(now - ahead.evaluating_since)}"
        elif ahead.epoch:
            of = f"/{ahead.epochs}" if ahead.epochs else ""
            where = f"epoch {ahead.epoch}{of} done"
        else:
            where = "in its first epoch"
        return f"waiting for {which} to end (furthest: {where})"

    def best_line(self) -> str:
        metric, mode = self.objective
        if self.best is None:
            return f"best {metric} ({mode}): no finished trial yet"
        tid, value = self.best
        return f"best {metric} ({mode}): {self.trials[tid].label} {value:.2f}"

    def status_lines(self, now: float, tty: bool) -> list[str]:
        """The status block: framed lines on a terminal, one plain line in a log file."""
        if not tty:
            return [f"status: {self.counts_line(now)}{SEP}{self.best_line()}"]
        rule = "─" * 8
        return [
            f"{rule} sweep status {rule}",
            self.counts_line(now),
            self.best_line(),
            "─" * (2 * len(rule) + len(" sweep status ")),
        ]
