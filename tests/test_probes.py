"""Per-epoch robustness probes: names, the fixed probe subset, a tiny trial
that reports them every epoch and matches the final evaluation on the same images, their MLflow
series, and a scheduler on a probe metric."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from lipsweep.core.config_base import ConfigError
from lipsweep.core.metric_names import (
    PROBE_LIP_JACOBIAN_MEDIAN,
    PROBE_SECONDS,
    is_probe_metric,
    probe_attack_metric,
)
from lipsweep.search.space import load_space
from lipsweep.settings.config import TrialConfig


def _tiny_trial(**overrides) -> dict:
    """The sweep tests' tiny trial (_sweep_helpers.TINY_FLAT), smaller, PGD-only evaluation."""
    from _sweep_helpers import TINY_FLAT

    flat = {**TINY_FLAT, "train_size": 128, "eval_size": 12, "epochs": 2, "attacks": ["pgd"]}
    flat.update(attack_images=0, lip_images=0, lip_tokens=False, lip_softmax=False)
    flat.update(lip_head_bounds=False, **overrides)
    return flat


def test_probe_names_are_built_from_the_attack_prefix_and_eps():
    assert probe_attack_metric("pgd", 4) == "probe_acc_pgd_4"
    assert PROBE_LIP_JACOBIAN_MEDIAN == "probe_lip_jacobian_median"
    assert is_probe_metric(PROBE_SECONDS) and not is_probe_metric("acc_pgd_4")
    on = TrialConfig.from_flat({"probe_every": 2, "pgd_eps": [1, 8]})
    assert on.probe_metric_names() == (
        "probe_acc_pgd_1",
        "probe_acc_pgd_8",
        "probe_lip_jacobian_median",
    )
    assert on.epoch_metric_names()[:4] == ("acc_clean", "loss", "loss_ce", "loss_reg")
    assert TrialConfig.from_flat({}).probe_metric_names() == ()  # off by default
    no_pgd = TrialConfig.from_flat({"probe_every": 1, "probe_images": 0})
    assert no_pgd.probe_metric_names() == ("probe_lip_jacobian_median",)
    assert [on.probe.due(e) for e in (1, 2, 3, 4)] == [False, True, False, True]


@pytest.mark.parametrize(
    "flat,field",
    [
        ({"probe_every": -1}, "probe_every"),
        ({"probe_every": 1.5}, "probe_every"),
        ({"probe_images": "all"}, "probe_images"),
        ({"probe_lip_images": -2}, "probe_lip_images"),
        ({"probe_every": 1, "probe_images": 0, "probe_lip_images": 0}, "probe_images"),
    ],
)
def test_bad_probe_settings_name_the_field(flat, field):
    with pytest.raises(ConfigError) as exc:
        TrialConfig.from_flat(flat)
    assert exc.value.field == field


def test_probe_subset_is_the_same_for_every_trial_seed_and_held_out():
    from lipsweep.data.loading import load_splits
    from lipsweep.trial.probes import probe_set

    sets = []
    for seed in (0, 7):
        flat = {"seed": seed, "eval_size": 100, "probe_images": 24, "probe_lip_images": 8}
        cfg = TrialConfig.from_flat(flat)
        sets.append(probe_set(load_splits(cfg.data), cfg))
    a, b = sets
    assert a.indices.tolist() == b.indices.tolist() and len(a.indices) == 24
    assert a.indices.tolist() != list(range(24))  # a seeded draw, not the first images
    assert (a.x == b.x).all() and (a.y == b.y).all()
    small = TrialConfig.from_flat({"eval_size": 10, "probe_images": 256})
    assert probe_set(load_splits(small.data), small).indices.tolist() == list(range(10))


def test_tiny_trial_probes_every_epoch_and_matches_the_final_evaluation(tmp_path):
    """probe_images >= eval_size: the probe images are the final evaluation's, so the last
    epoch's probes equal the final PGD accuracies and ||J_f|| median (same attack code)."""
    from lipsweep.trial.run import TrialCallbacks, run_trial

    seen: dict[int, dict] = {}

    class Keep(TrialCallbacks):
        def on_epoch_end(self, epoch, metrics, checkpoint) -> None:
            seen[epoch] = dict(metrics)

    cfg = TrialConfig.from_flat(_tiny_trial(probe_every=1, probe_images=64, probe_lip_images=64))
    res = run_trial(cfg, tmp_path, Keep(), progress=False)
    names = cfg.probe_metric_names()
    assert names == ("probe_acc_pgd_2", "probe_acc_pgd_4", "probe_lip_jacobian_median")
    for epoch in (1, 2):
        assert set(names) | {PROBE_SECONDS} <= set(seen[epoch]), epoch
        assert set(res.history[epoch - 1]) >= set(names)  # kept in the checkpoint history
    last, final = seen[2], res.metrics
    assert last["probe_acc_pgd_2"] == final["acc_pgd_2"]
    assert last["probe_acc_pgd_4"] == final["acc_pgd_4"]
    assert last[PROBE_LIP_JACOBIAN_MEDIAN] == pytest.approx(final["lip_jacobian_median"], rel=1e-5)


