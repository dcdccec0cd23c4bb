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
no other Ray on the machine carries it. ``SPT_NOENV=1`` beside it keeps it readable in the
processes that take a title (:meth:`LocalRay.mark`). A cluster that the driver only joins
(``--ray-address``) is never stopped: :func:`start` is not used for it, and ``ray.shutdown``
only disconnects from a cluster it did not start. Reading the environment needs ``/proc``
(Linux); elsewhere only ``ray.shutdown`` runs.

A driver killed outright (``SIGKILL``) runs none of this, and Ray's two agents outlived it.
:func:`start` also starts :mod:`lipsweep.sweep.ray_watchdog`, a small process apart from the
job that kills what is left of the instance once the driver has exited; :meth:`LocalRay.stop`
ends it last.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
from contextlib import contextmanager
from typing import Any, Iterator, Optional

from lipsweep.sweep import ray_internals, ray_watchdog
from lipsweep.sweep.ray_watchdog import MARKER, kill_session, session_pids, wait_gone

_log = logging.getLogger("lipsweep.sweep")

GRACE_S = 10.0  # after ray.shutdown: how long the processes have to exit on their own
WATCHDOG_EXIT_S = 5.0  # after SIGTERM: how long the watchdog has to exit
NOENV = "SPT_NOENV"  # set: setproctitle leaves the environment block alone (see LocalRay.mark)


class LocalRay:
    """The Ray instance this driver started; :meth:`stop` ends every process of it."""

    def __init__(self) -> None:
        self.session = f"{os.getpid()}-{secrets.token_hex(6)}"
        self.watchdog: Optional[subprocess.Popen] = None
        self._set_noenv = False

    def mark(self) -> None:
        """Mark the processes Ray will start: the session variable in this process's environment
        (they inherit it), and ``SPT_NOENV=1`` unless set. Ray's ``setproctitle`` (a vendored
        py-setproctitle) otherwise overwrites the start of the environment block of each process
        that takes a title (the agents, the workers): in ``/proc/<pid>/environ`` the marker was
        found or not depending on where it lay (of Ray's two agents left by a SIGKILLed driver,
        in one run both were found by it, in another neither). With ``SPT_NOENV`` the block is
        left alone and a title is at most as long as the command line (Ray's are long)."""
        os.environ[MARKER] = self.session
        self._set_noenv = NOENV not in os.environ
        os.environ.setdefault(NOENV, "1")

    def unmark(self) -> None:
        """Undo :meth:`mark` in this process."""
        if os.environ.get(MARKER) == self.session:
            del os.environ[MARKER]
        if self._set_noenv:
            os.environ.pop(NOENV, None)
            self._set_noenv = False

    def start_watchdog(self) -> None:
        """Start :mod:`lipsweep.sweep.ray_watchdog` for this instance: a child in a session of
        its own, without the marker (``stop`` must not wait for it), standard library only
        (``-I -S``: no site-packages, no ``PYTHON*`` variables). Where there is no ``/proc`` it
        could find nothing, and is not started; if it cannot start, the sweep goes on."""
        if self.watchdog is not None or not os.path.isdir("/proc") or not sys.executable:
            return
        env = {k: v for k, v in os.environ.items() if k != MARKER}
        try:
            self.watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", ray_watchdog.__file__, str(os.getpid()), self.session],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            _log.warning(
                "could not start the Ray watchdog (%s); if this driver is killed with SIGKILL, "
                "Ray's agents may be left running",
                exc,
            )

    def stop_watchdog(self) -> None:
        """End the watchdog (its job is done once this instance is stopped) and reap it."""
        proc, self.watchdog = self.watchdog, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=WATCHDOG_EXIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

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
            left = wait_gone(self.session, grace_s)
            if left:
                _, still = kill_session(self.session)  # the watchdog's kill, here and now
                _log.warning(
                    "%d Ray processes of this sweep did not exit within %.0f s of ray.shutdown; "
                    "killed them (pids %s)",
                    len(left),
                    grace_s,
                    " ".join(map(str, left)),
                )
                if still:
                    _log.error("Ray processes %s outlived SIGKILL", " ".join(map(str, still)))
            self.unmark()
            self.stop_watchdog()
        return left


def start(**init_kwargs: Any) -> tuple[LocalRay, Any]:
    """``ray.init(**init_kwargs)`` for a local instance: marked, each daemon in a process group
    of its own. Returns the handle and ``ray.init``'s context. If ``ray.init`` fails or is
    interrupted, what it had started is stopped before the exception goes on."""
    import ray

    local = LocalRay()
    local.start_watchdog()  # before the marker is set: it must not carry it
    local.mark()
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

    Ray has no option for it; its daemons are started through ``ConsolePopen`` of Ray's
    services (:func:`lipsweep.sweep.ray_internals.daemon_services`), which is replaced for the
    block. On Windows Ray already does the same; without kernel fate-sharing its reaper needs
    the shared group. If the class is gone in another Ray, nothing is changed (the daemons
    share the driver's group)."""
    services = None if sys.platform == "win32" else ray_internals.daemon_services()
    if services is None:
        yield
        return
    base = services.ConsolePopen

    class _OwnGroupPopen(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("process_group", 0)
            super().__init__(*args, **kwargs)

    services.ConsolePopen = _OwnGroupPopen
    try:
        yield
    finally:
        services.ConsolePopen = base
