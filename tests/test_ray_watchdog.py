"""The watchdog that ends a SIGKILLed driver's Ray.

No Ray: plain ``sleep`` processes stand for the daemons, marked as Ray's would be (the
session variable in their environment), under a "driver" that is a child python process.
The full sweep is covered by ``tests/test_faults.py::test_driver_sigkill_then_resume_...``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lipsweep.sweep.local_ray import LocalRay
from lipsweep.sweep.ray_watchdog import MARKER, session_pids

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]

# The stand-in driver: starts the watchdog as LocalRay.start does (or, "poll", the same script
# on a Python without os.pidfd_open), then two marked sleeps (one in a process group of its
# own, as Ray's daemons are) and one unmarked; prints the pids and waits to be killed.
DRIVER = r"""
import json, os, subprocess, sys, time
from lipsweep.sweep import ray_watchdog
from lipsweep.sweep.local_ray import MARKER, LocalRay

local = LocalRay()
if sys.argv[1] == "pidfd":
    local.start_watchdog()
    watchdog = local.watchdog
else:
    code = ("import os, runpy, sys; del os.pidfd_open; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    path = ray_watchdog.__file__
    watchdog = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", code, path, str(os.getpid()), local.session],
        start_new_session=True,
    )
local.mark()
marked = [subprocess.Popen(["sleep", "600"]).pid,
          subprocess.Popen(["sleep", "600"], process_group=0).pid]
plain = subprocess.Popen(["sleep", "600"], env={k: v for k, v in os.environ.items()
                                                 if k != MARKER}).pid
print(json.dumps({"session": local.session, "watchdog": watchdog.pid, "marked": marked,
                  "plain": plain}), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Running, not a zombie (a killed orphan waits for its new parent to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def _wait(pred, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("mode", ["pidfd", "poll"])
def test_a_sigkilled_driver_leaves_no_marked_process(tmp_path, mode):
    """Kill the driver with SIGKILL: its marked processes die within seconds, an unmarked
    one of the same driver survives, and the watchdog exits."""
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, mode],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    pids: dict = {}
    try:
        pids = json.loads(driver.stdout.readline())
        marked, plain, watchdog = pids["marked"], pids["plain"], pids["watchdog"]
        assert sorted(session_pids(pids["session"])) == sorted(marked)  # not the watchdog
        time.sleep(0.3)  # the watchdog is waiting, and kills nothing while the driver lives
        assert all(_alive(p) for p in [*marked, plain, watchdog])
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
        assert _wait(lambda: not any(_alive(p) for p in marked), 10), [
            p for p in marked if _alive(p)
        ]
        assert _wait(lambda: not _alive(watchdog), 10), "the watchdog outlived its job"
        assert _alive(plain), "an unmarked process was killed"
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for pid in [*pids.get("marked", []), pids.get("plain"), pids.get("watchdog")]:
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc (Linux)")
def test_a_normal_stop_ends_the_watchdog_and_it_kills_nothing():
    """``LocalRay.stop`` ends the watchdog last; ended so, it kills nothing (the driver,
    here this test process, is alive: the instance is still in use)."""
    local = LocalRay()
    local.start_watchdog()
    assert local.watchdog is not None
    marker_env = {**os.environ, MARKER: local.session}
    sleeper = subprocess.Popen(["sleep", "600"], env=marker_env)
    try:
        assert local.watchdog.pid not in session_pids(local.session)
        watchdog = local.watchdog
        local.stop_watchdog()
        assert watchdog.returncode == -signal.SIGTERM and local.watchdog is None
        time.sleep(0.3)
        assert sleeper.poll() is None, "the watchdog killed a process of a live driver"
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc (Linux)")
def test_a_process_with_a_ray_title_keeps_the_marker_readable():
    """Ray's setproctitle overwrote the start of the environment block of its agents and
    workers, so the marker was found or not by where it lay: with the environment of a short
    command, never. ``LocalRay.mark`` sets ``SPT_NOENV`` with it. A child marked so takes
    Ray's title for a worker, as ``ray::IDLE`` does, and is still found by the marker."""
    local = LocalRay()
    code = (
        "import sys, ray._raylet; ray._raylet.setproctitle('ray::IDLE'); print(1, flush=True); "
        "sys.stdin.read()"
    )
    saved = dict(os.environ)
    try:
        local.mark()
        env = dict(os.environ)
    finally:
        local.unmark()
    assert dict(os.environ) == saved  # unmark puts the driver's environment back
    child = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout.readline().strip() == b"1"
        assert Path(f"/proc/{child.pid}/cmdline").read_bytes().startswith(b"ray::IDLE")
        assert session_pids(local.session) == [child.pid]
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(sys.platform == "win32", reason="Ray groups its daemons itself on Windows")
def test_local_rays_daemons_start_in_a_process_group_of_their_own():
    """Inside ``LocalRay``'s block, the class the pinned Ray starts its daemons with
    (``ray_internals.daemon_services``) starts each in a process group of its own, so a
    signal to the command's group reaches the driver alone; after the block Ray's own class
    is back."""
    from lipsweep.sweep import local_ray, ray_internals

    services = ray_internals.daemon_services()
    assert services is not None, "the pinned Ray's ConsolePopen or fate sharing is missing"
    base = services.ConsolePopen
    code = "import os; print(os.getpgid(0))"
    with local_ray._own_process_groups():
        child = services.ConsolePopen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        out, _ = child.communicate(timeout=60)
    assert int(out) == child.pid != os.getpgid(0)
    assert services.ConsolePopen is base