def test_probe_metrics_reach_mlflow_as_per_epoch_series(tmp_path):
    from _sweep_helpers import TINY_FLAT, children, client, empty_store

    from lipsweep.sweep.callbacks import MlflowSweepCallback
    from lipsweep.tracking import Tracker

    uri = empty_store(tmp_path / "mlflow.db")
    tracker = Tracker(uri, "exp")
    cb = MlflowSweepCallback(tracker, tracker.open_parent("dir", "exp", {}))
    flat = TrialConfig.from_flat({**TINY_FLAT, "probe_every": 2}).to_flat()
    trial = SimpleNamespace(trial_id="t1", config={"trial": flat}, last_result={}, checkpoint=None)
    for epoch in (1, 2, 3, 4):
        result = {"epoch": float(epoch), "loss": 1.0 / epoch, "acc_clean": 10.0 * epoch}
        if epoch % 2 == 0:  # probe_every: 2
            result.update({"probe_acc_pgd_4": 5.0 * epoch, PROBE_LIP_JACOBIAN_MEDIAN: 3.0})
        cb.on_trial_result(0, [], trial, result)
    tracker.flush()
    (kid,) = children(uri)
    hist = client(uri).get_metric_history(kid.info.run_id, "probe_acc_pgd_4")
    assert [(m.step, m.value) for m in hist] == [(2, 10.0), (4, 20.0)]
    lip = client(uri).get_metric_history(kid.info.run_id, PROBE_LIP_JACOBIAN_MEDIAN)
    assert [m.step for m in lip] == [2, 4]


def _space(tmp_path, fixed: dict, metric: str):
    from _sweep_helpers import NONE, space_file

    scheduler = {"type": "asha", "metric": metric, "mode": "max"}
    return space_file(
        tmp_path, {"fixed": {"epochs": 2, **fixed}, "grid": [NONE], "scheduler": scheduler}
    )


def test_a_scheduler_may_use_a_probe_metric_when_every_trial_probes(tmp_path):
    spec = load_space(_space(tmp_path, {"probe_every": 1}, "probe_acc_pgd_4"))
    assert spec.scheduler.metric == "probe_acc_pgd_4"
    for fixed, metric, why in [
        ({"seed": 0}, "probe_acc_pgd_4", "probes are off"),
        ({"probe_every": 1}, "probe_acc_pgd_8", "not every trial's probes report it"),
        ({"probe_every": 1, "probe_images": 0}, "probe_acc_pgd_4", "not every trial's probes"),
    ]:
        with pytest.raises(ConfigError) as exc:
            load_space(_space(tmp_path, fixed, metric))
        assert exc.value.field == "scheduler.metric" and why in exc.value.message, fixed


def test_sweep_with_a_probe_scheduler_but_probes_off_exits_2_with_one_line(tmp_path):
    space = _space(tmp_path, {"seed": 0}, "probe_acc_pgd_4")
    proc = subprocess.run(
        [sys.executable, "-m", "lipsweep", "sweep", str(space), "--dry-run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "scheduler.metric" in lines[0], proc.stderr


def test_probe_cost_counts_the_passes_the_probes_make():
    """probe_cost's formula against the passes counted by hooks on a tiny model (exact route:
    one forward and C input backward passes per Jacobian image)."""
    import torch

    from lipsweep.data.loading import load_splits, to_unit
    from lipsweep.trial.probe_cost import probe_cost
    from lipsweep.trial.probes import probe_set, run_probes
    from lipsweep.vit.models import create_model

    flat = {"depth": 1, "embed_dim": 32, "num_heads": 2, "eval_size": 20, "probe_every": 1}
    flat.update(probe_images=20, probe_lip_images=6, lip_batch_size=4, attack_batch_size=8)
    cfg = TrialConfig.from_flat(flat)
    torch.manual_seed(0)
    model = create_model(cfg.model).eval()
    probes = probe_set(load_splits(cfg.data), cfg)
    with torch.no_grad():
        correct = int((model(to_unit(probes.x)).argmax(1) == probes.y).sum())
    passes = {"n": 0}
    model.register_forward_hook(lambda m, i, o: passes.update(n=passes["n"] + len(i[0])))
    model.register_full_backward_hook(lambda m, gi, go: passes.update(n=passes["n"] + len(go[0])))
    out = run_probes(model, probes, cfg, torch.device("cpu"))
    cost = probe_cost(cfg, train_images=1000, correct_fraction=correct / 20)
    # each probe carries its measurement's standard error: PGD on 20 images, ||J_f|| on 6
    from lipsweep.core.measurement import accuracy_se

    assert out["probe_acc_pgd_4_se"] == pytest.approx(accuracy_se(out["probe_acc_pgd_4"], 20))
    assert out["probe_lip_jacobian_median_se"] > 0
    assert 0 < correct < 20
    assert passes["n"] == pytest.approx(cost.pgd_passes + cost.jacobian_passes, abs=1e-9)
    assert cost.jacobian_passes == 6 * (1 + 10)
    assert cost.train_passes == 2 * 960  # 15 whole batches of 64
    # the paper recipe (CIFAR-10: 50,000 images, batch 512, PGD-4 at 2 and 4/255, C = 10)
    paper = TrialConfig.from_flat({"batch_size": 512, "pgd_eps": [2, 4], "probe_every": 1})
    assert probe_cost(paper, 50_000).fraction == pytest.approx((256 * 19 + 64 * 11) / 99_328)
