"""Search spaces: every shipped YAML validates; the paper grids are exactly Tables 3/4."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _sweep_helpers import import_blocker, space_file

from lipsweep.core.config_base import ConfigError
from lipsweep.search.space import load_space
from lipsweep.settings.config import TrialConfig

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
        expected |= {
            ("specformer", lam, lam, lam),
            ("specformer", lam, 0.0, 0.0),
            ("specformer", 0.0, lam, 0.0),
            ("specformer", 0.0, 0.0, lam),
        }
        expected |= {("jasmin", k, lam, agg) for k in (0, 10, 30) for agg in ("mean", "max")}
    assert set(keys) == expected
    cfg = TrialConfig.from_flat(spec.trials[0])
    assert (cfg.model.model, cfg.model.img_size, cfg.model.patch_size) == (
        "vit_base_patch16_224.orig_in21k_ft_in1k",
        32,
        4,
    )
    assert cfg.model.num_tokens == 65 and cfg.model.qkv_bias is False
    assert cfg.model.num_classes == classes and cfg.optim.epochs == 40
    assert (cfg.optim.optimizer, cfg.optim.momentum, cfg.optim.weight_decay) == ("sgd", 0.9, 1e-4)
    assert cfg.data.mixup > 0 and cfg.data.cutmix > 0 and cfg.data.hflip


BASE = "fixed: {epochs: 1}\n"


@pytest.mark.parametrize(
    "body,field",
    [
        (BASE + "grid: [{regularizer: jasmin, k: [0, 1]}]\n", "k"),
        (BASE + "grid: [{regularizer: jasmin, lam: -0.01}]\n", "lam"),
        (BASE + "grid: [{regularizer: jasmin, kk: 3}]\n", "grid[0].kk"),
        (BASE + "grid: [{regularizer: specformer, k: 10}]\n", "k"),
        (BASE + "grid: [{regularizer: none}]\nbogus: 1\n", "bogus"),
        ("fixed: {epochs: ten}\ngrid: [{regularizer: none}]\n", "epochs"),
        (BASE + "grid: [{regularizer: none}]\nresources: {gpu: -1}\n", "resources.gpu"),
        (BASE + "search: {algorithm: grid, num_samples: 2, space: {lr: 1}}\n", "search.algorithm"),
        (
            BASE + "grid: [{regularizer: none}]\nscheduler: {type: asha, mode: up}\n",
            "scheduler.mode",
        ),
        (BASE, "grid"),
        # ASHA compares trials every epoch, and only acc_clean and the losses are reported then.
        (
            BASE + "grid: [{regularizer: none}]\nscheduler: {type: asha, metric: acc_pgd_4}\n",
            "scheduler.metric",
        ),
        # An Optuna objective no trial reports would only surface after the first trial ran.
        (
            BASE + "search: {algorithm: optuna, num_samples: 2, metric: acc_pgd4, "
            "space: {lr: {loguniform: [1.0e-4, 1.0e-2]}}}\n",
            "search.metric",
        ),
        (
            BASE + "search: {algorithm: optuna, num_samples: 2, metric: [acc_clean, acc_aa_8], "
            "mode: [max, max], space: {lr: {loguniform: [1.0e-4, 1.0e-2]}}}\n",
            "search.metric",
        ),
    ],
)
def test_bad_spaces_name_the_key_and_file(tmp_path, body, field):
    path = space_file(tmp_path, body)
    with pytest.raises(ConfigError) as exc:
        load_space(path)
    assert exc.value.field == field and exc.value.source == str(path)


def test_random_search_is_seeded_and_conditional(tmp_path):
    path = space_file(
        tmp_path,
        BASE
        + """search:
  algorithm: random
  num_samples: 12
  seed: 3
  space:
    lr: {loguniform: [1.0e-4, 1.0e-2]}
    regularizer: {choice: [jasmin, specformer]}
    jasmin: {k: {choice: [0, 10]}, lam: {loguniform: [1.0e-4, 1.0e-2]}}
    specformer: {lam_v: {uniform: [0.001, 0.01]}}
