"""lipsweep.core.logs: lipsweep's log lines as a Python user of the API meets them (shown
like the CLI's, a URI's password redacted, the user's own logging configuration left alone),
each in a fresh interpreter."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )


_URI = "postgresql://" + "u:secret@h/x"  # split: no file git commits holds a password URI


def test_the_api_shows_lipsweeps_info_lines_unless_logging_is_configured():
    """From Python, lipsweep's INFO lines (the Optuna study's path among them) are shown as
    the CLI shows them, and a logging configuration the user made is left alone."""
    call = (
        "from lipsweep import api; api.sweep(space='smoke', dry_run=True)\n"
        "log = logging.getLogger('lipsweep.sweep')\n"
        f"log.info('study in %s', {_URI!r}); log.debug('not shown')\n"
    )
    user = "logging.basicConfig(level=logging.INFO, format='U %(message)s')\n"
    fresh = _python("import logging\n" + call + user + call)
    assert fresh.returncode == 0, fresh.stderr
    lines = fresh.stderr.splitlines()
    assert len(lines) == 2, lines  # the second call: the user's handler alone, once
    shown = r"\d\d:\d\d:\d\d INFO lipsweep\.sweep: study in postgresql://\*\*\*@h/x"
    assert re.fullmatch(shown, lines[0]), lines[0]
    assert lines[1] == f"U study in {_URI}"  # their format, their filters
    theirs = _python(
        "import logging; logging.basicConfig(level=logging.WARNING, format='U %(message)s')\n"
        + call
        + "assert logging.getLogger('lipsweep').handlers == []\n"
        + "assert logging.getLogger('lipsweep').level == logging.NOTSET\n"
    )
    assert theirs.returncode == 0 and theirs.stderr == "", theirs.stderr
