"""The paper spaces run the published recipe, each setting with its source.

The paper (JaSMin paper, arXiv:2507.07814, Sec. 5) states batch 512, SGD, wd 1e-4, momentum 0.9,
40 epochs, no q/k/v bias, cosine, flips, CutMix + MixUp, ImageNet-pretrained ViT-B, patch 4;
where it is silent the values are Specformer's CIFAR recipe (its public code). The recipe's
settings default to the plain behaviour, so a space that does not set them runs without them.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from lipsweep.core.config_base import ConfigError
from lipsweep.search.space import load_space
from lipsweep.settings.config import TrialConfig
from lipsweep.trial.engine import build_optimizer
from lipsweep.vit.models import ModelConfig, create_model, model_normalization

ROOT = Path(__file__).resolve().parents[1]
SPACES = ROOT / "search_spaces"
CIFAR_STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2471, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
}

# the recipe table's "paper / Specformer" column, plus the paper's own stated values
EXPECTED = {
    "batch_size": 512,
    "warmup_epochs": 0.0,
    "min_lr": 1e-4,
    "weight_decay_scope": "all",
    "mix_prob": 0.3,
    "mixup": 0.8,
    "cutmix": 1.0,
    "model": "vit_base_patch16_224.orig_in21k_ft_in1k",
    "patch_resample": "sum_pool",
    "pgd_step_size": 2 / 255,
    "eval_size": 0,
    "attack_images": 0,
    "epochs": 40,
    "optimizer": "sgd",
    "lr": 0.1,
    "momentum": 0.9,
    "weight_decay": 1e-4,
    "qkv_bias": False,
    "patch_size": 4,
    "img_size": 32,
    "hflip": True,
    "crop_padding": 4,
    "clip_grad": 1.0,
    "label_smoothing": 0.0,
    "pgd_steps": 4,
    "pgd_random_start": True,
    "fgsm_eps": [2, 4],
    "pgd_eps": [2, 4],
    "aa_eps": [2],
    "aa_iters": 10,
    "lip_images": 0,
}
# lines another helper owns (data source), and settings without a recipe value
NOT_RECIPE = {"dataset", "data_dir", "download", "pretrained", "device", "checkpoint_every"}


@pytest.mark.parametrize("dataset", ["cifar100", "cifar10"])
def test_paper_space_sets_every_table_row(dataset):
    spec = load_space(SPACES / f"paper_{dataset}.yaml")
    assert len(spec.trials) == 31
    for flat in spec.trials:
        for key, want in EXPECTED.items():
            got = flat[key]
            ok = math.isclose(got, want, rel_tol=1e-12) if isinstance(want, float) else got == want
            assert ok, f"{dataset}: {key} = {got!r}, expected {want!r}"
        assert flat["normalization"] == dataset and flat["dataset"] == dataset
        cfg = TrialConfig.from_flat(flat)
        assert model_normalization(cfg.model) == CIFAR_STATS[dataset]


@pytest.mark.parametrize("dataset", ["cifar100", "cifar10"])
def test_every_recipe_line_cites_its_source(dataset):
    """Each fixed setting carries a comment (on its line or the lines just above) naming the
    paper's line or Specformer's code file; the lr line says that neither states it."""
    text = (SPACES / f"paper_{dataset}.yaml").read_text()
    fixed = text.split("\nfixed:\n", 1)[1].split("\ngrid:", 1)[0].splitlines()
    seen = 0
    for i, line in enumerate(fixed):
        m = re.match(r"  (\w+):", line)
        if not m or m.group(1) in NOT_RECIPE:
            continue
        seen += 1
        comment = line.split("#", 1)[1] if "#" in line else fixed[i - 1] + fixed[i - 2]
        assert re.search(r"paper|NEITHER", comment), line
        if "paper silent" in comment:
            assert "Specformer's code" in comment and re.search(r"\w+/\w+\.py", comment), line
    assert seen >= len(EXPECTED) - 5
    lr_line = next(ln for ln in fixed if ln.startswith("  lr:"))
    assert "NEITHER" in lr_line and "batch 512" in lr_line


@pytest.mark.parametrize("dataset", ["cifar100", "cifar10"])
def test_specformer_recipe_space_differs_only_in_batch(dataset):
    paper = load_space(SPACES / f"paper_{dataset}.yaml").trials
    recipe = load_space(SPACES / f"specformer_recipe_{dataset}.yaml").trials
    assert [dict(t, batch_size=64) for t in paper] == recipe


def test_new_settings_keep_todays_defaults():
    cfg = TrialConfig()
    assert (cfg.model.normalization, cfg.model.patch_resample) == ("pretrained", "timm")
    assert (cfg.optim.weight_decay_scope, cfg.optim.min_lr, cfg.optim.warmup_epochs) == (
        "weights",
        0.0,
        0.0,
    )
    assert cfg.data.mix_prob == 1.0 and cfg.robustness.pgd_step_size is None
    assert model_normalization(cfg.model) == ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def test_bad_recipe_values_name_their_field():
    for kw, field in (
        (dict(normalization="imagenet"), "normalization"),
        (dict(patch_resample="bicubic"), "patch_resample"),
        (dict(weight_decay_scope="some"), "weight_decay_scope"),
        (dict(normalization="cifar100", dataset="cifar10", download=True), "normalization"),
    ):
        with pytest.raises(ConfigError) as err:
            TrialConfig.from_flat(kw)
        assert err.value.field == field


def _hand_sum_pool(w16: np.ndarray) -> np.ndarray:
    """16x16 -> 4x4 kernel by explicit loops: entry (i, j) adds the 4x4 block at (4i, 4j)."""
    o, c = w16.shape[:2]
    out = np.zeros((o, c, 4, 4))
    for i in range(4):
        for j in range(4):
            for a in range(4):
                for b in range(4):
                    out[:, :, i, j] += w16[:, :, 4 * i + a, 4 * j + b]
    return out


def _hand_bilinear(grid: np.ndarray, new: int) -> np.ndarray:
    """(G, G, D) -> (new, new, D), half-pixel centres, edge clamp (align_corners=False)."""
    g = grid.shape[0]

    def taps(i: int) -> tuple[int, int, float]:
        src = max((i + 0.5) * g / new - 0.5, 0.0)
        lo = min(int(math.floor(src)), g - 1)
        return lo, min(lo + 1, g - 1), src - lo

    out = np.zeros((new, new, grid.shape[2]))
    for i in range(new):
        y0, y1, fy = taps(i)
        for j in range(new):
            x0, x1, fx = taps(j)
            out[i, j] = (1 - fy) * ((1 - fx) * grid[y0, x0] + fx * grid[y0, x1]) + fy * (
                (1 - fx) * grid[y1, x0] + fx * grid[y1, x1]
            )
    return out


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A random 224px / patch-16 tiny ViT saved as a local 'pretrained' file."""
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(0)
    src = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=1, num_classes=10)
    path = tmp_path_factory.mktemp("ckpt") / "tiny16.safetensors"
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(path))
    return src, path


