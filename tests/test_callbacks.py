"""The sweep's console callback and its end-of-sweep summary (lipsweep.sweep.callbacks),
driven by plain objects carrying the three attributes of a Tune trial it reads (no Ray starts); the
outcomes of a resumed sweep read back from a real MLflow store (SQLite in a temp dir). The
module imports Ray's Callback, so each test imports it itself."""

from __future__ import annotations

import io
import logging
from types import SimpleNamespace

from lipsweep.tracking import FAILED, FINISHED


def test_resumed_sweep_counts_an_errored_trial_as_failed(three_trial_store):
    """Catches: on ``--resume``, a trial that ended in ERROR before the restart counted as
    finished, in the status block (Tune's trial states) and in the summary (MLflow's)."""
    from lipsweep.sweep.callbacks import ConsoleProgress, summarize
    from lipsweep.sweep.driver import _backfill_outcomes

    out = io.StringIO()
    cb = ConsoleProgress(3, status_every=0, stream=out)
    trials = [
        SimpleNamespace(trial_id=t, config={"regularizer": "none", "seed": 0}, status=s)
        for t, s in (("t0", "TERMINATED"), ("t1", "ERROR"), ("t2", "PENDING"))
    ]
    cb.on_step_end(0, trials)
    cb.show_status()
    assert out.getvalue().startswith("status: running 0 · pending 1 · finished 1 · failed 1 ·")

    _, tracker, parent = three_trial_store
    outcomes = SimpleNamespace(outcomes={})
    _backfill_outcomes(outcomes, tracker, parent)
    assert {t: o.status for t, o in outcomes.outcomes.items()} == {
        "t0": FINISHED,
        "t1": FAILED,
        "t2": FINISHED,
    }
    ok, text = summarize(outcomes.outcomes, 3)
    assert not ok and text.startswith("2 finished, 0 stopped early, 1 failed, 0 not run")
    assert "FAILED t1 [t1 [none seed=0]]: loss is nan at epoch 1" in text


def test_sweep_console_says_when_a_trial_starts_its_evaluation(caplog):
    """After the last epoch a trial evaluates for half a minute (the demo) to hours (ViT-B)
    with no event: the console says so when the last epoch's result arrives."""
    from lipsweep.settings.config import TrialConfig
    from lipsweep.sweep.callbacks import ConsoleProgress, evaluation_plan

    flat = TrialConfig.from_flat({"epochs": 2, "eval_size": 64}).to_flat()
    cb = ConsoleProgress(1, status_every=0, stream=io.StringIO())
    trial = SimpleNamespace(trial_id="t0", config={"trial": flat}, status="RUNNING")
    with caplog.at_level(logging.INFO, logger="lipsweep.sweep"):
        cb.on_trial_result(0, [trial], trial, {"epoch": 1, "loss": 2.0, "acc_clean": 20.0})
        assert "evaluating" not in caplog.text
        cb.on_trial_result(0, [trial], trial, {"epoch": 2, "loss": 1.9, "acc_clean": 21.0})
    assert (
        "t0 [none seed=0] evaluating: clean, FGSM, PGD, AutoAttack on 64 images; ||J_f|| on 64 "
        "images" in caplog.text
    )
    # each count is what that part measures: clean accuracy and the attacks on the first
    # attack_images of the evaluation images, ||J_f|| on the first lip_images (0: all)
    plan = evaluation_plan
    wide = {**flat, "eval_size": 0, "attack_images": 256, "lip_images": 0, "attacks": ["pgd"]}
    assert plan(wide) == "clean, PGD on up to 256 images; ||J_f|| on all test images"
    few = {**flat, "eval_size": 100, "attack_images": 0, "lip_images": 500, "attacks": []}
    assert plan(few) == "clean on 100 images; ||J_f|| on 100 images"
    no_eval = {**flat, "evaluate": False}
    caplog.clear()
    trial = SimpleNamespace(trial_id="t1", config={"trial": no_eval}, status="RUNNING")
    cb.on_trial_result(0, [trial], trial, {"epoch": 2, "loss": 1.9, "acc_clean": 21.0})
    assert "evaluating" not in caplog.text
