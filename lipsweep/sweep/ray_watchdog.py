"""Ends the local Ray of a sweep driver that was killed outright (``SIGKILL``, the OOM killer).

A ``SIGKILL``ed driver runs no cleanup. gcs_server, the raylet and the workers die with it
(``PR_SET_PDEATHSIG``), but Ray's ``DashboardAgent`` and ``RuntimeEnvAgent`` were alive 30 s
later in 6 of 6 runs (docs/reliability.md, "Ray processes after a sweep"): they notice their raylet
gone after 5 x 0.4 s, then publish "Raylet is terminated" to the dead GCS with a 60 s timeout
before they exit (Ray 2.60, ``ray/_private/process_watcher.py``; ``publish_error_to_driver``).

LocalRay (:mod:`lipsweep.sweep.local_ray`) starts this module just before ``ray.init`` as a
script, ``python -I -S ray_watchdog.py PID SESSION`` (standard library only, no lipsweep import:
0.05 s to start, 12 MB), in a session of its own, so a signal to the job's process group does
not end it early. It waits for the driver to exit, then SIGKILLs every process whose environment
holds ``LIPSWEEP_RAY_SESSION=SESSION`` (and only those) and exits. It is the driver's child and
does not carry the marker itself. ``LocalRay.stop`` ends it after a normal stop.

The driver's exit is seen through a pidfd (``os.pidfd_open``, Linux 5.3) or, without one, by
polling ``os.getppid()``; both are immune to pid reuse: while the watchdog runs, its parent is
the driver or, once the driver is gone, whatever process adopted it.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import sys
import time
from pathlib import Path

_log = logging.getLogger("lipsweep.sweep")

MARKER = "LIPSWEEP_RAY_SESSION"
KILL_WAIT_S = 10.0  # after SIGKILL: how long to wait for the processes to be gone
POLL_S = 0.2  # without a pidfd: how often the parent is checked


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


def wait_gone(session: str, timeout_s: float) -> list[int]:
    """Poll until no process of ``session`` is left or ``timeout_s`` passed; what is left."""
    deadline = time.monotonic() + timeout_s
    left = session_pids(session)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = session_pids(session)
    return left


def kill_session(session: str, timeout_s: float = KILL_WAIT_S) -> tuple[list[int], list[int]]:
    """SIGKILL every process of ``session``, again for any that appears, until none is left or
    ``timeout_s`` passed. Returns (the pids killed, the pids still alive at the end)."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    left = session_pids(session)
    while left:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            if pid not in killed:
                killed.append(pid)
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)
        left = session_pids(session)
    return killed, left


def wait_for_parent_exit(driver_pid: int) -> None:
    """Return once ``driver_pid``, this process's parent when it was started, has exited."""
    if os.getppid() != driver_pid:
        return  # gone before we looked
    try:
        fd = os.pidfd_open(driver_pid)
    except (AttributeError, OSError):  # no pidfd (not Linux, kernel < 5.3, seccomp): poll
        while os.getppid() == driver_pid:
            time.sleep(POLL_S)
        return
    try:
        if os.getppid() != driver_pid:
            return  # the pid may already name another process: do not wait on it
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll():  # readable once the process has exited
            pass
    finally:
        os.close(fd)


def watch(driver_pid: int, session: str) -> int:
    """Wait for the driver to exit, then kill what is left of its Ray. Returns the exit code:
    0, or 1 if some process of the session outlived SIGKILL."""
    wait_for_parent_exit(driver_pid)
    killed, still = kill_session(session)
    if killed:
        _log.warning(
            "the sweep driver (pid %d) exited without stopping its Ray; killed %d processes it "
            "left (pids %s)",
            driver_pid,
            len(killed),
            " ".join(map(str, killed)),
        )
    if still:
        _log.error("Ray processes %s outlived SIGKILL", " ".join(map(str, still)))
    return 1 if still else 0


def main(argv: list[str]) -> int:
    """``ray_watchdog.py DRIVER_PID SESSION``."""
    logging.basicConfig(format="lipsweep ray watchdog: %(message)s", level=logging.INFO)
    if len(argv) != 2 or not argv[0].isdigit() or not argv[1]:
        _log.error("usage: ray_watchdog.py DRIVER_PID SESSION")
        return 2
    return watch(int(argv[0]), argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
