"""FGSM / PGD against torchattacks, the registry, input validation and the eval-mode contract."""

from __future__ import annotations

import pytest
import torch
import torchattacks
from conftest import tiny_model_config
from torch import nn

from lipsweep.attacks import (
    PGD,
    attack_mode,
    create_attack,
    fgsm,
    get_attack_class,
    list_attacks,
    pgd,
)
from lipsweep.attacks._registry import AutoAttackSettings, PgdSettings
from lipsweep.vit.models import create_model

# a shallower, narrower tiny ViT for the mechanics (same code path; keeps the file fast)
SMALL = dict(depth=2, embed_dim=64, num_heads=4)

# cheap settings per registered attack (AutoAttack: one APGD-CE iteration)
FAST_KW = {"autoattack": dict(settings=AutoAttackSettings(aa_attacks=["apgd-ce"], aa_iters=1))}


def pgd_settings(
    steps: int, step_size: float | None = None, random_start: bool = True, restarts: int = 1
) -> PgdSettings:
    return PgdSettings(
        pgd_steps=steps,
        pgd_step_size=step_size,
        pgd_random_start=random_start,
        pgd_restarts=restarts,
    )


@pytest.fixture(scope="module")
def tiny():
    """Random-init tiny ViT with labels = its own predictions (100% clean accuracy, so every
    image is a meaningful target), on 64 real CIFAR-10 test images."""
    torch.manual_seed(0)
    model = create_model(tiny_model_config(**SMALL)).eval()
    return model


@pytest.fixture(scope="module")
def batch(tiny, cifar_sample):
    x = cifar_sample["x_test"][:64]
    with torch.no_grad():
        y = tiny(x).argmax(1)
    return x, y


def _acc(model, x, y) -> float:
    with torch.no_grad():
        return 100.0 * float((model(x).argmax(1) == y).float().mean())


def test_registry_lists_the_paper_attacks():
    assert {"fgsm", "pgd", "autoattack"} <= set(list_attacks())
    assert list_attacks("pg*") == ["pgd"]


@pytest.mark.parametrize("eps", [2 / 255, 4 / 255])
def test_fgsm_identical_to_torchattacks(tiny, batch, eps):
    x, y = batch
    ours = fgsm(tiny, x, y, eps)
    ref = torchattacks.FGSM(tiny, eps=eps)(x, y)
    assert torch.equal(ours, ref)
    assert _acc(tiny, ours, y) < 100.0  # the attack does something on this batch


@pytest.mark.parametrize("eps", [2 / 255, 4 / 255])
def test_pgd_matches_torchattacks_without_random_start(tiny, batch, eps):
    x, y = batch[0][:32], batch[1][:32]
    alpha = 2.5 * eps / 4  # our default step; torchattacks' own default is a fixed 2/255
    ours = pgd(tiny, x, y, eps, 4, random_start=False)
    ref = torchattacks.PGD(tiny, eps=eps, alpha=alpha, steps=4, random_start=False)(x, y)
    assert (ours - ref).abs().max() <= 1e-5
    assert abs(_acc(tiny, ours, y) - _acc(tiny, ref, y)) <= 0.5


def test_pgd_matches_torchattacks_with_random_start(tiny, batch):
    x, y = batch[0][:32], batch[1][:32]
    eps = 4 / 255
    torch.manual_seed(123)
    ours = pgd(tiny, x, y, eps, 4, step_size=1 / 255)
    torch.manual_seed(123)
    ref = torchattacks.PGD(tiny, eps=eps, alpha=1 / 255, steps=4, random_start=True)(x, y)
    assert (ours - ref).abs().max() <= 1e-5
    assert abs(_acc(tiny, ours, y) - _acc(tiny, ref, y)) <= 0.5


