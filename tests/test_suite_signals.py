"""The suite's own signal hygiene (tests/conftest.py, tests/_signals.py): a test that leaves a
signal ignored, replaced or blocked fails, and a suite started with signals ignored (under
``nohup``, or as a background job of a script) gives its tests, and so the sweeps they start,
the dispositions of a foreground shell. A pytest run of three probe tests, in a subprocess
started with SIGINT and SIGHUP ignored; no Ray."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import signal
import subprocess
import sys


def test_a_child_starts_with_default_dispositions():
    shown = "import signal; print(signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGHUP))"
    out = subprocess.run([sys.executable, "-c", shown], capture_output=True, text=True).stdout
    assert out.split() == ["<built-in", "function", "default_int_handler>", "Handlers.SIG_DFL"]


def test_that_leaves_sighup_ignored():
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def test_after_it():
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL
"""


def _ignore_stop_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def test_a_test_leaving_a_signal_changed_fails_and_children_start_with_defaults(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest"]
        + ["test_probe.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])},
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_ignore_stop_signals,
    )
    out = proc.stdout + proc.stderr
    assert "2 passed, 1 error" in out, out[-3000:]
    assert "ERROR at teardown of test_that_leaves_sighup_ignored" in out, out[-3000:]
    assert "the test left the signal state changed: SIGHUP" in out, out[-3000:]