""",
    )
    a, b = load_space(path), load_space(path)
    assert a.trials == b.trials and len(a.trials) == 12
    for t in a.trials:
        assert 1e-4 <= t["lr"] <= 1e-2
        if t["regularizer"] == "jasmin":
            assert "lam_v" not in t and t["k"] in (0, 10)
        else:
            assert "k" not in t and 0.001 <= t["lam_v"] <= 0.01


def test_repeat_crosses_every_grid_point(tmp_path):
    path = space_file(
        tmp_path,
        BASE + "grid: [{regularizer: none}, {regularizer: jasmin, k: [0, 10]}]\n"
        "repeat: {seed: [0, 1, 2]}\n",
    )
    spec = load_space(path)
    assert len(spec.trials) == 9 and {t["seed"] for t in spec.trials} == {0, 1, 2}


def test_cli_bad_space_exits_2_before_ray(tmp_path):
    path = space_file(tmp_path, BASE + "grid: [{regularizer: jasmin, k: 1}]\n")
    code = (
        "import sys; from lipsweep.__main__ import main; rc = main(['sweep', sys.argv[1]]); "
        "assert 'ray' not in sys.modules, 'ray was imported'; sys.exit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert str(path) in proc.stderr and "k:" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "ray_results").exists() and not (tmp_path / "mlflow.db").exists()


def test_dry_run_lists_trials_without_ray(tmp_path):
    code = (
        "import sys; from lipsweep.__main__ import main; rc = main(['sweep', sys.argv[1], "
        "'--dry-run']); assert 'ray' not in sys.modules; sys.exit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "search_spaces" / "paper_cifar100.yaml")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "31 trials" in proc.stdout and "jasmin k=30 lam=0.0001 max" in proc.stdout


def test_optuna_objectives_may_be_any_reported_final_metric(tmp_path):
    path = space_file(
        tmp_path,
        BASE
        + """search:
  algorithm: optuna
  num_samples: 4
  metric: [acc_pgd_4, lip_jacobian_median]
  mode: [max, min]
  space: {lr: {loguniform: [1.0e-4, 1.0e-2]}}
scheduler: {type: asha, metric: acc_clean, mode: max}
""",
    )
    spec = load_space(path)
    assert spec.search.metric == ["acc_pgd_4", "lip_jacobian_median"]
    assert spec.scheduler.metric == "acc_clean"


# A dry run validates YAML: it must not import torch (~4 s and 600 MB), timm, Ray or
# MLflow. An unimportable torch package comes first on sys.path, and a
# blocker records (and refuses) every import of the four, so an import that some `try` swallows
# still fails the test; its traceback on stderr shows who imported it.
_NO_TORCH = (
    import_blocker("torch", "timm", "torchvision", "ray", "mlflow")
    + """
sys.path.insert(0, sys.argv[1])
from lipsweep.__main__ import main
rcs = [main(["sweep", space, "--dry-run"]) for space in sys.argv[2:]]
loaded = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
assert not tried and not loaded, f"imported {tried} {loaded}"
sys.exit(max(rcs))
"""
)

# Every family named by the space: regularizers, attacks and Lipschitz estimators.
_FAMILIES = """name: families
fixed:
  epochs: 1
  attacks: [fgsm, pgd, autoattack]
  lip_estimators: [softmax_jacobian, head_bounds]
grid:
  - regularizer: none
  - {regularizer: jasmin, k: [0, 2], aggregation: max}
  - {regularizer: specformer, lam_v: 1.0e-3}
