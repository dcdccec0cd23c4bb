"""The sweep status block, driven by fake trial events (no Ray)."""

from __future__ import annotations

import pytest

from lipsweep.sweep.progress import FAILED, FINISHED, STOPPED, SweepProgress, format_duration


@pytest.mark.parametrize(
    "seconds,text",
    [
        (0, "0s"),
        (45, "45s"),
        (60, "1m"),
        (719, "11m"),
        (3 * 3600 + 10 * 60, "3h10m"),
        (50 * 3600, "2d2h"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def _sweep() -> SweepProgress:
    """31 trials, two slots: trials take 840 s (14 min); two finished, two running."""
    p = SweepProgress(total=31, objective=("acc_clean", "max"))
    p.started("t0", 0, "t0 [none seed=0]")
    p.started("t1", 0, "t1 [jasmin k=10]")
    p.ended("t0", FINISHED, 840, {"acc_clean": 21.5})
    p.ended("t1", FINISHED, 840, {"acc_clean": 25.0})
    p.started("t2", 840, "t2 [specformer]")
    p.started("t3", 840, "t3 [jasmin k=0]")
    return p


def test_counts_eta_and_best_line():
    p = _sweep()
    # now = 1260: each running trial has 420 s left; (2 * 420 + 27 * 840) / 2 slots = 11760 s
    assert p.counts_line(1260) == ("running 2 · pending 27 · finished 2 · failed 0 · ETA 3h16m")
    assert p.best_line() == "best acc_clean (max): t1 [jasmin k=10] 25.00"


def test_failed_and_stopped_are_counted_and_never_best():
    p = _sweep()
    p.ended("t2", FAILED, 900, {"acc_clean": 99.0})
    p.ended("t3", STOPPED, 900, {"acc_clean": 98.0})
    line = p.counts_line(900)
    assert "running 0 · pending 27 · finished 2 · stopped 1 · failed 1 · ETA" in line
    assert p.best[0] == "t1"


def test_min_objective_and_no_best_yet():
    p = SweepProgress(total=2, objective=("lip_jacobian_median", "min"))
    assert p.best_line() == "best lip_jacobian_median (min): no finished trial yet"
    assert p.counts_line(0) == (
        "running 0 · pending 2 · finished 0 · failed 0 · waiting for a trial to start"
    )
    p.started("a", 0)
    p.ended("a", FINISHED, 10, {"lip_jacobian_median": 1.4})
    p.started("b", 10)
    p.ended("b", FINISHED, 20, {"lip_jacobian_median": 1.2})
    assert p.best == ("b", 1.2) and p.eta(20) == 0


def test_restarted_trial_is_not_counted_twice_and_resumed_ones_are_done():
    p = SweepProgress(total=4)
    p.ended_before("old0", FINISHED)
    p.ended_before("old1", FAILED)
    p.started("x", 0)
    p.started("x", 5)  # retried after a worker failure: still one running trial
    assert p.counts_line(6).startswith("running 1 · pending 1 · finished 1 · failed 1 · ")


def test_trials_finished_before_a_resume_compete_for_the_best():
    """A resumed sweep's status names the best trial that finished before the restart, not
    'no finished trial yet'; a stopped one (no final report) does not compete."""
    p = SweepProgress(total=4)
    p.ended_before("old0", FINISHED, "old0 [none seed=0]", {"acc_clean": 25.3})
    p.ended_before("old1", STOPPED, "old1 [jasmin]", {"acc_clean": 90.0})
    p.ended_before("old2", FINISHED, "old2 [jasmin]", {"acc_clean": 26.1})
    assert p.best_line() == "best acc_clean (max): old2 [jasmin] 26.10"
    p.started("x", 0)
    p.ended("x", FINISHED, 10, {"acc_clean": 24.0})
    assert p.best == ("old2", 26.1)


def test_block_is_framed_on_a_terminal_and_one_plain_line_in_a_log():
    p = _sweep()
    plain = p.status_lines(1260, tty=False)
    assert plain == [
        "status: running 2 · pending 27 · finished 2 · failed 0 · ETA 3h16m · "
        "best acc_clean (max): t1 [jasmin k=10] 25.00"
    ]
    block = p.status_lines(1260, tty=True)
    assert len(block) == 4 and "sweep status" in block[0] and block[1].startswith("running 2")


def test_unknown_end_state_is_refused():
    with pytest.raises(ValueError):
        SweepProgress(total=1).ended("a", "done", 0)


def test_console_progress_feeds_the_block_at_each_trial_end():
    """The Tune callback only feeds SweepProgress; a fake trial stands in for Tune's."""
    import io
    from types import SimpleNamespace

    from lipsweep.sweep.callbacks import ConsoleProgress
    from lipsweep.sweep.trainable import FINAL_KEY

    out = io.StringIO()
    cb = ConsoleProgress(3, ("acc_clean", "max"), status_every=0, stream=out)
    trial = SimpleNamespace(
        trial_id="t0",
        config={"regularizer": "none", "seed": 0},
        last_result={FINAL_KEY: True, "acc_clean": 21.5},
        status="RUNNING",
    )
    cb.on_step_end(0, [trial])
    cb.on_trial_start(0, [trial], trial)
    assert out.getvalue() == ""  # status_every=0: nothing until a trial ends
    cb.on_trial_complete(1, [trial], trial)
    line = out.getvalue().strip()
    assert line.startswith("status: running 0 · pending 2 · finished 1 · failed 0 · ETA ")
    assert line.endswith("21.50") and "t0 [" in line


def test_eta_says_soon_not_0s_while_trials_run_past_the_mean():
    """A trial still running after the mean ended trial's time has an unknown, not zero, rest."""
    p = SweepProgress(total=2)
    p.started("a", 0)
    p.ended("a", FINISHED, 10, {"acc_clean": 1.0})
    p.started("b", 10)
    assert p.counts_line(12).endswith("ETA 8s")
    assert p.counts_line(30).endswith("ETA soon")


def test_before_any_trial_ends_the_line_says_what_it_waits_for():
    """No `ETA ?` repeated for the whole first trial: how far the furthest trial is."""
    p = SweepProgress(total=4)
    p.started("a", 0, "a [none]")
    p.started("b", 0, "b [jasmin]")
    assert p.counts_line(5).endswith(
        "failed 0 · waiting for the first trial to end (furthest: in its first epoch)"
    )
    p.epoch_done("a", 1, 4, 30)
    p.epoch_done("b", 3, 4, 40)
    assert p.counts_line(45).endswith("(furthest: epoch 3/4 done)")
    p.epoch_done("b", 4, 4, 50, evaluating=True)
    assert p.counts_line(50 + 125).endswith("(furthest: evaluating for 2m)")
    p.ended("b", FINISHED, 200, {"acc_clean": 1.0})
    assert "ETA" in p.counts_line(201)
    resumed = SweepProgress(total=2)  # one ended before this run: "a trial of this run"
    resumed.ended_before("x", FINISHED, "x")
    resumed.started("y", 0)
    assert resumed.counts_line(1).endswith(
        "waiting for a trial of this run to end (furthest: in its first epoch)"
    )
    assert (resumed.ran, p.ran) == (1, 2)


def test_a_periodic_status_that_repeats_the_last_one_is_not_printed_again(monkeypatch):
    import io
    from types import SimpleNamespace

    from lipsweep.sweep import callbacks
    from lipsweep.sweep.callbacks import ConsoleProgress

    clock = [100.0]
    monkeypatch.setattr(callbacks.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    cb = ConsoleProgress(2, status_every=30, stream=out)
    flat = {"regularizer": "none", "seed": 0, "epochs": 2}
    trial = SimpleNamespace(trial_id="t0", config=flat, status="RUNNING", last_result={})
    cb.on_trial_start(0, [trial], trial)
    for step in range(4):  # two minutes in the first epoch: one line, not four
        clock[0] += 30
        cb.on_step_end(step, [trial])
    assert out.getvalue().count("status:") == 1
    cb.on_trial_result(0, [trial], trial, {"epoch": 1, "loss": 2.0, "acc_clean": 20.0})
    clock[0] += 30
    cb.on_step_end(5, [trial])
    assert out.getvalue().count("status:") == 2 and "(furthest: epoch 1/2 done)" in out.getvalue()


def test_a_sweep_worker_shows_its_evaluation_lines_named_by_trial():
    """A Tune worker shows lipsweep's INFO lines nowhere, so a trial's evaluation was silent
    on the driver: its evaluation lines go to the worker's stderr (Ray shows them on the
    driver), named by trial, and its other lines stay quiet. In a fresh process: it changes
    the loggers for the process's life."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import logging; from lipsweep.sweep.trainable import show_evaluation_lines\n"
        "show_evaluation_lines('t0 [none seed=0]'); show_evaluation_lines('t1 [none seed=1]')\n"
        "logging.getLogger('lipsweep.attacks.evaluate').info('acc_fgsm_2 = %.2f%%', 25)\n"
        "logging.getLogger('lipsweep.trial.run').info('epoch 1/1')\n"
    )
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.endswith(" INFO lipsweep.attacks.evaluate: t1 [none seed=1] acc_fgsm_2 = 25.00%")


def test_compute_saved_counts_the_seeds_the_scheduler_never_started():
    """Three trials of 4 epochs (12 in all): x_1 stopped after epoch 1, x_2 a queued seed of
    the same configuration ended before it started (Tune's last result holds only its id),
    x_3 finished. By hand: saved (4 - 1) + (4 - 0) = 7 of 12 epochs, 58%; the same after a
    --resume that finds them ended."""
    import io
    from types import SimpleNamespace

    from lipsweep.sweep.callbacks import ConsoleProgress
    from lipsweep.sweep.trainable import FINAL_KEY

    def trial(tid, last):
        cfg = {"trial": {"epochs": 4, "lr": 0.1, "seed": int(tid[-1])}}
        return SimpleNamespace(trial_id=tid, config=cfg, last_result={"trial_id": tid, **last})

    stopped = trial("x_1", {"epoch": 1, "acc_clean": 10.0})
    queued = trial("x_2", {})
    done = trial("x_3", {"epoch": 4, FINAL_KEY: True, "acc_clean": 20.0})
    live = ConsoleProgress(3, status_every=0, stream=io.StringIO(), total_epochs=12)
    for t in (stopped, done):
        live.on_trial_start(0, [], t)
    for t in (stopped, queued, done):
        live.on_trial_complete(0, [], t)
    assert "finished 1 · stopped 2 · saved 7/12 epochs (58%)" in live.progress.counts_line(0.0)

    resumed = ConsoleProgress(3, status_every=0, stream=io.StringIO(), total_epochs=12)
    for t in (stopped, queued, done):
        t.status = "TERMINATED"
    resumed.on_step_end(0, [stopped, queued, done])
    assert "finished 1 · stopped 2 · saved 7/12 epochs (58%)" in resumed.progress.counts_line(0.0)
