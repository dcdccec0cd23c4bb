"""The AutoAttack adapter: schedule built for the iteration count, cascade, a second
implementation."""

from __future__ import annotations

import logging

import pytest
import torch
import torchattacks
from conftest import tiny_model_config
from pyautoattack import AutoAttack as PackageAutoAttack
from pyautoattack.autopgd_base import APGDAttack

from lipsweep.attacks import AutoAttack, RobustnessConfig
from lipsweep.attacks._registry import AutoAttackSettings
from lipsweep.attacks.autoattack import STANDARD_ATTACKS
from lipsweep.core.config_base import ConfigError
from lipsweep.vit.models import create_model

STANDARD = AutoAttackSettings(aa_version="standard", aa_iters=100)


def custom(attacks: list[str], iters: int) -> AutoAttackSettings:
    return AutoAttackSettings(aa_attacks=attacks, aa_iters=iters)


# a shallower, narrower tiny ViT for the mechanics (same code path; keeps the file fast)
SMALL = dict(depth=2, embed_dim=64, num_heads=4)

EPS = 2 / 255


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(1)
    return create_model(tiny_model_config(**SMALL)).eval()


@pytest.fixture(scope="module")
def batch(tiny, cifar_sample):
    """8 real images labelled with the model's own predictions (all clean-correct)."""
    x = cifar_sample["x_test"][:8]
    with torch.no_grad():
        y = tiny(x).argmax(1)
    return x, y


def test_the_package_traps_exist():
    """What the adapter works around (pyautoattack 0.2.0): 5 APGD restarts in the custom
    version, and a step-size schedule fixed at construction."""
    model = torch.nn.Linear(2, 2)
    aa = PackageAutoAttack(model, attacks=["apgd-ce"], version="custom", eps=EPS)
    assert aa.apgd.n_restarts == 5 and aa.apgd.n_iter == 100
    aa.apgd.n_iter = 10
    assert aa.apgd.n_iter_2 == 22  # first step-size check after 22 of 10 steps: never
    fresh = APGDAttack(model, n_iter=10, eps=EPS)
    assert (fresh.n_iter_2, fresh.n_iter_min, fresh.size_decr) == (2, 1, 1)


def test_adapter_builds_every_attack_with_the_iteration_count(tiny):
    aa = AutoAttack(tiny, EPS).build(n_classes=10, device=torch.device("cpu"))
    assert aa.attacks_to_run == list(STANDARD_ATTACKS)
    for apgd in (aa.apgd, aa.apgd_targeted):
        assert apgd.n_iter == 10 and apgd.n_iter_orig == 10 and apgd.n_restarts == 1
        assert (apgd.n_iter_2, apgd.n_iter_min, apgd.size_decr) == (2, 1, 1)
    assert aa.fab.n_iter == 10 and aa.fab.n_restarts == 1
    assert aa.square.n_queries == 10
    assert aa.apgd_targeted.n_target_classes == 9 and aa.fab.n_target_classes == 9
    three = AutoAttack(tiny, EPS).build(n_classes=3, device=torch.device("cpu"))
    assert three.apgd_targeted.n_target_classes == 2 and three.fab.n_target_classes == 2


def test_standard_version_is_the_package_standard(tiny):
    aa = AutoAttack(tiny, EPS, STANDARD).build(10, torch.device("cpu"))
    assert aa.apgd.n_iter == 100 and aa.apgd.n_restarts == 1 and aa.square.n_queries == 5000
    with pytest.raises(ConfigError, match="aa_version='standard'"):
        AutoAttackSettings(aa_version="standard", aa_iters=10)
    with pytest.raises(ConfigError, match="aa_iters"):
        RobustnessConfig(aa_version="standard")
    assert RobustnessConfig(aa_version="standard", aa_iters=100).aa_iters == 100


def test_apgd_ce_matches_torchattacks_apgd(tiny, batch):
    """Second implementation: torchattacks' APGD recomputes its schedule from `steps` on each
    call, so a 10-step run there equals ours only if our schedule is the 10-step one."""
    x, y = batch
    res = AutoAttack(tiny, EPS, custom(["apgd-ce"], 10), seed=0).run(x, y)
    ref = torchattacks.APGD(tiny, norm="Linf", eps=EPS, steps=10, n_restarts=1, seed=0, loss="ce")(
        x, y
    )
    with torch.no_grad():
        ref_robust = tiny(ref).argmax(1) == y
    assert 0 < int(ref_robust.sum()) < len(y)  # the comparison is informative
    assert torch.equal(res.robust, ref_robust)
    fooled = ~ref_robust
    assert (res.x_adv[fooled] - ref[fooled]).abs().max() <= 1e-5
    assert torch.equal(res.x_adv[~fooled], x[~fooled])  # survivors come back clean


def test_cascade_runs_each_attack_on_the_survivors_only(tiny, batch):
    x, y = batch
    first = AutoAttack(tiny, EPS, custom(["apgd-ce"], 3)).run(x, y)
    both = AutoAttack(tiny, EPS, custom(["apgd-ce", "apgd-t"], 3), n_target_classes=2).run(x, y)
    s1, s2 = both.stages
    assert (s1.attack, s2.attack) == ("apgd-ce", "apgd-t")
    assert s1.n_attacked == len(y)  # every clean-correct image
    assert s2.n_attacked == int(first.robust.sum())  # only what APGD-CE left
    assert s1.n_fooled == len(y) - s2.n_attacked
    assert s2.n_fooled == s2.n_attacked - int(both.robust.sum())
    assert both.robust_accuracy <= first.robust_accuracy
    assert all(s.seconds > 0 for s in both.stages)
    assert (both.x_adv - x).abs().max() <= EPS + 1e-6
    assert both.x_adv.min() >= 0 and both.x_adv.max() <= 1


