"""The train loop makes no host-device sync per step, checked on CPU.

A GPU stalls whenever the host reads a device value. On CPU there is no device to wait for,
so the test traps the Python entry points of such reads instead: ``Tensor.item``, ``.tolist``,
``.nonzero``, ``bool``/``int``/``float`` of a tensor and ``.cpu`` raise while a whole epoch of
the real train loop runs (batching, on-device crop/flip, timm Mixup/CutMix, forward, the
regularizer, backward, gradient clipping, SGD). Only the loop's non-finite-loss check
(:meth:`LossMonitor.check`, every ``nonfinite_check_every`` steps and at epoch end) may read.
"""

from __future__ import annotations

import pytest
import torch

from lipsweep.data.loading import create_mixup, load_splits, train_batches, train_to_device
from lipsweep.regularizers import create_regularizer_from_config
from lipsweep.regularizers.jasmin import JasminRegularizer
from lipsweep.settings.config import TrialConfig
from lipsweep.trial.engine import (
    LossMonitor,
    NonFiniteLossError,
    build_optimizer,
    host_sync_sites,
    train_one_epoch,
    train_step,
)
from lipsweep.trial.run import seed_everything
from lipsweep.vit.models import create_model

TRAPPED = ("item", "tolist", "nonzero", "cpu", "__bool__", "__int__", "__float__")
TINY = {
    "depth": 2,
    "embed_dim": 64,
    "num_heads": 4,
    "train_size": 96,
    "eval_size": 16,
    "batch_size": 32,
    "optimizer": "sgd",
    "lr": 0.05,
    "mixup": 0.8,
    "cutmix": 1.0,
    "clip_grad": 1.0,
    "epochs": 1,
}


class SyncTrap:
    """Arms raising replacements of the host-read methods of ``torch.Tensor``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        self.checks = 0
        for name in TRAPPED:
            orig = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._guard(name, orig))
        check = LossMonitor.check

        def counted_check(monitor: LossMonitor, *args, **kwargs):
            self.checks += 1
            self.armed = False  # the allowed sync
            try:
                return check(monitor, *args, **kwargs)
            finally:
                self.armed = True

        monkeypatch.setattr(LossMonitor, "check", counted_check)

    def _guard(self, name: str, orig):
        def guarded(tensor: torch.Tensor, *args, **kwargs):
            if self.armed:
                raise AssertionError(f"host sync in the train step: Tensor.{name}")
            return orig(tensor, *args, **kwargs)

        return guarded


def _epoch(flat: dict, trap: SyncTrap, check_every: int) -> dict[str, float]:
    cfg = TrialConfig.from_flat({**TINY, **flat})
    device = torch.device("cpu")
    splits = train_to_device(load_splits(cfg.data), device)
    gen = seed_everything(0, 1, device)
    model = create_model(cfg.model)
    reg = create_regularizer_from_config(cfg.regularizer)
    reg.attach(model)
    opt = build_optimizer(model, cfg.optim)
    trap.armed = True
    try:
        return train_one_epoch(
            model,
            reg,
            opt,
            train_batches(splits, cfg.optim.batch_size, 0, 1),
            optim_cfg=cfg.optim,
            data_cfg=cfg.data,
            device=device,
            precision="fp32",
            gen=gen,
            mixup=create_mixup(cfg.data, 10),
            step0=0,
            steps_per_epoch=3,
            epoch=1,
            seed=0,
            nonfinite_check_every=check_every,
        )
    finally:
        trap.armed = False


@pytest.mark.parametrize(
    "flat",
    [
        {"regularizer": "none"},
        {"regularizer": "jasmin", "k": 10, "aggregation": "mean"},
        {"regularizer": "jasmin", "k": 0, "aggregation": "max"},
    ],
    ids=["baseline", "jasmin-k10-mean", "jasmin-k0-max"],
)
def test_train_loop_reads_the_device_only_at_the_every_n_check(flat, monkeypatch):
    trap = SyncTrap(monkeypatch)
    stats = _epoch(flat, trap, check_every=2)
    assert stats["steps"] == 3
    assert trap.checks == 2  # after step 2, and at epoch end
    assert all(torch.isfinite(torch.tensor(stats[k])) for k in ("loss", "loss_ce", "loss_reg"))
    assert (stats["loss_reg"] != 0) == (flat["regularizer"] != "none")


def test_the_trap_catches_a_sync(monkeypatch):
    """The trap is live: a regularizer term that reads a value on the host is caught."""
    trap = SyncTrap(monkeypatch)
    orig_terms = JasminRegularizer.terms

    def reading_terms(self):
        terms = orig_terms(self)
        float(terms["jasmin"])  # what a per-step log line would do
        return terms

    monkeypatch.setattr(JasminRegularizer, "terms", reading_terms)
    with pytest.raises(AssertionError, match="host sync.*__float__"):
        _epoch({"regularizer": "jasmin"}, trap, check_every=50)


def test_non_finite_loss_is_caught_by_the_periodic_check_with_its_step():
    """The deferred check still names the first non-finite step and its loss parts."""
    monitor = LossMonitor(torch.device("cpu"))
    monitor.add(torch.tensor([1.0, 1.0, 0.0]), step=7)
    monitor.add(torch.tensor([float("nan"), 1.0, float("nan")]), step=8)
    monitor.add(torch.tensor([float("inf"), float("inf"), 0.0]), step=9)
    with pytest.raises(
        NonFiniteLossError,
        match=r"loss became nan at epoch 3, step 8 "
        r"\(loss_ce=1.0, loss_reg=nan",
    ):
        monitor.check(3, 0.1)


def test_host_sync_sites_needs_cuda():
    with pytest.raises(ValueError, match="CUDA"):
        host_sync_sites(lambda: None, torch.device("cpu"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(
    "flat",
    [
        {"regularizer": "none"},
        {"regularizer": "jasmin", "k": 10, "aggregation": "mean"},
        {"regularizer": "jasmin", "k": 0, "aggregation": "max"},
    ],
)
def test_a_cuda_train_step_makes_no_sync(flat):
    """What the CPU traps stand in for, counted by CUDA itself (set_sync_debug_mode)."""
    cfg = TrialConfig.from_flat({**TINY, **flat})
    device = torch.device("cuda")
    splits = train_to_device(load_splits(cfg.data), device)
    gen = seed_everything(0, 1, device)
    model = create_model(cfg.model).to(device)
    reg = create_regularizer_from_config(cfg.regularizer)
    reg.attach(model)
    opt = build_optimizer(model, cfg.optim)
    mixup = create_mixup(cfg.data, 10)
    batches = train_batches(splits, cfg.optim.batch_size, 0, 1)

    def step() -> None:
        xb, yb = next(batches)
        train_step(
            model,
            reg,
            opt,
            xb,
            yb,
            optim_cfg=cfg.optim,
            data_cfg=cfg.data,
            device=device,
            precision="auto",
            gen=gen,
            mixup=mixup,
            lr=0.01,
        )

    step()  # warm-up: first-use allocations and lazy inits
    assert host_sync_sites(step, device) == []  # on failure: where each sync came from


def test_host_sync_sites_names_the_line_of_each_sync(monkeypatch):
    """The recording half of host_sync_sites on any machine: the CUDA calls are stubbed, and
    ``fn`` raises the warning PyTorch's sync debug mode raises (on a GPU it comes from CUDA)."""
    import warnings

    for name in ("synchronize", "get_sync_debug_mode", "set_sync_debug_mode"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, **k: 0)

    def fn() -> None:
        warnings.warn("called a synchronizing CUDA operation", stacklevel=1)  # the sync
        warnings.warn("something else", stacklevel=1)  # not a sync: shown as usual, not counted

    line = fn.__code__.co_firstlineno + 1
    with pytest.warns(UserWarning, match="something else"):
        sites = host_sync_sites(fn, torch.device("cuda"))
    assert len(sites) == 1
    assert sites[0].startswith(f"{__file__}:{line} <- ")
    assert sites[0].endswith(": called a synchronizing CUDA operation")


def test_host_sync_sites_marks_a_sync_made_in_garbage_collection(monkeypatch):
    """A finalizer run by Python's collector while ``fn`` runs (an older object's, say a
    tensor's cleanup) is named as such: on a GPU that tells a one-time sync of the process from
    one in ``fn``'s own code. The collection is forced here; on a GPU it comes when it comes."""
    import gc
    import warnings

    for name in ("synchronize", "get_sync_debug_mode", "set_sync_debug_mode"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, **k: 0)

    class Syncs:
        def __del__(self) -> None:
            warnings.warn("called a synchronizing CUDA operation", stacklevel=1)

    def fn() -> None:
        warnings.warn("called a synchronizing CUDA operation", stacklevel=1)  # fn's own
        garbage = Syncs()
        garbage.cycle = garbage  # freed only by the collector
        del garbage
        gc.collect()

    callbacks = list(gc.callbacks)
    sites = host_sync_sites(fn, torch.device("cuda"))
    assert len(sites) == 2
    assert not sites[0].endswith("[in garbage collection]")
    assert sites[1].endswith(": called a synchronizing CUDA operation [in garbage collection]")
    assert gc.callbacks == callbacks  # the hook is gone afterwards


def test_host_sync_sites_does_not_count_the_warning_of_entering_the_debug_mode(monkeypatch):
    """PyTorch warns once per process, when the sync debug mode is first switched on, that it
    "does not yet detect all synchronizing operations". On the H100 that warning was the one
    "sync" of the first measured train step: it is the instrument's, not the step's."""
    import warnings

    def set_mode(mode: object) -> None:
        if mode == "warn":
            warnings.warn(
                "Sync debug mode is on; it does not yet detect all synchronizing operations",
                stacklevel=1,
            )

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", set_mode)
    with pytest.warns(UserWarning, match="does not yet detect"):
        assert host_sync_sites(lambda: None, torch.device("cuda")) == []
