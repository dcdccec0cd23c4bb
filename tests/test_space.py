"""Search spaces: every shipped YAML validates; the paper grids are exactly Tables 3/4."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lipsweep.config import TrialConfig
from lipsweep.config_base import ConfigError
from lipsweep.sweep.space import load_space

ROOT = Path(__file__).resolve().parents[1]
SPACES = sorted((ROOT / "search_spaces").glob("*.yaml"))


@pytest.mark.parametrize("path", SPACES, ids=[p.name for p in SPACES])
def test_every_shipped_space_validates(path):
    spec = load_space(path)
    assert spec.num_trials >= 1
    for flat in spec.trials:
        TrialConfig.from_flat(flat)


def _reg_key(t):
    reg = t["regularizer"]
    if reg == "jasmin":
        return ("jasmin", t["k"], float(t["lam"]), t["aggregation"])
    if reg == "specformer":
        return ("specformer", float(t["lam_q"]), float(t["lam_k"]), float(t["lam_v"]))
    return ("none",)


@pytest.mark.parametrize("name,classes", [("paper_cifar100", 100), ("paper_cifar10", 10)])
def test_paper_grids_are_exactly_the_tables(name, classes):
    spec = load_space(ROOT / "search_spaces" / f"{name}.yaml")
    keys = [_reg_key(t) for t in spec.trials]
    assert len(keys) == len(set(keys)) == 31
    lams = (1e-2, 1e-3, 1e-4)
    expected = {("none",)}
    for lam in lams:
        expected |= {("specformer", lam, lam, lam), ("specformer", lam, 0.0, 0.0),
                     ("specformer", 0.0, lam, 0.0), ("specformer", 0.0, 0.0, lam)}
        expected |= {("jasmin", k, lam, agg) for k in (0, 10, 30) for agg in ("mean", "max")}
    assert set(keys) == expected
    cfg = TrialConfig.from_flat(spec.trials[0])
    assert (cfg.model.model, cfg.model.img_size, cfg.model.patch_size) == \
        ("vit_base_patch16_224.orig_in21k_ft_in1k", 32, 4)
    assert cfg.model.num_tokens == 65 and cfg.model.qkv_bias is False
    assert cfg.model.num_classes == classes and cfg.optim.epochs == 40
    assert (cfg.optim.optimizer, cfg.optim.momentum, cfg.optim.weight_decay) == ("sgd", 0.9, 1e-4)
    assert cfg.data.mixup > 0 and cfg.data.cutmix > 0 and cfg.data.hflip


def _space(tmp_path, text):
    p = tmp_path / "space.yaml"
    p.write_text(text)
    return p


BASE = "fixed: {epochs: 1}\n"


@pytest.mark.parametrize("body,field", [
    (BASE + "grid: [{regularizer: jasmin, k: [0, 1]}]\n", "k"),
    (BASE + "grid: [{regularizer: jasmin, lam: -0.01}]\n", "lam"),
    (BASE + "grid: [{regularizer: jasmin, kk: 3}]\n", "grid[0].kk"),
    (BASE + "grid: [{regularizer: specformer, k: 10}]\n", "k"),
    (BASE + "grid: [{regularizer: none}]\nbogus: 1\n", "bogus"),
    ("fixed: {epochs: ten}\ngrid: [{regularizer: none}]\n", "epochs"),
    (BASE + "grid: [{regularizer: none}]\nresources: {gpu: -1}\n", "resources.gpu"),
    (BASE + "search: {algorithm: grid, num_samples: 2, space: {lr: 1}}\n", "search.algorithm"),
    (BASE + "grid: [{regularizer: none}]\nscheduler: {type: asha, mode: up}\n", "scheduler.mode"),
    (BASE, "grid"),
    # ASHA compares trials every epoch, and only acc_clean and the losses are reported then.
    (BASE + "grid: [{regularizer: none}]\nscheduler: {type: asha, metric: acc_pgd_4}\n",
     "scheduler.metric"),
    # An Optuna objective no trial reports would only surface after the first trial ran.
    (BASE + "search: {algorithm: optuna, num_samples: 2, metric: acc_pgd4, "
     "space: {lr: {loguniform: [1.0e-4, 1.0e-2]}}}\n", "search.metric"),
    (BASE + "search: {algorithm: optuna, num_samples: 2, metric: [acc_clean, acc_aa_8], "
     "mode: [max, max], space: {lr: {loguniform: [1.0e-4, 1.0e-2]}}}\n", "search.metric"),
])
def test_bad_spaces_name_the_key_and_file(tmp_path, body, field):
    path = _space(tmp_path, body)
    with pytest.raises(ConfigError) as exc:
        load_space(path)
    assert exc.value.field == field and exc.value.source == str(path)


def test_random_search_is_seeded_and_conditional(tmp_path):
    path = _space(tmp_path, BASE + """search:
  algorithm: random
  num_samples: 12
  seed: 3
  space:
    lr: {loguniform: [1.0e-4, 1.0e-2]}
    regularizer: {choice: [jasmin, specformer]}
    jasmin: {k: {choice: [0, 10]}, lam: {loguniform: [1.0e-4, 1.0e-2]}}
    specformer: {lam_v: {uniform: [0.001, 0.01]}}
""")
    a, b = load_space(path), load_space(path)
    assert a.trials == b.trials and len(a.trials) == 12
    for t in a.trials:
        assert 1e-4 <= t["lr"] <= 1e-2
        if t["regularizer"] == "jasmin":
            assert "lam_v" not in t and t["k"] in (0, 10)
        else:
            assert "k" not in t and 0.001 <= t["lam_v"] <= 0.01


def test_repeat_crosses_every_grid_point(tmp_path):
    path = _space(tmp_path, BASE + "grid: [{regularizer: none}, {regularizer: jasmin, k: [0, 10]}]\n"
                  "repeat: {seed: [0, 1, 2]}\n")
    spec = load_space(path)
    assert len(spec.trials) == 9 and {t["seed"] for t in spec.trials} == {0, 1, 2}


def test_cli_bad_space_exits_2_before_ray(tmp_path):
    path = _space(tmp_path, BASE + "grid: [{regularizer: jasmin, k: 1}]\n")
    code = ("import sys; from lipsweep.__main__ import main; rc = main(['sweep', sys.argv[1]]); "
            "assert 'ray' not in sys.modules, 'ray was imported'; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert str(path) in proc.stderr and "k:" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "ray_results").exists() and not (tmp_path / "mlflow.db").exists()


def test_dry_run_lists_trials_without_ray(tmp_path):
    code = ("import sys; from lipsweep.__main__ import main; rc = main(['sweep', sys.argv[1], "
            "'--dry-run']); assert 'ray' not in sys.modules; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code,
                           str(ROOT / "search_spaces" / "paper_cifar100.yaml")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "31 trials" in proc.stdout and "jasmin k=30 lam=0.0001 max" in proc.stdout


def test_optuna_objectives_may_be_any_reported_final_metric(tmp_path):
    path = _space(tmp_path, BASE + """search:
  algorithm: optuna
  num_samples: 4
  metric: [acc_pgd_4, lip_jacobian_median]
  mode: [max, min]
  space: {lr: {loguniform: [1.0e-4, 1.0e-2]}}
scheduler: {type: asha, metric: acc_clean, mode: max}
""")
    spec = load_space(path)
    assert spec.search.metric == ["acc_pgd_4", "lip_jacobian_median"]
    assert spec.scheduler.metric == "acc_clean"