def test_misclassified_images_are_not_attacked_and_not_robust(tiny, batch):
    x, y = batch
    y_wrong = y.clone()
    y_wrong[:3] = (y[:3] + 1) % 10
    res = AutoAttack(tiny, EPS, custom(["apgd-ce"], 1)).run(x, y_wrong)
    assert res.stages[0].n_attacked == len(y) - 3
    assert not res.robust[:3].any()


def test_global_rng_and_model_state_are_restored(tiny, batch):
    x, y = batch[0][:4], batch[1][:4]
    torch.manual_seed(42)
    expected = torch.rand(3)
    torch.manual_seed(42)
    tiny.train()
    AutoAttack(tiny, EPS, custom(["apgd-ce", "fab-t"], 2), n_target_classes=1)(x, y)
    assert tiny.training and all(
        p.requires_grad and p.grad is None for p in tiny.parameters()
    )  # FAB calls .backward()
    tiny.eval()
    assert torch.equal(torch.rand(3), expected)


def test_package_check_warnings_are_returned_and_logged(tiny, batch, caplog):
    x, y = batch[0][:4], batch[1][:4]
    probs = torch.nn.Sequential(tiny, torch.nn.Softmax(dim=-1))
    with caplog.at_level(logging.WARNING, logger="lipsweep.attacks.autoattack"):
        res = AutoAttack(probs, EPS, custom(["apgd-ce"], 1)).run(x, y)
    assert any("probability distribution" in w for w in res.warnings)
    assert any("probability distribution" in r.getMessage() for r in caplog.records)


def test_adapter_validates_its_settings(tiny):
    with pytest.raises(ConfigError, match="aa_attacks"):
        AutoAttackSettings(aa_attacks=["apgd-ce", "pgd"])
    with pytest.raises(ConfigError, match="aa_iters"):
        AutoAttackSettings(aa_iters=0)
    with pytest.raises(ConfigError, match="aa_version"):
        AutoAttackSettings(aa_version="plus")
    with pytest.raises(ValueError, match="eps"):
        AutoAttack(tiny, 8)
    with pytest.raises(ConfigError, match="n_target_classes"):
        AutoAttack(tiny, EPS, n_target_classes=0)
    with pytest.raises(TypeError, match="AutoAttackSettings"):
        AutoAttack(tiny, EPS, {"aa_iters": 10})


def test_the_estimate_counts_each_stages_passes(tiny):
    """Per point: APGD-CE iters x restarts passes, APGD-T and FAB-T that times the targets,
    Square a third of a pass per query; the estimate multiplies by points and seconds."""
    aa = AutoAttack(tiny, EPS, AutoAttackSettings(aa_restarts=2), n_target_classes=3)
    # 10 x 2 = 20; 20 x 3 targets = 60; Square 10 queries / 3
    assert aa.stage_steps(10) == {"apgd-ce": 20.0, "apgd-t": 60.0, "fab-t": 60.0, "square": 10 / 3}
    first, most = aa.estimate(100, 10, 0.01)  # 100 points, 0.01 s per point-step
    assert first == pytest.approx(100 * 20 * 0.01)  # 20 s
    assert most == pytest.approx(100 * (20 + 60 + 60 + 10 / 3) * 0.01)  # 143.3 s
    std = AutoAttack(tiny, EPS, STANDARD)  # 100 iterations, 9 targets, 5000 queries
    assert std.stage_steps(10) == {
        "apgd-ce": 100.0,
        "apgd-t": 900.0,
        "fab-t": 900.0,
        "square": 5000 / 3,
    }


def test_progress_logs_an_estimate_first_then_each_stage_and_batch(tiny, batch, caplog):
    """``run(progress=True)``: the estimate before any attack, a line as each stage starts
    (its points: those the earlier stages did not fool) and one per batch."""
    x, y = batch
    caplog.set_level(logging.INFO, logger="lipsweep.attacks.autoattack")
    res = AutoAttack(tiny, EPS, AutoAttackSettings(aa_iters=2), batch_size=4).run(
        x, y, progress=True
    )
    lines = [r.getMessage() for r in caplog.records if r.name == "lipsweep.attacks.autoattack"]
    assert lines[0].startswith("autoattack eps 0.007843: 8 points, 8 correct clean; estimated ")
    assert lines[1].startswith("autoattack eps 0.007843, stage 1/4 apgd-ce: 8 points, estimated")
    assert lines[2].startswith("autoattack apgd-ce: 4/8 points, ")
    assert lines[3].startswith("autoattack apgd-ce: 8/8 points, ")
    starts = [line for line in lines if ", stage " in line]
    ran = [s for s in res.stages if s.n_attacked]
    assert [f"{s.attack}: {s.n_attacked} points" for s in ran] == [
        line.split("/4 ")[1].split(", estimated")[0] for line in starts
    ]