def test_pgd_is_stronger_than_fgsm_and_grows_with_eps(tiny, batch):
    x, y = batch[0][:32], batch[1][:32]
    accs = {
        (name, e): _acc(tiny, fn(e), y)
        for e in (2 / 255, 4 / 255)
        for name, fn in (
            ("fgsm", lambda e: fgsm(tiny, x, y, e)),
            ("pgd", lambda e: pgd(tiny, x, y, e, 4, random_start=False)),
        )
    }
    for e in (2 / 255, 4 / 255):
        assert accs[("pgd", e)] <= accs[("fgsm", e)] + 1.0
    for name in ("fgsm", "pgd"):
        assert accs[(name, 4 / 255)] <= accs[(name, 2 / 255)] + 1.0


def test_pgd_restarts_take_the_worst_case(tiny, batch):
    x, y = batch
    eps, alpha = 16 / 255, 4 / 255  # one short step in a large ball: the start matters
    multi = PGD(tiny, eps, pgd_settings(1, alpha, restarts=3), seed=0)(x, y)
    assert (multi - x).abs().max() <= eps + 1e-6
    # an image is robust only if each restart fails; restart r alone = a seeded single run
    # drawing the same per-image starts (restart r of image i is the i-th image's r-th draw)
    starts = PGD(tiny, eps, pgd_settings(1, restarts=3), seed=0)._starts(x)
    robust_each = []
    for r in range(3):
        single = PGD(tiny, eps, pgd_settings(1, alpha, random_start=False))
        lo, hi = (x - eps).clamp(min=0), (x + eps).clamp(max=1)
        with attack_mode(tiny):
            adv = single._descend(x, y, lo, hi, starts[r])
        with torch.no_grad():
            robust_each.append(tiny(adv).argmax(1) == y)
    with torch.no_grad():
        robust_multi = tiny(multi).argmax(1) == y
    assert torch.equal(robust_multi, torch.stack(robust_each).all(0))
    assert not all(torch.equal(r, robust_each[0]) for r in robust_each)  # restarts differ


def test_seeded_pgd_start_does_not_depend_on_batching(tiny, batch):
    x, y = batch
    whole = PGD(tiny, 2 / 255, pgd_settings(1), seed=7)._starts(x)
    attack = PGD(tiny, 2 / 255, pgd_settings(1), seed=7)
    parts = torch.cat([attack._starts(x[:10]), attack._starts(x[10:])], dim=1)
    assert torch.equal(whole, parts)


@pytest.mark.parametrize("name", list_attacks())
def test_attack_output_in_box_and_model_mode_restored(name, tiny, batch):
    x, y = batch[0][:8], batch[1][:8]
    eps = 4 / 255
    seen = []
    hook = tiny.register_forward_pre_hook(lambda m, _: seen.append(m.training))
    tiny.train()
    tiny.net.blocks[0].eval()  # a mixed state must come back exactly
    before = {n: m.training for n, m in tiny.named_modules()}
    try:
        adv = create_attack(name, model=tiny, eps=eps, **FAST_KW.get(name, {}))(x, y)
    finally:
        hook.remove()
        after = {n: m.training for n, m in tiny.named_modules()}
        tiny.eval()
    assert seen and not any(seen), "the attack must run the model in eval mode"
    assert after == before
    assert all(p.requires_grad for p in tiny.parameters())
    assert all(p.grad is None for p in tiny.parameters())
    assert adv.shape == x.shape and adv.dtype == x.dtype
    assert (adv - x).abs().max() <= eps + 1e-6
    assert adv.min() >= 0 and adv.max() <= 1


def test_attack_mode_restores_after_an_exception(tiny):
    tiny.train()
    with pytest.raises(RuntimeError):
        with attack_mode(tiny):
            assert not tiny.training
            assert not any(p.requires_grad for p in tiny.parameters())
            raise RuntimeError("boom")
    assert tiny.training and all(p.requires_grad for p in tiny.parameters())
    tiny.eval()


@pytest.mark.parametrize("name", list_attacks())
@pytest.mark.parametrize("eps", [-1 / 255, 1.5, float("nan")])
def test_bad_eps_is_a_value_error_naming_eps(name, eps, tiny):
    with pytest.raises(ValueError, match="eps"):
        create_attack(name, model=tiny, eps=eps)


