"""The sweep service for real: local Ray (num_cpus fixed) + SQLite MLflow in a temp folder."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _sweep_helpers import (
    FOUR,
    NONE,
    children,
    client,
    empty_store,
    epochs_logged,
    import_blocker,
    parents,
    runs,
    sqlite_uri,
    sweep_cmd,
    wait_for,
    write_space,
)

pytestmark = [pytest.mark.slow, pytest.mark.ray]
SPEC_METRICS = (
    "acc_clean",
    "acc_fgsm_2",
    "acc_fgsm_4",
    "acc_pgd_2",
    "acc_pgd_4",
    "acc_aa_2",
    "lip_jacobian_mean",
    "lip_jacobian_median",
    "lip_jacobian_p90",
    "lip_jacobian_p99",
    "lip_jacobian_max",
    "lip_jacobian_tokens_mean",
    "lip_jacobian_tokens_median",
    "lip_jacobian_tokens_p90",
    "lip_jacobian_tokens_p99",
    "lip_jacobian_tokens_max",
)


def test_four_trial_sweep_logs_finished_children_under_one_parent(four_trial_sweep):
    """The session's sweep (conftest.py; tests/test_pareto.py and tests/test_export.py read it
    too)."""
    d, proc = four_trial_sweep
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    uri = sqlite_uri(d)
    (parent,) = parents(uri)
    kids = children(uri)
    assert parent.info.status == "FINISHED"
    assert len(kids) == 4
    c = client(uri)
    for r in kids:
        assert r.info.status == "FINISHED"
        assert r.data.tags["mlflow.parentRunId"] == parent.info.run_id
        for m in SPEC_METRICS:
            assert m in r.data.metrics, (m, r.data.metrics)
        assert r.data.metrics["epochs_done"] == 2
        assert r.data.params["regularizer"] in ("none", "jasmin", "specformer")
        assert [m.step for m in c.get_metric_history(r.info.run_id, "loss")] == [1, 2]
        # the held-out accuracy per epoch has its own name, so MLflow's latest acc_clean
        # (what the UI and `lipsweep pareto` read) is the final evaluation's
        assert [m.step for m in c.get_metric_history(r.info.run_id, "epoch_acc_clean")] == [1, 2]
        assert [m.step for m in c.get_metric_history(r.info.run_id, "acc_clean")] == [0]
        arts = {a.path for a in c.list_artifacts(r.info.run_id)}
        assert {"checkpoint", "lipschitz"} <= arts
        assert "lipsweep.trial.checkpoint" in r.data.tags
        # the per-row arrays travel to the driver in the final checkpoint and are stored
        # once, in MLflow: the copy in Tune's storage is gone once the upload landed
        final = Path(r.data.tags["lipsweep.trial.checkpoint"])
        assert (final / "model.safetensors").is_file()
        assert not (final / "artifacts").exists(), sorted(p.name for p in final.iterdir())
        lip = {a.path for a in c.list_artifacts(r.info.run_id, "lipschitz")}
        assert "lipschitz/lipschitz.npz" in lip, lip
    regs = sorted(r.data.params["regularizer"] for r in kids)
    assert regs == ["jasmin", "jasmin", "none", "specformer"]
    assert "jasmin k=10" in proc.stderr  # one console line per trial event
    # each trial's evaluation shows its progress on the driver, named by trial (Ray shows
    # the worker's lines there)
    shown = proc.stdout + proc.stderr
    for what in ("final evaluation: clean accuracy and", "acc_pgd_4 = ", "Lipschitz summary done"):
        assert re.search(r"lipsweep\.\S+: \w+_0000\d \[[^]]+\] " + re.escape(what), shown), what
    # output to pipes, not a terminal: Ray's worker-line prefixes come without colour codes
    assert "\x1b[" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    parent_arts = {a.path for a in c.list_artifacts(parent.info.run_id)}
    assert "space.yaml" in parent_arts


def test_nan_trial_fails_with_reason_and_others_finish(tmp_path):
    nan = {"regularizer": "none", "lr": 1e6, "clip_grad": 0, "optimizer": "sgd", "momentum": 0.9}
    space = write_space(tmp_path, [nan, NONE], epochs=1)
    uri = empty_store(tmp_path / "mlflow.db")
    proc = subprocess.run(
        sweep_cmd(tmp_path, space), cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert "1 failed" in proc.stdout and "loss became" in proc.stdout
    kids = {r.data.params["lr"]: r for r in children(uri)}
    assert kids["1000000.0"].info.status == "FAILED"
    assert "loss became" in kids["1000000.0"].data.tags["lipsweep.failure"]
    assert kids["0.001"].info.status == "FINISHED"


def test_existing_sweep_needs_resume_and_resume_needs_a_sweep(tmp_path):
    space = write_space(tmp_path, [NONE], epochs=1)
    (tmp_path / "ray_results" / "exp").mkdir(parents=True)
    proc = subprocess.run(
        sweep_cmd(tmp_path, space), cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2 and "--resume" in proc.stderr
    proc = subprocess.run(
        sweep_cmd(tmp_path, space, "--resume", "--experiment", "other"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "no sweep" in proc.stderr


def test_sigint_then_resume_finishes_each_trial_exactly_once(tmp_path):
    space = write_space(tmp_path, FOUR, epochs=3)
    uri = empty_store(tmp_path / "mlflow.db")
    proc = subprocess.Popen(
        sweep_cmd(tmp_path, space),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: epochs_logged(uri) >= 2, 600, "two epochs logged")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out[-3000:]
    assert all(r.info.status != "RUNNING" for r in runs(uri))
    proc2 = subprocess.run(
        sweep_cmd(tmp_path, space, "--resume"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc2.returncode == 0, proc2.stdout + proc2.stderr[-4000:]
    kids = children(uri)
    assert len(kids) == 4 and len({r.data.tags["lipsweep.trial_id"] for r in kids}) == 4
    assert all(r.info.status == "FINISHED" for r in kids)
    c = client(uri)
    for r in kids:  # no epoch repeated, none missing
        assert [m.step for m in c.get_metric_history(r.info.run_id, "epoch")] == [1, 2, 3]
    (parent,) = parents(uri)
    assert parent.info.status == "FINISHED"


def test_optuna_multi_objective_with_asha_learns_from_final_reports(tmp_path):
    """Optuna (NSGA-II over acc_pgd_4 and lip_jacobian_median) proposes the trials, ASHA may
    stop some on the per-epoch acc_clean: Tune must not reject the per-epoch reports that lack
    the final metrics, and every trial ends FINISHED with the objectives or KILLED + tagged."""
    search = {
        "algorithm": "optuna",
        "num_samples": 4,
        "seed": 1,
        "metric": ["acc_pgd_4", "lip_jacobian_median"],
        "mode": ["max", "min"],
        "space": {
            "lr": {"loguniform": [1e-4, 3e-3]},
            "regularizer": {"choice": ["none", "jasmin"]},
            "jasmin": {"k": {"choice": [0, 10]}, "lam": {"loguniform": [1e-3, 1e-2]}},
        },
    }
    asha = {"type": "asha", "metric": "acc_clean", "mode": "max", "grace_period": 1}
    space = write_space(
        tmp_path, None, 3, 1, search=search, scheduler={**asha, "reduction_factor": 2}
    )
    uri = empty_store(tmp_path / "mlflow.db")
    proc = subprocess.run(
        sweep_cmd(tmp_path, space), cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "did not include the specified metric" not in out
    kids = children(uri)
    assert len(kids) == 4
    lrs = {float(r.data.params["lr"]) for r in kids}
    assert len(lrs) == 4 and all(1e-4 <= lr <= 3e-3 for lr in lrs)
    finished = [r for r in kids if r.info.status == "FINISHED"]
    stopped = [r for r in kids if r.info.status == "KILLED"]
    assert len(finished) + len(stopped) == 4 and finished  # the first trial always runs out
    for r in finished:
        assert {"acc_pgd_4", "lip_jacobian_median"} <= set(r.data.metrics)
        assert r.data.metrics["epochs_done"] == 3
    for r in stopped:
        assert r.data.tags.get("lipsweep.early_stopped") == "true"


def test_optuna_with_repeat_runs_each_draw_on_every_seed_in_a_real_sweep(tmp_path):
    """``repeat: {seed: [0, 1]}`` under Optuna: 2 draws x 2 seeds = 4 trials, each draw's
    settings on both seeds (test_search_protocol.py checks the study is told the seed mean)."""
    search = {
        "algorithm": "optuna-tpe",
        "num_samples": 2,
        "seed": 1,
        "metric": "acc_clean",
        "mode": "max",
        "space": {"lr": {"loguniform": [1.0e-4, 3.0e-3]}},
    }
    space = write_space(tmp_path, None, epochs=1, repeat={"seed": [0, 1]}, search=search)
    uri = empty_store(tmp_path / "mlflow.db")
    proc = subprocess.run(
        sweep_cmd(tmp_path, space), cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    kids = children(uri)
    assert len(kids) == 4 and all(r.info.status == "FINISHED" for r in kids)
    by_lr: dict[str, set] = {}
    for r in kids:
        by_lr.setdefault(r.data.params["lr"], set()).add(r.data.params["seed"])
    assert sorted(map(sorted, by_lr.values())) == [["0", "1"], ["0", "1"]]


# The driver schedules; only Tune's workers train. Importing torch cost every `lipsweep sweep`
# ~3-4 s and ~300 MB before its first trial (through the trainable's module, the AutoAttack tags
# and Tune's TensorBoardX logger). A blocker refuses torch, timm and torchvision; the driver's
# modules, Tune's callbacks as the driver assembles them, and a finished trial's tags must work.
_DRIVER_NO_TORCH = (
    import_blocker("torch", "timm", "torchvision")
    + """
