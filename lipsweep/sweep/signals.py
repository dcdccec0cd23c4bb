"""Clean shutdown of a sweep driver on SIGINT, SIGTERM and SIGHUP.

Ray's ``ray.init`` makes SIGTERM ``sys.exit`` wherever the driver happens to be (it aborted
with rc 134 and left runs RUNNING), and SIGHUP kills the process outright. While a sweep runs,
:class:`StopSignals` routes all three to one graceful path, Tune's own stop request:

- inside Tune's loop, the first signal is logged and passed to Tune's stop request (its
  SIGUSR1 handler): Tune leaves the loop, saves the experiment state once more and stops the
  trials; the driver then marks the open MLflow runs KILLED and ``--resume`` continues;
- before the loop (Ray and the parent run starting), the driver unwinds at once
  (``KeyboardInterrupt``) and closes what it opened;
- after the loop (closing runs, delivering buffered writes), the driver finishes that work;
- a second signal stops at once (``KeyboardInterrupt``): trials die with the driver and the
  runs are still marked KILLED;
- the command exits ``128 + signal`` (130, 143, 129), the shell's convention, whenever a
  signal arrived;
- a signal that was ignored when the driver started stays ignored: ``nohup lipsweep sweep``
  keeps running when the terminal hangs up (before, the hangup stopped the sweep).

Tune's SIGINT handler is turned off (``TUNE_DISABLE_SIGINT_HANDLER=1``) so that SIGINT goes
through the same path and the exit code can name the signal that arrived. On leaving, the
handlers and that variable are as they were (a notebook or a test process runs on with them).

Inside Ray's workers (a trial, a ``confirm`` task), :func:`quiet_worker_exit` keeps Ray's
SIGTERM from relaying a traceback into the driver's log when it lands where Python cannot
raise.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, Callable, Optional

_log = logging.getLogger("lipsweep.sweep")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
START, TUNE, FINISH = "start", "tune", "finish"  # where the driver is
_TUNE_SIGINT = "TUNE_DISABLE_SIGINT_HANDLER"


def exit_code(signum: int) -> int:
    """The shell's exit status for a command stopped by ``signum``: 128 + its number."""
    return 128 + int(signum)


class StopSignals:
    """Context manager: while active, SIGINT/SIGTERM/SIGHUP request a graceful stop.

    ``received`` holds the first signal (``None`` if none arrived); the driver sets ``phase``
    (``START``, ``TUNE``, ``FINISH``). Only the main thread can install handlers; elsewhere
    this is a no-op.
    """

    def __init__(self) -> None:
        self.received: Optional[int] = None
        self.phase = START
        self._previous: dict[int, Any] = {}
        self._tune_sigint: Optional[str] = None  # TUNE_DISABLE_SIGINT_HANDLER at entry
        self._held: tuple[int, ...] = ()  # the stop signals this holds (not ignored at entry)

    def __enter__(self) -> "StopSignals":
        self._tune_sigint = os.environ.get(_TUNE_SIGINT)
        os.environ[_TUNE_SIGINT] = "1"
        if _main_thread():
            for sig in (*STOP_SIGNALS, signal.SIGUSR1):
                previous = signal.getsignal(sig)
                self._previous[sig] = signal.SIG_DFL if previous is None else previous
            # nohup (SIGHUP) or a shell's background job (SIGINT): whoever started us asked
            # for that signal to be ignored; it stays so, here and in the Ray processes
            self._held = tuple(s for s in STOP_SIGNALS if self._previous[s] != signal.SIG_IGN)
            self.reinstall()
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self._tune_sigint is None:
            os.environ.pop(_TUNE_SIGINT, None)
        else:
            os.environ[_TUNE_SIGINT] = self._tune_sigint

    def reinstall(self) -> None:
        """Take the stop signals back (``ray.init`` sets its own SIGTERM handler)."""
        if self._previous and _main_thread():
            for sig in STOP_SIGNALS:
                signal.signal(sig, self._handle if sig in self._held else signal.SIG_IGN)

    def enter(self, phase: str) -> None:
        """The driver moves to ``phase``; entering Tune's loop clears a stale Tune handler."""
        self.phase = phase
        if phase == TUNE and self._previous and _main_thread():
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # until tune.run installs its own

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:
            _log.warning("%s again: stopping now, without waiting for the trials", name)
            raise KeyboardInterrupt
        self.received = signum
        tune_stop = _tune_stop_handler()
        if self.phase == TUNE and tune_stop is not None:
            _log.warning(
                "%s: stopping the sweep (saving its state, stopping the trials, marking their "
                "runs KILLED); send it again to stop at once",
                name,
            )
            tune_stop(signal.SIGUSR1, frame)  # sets Tune's stop event; its loop then ends
        elif self.phase == FINISH:
            _log.warning("%s: the trials are done; closing the runs first", name)
        else:
            _log.warning("%s: stopping the sweep", name)
            raise KeyboardInterrupt


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _tune_stop_handler() -> Optional[Callable[[int, Optional[FrameType]], Any]]:
    """Tune's SIGUSR1 stop handler, once ``tune.run`` has installed it (else ``None``)."""
    handler = signal.getsignal(signal.SIGUSR1)
    if callable(handler) and getattr(handler, "__module__", "").startswith("ray.tune"):
        return handler
    return None


def quiet_worker_exit() -> None:
    """Drop, without a traceback, a ``SystemExit`` that Python cannot raise.

    Ray's worker turns SIGTERM into ``SystemExit`` (``ray/_private/worker.py``,
    ``Worker.main_loop``); the raylet sends it when it stops a worker (a finished trial's
    actor, a confirm task's worker at ``ray.shutdown``). If the signal lands while a weakref
    callback or a ``__del__`` runs, Python cannot raise the exception there: it prints
    "Exception ignored in ... SystemExit: 1" with a traceback, which Ray relays into the
    driver's log (a sweep's, after the trial's FINISHED line). The exit is dropped either way
    (the raylet then kills the worker); this hook only drops the traceback with it. Every
    other unraisable exception goes to the hook that was there before. Idempotent.
    """
    previous = sys.unraisablehook
    if getattr(previous, "lipsweep_quiet_exit", False):
        return

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, SystemExit):
            _log.debug("SystemExit in %r dropped (the worker is being stopped)", unraisable.object)
            return
        previous(unraisable)

    hook.lipsweep_quiet_exit = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook
