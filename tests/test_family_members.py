"""A new member of each family is one file: a regularizer, an attack, a Lipschitz estimator,
a dataset, a searcher and a scheduler defined here, in a test module, and added with their
family's decorator, are listed, pass config validation (errors naming their fields) and are
created (the first three run in one tiny trial; docs/architecture.md has the recipe)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from _sweep_helpers import TINY_FLAT
from torch import nn

from lipsweep.attacks import ATTACKS, Attack, register_attack, unregister_attack
from lipsweep.core.config_base import ConfigError, check_positive
from lipsweep.data import register_dataset, unregister_dataset
from lipsweep.lipschitz import register_estimator, unregister_estimator
from lipsweep.regularizers import (
    Regularizer,
    RegularizerSpec,
    is_regularizer,
    register_regularizer,
    unregister_regularizer,
)
from lipsweep.settings.config import TrialConfig

pytestmark = pytest.mark.ray

# ------------------------------------------------------------------ a regularizer


@dataclass(frozen=True)
class LogitSettings:
    logit_lam: float = 0.5
    """Logit penalty: weight (> 0). Default 0.5."""

    def __post_init__(self) -> None:
        check_positive("logit_lam", self.logit_lam)


LOGIT = RegularizerSpec(name="logit_pen", doc="test only", settings=LogitSettings)


class LogitPenalty(Regularizer):
    """Mean squared logit of the last training forward (a test-only penalty)."""

    terms_taken = 0

    def __init__(self, settings: LogitSettings) -> None:
        super().__init__(settings)
        self.lam, self._out, self._hook = settings.logit_lam, None, None

    def attach(self, model: nn.Module) -> None:
        self._hook = model.register_forward_hook(lambda m, i, out: setattr(self, "_out", out))

    def detach(self) -> None:
        if self._hook is not None:
            self._hook.remove()

    def terms(self) -> dict[str, torch.Tensor]:
        type(self).terms_taken += 1
        return {"logit_pen": self._out.float().pow(2).mean()}

    @property
    def weights(self) -> dict[str, float]:
        return {"logit_pen": self.lam}


# ------------------------------------------------------------------ an attack


@dataclass(frozen=True)
class SignNoiseSettings:
    sign_eps: list[int] = field(default_factory=lambda: [8])
    """Sign-noise radii, numerators over 255 (metrics ``acc_signnoise_<n>``)."""
    sign_seed: int = 0
    """Seed of the sign pattern (>= 0)."""

    def __post_init__(self) -> None:
        check_positive("sign_seed", self.sign_seed, allow_zero=True)


class SignNoise(Attack):
    """x + eps * a fixed random sign pattern (a test-only attack with its own settings)."""

    @classmethod
    def from_config(cls, model: nn.Module, eps: float, cfg: Any) -> "SignNoise":
        attack = cls(model, eps, precision=cfg.attack_precision)
        attack.seed = cfg.settings["sign_noise"].sign_seed
        return attack

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed)
        sign = torch.randint(0, 2, x.shape, generator=g).to(x) * 2 - 1
        return (x + self.eps * sign).clamp(0.0, 1.0)


# ------------------------------------------------------------------ an estimator


class LogitNorm:
    """||f(x)||_2 of each sample (a test-only estimator)."""

    outputs = ("logit_norm",)

    def __call__(self, model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return {"logit_norm": model(x).float().norm(dim=1)}


@pytest.fixture()
def members():
    """Each family's decorator, as a plugin module would apply it; removed after the test."""
    register_regularizer("logit_pen", spec=LOGIT)(LogitPenalty)
    register_attack(
        "sign_noise", eps_field="sign_eps", metric_prefix="signnoise", settings=SignNoiseSettings
    )(SignNoise)
    register_estimator("logit_norm")(LogitNorm)
    yield
    unregister_regularizer("logit_pen")
    unregister_attack("sign_noise")
    unregister_estimator("logit_norm")


FLAT = {
    **TINY_FLAT,
    "epochs": 1,
    "train_size": 64,
    "regularizer": "logit_pen",
    "logit_lam": 0.25,
    "attacks": ["sign_noise"],
    "sign_eps": [8],
    "sign_seed": 3,
    "lip_estimators": ["logit_norm"],
    "lip_images": 8,
    "lip_tokens": False,
    "lip_softmax": False,
    "lip_head_bounds": False,
}


def test_members_defined_in_a_test_module_validate(members):
    cfg = TrialConfig.from_flat(FLAT)
    assert cfg.to_flat()["logit_lam"] == 0.25 and cfg.regularizer.settings == LogitSettings(0.25)
    assert TrialConfig.from_flat(cfg.to_flat()) == cfg
    assert cfg.robustness.metric_names() == ["acc_clean", "acc_signnoise_8"]
    assert ATTACKS.spec("sign_noise").eps_field == "sign_eps"
    assert cfg.robustness.settings["sign_noise"] == SignNoiseSettings([8], 3)
    for bad, key in [
        ({"logit_lam": -1}, "logit_lam"),
        ({"regularizer": "jasmin"}, "logit_lam"),  # another member's setting
        ({"attacks": ["sign_nois"]}, "attacks"),
        ({"sign_seed": -1}, "sign_seed"),
        ({"sign_eps": []}, "sign_eps"),
        ({"lip_estimators": ["logit_nrm"]}, "lip_estimators"),
    ]:
        with pytest.raises(ConfigError) as err:
            TrialConfig.from_flat({**FLAT, **bad})
        assert err.value.field == key, (bad, err.value)


def test_members_defined_in_a_test_module_train_and_measure(members, tmp_path):
    from lipsweep.trial.run import run_trial

    LogitPenalty.terms_taken = 0
    result = run_trial(TrialConfig.from_flat(FLAT), tmp_path, progress=False)
    assert LogitPenalty.terms_taken == 1  # 64 images, batch 64: one step with the penalty
    assert 0.0 <= result.metrics["acc_signnoise_8"] <= result.metrics["acc_clean"]
    assert result.metrics["lip_logit_norm_logit_norm_mean"] > 0


def test_a_member_needs_its_light_facts():
    with pytest.raises(TypeError, match="not declared"):
        register_regularizer("nameless")(LogitPenalty)
    with pytest.raises(TypeError, match="outputs"):
        register_estimator("no_outputs")(lambda: None)
    with pytest.raises(ValueError, match="already a setting of 'jasmin'"):
        register_regularizer(spec=RegularizerSpec("clash", "x", settings=_KSettings))(LogitPenalty)
    assert not is_regularizer("nameless") and not is_regularizer("clash")


@dataclass(frozen=True)
class _KSettings:
    k: int = 2


# ------------------------------------------------------------------ a dataset


class Stripes:
    """Two classes of 8x8 images held in memory: vertical or horizontal stripes (a test-only
    dataset; ``check`` finds no files to read, ``arrays`` makes them)."""

    def check(self, cfg: Any) -> None:
        if cfg.data_dir:
            raise ConfigError("data_dir", "stripes reads no files; leave data_dir empty")

    def arrays(self, cfg: Any) -> tuple[np.ndarray, ...]:
        rows = np.arange(8) % 2 * 255
        vertical = np.broadcast_to(rows, (3, 8, 8))
        x = np.stack([vertical, vertical.transpose(0, 2, 1)] * 12).astype(np.uint8)
        y = np.arange(24) % 2
        return x[:16], y[:16], x[16:], y[16:]


@pytest.fixture()
def stripes():
    register_dataset(
        "stripes",
        files="nothing: made in memory",
        num_classes=2,
        image_size=8,
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
    )(Stripes)
    yield
    unregister_dataset("stripes")


def test_a_dataset_defined_in_a_test_module_is_listed_validated_and_loaded(stripes):
    from lipsweep.data import list_datasets
    from lipsweep.data.loading import DataConfig, load_splits

    assert "stripes" in list_datasets()
    flat = {**TINY_FLAT, "dataset": "stripes", "img_size": 8, "patch_size": 4}
    cfg = TrialConfig.from_flat({**flat, "num_classes": 2, "normalization": "stripes"})
    assert (cfg.data.num_classes, cfg.data.image_size) == (2, 8)
    splits = load_splits(DataConfig(dataset="stripes", eval_size=0))
    assert splits.x_train.shape == (16, 3, 8, 8) and splits.y_eval.tolist() == [0, 1] * 4
    for bad, key in [
        ({"dataset": "stripez"}, "dataset"),
        ({"data_dir": "/tmp"}, "data_dir"),
        ({"num_classes": 10}, "num_classes"),
        ({"img_size": 32}, "img_size"),
    ]:
        with pytest.raises(ConfigError) as err:
            TrialConfig.from_flat({**flat, "num_classes": 2, **bad})
        assert err.value.field == key, (bad, err.value)


def _stripes_as(change: Any) -> type:
    """Stripes whose ``arrays`` pass through ``change`` (a plugin handing bad arrays)."""
    return type("Changed", (Stripes,), {"arrays": lambda self, cfg: change(Stripes().arrays(cfg))})


def _nhwc(a: tuple) -> tuple:
    return (a[0].transpose(0, 2, 3, 1), a[1], a[2].transpose(0, 2, 3, 1), a[3])


BAD_ARRAYS = {
    "float": (lambda a: (a[0] / 255.0, *a[1:]), "x_train is float64; expected uint8"),
    "label": (lambda a: (*a[:3], a[3] + 1), "label 2 is out of range: the config has num_"),
    "size": (lambda a: (a[0][:, :, :4, :4], a[1], a[2][:, :, :4, :4], a[3]), "images are 4x4"),
    "count": (lambda a: a[:3], "must return the 4 arrays"),
}


@pytest.fixture()
def plugin_arrays(request):
    """Dataset 'stripes' whose ``arrays`` are changed by ``request.param``."""
    register_dataset("stripes", files="nothing", num_classes=2, image_size=8)(
        _stripes_as(request.param)
    )
    yield
    unregister_dataset("stripes")


@pytest.mark.parametrize(
    "plugin_arrays,problem",
    [(change, problem) for change, problem in BAD_ARRAYS.values()],
    ids=list(BAD_ARRAYS),
    indirect=["plugin_arrays"],
)
def test_a_plugins_bad_arrays_exit_2_naming_the_dataset_before_train_writes(
    plugin_arrays, problem, tmp_path, capsys
):
    from lipsweep.__main__ import main

    flat = {"dataset": "stripes", "img_size": 8, "patch_size": 4, "num_classes": 2}
    flat.update(depth=1, embed_dim=16, num_heads=2, device="cpu", epochs=1)
    sets = [arg for k, v in flat.items() for arg in ("--set", f"{k}={v}")]
    out = tmp_path / "out"
    assert main(["train", *sets, "--out", str(out)]) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and line.startswith("lipsweep train: error: dataset: 'stripes'"), line
    assert problem in line and not out.exists(), line


@pytest.mark.parametrize("plugin_arrays", [_nhwc], indirect=True)
def test_a_plugins_nhwc_arrays_load_as_nchw(plugin_arrays):
    from lipsweep.data.loading import DataConfig, load_splits

    splits = load_splits(DataConfig(dataset="stripes", eval_size=0))
    nchw = Stripes().arrays(None)
    assert splits.x_train.shape == (16, 3, 8, 8)
    assert (splits.x_train.numpy() == nchw[0]).all() and splits.y_train.dtype == torch.int64


# ------------------------------------------------------------------ a searcher and a scheduler
# They run in the sweep's driver (not in Tune's workers), so registering them here is enough
# for a real sweep through lipsweep.api.

CALLS: dict[str, int] = {}


@dataclass(frozen=True)
class ReversedSettings:
    """``search: {algorithm: reversed-random, ...}``: the random draws, run last first."""

    num_samples: Any = None
    seed: Any = 0
    metric: Any = "acc_clean"
    mode: Any = "max"

    def __post_init__(self) -> None:
        if not isinstance(self.num_samples, int) or self.num_samples < 1:
            raise ConfigError("search.num_samples", f"must be >= 1, got {self.num_samples!r}")


def reversed_plan(settings: ReversedSettings, request: Any) -> Any:
    from ray import tune

    from lipsweep.search.searchers import TunePlan

    CALLS["searcher"] = CALLS.get("searcher", 0) + 1
    return TunePlan(param_space={"trial": tune.grid_search(list(request.trials)[::-1])})


@dataclass(frozen=True)
class HaltSettings:
    """``scheduler: {type: halt-after, epochs: N}``: stop every trial after N epochs."""

    epochs: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.epochs, int) or self.epochs < 1:
            raise ConfigError("scheduler.epochs", f"must be an integer >= 1, got {self.epochs!r}")

    @property
    def type(self) -> str:
        return "halt-after"

    def metrics_used(self) -> tuple[tuple[str, str], ...]:
        return ()