@pytest.mark.parametrize("name", list_attacks())
@pytest.mark.parametrize("bad", ["above", "below", "nan"])
def test_images_outside_unit_box_are_rejected(name, bad, tiny, batch):
    x, y = batch[0][:2].clone(), batch[1][:2]
    x[0, 0, 0, 0] = {"above": 1.5, "below": -0.1, "nan": float("nan")}[bad]
    with pytest.raises(ValueError, match=r"x must hold pixels in \[0, 1\]"):
        create_attack(name, model=tiny, eps=2 / 255, **FAST_KW.get(name, {}))(x, y)


def test_public_functions_validate_their_arguments(tiny, batch):
    x, y = batch[0][:2], batch[1][:2]
    with pytest.raises(ValueError, match="eps"):
        fgsm(tiny, x, y, -0.1)
    with pytest.raises(ValueError, match="eps"):
        pgd(tiny, x, y, 4.0, 4)  # 4 instead of 4/255
    for steps in (0, -1, 2.5):
        with pytest.raises(ValueError, match="steps"):
            pgd(tiny, x, y, 2 / 255, steps)
    with pytest.raises(ValueError, match="step_size"):
        pgd(tiny, x, y, 2 / 255, 4, step_size=0.0)
    with pytest.raises(ValueError, match="y must be"):
        fgsm(tiny, x, y[:1], 2 / 255)
    with pytest.raises(ValueError, match="x must be"):
        fgsm(tiny, x[0], y, 2 / 255)


def test_unknown_attack_name_lists_the_known_ones(tiny):
    with pytest.raises(ValueError, match=r"unknown attack 'cw'.*fgsm"):
        create_attack("cw", model=tiny, eps=2 / 255)
    with pytest.raises(ValueError, match="unknown attack"):
        get_attack_class("PGD")


def test_zero_eps_returns_clean_images(tiny, batch):
    x, y = batch[0][:4], batch[1][:4]
    assert torch.equal(fgsm(tiny, x, y, 0.0), x)
    assert torch.equal(pgd(tiny, x, y, 0.0, 3), x)


def test_bf16_precision_stays_in_the_box(tiny, batch):
    x, y = batch[0][:8], batch[1][:8]
    adv = PGD(tiny, 4 / 255, pgd_settings(2, random_start=False), precision="bf16")(x, y)
    assert adv.dtype == torch.float32
    assert (adv - x).abs().max() <= 4 / 255 + 1e-6
    with pytest.raises(ValueError, match="precision"):
        PGD(tiny, 4 / 255, precision="fp16")


def test_attacks_do_not_touch_parameter_grads_of_a_model_with_buffers():
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 3), nn.BatchNorm1d(3)).train()
    x = torch.rand(5, 3, 2, 2)
    y = torch.tensor([0, 1, 2, 0, 1])
    stats = model[2].running_mean.clone()
    pgd(model, x, y, 2 / 255, 2)
    assert torch.equal(model[2].running_mean, stats)  # eval mode: BN statistics untouched
    assert model.training and all(p.grad is None for p in model.parameters())


def test_titles_and_strength_order_are_read_from_the_attack_specs():
    """A member's title and strength live on its spec only: presenters and the monotonicity
    check read them from the family (a new member needs no table elsewhere)."""
    from lipsweep.attacks import ATTACKS, AttackVocab, metric_title
    from lipsweep.attacks._registry import strength_order
    from lipsweep.attacks.checks import check_monotone

    assert strength_order() == ("fgsm", "pgd", "aa")
    assert metric_title("acc_aa_2") == "AutoAttack, ε = 2/255"

    @ATTACKS.register("strongest", spec=AttackVocab("fgsm_eps", "zz", title="ZZ", strength=9))
    class Strongest:
        pass

    try:
        assert strength_order() == ("fgsm", "pgd", "aa", "zz")
        assert metric_title("acc_zz_4") == "ZZ, ε = 4/255"
        warned = check_monotone({"acc_aa_4": 10.0, "acc_zz_4": 50.0})
        assert any("acc_zz_4" in w for w in warned)
    finally:
        ATTACKS.unregister("strongest")
