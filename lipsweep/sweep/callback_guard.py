"""A space's Tune callback behind a guard: its errors and hangs never stop the sweep.

Tune calls :class:`GuardedCallback`; the guard runs the user's hook on a thread of its own and
waits for it at most ``timeout_s`` (:func:`callback_timeout_s`). What the hook raises
(``sys.exit()`` included) is logged, one line the first time per hook, and Tune's loop goes on;
a hook past the bound is logged once and the callback is not called again (its thread is left
behind, a daemon). Hooks the user's class does not override are not called. Only one hook of a
callback runs at a time, in Tune's order: the loop waits for each. The guard pickles with its
callback (Tune keeps callbacks with the experiment), without its counters. A hook gets a copy
of the ``result`` Tune hands it (Tune passes the very dict it keeps as the trial's last
result, which lipsweep logs to MLflow and the searcher is told): what a callback changes in it
never reaches the record. :func:`bounded`
and :func:`failed` put the same bound on a callback's import and constructor at start.
Imports Ray: only :func:`lipsweep.sweep.user_callbacks.create_callbacks` imports it.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ray.tune import Callback

from lipsweep.core.config_base import UsageError

_log = logging.getLogger("lipsweep.sweep")
TIMEOUT_ENV = "LIPSWEEP_CALLBACK_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 600.0


def callback_timeout_s() -> float:
    """How long a callback's import, constructor or one hook may take (seconds):
    ``LIPSWEEP_CALLBACK_TIMEOUT_S``, default 600; a UsageError naming it if it is not a
    positive number. A bound past the longest wait the platform allows (``inf``, ``1e13``:
    "no limit") is that longest wait, ``threading.TIMEOUT_MAX`` (292 years on Linux)."""
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value > 0:  # nan, zero and negatives
        raise UsageError(f"{TIMEOUT_ENV}: must be a positive number of seconds, got {raw!r}")
    return min(value, threading.TIMEOUT_MAX)


@dataclass
class _Outcome:
    value: Any = None
    error: Optional[BaseException] = None
    timed_out: bool = False


def bounded(fn: Callable[[], Any], timeout_s: float, name: str) -> _Outcome:
    """``fn()`` on a daemon thread, waited for at most ``timeout_s``: its value, or what it
    raised (any BaseException, ``SystemExit`` included), or ``timed_out`` (the thread is left
    running; it dies with the process)."""
    out = _Outcome()

    def run() -> None:
        try:
            out.value = fn()
        except BaseException as exc:  # noqa: BLE001 - a user's code: everything is reported
            out.error = exc

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join(timeout_s)
    out.timed_out = thread.is_alive()
    return out


def _copied(result: Any) -> Any:
    """A deep copy of ``result`` for a user's hook; a shallow one where a value cannot be
    copied (then a value changed in place inside it still reaches Tune's dict)."""
    try:
        return copy.deepcopy(result)
    except Exception:  # noqa: BLE001 - any value a trainable reported
        return dict(result) if isinstance(result, dict) else result


def _one_line(err: BaseException) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())


def failed(what: str, outcome: _Outcome, timeout_s: float) -> Optional[str]:
    """Why ``outcome`` of ``what`` (a user callback's import or constructor) is a failure."""
    if outcome.timed_out:
        return f"{what} did not finish within {timeout_s:g} s ({TIMEOUT_ENV}); is it waiting?"
    if isinstance(outcome.error, SystemExit):
        return f"{what} called sys.exit({outcome.error.code!r})"
    if outcome.error is not None:
        return f"{what} failed: {_one_line(outcome.error)}"
    return None


class GuardedCallback(Callback):
    """``callback`` (a ``ray.tune.Callback``) as Tune sees it, its errors logged, its hangs
    cut at ``timeout_s``; ``label`` names it in the log (``callbacks[i] module.Class``)."""

    def __init__(self, callback: Any, label: str, timeout_s: float) -> None:
        self.callback, self.label, self.timeout_s = callback, label, timeout_s
        self.errors: Counter[str] = Counter()
        self.stuck: Optional[str] = None  # the hook that did not return in time

    def __getstate__(self) -> dict[str, Any]:
        return {"callback": self.callback, "label": self.label, "timeout_s": self.timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["callback"], state["label"], state["timeout_s"])

    def _overrides(self, hook: str) -> bool:
        mine = getattr(type(self.callback), hook, None)
        return mine is not None and mine is not getattr(Callback, hook, None)

    def _run_hook(self, hook: str, *args: Any, **info: Any) -> Any:
        """The callback's ``hook``, bounded; None where it failed, hung or is not defined."""
        if self.stuck is not None or not self._overrides(hook):
            return None
        method = getattr(self.callback, hook)
        if "result" in info:
            info["result"] = _copied(info["result"])

        def run() -> Any:
            try:
                return method(*args, **info)
            except TypeError as err:  # setup() of an older signature, as CallbackList allows
                if hook == "setup" and "argument" in str(err):
                    return method()
                raise

        done = bounded(run, self.timeout_s, f"lipsweep-{hook}")
        if done.timed_out:
            self.stuck = hook
            _log.error(
                "%s: %s did not return within %g s (%s); it is not called again in this sweep",
                self.label,
                hook,
                self.timeout_s,
                TIMEOUT_ENV,
            )
            return None
        if done.error is not None:
            self.errors[hook] += 1
            if self.errors[hook] == 1:
                what = (
                    f"called sys.exit({done.error.code!r})"
                    if isinstance(done.error, SystemExit)
                    else f"raised {_one_line(done.error)}"
                )
                _log.warning(
                    "%s: %s %s; the sweep goes on (logged once per hook)",
                    self.label,
                    hook,
                    what,
                )
            _log.debug("%s: %s failed", self.label, hook, exc_info=done.error)
            return None
        return done.value

    def setup(self, **info: Any) -> None:
        self._run_hook("setup", **info)

    def on_step_begin(self, **info: Any) -> None:
        self._run_hook("on_step_begin", **info)

    def on_step_end(self, **info: Any) -> None:
        self._run_hook("on_step_end", **info)

    def on_trial_start(self, **info: Any) -> None:
        self._run_hook("on_trial_start", **info)

    def on_trial_restore(self, **info: Any) -> None:
        self._run_hook("on_trial_restore", **info)

    def on_trial_save(self, **info: Any) -> None:
        self._run_hook("on_trial_save", **info)

    def on_trial_result(self, **info: Any) -> None:
        self._run_hook("on_trial_result", **info)

    def on_trial_complete(self, **info: Any) -> None:
        self._run_hook("on_trial_complete", **info)

    def on_trial_recover(self, **info: Any) -> None:
        self._run_hook("on_trial_recover", **info)

    def on_trial_error(self, **info: Any) -> None:
        self._run_hook("on_trial_error", **info)

    def on_checkpoint(self, **info: Any) -> None:
        self._run_hook("on_checkpoint", **info)

    def on_experiment_end(self, **info: Any) -> None:
        self._run_hook("on_experiment_end", **info)
        if sum(self.errors.values()) > len(self.errors):  # more than the lines logged
            counts = ", ".join(f"{hook} {n} times" for hook, n in sorted(self.errors.items()))
            _log.warning("%s: failures in all: %s", self.label, counts)

    def get_state(self) -> Optional[dict]:
        return self._run_hook("get_state")

    def set_state(self, state: dict) -> None:
        self._run_hook("set_state", state)