def test_sum_pool_matches_a_hand_computed_16_to_4_kernel(tiny_checkpoint):
    src, path = tiny_checkpoint
    kw = dict(model="vit_tiny_patch16_224", depth=1, num_classes=10, pretrained=str(path))
    net = create_model(ModelConfig(patch_resample="sum_pool", **kw)).net
    w16 = src.patch_embed.proj.weight.detach().double().numpy()
    got = net.patch_embed.proj.weight.detach().double().numpy()
    assert got.shape == (192, 3, 4, 4)
    np.testing.assert_allclose(got, _hand_sum_pool(w16), rtol=1e-5, atol=1e-6)
    # the position embedding: CLS row kept, the 14x14 grid bilinearly resized to 8x8
    pos = src.pos_embed.detach().double().numpy()[0]
    new = net.pos_embed.detach().double().numpy()[0]
    np.testing.assert_allclose(new[0], pos[0], rtol=1e-6)
    want = _hand_bilinear(pos[1:].reshape(14, 14, -1), 8).reshape(64, -1)
    np.testing.assert_allclose(new[1:], want, rtol=1e-5, atol=1e-6)
    assert torch.equal(net.blocks[0].attn.qkv.weight, src.blocks[0].attn.qkv.weight)
    # timm's default resampling is a different kernel: the setting changes what is loaded
    timm_w = create_model(ModelConfig(**kw)).net.patch_embed.proj.weight.detach().double()
    assert not np.allclose(timm_w.numpy(), got, atol=1e-3)


def test_normalisation_travels_into_the_export(tiny_checkpoint, tmp_path):
    """cifar100 mean/std sit in the wrapper and in config.json; load_exported gives the same
    logits (the export path builds its config with model_normalization)."""
    from lipsweep.decide.export import write_export
    from lipsweep.vit.export_format import build_config_json, load_exported

    _, path = tiny_checkpoint
    cfg = TrialConfig.from_flat(
        dict(
            model="vit_tiny_patch16_224",
            depth=1,
            num_classes=100,
            dataset="cifar100",
            download=True,
            normalization="cifar100",
            pretrained=str(path),
            patch_resample="sum_pool",
        )
    )
    model = create_model(cfg.model).eval()
    mean, std = CIFAR_STATS["cifar100"]
    assert torch.allclose(model.mean.flatten(), torch.tensor(mean))
    assert torch.allclose(model.std.flatten(), torch.tensor(std))
    config = build_config_json(cfg.to_flat(), *model_normalization(cfg.model), {})
    write_export(tmp_path / "exp", model.net.state_dict(), config, {})
    x = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(load_exported(tmp_path / "exp")(x), model(x), atol=1e-5)