def halt_after(settings: HaltSettings, ctx: Any) -> Any:
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler

    CALLS["scheduler"] = CALLS.get("scheduler", 0) + 1

    class HaltAfter(FIFOScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            if result.get("epoch", 0) >= settings.epochs:
                return TrialScheduler.STOP
            return TrialScheduler.CONTINUE

    return HaltAfter()


@pytest.fixture()
def search_members():
    from lipsweep.search.schedulers import register_scheduler, unregister_scheduler
    from lipsweep.search.searchers import SearcherInfo, register_searcher, unregister_searcher

    register_searcher("reversed-random", settings=ReversedSettings, info=SearcherInfo())(
        reversed_plan
    )
    register_scheduler("halt-after", settings=HaltSettings)(halt_after)
    CALLS.clear()
    try:
        yield
    finally:
        unregister_searcher("reversed-random")
        unregister_scheduler("halt-after")


def _search_space(tmp_path, scheduler: dict, **extra: Any) -> Any:
    from _sweep_helpers import npz_space

    search = {
        "algorithm": "reversed-random",
        "num_samples": 2,
        "space": {"lr": {"loguniform": [1e-4, 1e-2]}},
    }
    return npz_space(
        tmp_path,
        "members",
        epochs=3,
        search=search,
        scheduler=scheduler,
        resources={"cpu": 1, "gpu": 0},
        max_concurrent_trials=2,
        **extra,
    )


def test_a_searcher_and_a_scheduler_defined_in_a_test_module_validate(search_members, tmp_path):
    from lipsweep.search.schedulers import create_scheduler, list_schedulers
    from lipsweep.search.searchers import SearchRequest, create_searcher, list_searchers
    from lipsweep.search.space import load_space

    assert "reversed-random" in list_searchers() and "halt-after" in list_schedulers()
    spec = load_space(_search_space(tmp_path, {"type": "halt-after", "epochs": 2}))
    assert spec.num_trials == 2 and spec.scheduler.epochs == 2
    request = SearchRequest(trials=[{"lr": 1}, {"lr": 2}])
    plan = create_searcher("reversed-random", spec.search.settings, request)
    assert plan.param_space["trial"]["grid_search"] == [{"lr": 2}, {"lr": 1}]
    assert type(create_scheduler(spec.scheduler)).__name__ == "HaltAfter"
    with pytest.raises(ConfigError, match="scheduler.epochs"):
        load_space(_search_space(tmp_path, {"type": "halt-after", "epochs": 0}))
    with pytest.raises(ConfigError, match="scheduler.type"):
        load_space(_search_space(tmp_path, {"type": "halt-before"}))


@pytest.mark.slow
def test_a_searcher_and_a_scheduler_defined_in_a_test_module_drive_a_sweep(
    search_members, tmp_path, monkeypatch, caplog
):
    """Through lipsweep.api, no argparse: the test's searcher plans the trials and its
    scheduler stops each after its first epoch; the space's ``callbacks:`` entry (a Tune
    callback named by import path, as W&B's would be: tests/_plugins/tune_probe.py) is told
    each result and the experiment's end. Hostile callbacks before it (one raises in every
    ``on_trial_result``, one hangs in ``on_trial_complete``, one calls ``sys.exit`` at the
    experiment's end) are logged and change nothing: every run ends, none RUNNING
    (tests/test_faults_callbacks.py holds the rule)."""
    from _sweep_helpers import runs, sweep_in_process

    log = tmp_path / "callback.log"
    hostile = "_plugins.tune_probe.HostileCallback"
    callbacks = [
        {hostile: {"mode": "raise"}},
        {hostile: {"mode": "hang", "hook": "on_trial_complete"}},
        {hostile: {"mode": "exit", "hook": "on_experiment_end"}},
        {"_plugins.tune_probe.RecordingCallback": {"path": str(log)}},
    ]
    monkeypatch.setenv("LIPSWEEP_CALLBACK_TIMEOUT_S", "2")
    caplog.set_level(logging.WARNING, logger="lipsweep")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    swept = sweep_in_process(
        monkeypatch,
        tmp_path,
        space=_search_space(tmp_path, {"type": "halt-after", "epochs": 1}, callbacks=callbacks),
        tracking_uri=uri,
    )
    assert CALLS == {"searcher": 1, "scheduler": 1}
    assert swept.ok and swept.counts.total == 2 and swept.counts.stopped == 2, swept.summary
    assert sorted(log.read_text().splitlines()) == [
        "probe end 2",
        "probe result 1",
        "probe result 1",
    ]
    said = caplog.text
    assert "callbacks[0] " + hostile + ": on_trial_result raised ValueError" in said
    assert "callbacks[1] " + hostile + ": on_trial_complete did not return within 2 s" in said
    assert "callbacks[2] " + hostile + ": on_experiment_end called sys.exit(4)" in said
    assert "RUNNING" not in {r.info.status for r in runs(uri)}
