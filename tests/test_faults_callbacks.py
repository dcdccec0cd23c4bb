"""A space's ``callbacks:`` under hostile code: a callback that raises, exits or hangs.

The rule (lipsweep/sweep/user_callbacks.py): at start, a callback whose import or constructor
raises, calls ``sys.exit()`` or does not finish within ``LIPSWEEP_CALLBACK_TIMEOUT_S`` exits 2
with one line naming ``callbacks[i]``, before Ray starts or anything is written; while the sweep
runs, what a hook raises is logged and the sweep goes on, and a hook past the bound is logged
and not called again. Real Tune code (its ``CallbackList``, which the controller calls), no Ray
cluster: the sweep that proves Tune's loop goes on is the family-members sweep
(tests/test_family_members.py), which carries a hostile callback.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _sweep_helpers import NONE, ROOT, write_space

pytestmark = pytest.mark.faults

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize(
    "body,needle",
    [
        ("import sys\nsys.exit(3)\n", "importing at_import.Notify called sys.exit(3)"),
        (
            "import time\ntime.sleep(3600)\n",
            "importing at_import.Notify did not finish within 2 s (LIPSWEEP_CALLBACK_TIMEOUT_S)",
        ),
    ],
    ids=["sys.exit", "hang"],
)
def test_a_callback_module_that_exits_or_hangs_at_import_exits_2_naming_it(tmp_path, body, needle):
    """``sys.exit(3)`` at import must not end ``lipsweep sweep`` with status 3 and no word,
    nor a module that hangs at import hang the command for ever."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "at_import.py").write_text(
        body + "from ray.tune import Callback\n\nclass Notify(Callback):\n    pass\n"
    )
    space = write_space(tmp_path, [NONE], epochs=1, callbacks=["at_import.Notify"])
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(mods), str(ROOT)]),
        "LIPSWEEP_CALLBACK_TIMEOUT_S": "2",
    }
    argv = ["sweep", str(space), "--storage", str(work / "runs")]
    argv += ["--tracking-uri", f"sqlite:///{work / 'mlflow.db'}"]
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "lipsweep", *argv],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ": error: " in ln]
    assert len(errors) == 1 and f"callbacks[0]: {needle}" in errors[0], proc.stderr[-3000:]
    assert list(work.iterdir()) == []  # no store, no storage, no lock: nothing was started
    assert time.monotonic() - start < 60


def test_a_callback_that_raises_exits_or_hangs_never_stops_tunes_loop(
    tmp_path, caplog, monkeypatch
):
    """A ``callbacks:`` entry whose ``on_trial_result`` raises must not end the sweep with a
    TuneError traceback and its runs left RUNNING. Tune's own CallbackList calls every hook
    as its controller does; the one after the hostile ones still sees every event."""
    from ray.tune.callback import CallbackList

    from lipsweep.core.config_base import UsageError
    from lipsweep.search.space import load_space
    from lipsweep.sweep.user_callbacks import create_callbacks

    monkeypatch.syspath_prepend(str(TESTS))
    log = tmp_path / "seen.log"
    probe = "_plugins.tune_probe"
    hostile = f"{probe}.HostileCallback"
    callbacks = [
        {hostile: {"mode": "raise"}},
        {hostile: {"mode": "exit"}},
        {hostile: {"mode": "hang"}},
        {hostile: {"mode": "raise", "hook": "on_experiment_end"}},
        {f"{probe}.RecordingCallback": {"path": str(log)}},
    ]
    space = write_space(tmp_path, [NONE], epochs=1, callbacks=callbacks)
    monkeypatch.setenv("LIPSWEEP_CALLBACK_TIMEOUT_S", "1")
    built = create_callbacks(load_space(space).callbacks, str(space))
    built = pickle.loads(pickle.dumps(built))  # as Tune keeps them with the experiment
    callbacks = CallbackList(built)
    caplog.set_level(logging.INFO, logger="lipsweep")
    start = time.monotonic()
    for epoch in (1, 2, 3):
        callbacks.on_trial_result(iteration=epoch, trials=[], trial=None, result={"epoch": epoch})
    callbacks.on_experiment_end(trials=[None])
    assert time.monotonic() - start < 10  # the hang was waited for once, 1 s
    assert log.read_text().splitlines() == [
        "probe result 1",
        "probe result 2",
        "probe result 3",
        "probe end 1",
    ]
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    hostile = f"{probe}.HostileCallback"
    assert lines == [
        f"callbacks[0] {hostile}: on_trial_result raised ValueError: on_trial_result broke; "
        "the sweep goes on (logged once per hook)",
        f"callbacks[1] {hostile}: on_trial_result called sys.exit(4); "
        "the sweep goes on (logged once per hook)",
        f"callbacks[2] {hostile}: on_trial_result did not return within 1 s "
        "(LIPSWEEP_CALLBACK_TIMEOUT_S); it is not called again in this sweep",
        f"callbacks[0] {hostile}: failures in all: on_trial_result 3 times",
        f"callbacks[1] {hostile}: failures in all: on_trial_result 3 times",
        f"callbacks[3] {hostile}: on_experiment_end raised ValueError: on_experiment_end "
        "broke; the sweep goes on (logged once per hook)",
    ], lines
    assert callbacks.get_state() is None  # no callback here keeps state: nothing to save
    for bad in ("0", "-1", "nan", "inf", "soon"):  # the bound itself: a positive number
        monkeypatch.setenv("LIPSWEEP_CALLBACK_TIMEOUT_S", bad)
        with pytest.raises(UsageError, match="LIPSWEEP_CALLBACK_TIMEOUT_S: must be a positive"):
            create_callbacks(load_space(space).callbacks, str(space))