def test_weight_decay_scope_all_decays_every_parameter():
    net = create_model(ModelConfig(depth=1, embed_dim=32, num_heads=2))
    n_params = len(list(net.parameters()))
    for scope, n_spared in (("weights", None), ("all", 0)):
        cfg = TrialConfig.from_flat({"weight_decay_scope": scope}).optim
        groups = build_optimizer(net, cfg).param_groups
        decay = [g for g in groups if g["weight_decay"] > 0][0]["params"]
        spared = [p for g in groups if g["weight_decay"] == 0 for p in g["params"]]
        assert len(decay) + len(spared) == n_params
        if n_spared is not None:
            assert len(spared) == n_spared
        else:
            assert any(p is net.net.pos_embed for p in spared) and len(spared) > 3


def test_paper_schedule_is_cosine_per_step_to_min_lr_without_warmup():
    optim = load_space(SPACES / "paper_cifar100.yaml").trials[0]
    cfg = TrialConfig.from_flat(optim).optim
    steps = 97
    lrs = [cfg.lr_at(s, steps) for s in range(cfg.epochs * steps)]
    assert lrs[0] == pytest.approx(0.1, rel=1e-6)  # no warm-up
    assert lrs[-1] == pytest.approx(1e-4, abs=1e-6)  # down to min_lr
    assert all(a > b for a, b in zip(lrs, lrs[1:]))  # decays every step
    mid = cfg.lr_at(cfg.epochs * steps // 2, steps)
    assert mid == pytest.approx(1e-4 + 0.5 * (0.1 - 1e-4), rel=1e-6)


def test_paper_pgd_step_is_2_over_255_for_every_eps():
    from lipsweep.attacks._pgd import PGD

    cfg = TrialConfig.from_flat(load_space(SPACES / "paper_cifar10.yaml").trials[0])
    net = torch.nn.Linear(1, 1)
    for eps in (2, 4):
        assert PGD.from_config(net, eps / 255, cfg.robustness).step_size == pytest.approx(
            2 / 255, rel=1e-12
        )
    default = TrialConfig().robustness
    assert PGD.from_config(net, 4 / 255, default).step_size == pytest.approx(2.5 * 4 / 255 / 4)


def test_dry_run_prints_the_recipe_before_the_trials(capsys):
    from lipsweep.__main__ import main

    assert main(["sweep", str(SPACES / "paper_cifar100.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    start = next(i for i, ln in enumerate(out) if ln.startswith("recipe"))
    first_trial = next(i for i, ln in enumerate(out) if re.match(r"\s+0\s+none", ln))
    block = out[start + 1 : first_trial]
    assert start < first_trial and all(ln.startswith("  ") for ln in block)
    rows = dict(ln.split(None, 1) for ln in block)
    assert rows["batch_size"] == "512" and rows["pgd_step_size"] == "2/255"
    assert rows["weight_decay_scope"] == "all" and rows["normalization"] == "cifar100"
    assert rows["patch_resample"] == "sum_pool" and rows["mix_prob"] == "0.3"
    assert rows["min_lr"] == "0.0001" and rows["warmup_epochs"] == "0.0"
    assert rows["model"] == "vit_base_patch16_224.orig_in21k_ft_in1k"
    assert rows["attack_images"] == "0 (all)" and rows["eval_size"] == "0 (all)"


def test_dry_run_recipe_of_a_sampled_space_marks_nothing_it_cannot_know(tmp_path):
    """Optuna samples lazily: the block shows the fixed settings and defaults; sampled ones
    (here lr) show their default, the trial list says they are sampled."""
    from _sweep_helpers import space_file

    from lipsweep.sweep.driver import dry_run_lines

    fixed = {"epochs": 1, "batch_size": 32, "pgd_step_size": 0.0156862745098039}
    search = {"algorithm": "optuna", "num_samples": 2, "metric": "acc_pgd_4", "mode": "max"}
    search["space"] = {"lr": {"loguniform": [1e-4, 1e-2]}}
    path = space_file(tmp_path, {"fixed": fixed, "search": search})
    lines = dry_run_lines(load_space(path))
    start = next(i for i, ln in enumerate(lines) if ln.startswith("recipe"))
    rows = dict(ln.split(None, 1) for ln in lines[start + 1 : start + 1 + 30])
    assert rows["batch_size"] == "32" and rows["pgd_step_size"] == "4/255"
    assert rows["normalization"] == "pretrained" and "optuna samples" in lines[-1]