"""


def test_dry_run_imports_no_torch_timm_ray_or_mlflow(tmp_path):
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise ImportError('torch is unimportable here')\n")
    families = tmp_path / "families.yaml"
    families.write_text(_FAMILIES)
    space = ROOT / "search_spaces" / "paper_cifar10.yaml"
    proc = subprocess.run(
        [sys.executable, "-c", _NO_TORCH, str(fake), str(space), str(families)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "4 trials" in proc.stdout and "jasmin k=2 lam=0.01 max" in proc.stdout


def _optuna_trial(seed: int):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask()


@pytest.mark.parametrize("algorithm", ["random", "optuna"])
@pytest.mark.parametrize("dist", ["{normal: [0, 1]}", "{loguniform: [1.0e-4, 1.0e-2], x: 1}", "{}"])
def test_a_mapping_that_is_no_distribution_is_refused_by_both_searchers(tmp_path, algorithm, dist):
    """An unknown one-key mapping is neither a constant to the random sampler nor a
    suggest_int to Optuna: one parser refuses it for both, naming the key."""
    path = space_file(
        tmp_path,
        BASE + f"search: {{algorithm: {algorithm}, num_samples: 2, "
        f"metric: acc_clean, space: {{regularizer: {{choice: [none, jasmin]}}, "
        f"jasmin: {{lam: {dist}}}}}}}\n",
    )
    with pytest.raises(ConfigError) as exc:
        load_space(path)
    assert exc.value.field == "search.space.jasmin.lam", exc.value.format()
    assert "distribution" in exc.value.message


@pytest.mark.parametrize(
    "raw,allowed",
    [
        ({"quniform": [32, 64, 8]}, {32, 40, 48, 56, 64}),
        ({"quniform": [0.0, 1.0, 0.25]}, {0.0, 0.25, 0.5, 0.75, 1.0}),
        ({"quniform": [1, 4]}, {1, 2, 3, 4}),
        ({"randint": [0, 3]}, {0, 1, 2}),
        ({"choice": [[2], [2, 4]]}, {(2,), (2, 4)}),
    ],
)
def test_random_and_optuna_draw_the_same_values(raw, allowed):
    """quniform quantises to q; both searchers draw from one set, with the same types."""
    import random

    from lipsweep.search.space_distributions import parse_distribution

    dist = parse_distribution(raw, "search.space.x", "s.yaml")
    rng = random.Random(0)
    drawn = {
        "random": [dist.sample(rng) for _ in range(30)],
        "optuna": [dist.suggest(_optuna_trial(i), "x") for i in range(30)],
    }
    for name, values in drawn.items():
        keyed = {tuple(v) if isinstance(v, list) else v for v in values}
        assert keyed <= allowed and len(keyed) >= 2, (name, keyed)
        assert {type(v) for v in values} == {
            type(next(iter(allowed))) if not isinstance(next(iter(allowed)), tuple) else list
        }, name


@pytest.mark.parametrize(
    "raw",
    [
        {"quniform": [0, 1, 0.3]},
        {"quniform": [0, 1, 0]},
        {"quniform": [0, 1, 2, 3]},
        {"uniform": [1, "x"]},
    ],
)
def test_bad_quniform_and_bounds_name_the_key(raw):
    from lipsweep.search.space_distributions import parse_distribution

    with pytest.raises(ConfigError) as exc:
        parse_distribution(raw, "search.space.lr", "s.yaml")
    assert exc.value.field == "search.space.lr"


def test_optuna_mlflow_params_are_the_normalised_config(tmp_path):
    """Under Optuna the child run's params are what config.json holds (every setting, typed),
    not the raw sampled dict (real Ray Tune Optuna searcher, real MLflow on SQLite)."""
    import json
    from types import SimpleNamespace

    from _sweep_helpers import children, empty_store

    from lipsweep.search.searchers.optuna_sampling import OptunaSpace
    from lipsweep.sweep.callbacks import MlflowSweepCallback
    from lipsweep.sweep.searchers._optuna import FinalResultOptuna
    from lipsweep.sweep.trainable import flat_config
    from lipsweep.tracking import Tracker

    path = space_file(
        tmp_path,
        BASE
        + """search:
  algorithm: optuna
  num_samples: 1
  metric: acc_clean
  space: {batch_size: {quniform: [32, 64, 32]}, regularizer: jasmin,
          jasmin: {lam: {loguniform: [1.0e-4, 1.0e-2]}}}