from lipsweep.sweep import driver
from lipsweep.sweep.callbacks import trial_attack_tags
from lipsweep.sweep.trainable import train_trial
driver._ray_environment()
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.utils.callback import _create_default_callbacks
made = _create_default_callbacks(driver._tune_loggers())
kinds = sorted(type(c).__name__ for c in made)
assert {"CSVLoggerCallback", "JsonLoggerCallback"} <= set(kinds), kinds
assert not any("TBX" in k for k in kinds), kinds
tags = trial_attack_tags({"attacks": ["autoattack"], "aa_eps": [2]}, {"attack_images": 32})
assert tags["aa.images"] == "32" and "attack.acc_aa_2" in tags, tags
loaded = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
assert not tried and not loaded, f"imported {tried} {loaded}"
"""
)


def test_the_sweep_driver_imports_no_torch():
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER_NO_TORCH], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.usefixtures("ray_in_this_process")
def test_a_ray_already_running_in_the_process_is_used_and_its_unapplied_options_are_named(
    tmp_path, caplog, monkeypatch
):
    """A notebook's ``ray.init()`` before ``api.sweep(num_cpus=...)``: the sweep runs on that
    Ray (the driver neither starts nor stops one) and names what it leaves unapplied."""
    import logging

    import ray

    from lipsweep.sweep import driver
    from lipsweep.sweep.options import SweepOptions

    opts = SweepOptions(space="smoke", num_cpus=2, ray_address=None)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
            assert driver._init_ray(opts) is None  # nothing started: nothing to stop later
        assert "num_cpus=2 (it has 1 CPU) not applied" in caplog.text
        assert "ray.shutdown()" in caplog.text
        caplog.clear()
        same = SweepOptions(space="smoke", num_cpus=1, ray_address=None)
        with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
            assert driver._init_ray(same) is None
        assert caplog.text == ""  # what it asked for is what it has
        joined = SweepOptions(space="smoke", ray_address="head:6379")
        with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
            assert driver._init_ray(joined) is None
        assert "ray_address='head:6379' not applied" in caplog.text
        caplog.clear()  # the address this process's driver joined before: as asked
        gcs = ray.get_runtime_context().gcs_address
        monkeypatch.setattr(driver, "_joined", ("head:6379", gcs))
        with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
            assert driver._init_ray(joined) is None
        assert caplog.text == ""
        monkeypatch.setattr(driver, "_joined", ("head:6379", "other-head:6379"))  # another cluster
        with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
            driver._init_ray(joined)
        assert "ray_address='head:6379' not applied" in caplog.text
    finally:
        ray.shutdown()
