"""The signal state a test process keeps: the dispositions of the signals a sweep's driver
handles or a shell sets, and the blocked mask.

A child process inherits a signal that is ignored or blocked (``exec`` resets only handlers),
so one test leaving SIGINT ignored makes every later sweep subprocess on that worker ignore
Ctrl-C. tests/conftest.py resets the state at start and fails a test that leaves it changed;
a test that starts Ray or Tune in its own process (``ray.init`` sets a SIGTERM handler, Tune
SIGINT and SIGUSR1 ones, and neither puts them back) runs inside :func:`signals_kept`.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

WATCHED = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGPIPE")
    if hasattr(signal, name)
)
"""SIGALRM is pytest-timeout's, which sets and clears it around each test itself."""

State = tuple[dict[int, Any], frozenset[int]]


def python_defaults() -> dict[int, Any]:
    """The dispositions a Python process started from a foreground shell has: SIGINT raises
    KeyboardInterrupt, SIGPIPE is ignored (Python's own choice), the rest are the system's."""
    out: dict[int, Any] = {sig: signal.SIG_DFL for sig in WATCHED}
    out[signal.SIGINT] = signal.default_int_handler
    if hasattr(signal, "SIGPIPE"):
        out[signal.SIGPIPE] = signal.SIG_IGN
    return out


def signal_state() -> State:
    """Each watched signal's disposition and the signals this thread blocks."""
    return {sig: signal.getsignal(sig) for sig in WATCHED}, frozenset(
        signal.pthread_sigmask(signal.SIG_BLOCK, [])
    )


def set_signal_state(state: State) -> None:
    """Put back ``state`` (:func:`signal_state`); in the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    handlers, blocked = state
    for sig, handler in handlers.items():
        if signal.getsignal(sig) != handler and handler is not None:
            signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def changes(before: State, after: State) -> list[str]:
    """What differs between two states, one entry per signal or for the mask."""
    out = [
        f"{signal.Signals(sig).name}: {before[0][sig]!r} -> {after[0][sig]!r}"
        for sig in WATCHED
        if before[0][sig] != after[0][sig]
    ]
    if before[1] != after[1]:
        names = sorted(signal.Signals(s).name for s in before[1] ^ after[1])
        out.append(f"blocked mask changed for {', '.join(names)}")
    return out


@contextmanager
def signals_kept() -> Iterator[None]:
    """Run the block, then put the signal state back as it was."""
    before = signal_state()
    try:
        yield
    finally:
        set_signal_state(before)