""",
    )
    spec = load_space(path)
    searcher = FinalResultOptuna(
        space=OptunaSpace(spec.fixed, spec.search.space), metric="acc_clean", mode="max"
    )
    config = searcher.suggest("t1")
    uri = empty_store(tmp_path / "mlflow.db")
    tracker = Tracker(uri, "exp")
    cb = MlflowSweepCallback(tracker, tracker.open_parent("dir", "exp", {}))
    cb.on_trial_start(0, [], SimpleNamespace(trial_id="t1", config=config))
    (kid,) = children(uri)
    # what the trainable writes as config.json for this Tune config
    saved = json.loads(TrialConfig.from_flat(flat_config(config)).to_json())
    assert kid.data.params == {k: str(v) for k, v in saved.items()}
    assert kid.data.params["batch_size"] in ("32", "64") and kid.data.params["k"] == "0"


# ---------------------------------------------------------------- spaces and their schedulers
MOASHA_LINE = "scheduler: {type: moasha, metrics: [acc_clean], modes: [max]}\n"
ASHA_LINE = "scheduler: {type: asha, metric: acc_clean, mode: max, grace_period: 6}\n"


def _space_yaml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "body,field,words",
    [
        # epochs per trial: a rung at a short trial's last epoch would kill it
        ("grid: [{regularizer: none, epochs: [4, 8]}]\n" + MOASHA_LINE, "scheduler",
         "different epochs"),
        (
            "search: {algorithm: random, num_samples: 4, space: {epochs: {choice: [4, 8]}}}\n"
            + MOASHA_LINE,
            "scheduler",
            "different epochs",
        ),
        (
            "search: {algorithm: optuna-tpe, num_samples: 4, metric: acc_clean, mode: max, "
            "space: {epochs: {choice: [4, 8]}, lr: 0.001}}\n" + MOASHA_LINE,
            "scheduler",
            "draws epochs",
        ),
        # a moasha that can never stop anything
        (
            "fixed: {epochs: 4, probe_every: 5}\ngrid: [{regularizer: none}]\n"
            "scheduler: {type: moasha, metrics: [probe_acc_pgd_4], modes: [max]}\n",
            "scheduler.metrics",
            "could never compare",
        ),
        (
            "fixed: {epochs: 4}\ngrid: [{regularizer: none}]\n"
            "scheduler: {type: moasha, metrics: [acc_clean], modes: [max], grace_period: 6}\n",
            "scheduler.grace_period",
            "could never stop",
        ),
        # asha's grace period above the epochs
        ("fixed: {epochs: 4}\ngrid: [{regularizer: none}]\n" + ASHA_LINE, "scheduler.grace_period",
         "could never stop"),
        (
            "fixed: {epochs: 4}\ngrid: [{regularizer: none}]\n"
            "scheduler: {type: asha, metric: acc_clean, grace_period: 6, max_t: 4}\n",
            "scheduler.max_t",
            "grace_period",
        ),
        # a max_t past the trials' epochs would put a rung at a trial's last epoch
        (
            "fixed: {epochs: 4}\ngrid: [{regularizer: none}]\n"
            "scheduler: {type: moasha, metrics: [acc_clean], modes: [max], max_t: 40}\n",
            "scheduler.max_t",
            "at most the trials' 4 epochs",
        ),
    ],
)  # fmt: skip
def test_a_scheduler_that_cannot_work_is_refused_by_the_dry_run(
    tmp_path, capsys, body, field, words
):
    from lipsweep.__main__ import main

    space = _space_yaml(tmp_path, body)
    with pytest.raises(ConfigError) as exc:
        load_space(space)
    assert exc.value.field == field and words in exc.value.message, exc.value
    rc, err = main(["sweep", str(space), "--dry-run"]), capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and field in err, err
