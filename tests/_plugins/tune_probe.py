"""A Ray Tune callback that a space names by import path (``callbacks:``), as it would name
W&B's: it appends one line per trial result and one at the experiment's end to a file, so a
test can read back that Tune called it."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from ray.tune import Callback


class RecordingCallback(Callback):
    """Appends ``result <epoch>`` per trial result and ``end <n trials>`` to ``path``."""

    def __init__(self, path: str, tag: str = "probe") -> None:
        self.path, self.tag = path, tag

    def _write(self, line: str) -> None:
        with Path(self.path).open("a") as fh:
            fh.write(f"{self.tag} {line}\n")

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info):
        self._write(f"result {result.get('epoch')}")

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self._write(f"end {len(trials)}")


class NotACallback:
    """A class that is no ``ray.tune.Callback`` (the sweep refuses it, naming the entry)."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class HostileCallback(Callback):
    """A callback whose ``hook`` misbehaves on every call: ``mode`` ``raise`` (ValueError),
    ``exit`` (``sys.exit(4)``) or ``hang`` (sleeps an hour)."""

    def __init__(self, mode: str, hook: str = "on_trial_result") -> None:
        self.mode, self.hook = mode, hook

    def _misbehave(self, hook: str) -> None:
        if hook != self.hook:
            return
        if self.mode == "raise":
            raise ValueError(f"{hook} broke")
        if self.mode == "exit":
            sys.exit(4)
        if self.mode == "hang":
            time.sleep(3600)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info):
        self._misbehave("on_trial_result")

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._misbehave("on_trial_complete")

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self._misbehave("on_experiment_end")


class FractionCallback(Callback):
    """Turns accuracies (percent) into fractions, in place, as a user converting them for
    another tracker might: in each result it is handed, and in the trial's last result when
    the trial checkpoints."""

    @staticmethod
    def _fractions(result: dict) -> None:
        for key in [k for k in result if k.startswith("acc_")]:
            result[key] /= 100

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info):
        self._fractions(result)

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info):
        self._fractions(trial.last_result)


class LockedCallback(Callback):
    """Holds a lock, as a callback holding a tracker client or an HTTP session does: it cannot
    be pickled."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()
