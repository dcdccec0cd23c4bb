"""The local Ray instance of one sweep driver: started apart from the command's process group,
and stopped, all of it, before the command returns.

``lipsweep sweep`` without ``--ray-address`` starts its own Ray (gcs_server, raylet, the
dashboard and runtime-env agents, the workers). Two things went wrong with it:

- Ray starts its daemons in the driver's process group. A signal to that group (the terminal
  hanging up, ``timeout 2h lipsweep sweep ...``, ``kill -- -PGID``) killed gcs_server and the
  raylet under the driver: the driver waited 60 s for the GCS, exited 1 instead of 129/143, its
  runs were not marked KILLED, and the trial workers were still running when it returned.
  (Ctrl-C was spared only because Ray blocks SIGINT in its daemons.) While :func:`start` runs
  ``ray.init``, each daemon gets a process group of its own; the driver alone takes a group
  signal, stops the sweep cleanly (:mod:`lipsweep.sweep.signals`) and then stops Ray. This needs
  the kernel fate-sharing that Ray uses on Linux (``PR_SET_PDEATHSIG``: the daemons still die
  with the driver); without it Ray's reaper kills by process group, and nothing is changed.
- Ray's own end (``ray.shutdown`` at interpreter exit) signals the raylet and GCS and returns
  without waiting; workers whose raylet was SIGKILLed after its one second of grace linger as
  orphans. :meth:`LocalRay.stop` shuts Ray down, then waits for every process of this
  instance to be gone, and SIGKILLs what is left after :data:`GRACE_S`.

The processes of the instance are found by a marker in their environment,
``LIPSWEEP_RAY_SESSION=<pid>-<random>``, set in the driver just before ``ray.init``: every Ray
process inherits it, orphans included (a walk of the driver's children would miss those), and
no other Ray on the machine carries it. A cluster that the driver only joins (``--ray-address``)
is never stopped: :func:`start` is not used for it, and ``ray.shutdown`` only disconnects from a
cluster it did not start. Reading the environment needs ``/proc`` (Linux); elsewhere only
``ray.shutdown`` runs.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

_log = logging.getLogger("lipsweep.sweep")

MARKER = "LIPSWEEP_RAY_SESSION"
GRACE_S = 10.0  # after ray.shutdown: how long the processes have to exit on their own
KILL_WAIT_S = 10.0  # after SIGKILL: how long to wait for them to be gone


class LocalRay:
    """The Ray instance this driver started; :meth:`stop` ends every process of it."""

    def __init__(self) -> None:
        self.session = f"{os.getpid()}-{secrets.token_hex(6)}"

    def pids(self) -> list[int]:
        """The live processes of this instance (its marker in their environment)."""
        return session_pids(self.session)

    def stop(self, grace_s: float = GRACE_S) -> list[int]:
        """``ray.shutdown``, then wait for this instance's processes to exit; SIGKILL the ones
        left after ``grace_s``. Returns the pids that had to be killed."""
        import ray

        try:
            if ray.is_initialized():
                ray.shutdown()  # raylet first (it stops its workers), then GCS and the agents
        finally:
            left = _wait_gone(self.session, grace_s)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if left:
                _log.warning(
                    "%d Ray processes of this sweep did not exit within %.0f s of ray.shutdown; "
                    "killed them (pids %s)",
                    len(left),
                    grace_s,
                    " ".join(map(str, left)),
                )
                still = _wait_gone(self.session, KILL_WAIT_S)
                if still:
                    _log.error("Ray processes %s outlived SIGKILL", " ".join(map(str, still)))
            if os.environ.get(MARKER) == self.session:
                del os.environ[MARKER]
        return left


def start(**init_kwargs: Any) -> tuple[LocalRay, Any]:
    """``ray.init(**init_kwargs)`` for a local instance: marked, each daemon in a process group
    of its own. Returns the handle and ``ray.init``'s context. If ``ray.init`` fails or is
    interrupted, what it had started is stopped before the exception goes on."""
    import ray

    local = LocalRay()
    os.environ[MARKER] = local.session
    try:
        with _own_process_groups():
            ctx = ray.init(**init_kwargs)
    except BaseException:
        local.stop()
        raise
    return local, ctx


@contextmanager
def _own_process_groups() -> Iterator[None]:
    """While active, Ray starts each daemon in a new process group (``Popen(process_group=0)``).

    Ray has no option for it; its daemons are started through ``ray._private.services.
    ConsolePopen`` (Ray 2.60, pinned), which is replaced for the block. On Windows Ray already
    does the same; without kernel fate-sharing its reaper needs the shared group. If the
    attribute is gone in another Ray, nothing is changed (the daemons share the driver's group
    as before)."""
    try:
        from ray._private import services
        from ray._private.utils import detect_fate_sharing_support
    except ImportError:  # pragma: no cover - depends on Ray internals
        yield
        return
    base = getattr(services, "ConsolePopen", None)
    if base is None or sys.platform == "win32" or not detect_fate_sharing_support():
        yield
        return

    class _OwnGroupPopen(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("process_group", 0)
            super().__init__(*args, **kwargs)

    services.ConsolePopen = _OwnGroupPopen
    try:
        yield
    finally:
        services.ConsolePopen = base


def session_pids(session: str) -> list[int]:
    """Live processes (not zombies) other than this one whose environment holds
    ``MARKER=session``; empty where there is no ``/proc``."""
    needle = f"{MARKER}={session}".encode()
    me = os.getpid()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if needle not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone, or another user's
            continue
        if stat[stat.rindex(")") + 2 :][:1] not in ("Z", "X"):
            found.append(int(entry))
    return found


def _wait_gone(session: str, timeout_s: float) -> list[int]:
    """Poll until no process of ``session`` is left or ``timeout_s`` passed; what is left."""
    deadline = time.monotonic() + timeout_s
    left = session_pids(session)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = session_pids(session)
    return left
