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
    for bad in ("0", "-1", "nan", "-inf", "soon"):  # the bound itself: a positive number
        monkeypatch.setenv("LIPSWEEP_CALLBACK_TIMEOUT_S", bad)
        with pytest.raises(UsageError, match="LIPSWEEP_CALLBACK_TIMEOUT_S: must be a positive"):
            create_callbacks(load_space(space).callbacks, str(space))


def test_a_callback_with_the_older_setup_signature_has_its_setup_run_once():
    """Tune's CallbackList calls ``setup(stop=..., num_samples=..., total_num_samples=...)``
    and, for a ``setup(self)`` that takes none of them, ``setup()``: the guard does the same."""
    from ray.tune import Callback
    from ray.tune.callback import CallbackList

    from lipsweep.sweep.callback_guard import GuardedCallback

    class Older(Callback):
        def __init__(self) -> None:
            self.calls: list[dict] = []

        def setup(self) -> None:  # no keywords: the older signature Tune still accepts
            self.calls.append({})

    class Newer(Callback):
        def __init__(self) -> None:
            self.calls: list[dict] = []

        def setup(self, **info) -> None:
            self.calls.append(info)

    older, newer = Older(), Newer()
    guards = [GuardedCallback(cb, f"callbacks[{i}]", 5.0) for i, cb in enumerate((older, newer))]
    CallbackList(guards).setup(stop=None, num_samples=2, total_num_samples=2)
    assert older.calls == [{}]
    assert newer.calls == [{"stop": None, "num_samples": 2, "total_num_samples": 2}]
    assert all(not g.errors for g in guards)


def test_a_callback_that_rewrites_a_result_in_place_leaves_the_mlflow_record_alone(
    tmp_path, monkeypatch
):
    """Tune hands every callback the very result dict it keeps as the trial's last result, which
    lipsweep logs to MLflow when the trial completes: a callback turning accuracies into
    fractions in place, in the result or in ``trial.last_result`` before the trial's end, must
    not make MLflow record ``acc_clean`` 0.125 for 12.5. Tune's own CallbackList and Trial,
    driven as its controller does (results, then the last result kept, the final checkpoint,
    then the trial's end), real MLflow on SQLite; no Ray cluster."""
    from _sweep_helpers import TINY_FLAT, client, empty_store, stub_trial
    from ray.tune.callback import CallbackList

    from lipsweep.search.space import load_space
    from lipsweep.sweep.callbacks import MlflowSweepCallback
    from lipsweep.sweep.trainable import FINAL_KEY
    from lipsweep.sweep.user_callbacks import create_callbacks
    from lipsweep.tracking import Tracker

    monkeypatch.syspath_prepend(str(TESTS))
    space = write_space(
        tmp_path, [NONE], epochs=1, callbacks=["_plugins.tune_probe.FractionCallback"]
    )
    uri = empty_store(tmp_path / "mlflow.db")
    tracker = Tracker(uri, "exp")
    mlflow_cb = MlflowSweepCallback(tracker, tracker.open_parent("s3://b/exp", "exp", {}))
    callbacks = CallbackList([mlflow_cb, *create_callbacks(load_space(space).callbacks)])
    trial = stub_trial(tmp_path, {**TINY_FLAT, "epochs": 1})
    callbacks.on_trial_start(iteration=0, trials=[trial], trial=trial)
    for result in (
        {"epoch": 1, "acc_clean": 12.5, "loss": 2.0},
        {"epoch": 1, "acc_clean": 12.5, "acc_pgd": 6.25, FINAL_KEY: 1},
    ):
        callbacks.on_trial_result(iteration=1, trials=[trial], trial=trial, result=result)
        trial.update_last_result(result)
    assert trial.last_result["acc_clean"] == 12.5  # what the searcher is told
    # the final checkpoint registered: a hook given the trial changes Tune's own dict
    callbacks.on_checkpoint(iteration=1, trials=[trial], trial=trial, checkpoint=None)
    callbacks.on_trial_complete(iteration=1, trials=[trial], trial=trial)
    tracker.flush()
    logged = client(uri).get_run(mlflow_cb.runs[trial.trial_id]).data.metrics
    assert (logged["acc_clean"], logged["acc_pgd"]) == (12.5, 6.25), logged


@pytest.mark.parametrize("raw", ["1e13", "inf"])
def test_a_callback_bound_past_the_platforms_longest_wait_is_that_wait(monkeypatch, raw):
    """``LIPSWEEP_CALLBACK_TIMEOUT_S=1e13`` (meaning "no limit") is past what ``Thread.join``
    accepts (OverflowError): the bound is the longest wait the platform allows."""
    import threading

    from lipsweep.sweep.callback_guard import bounded, callback_timeout_s

    monkeypatch.setenv("LIPSWEEP_CALLBACK_TIMEOUT_S", raw)
    assert callback_timeout_s() == threading.TIMEOUT_MAX
    assert bounded(lambda: 7, callback_timeout_s(), "lipsweep-test").value == 7


def test_a_callback_that_cannot_be_pickled_exits_2_before_anything_starts(tmp_path, monkeypatch):
    """A callback holding a lock would kill the sweep when Tune pickles its run config (a
    TypeError traceback, exit 1, the MLflow parent run left RUNNING). It is refused with the
    other start-up checks: exit 2, one line naming ``callbacks[0]``, no store, no storage, no
    Ray."""
    from lipsweep.core.config_base import ConfigError
    from lipsweep.search.space import load_space
    from lipsweep.sweep.user_callbacks import create_callbacks

    monkeypatch.syspath_prepend(str(TESTS))
    space = write_space(
        tmp_path, [NONE], epochs=1, callbacks=["_plugins.tune_probe.LockedCallback"]
    )
    with pytest.raises(ConfigError, match=r"callbacks\[0\].*cannot pickle"):
        create_callbacks(load_space(space).callbacks, str(space))
    work = tmp_path / "work"
    work.mkdir()
    argv = ["sweep", str(space), "--storage", str(work / "runs")]
    argv += ["--tracking-uri", f"sqlite:///{work / 'mlflow.db'}"]
    proc = subprocess.run(
        [sys.executable, "-m", "lipsweep", *argv],
        cwd=work,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT)])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ": error: " in ln]
    assert len(errors) == 1 and "callbacks[0]: pickling" in errors[0], proc.stderr[-3000:]
    assert list(work.iterdir()) == []
