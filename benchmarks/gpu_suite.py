"""One command that measures lipsweep's GPU path and writes one JSON file.

    python benchmarks/gpu_suite.py --device cuda --smoke-trial --out gpu_suite.json   # one H100
    python benchmarks/gpu_suite.py --device cpu --quick --out quick.json              # 2 CPUs

It runs on a machine with its own torch (>= 2.4; the device image has 2.11) and timm but no
Ray, MLflow, Optuna or network: it imports none of them, directly or through lipsweep, and uses
pyautoattack when it is importable (``benchmarks/fetch_wheels.sh`` puts a wheel in ``.whl/``),
else it skips AutoAttack with a warning. Every figure comes from lipsweep's own functions
(``engine.train_one_epoch``, the regularizers, ``attacks``, ``lipschitz``, ``checkpoint``,
``trial.run_trial``); each measurement is guarded, so one failure records an error string and
the suite goes on. The JSON is rewritten after every phase, so a run cut short keeps what
it measured. ``--quick`` takes the same code path with tiny shapes (a 2-block width-64 ViT,
small batches and image counts).

What it measures for is a search space (``--space``, default ``search_spaces/paper_cifar100.yaml``):
the projection of one trial reads every assumption from that space's first trial (epochs,
batch, split sizes, evaluation and attack settings, Lipschitz image counts with ``0`` = the
whole evaluation split, ``checkpoint_every``, precision, classes) and names the space.

Order, each phase under a cap (``Sizes.caps``; ``meta.phases`` records the
order, each cap, its time and whether it was done, capped, skipped or failed):

1. ``smoke_trial`` (with ``--smoke-trial SPACE``, default ``search_spaces/gpu_smoke.yaml``): the
   first trial of that space through ``python -m lipsweep train`` (no Ray, no MLflow).
2. The mandatory phases, which the projection and docs/benchmarks.md's figures need:
   ``train`` (the bf16 matmul rate and the space's train step at its batch), ``regularizers``
   (each regularizer's step-time ratio to the baseline at ViT-B bf16 batch 512, CUDA events,
   interleaved rounds, medians, and host syncs per step), ``checkpoint`` (per-epoch clean
   evaluation in fp32 and bf16 autocast, checkpoint save and load), ``attacks`` (FGSM and
   PGD-4 images/s in fp32, TF32 and bf16 and the accuracy difference; each AutoAttack stage
   alone in s per 1000 attacked images, on a briefly trained ViT), ``lipschitz`` (seconds per
   image of each part of the space's Lipschitz summary at its number of classes), and
   ``projection`` (the device-hours of one trial of the space with its arithmetic, the
   Lipschitz and checkpoint shares, the ``checkpoint_every`` that keeps checkpoints under 3 %,
   and what a preemption loses).
3. The optional phases, while ``--budget-s`` and ``--deadline-s`` leave room for their whole
   cap: ``train_modes`` (fp32, TF32 and bf16 at every batch; MFU against the matmul rate, FLOPs
   cross-checked with torch.utils.flop_counter), ``lipschitz_detail`` (||J_f|| at C = 10 and
   100, the head bounds split into matvecs and eigh/SVD with their CPU vs device placement, and
   the whole summary against the sum of its parts), ``run_trial`` (one epoch of ``run_trial``
   on the embedded CIFAR-10 sample), and ``compile`` last (bf16 + torch.compile).

A phase past its cap is stopped (SIGALRM; the smoke trial's subprocess is killed) and what it
measured is kept. ``benchmarks/gpu_report.py`` turns the JSON into the tables of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from lipsweep.data.loading import (  # noqa: E402
    DataConfig,
    load_splits,
    to_unit,
    train_batches,
    train_to_device,
)
from lipsweep.regularizers import Regularizer, create_regularizer  # noqa: E402
from lipsweep.settings.config import OptimConfig, TrialConfig  # noqa: E402
from lipsweep.sweep.projection import (  # noqa: E402, F401  (re-exported for the scripts)
    BASELINE_ACC,
    CHECKPOINT_SHARE_TARGET,
    SPLITS,
    TARGET_HOURS,
    Target,
    _get,
    _num,
    checkpoint_epochs,
    preemption_loss,
    project_trial,
)
from lipsweep.sweep.projection import projected_mode as _projected_mode  # noqa: E402
from lipsweep.trial.engine import (  # noqa: E402
    autocast_context,
    build_optimizer,
    evaluate_clean,
    train_one_epoch,  # noqa: E402
)
from lipsweep.vit.models import ModelConfig, PixelModel, create_model  # noqa: E402

_log = logging.getLogger("gpu_suite")

SECTIONS = ("train", "regularizers", "checkpoint", "attacks", "lipschitz", "probes", "trial")
MODES = ("fp32", "tf32", "bf16", "bf16_compile")
REGULARIZERS: dict[str, dict[str, Any]] = {
    "baseline": {"name": "none"},
    "jasmin_k10_mean": {"name": "jasmin", "k": 10, "lam": 1e-2, "aggregation": "mean"},
    "jasmin_k10_max": {"name": "jasmin", "k": 10, "lam": 1e-2, "aggregation": "max"},
    "jasmin_k0_mean": {"name": "jasmin", "k": 0, "lam": 1e-2, "aggregation": "mean"},
    "specformer": {"name": "specformer", "lam_q": 1e-2, "lam_k": 1e-2, "lam_v": 1e-2},
}
TARGET_RATIO = {"jasmin_k10_mean": 1.05, "jasmin_k10_max": 1.05, "specformer": 1.02}
AA_STAGES = ("apgd-ce", "apgd-t", "fab-t", "square")
DEFAULT_SPACE = ROOT / "search_spaces" / "paper_cifar100.yaml"
"""The space the suite measures for and projects (``--space``): every assumption of the
projection (epochs, batch, split sizes, evaluation, attack and Lipschitz image counts,
checkpoint cadence, precision, classes) is read from its first trial."""


@dataclass
class Sizes:
    """Shapes of one run: the ViT-B figures, or tiny ones for --quick (same code path)."""

    model: dict[str, Any]
    batches: tuple[int, ...]
    compile_batches: tuple[int, ...]
    reg_batch: int
    warmup: int
    steps: int
    rounds: int
    matmul_n: int
    eval_images: int
    brief_epochs: int
    brief_train: int
    attack_images: int
    aa_images: int
    lip_images: int
    head_images: int
    summary_images: int
    trial_train: int
    trial_batch: int
    trial_eval: int
    budget_s: float
    caps: dict[str, float]


FULL = Sizes(
    model={"model": "vit_base_patch16_224"},
    batches=(64, 256, 512),
    compile_batches=(512, 256, 64),
    reg_batch=512,
    warmup=3,
    steps=10,
    rounds=3,
    matmul_n=8192,
    eval_images=10_000,
    brief_epochs=6,
    brief_train=2000,
    attack_images=1000,
    aa_images=500,
    lip_images=64,
    head_images=8,
    summary_images=500,
    trial_train=2000,
    trial_batch=256,
    trial_eval=500,
    budget_s=450.0,
    # one device call is 600 s with ~60 s of imports: the smoke trial and the mandatory
    # phases (the first seven) fit in 500 s; the optional ones run while --budget-s and
    # --deadline-s leave room for their whole cap
    caps={
        "smoke_trial": 150.0,
        "train": 45.0,
        "regularizers": 75.0,
        "checkpoint": 45.0,
        "attacks": 100.0,
        "lipschitz": 75.0,
        "projection": 10.0,
        "train_modes": 90.0,
        "lipschitz_detail": 75.0,
        "lipschitz_routes": 90.0,
        "regularizers_compiled": 240.0,
        "probes": 45.0,
        "run_trial": 90.0,
        "compile": 120.0,
    },
)
QUICK = Sizes(
    model={"model": "vit_tiny_patch16_224", "depth": 2, "embed_dim": 64, "num_heads": 2},
    batches=(8, 16),
    compile_batches=(8,),
    reg_batch=16,
    warmup=1,
    steps=2,
    rounds=2,
    matmul_n=256,
    eval_images=128,
    brief_epochs=1,
    brief_train=256,
    attack_images=32,
    aa_images=16,
    lip_images=4,
    head_images=1,
    summary_images=8,
    trial_train=128,
    trial_batch=32,
    trial_eval=32,
    budget_s=150.0,
    caps={
        "smoke_trial": 120.0,
        "train": 30.0,
        "regularizers": 60.0,
        "checkpoint": 30.0,
        "attacks": 60.0,
        "lipschitz": 40.0,
        "projection": 10.0,
        "train_modes": 60.0,
        "lipschitz_detail": 40.0,
        "lipschitz_routes": 60.0,
        "regularizers_compiled": 120.0,
        "probes": 30.0,
        "run_trial": 60.0,
        "compile": 120.0,
    },
)


def load_target(path: Path) -> Target:
    """Read ``path`` with lipsweep's own space loader (no Ray, no MLflow)."""
    from lipsweep.search.space import load_space

    path = Path(os.path.abspath(path))  # not resolve(): search_spaces/ is a link into lipsweep/
    spec = load_space(path)
    if not spec.trials:
        raise ValueError(f"--space {path}: no trial to project (a grid space is needed)")
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return Target(str(shown), spec.name, len(spec.trials), TrialConfig.from_flat(spec.trials[0]))


# ---------------------------------------------------------------- helpers


class Suite:
    """The JSON being built, the time budget, and the guard that keeps one failure local."""

    def __init__(
        self,
        out: Path,
        device: torch.device,
        sizes: Sizes,
        quick: bool,
        space: Path = DEFAULT_SPACE,
    ) -> None:
        self.out, self.device, self.sizes, self.quick = out, device, sizes, quick
        self.target = load_target(space)
        self.num_classes = self.target.cfg.model.num_classes
        self.t0 = time.perf_counter()
        self.data: dict[str, Any] = {"meta": {}, "errors": []}

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def over_budget(self) -> bool:
        return self.elapsed() > self.sizes.budget_s

    @contextlib.contextmanager
    def guard(
        self, where: dict[str, Any], key: str, optional: bool = False
    ) -> Iterator[dict[str, Any]]:
        """Run one measurement into ``where[key]``; an exception becomes an error string."""
        slot: dict[str, Any] = where.setdefault(key, {})
        if optional and self.over_budget():
            slot["skipped"] = f"time budget of {self.sizes.budget_s:.0f} s spent"
            _log.warning("%s: skipped (time budget spent)", key)
            yield slot
            return
        t0 = time.perf_counter()
        try:
            yield slot
        except Exception as exc:  # noqa: BLE001 - the suite records and goes on
            msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            slot["error"] = msg
            self.data["errors"].append(f"{key}: {msg}")
            _log.error("%s failed: %s\n%s", key, msg, traceback.format_exc(limit=4))
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        finally:
            slot.setdefault("seconds_spent", round(time.perf_counter() - t0, 3))

    def write(self) -> None:
        self.data["meta"]["wall_s"] = round(self.elapsed(), 1)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.with_name(f".{self.out.name}.tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=_jsonable))
        os.replace(tmp, self.out)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if torch.is_tensor(obj):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


class Clock:
    """Wall time of a region: CUDA events on a GPU (sync at the end only), perf_counter on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.seconds = float("nan")

    def __enter__(self) -> "Clock":
        if self.cuda:
            torch.cuda.synchronize()
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.cuda:
            self._end.record()
            self._end.synchronize()
            self.seconds = self._start.elapsed_time(self._end) / 1e3
        else:
            self.seconds = time.perf_counter() - self._t


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def matmul_mode(mode: str) -> Iterator[None]:
    """TF32 matmuls and convolutions for 'tf32', strict fp32 otherwise; restored after.

    Through lipsweep's own switch (``vit.precision.tf32_matmuls``, the legacy per-backend
    flags): mixing it with ``torch.set_float32_matmul_precision`` leaves torch >= 2.9 in a
    state where ``torch.get_float32_matmul_precision()`` raises, and torch.compile calls it.
    """
    from lipsweep.vit.precision import tf32_matmuls

    with tf32_matmuls(mode == "tf32"):
        yield


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: torch.device) -> Optional[float]:
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated() / 2**30, 3)


def build_vit(sizes: Sizes, num_classes: int, device: torch.device) -> PixelModel:
    """lipsweep's model builder: patch 4 on 32 px (65 tokens), no q/k/v bias, random init."""
    cfg = ModelConfig(img_size=32, patch_size=4, num_classes=num_classes, **sizes.model)
    return create_model(cfg).to(device)


def model_shape(model: PixelModel) -> dict[str, int]:
    net = model.net
    return {
        "depth": len(net.blocks),
        "embed_dim": net.embed_dim,
        "num_heads": net.blocks[0].attn.num_heads,
        "tokens": net.patch_embed.num_patches + 1,
        "patch": net.patch_embed.patch_size[0],
        "num_classes": net.num_classes,
        "params": sum(p.numel() for p in net.parameters()),
    }


def vit_train_flops_per_image(shape: dict[str, int]) -> float:
    """FLOPs of one training image: 3 x forward (backward = 2 x forward), matmuls only.

    Forward per block: qkv 2N D 3D, scores and P V 2 x 2 N^2 D, projection 2N D^2, MLP
    2 x 2N D 4D; plus patch embedding 2 (N-1) (3 p^2) D and the head 2 D C.
    """
    n, d, depth = shape["tokens"], shape["embed_dim"], shape["depth"]
    block = 2 * n * d * 3 * d + 4 * n * n * d + 2 * n * d * d + 16 * n * d * d
    fwd = depth * block + 2 * (n - 1) * 3 * shape["patch"] ** 2 * d + 2 * d * shape["num_classes"]
    return 3.0 * fwd


def counted_train_flops_per_image(model: PixelModel, device: torch.device) -> float:
    """FLOPs of one training image as torch.utils.flop_counter counts them (batch 2)."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.rand(2, 3, 32, 32, device=device)
    with FlopCounterMode(display=False) as fc:
        model(x).float().logsumexp(-1).mean().backward()
    model.zero_grad(set_to_none=True)
    return fc.get_total_flops() / 2


def bf16_matmul_tflops(n: int, device: torch.device, reps: int = 10) -> float:
    """Measured bf16 matmul rate (n x n x n) on ``device``, TFLOP/s."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    with Clock(device) as clk:
        for _ in range(reps):
            a @ b
    return 2 * n**3 * reps / clk.seconds / 1e12


def random_batches(
    n_batches: int, batch: int, num_classes: int, device: torch.device, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """CIFAR-shaped uint8 batches already on the device (the hot path moves data there once)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (batch, 3, 32, 32), generator=g, dtype=torch.uint8)
    y = torch.randint(0, num_classes, (batch,), generator=g)
    return [(x.to(device), y.to(device))] * n_batches


def train_steps(
    model: torch.nn.Module,
    regularizer: Regularizer,
    optimizer: torch.optim.Optimizer,
    batches: list,
    precision: str,
    device: torch.device,
    num_classes: int,
    epoch: int = 1,
    steps_per_epoch: Optional[int] = None,
    optim_cfg: Optional[OptimConfig] = None,
) -> dict[str, float]:
    """Every training step of the suite goes through here: ``engine.train_one_epoch``."""
    optim_cfg = optim_cfg or OptimConfig(lr=0.01)
    n = steps_per_epoch or len(batches)
    return train_one_epoch(
        model,
        regularizer,
        optimizer,
        batches,
        optim_cfg=optim_cfg,
        data_cfg=DataConfig(),
        device=device,
        precision=precision,
        gen=torch.Generator(device=device).manual_seed(epoch),  # as a trial: draws on the device
        mixup=None,
        step0=(epoch - 1) * n,
        steps_per_epoch=n,
        epoch=epoch,
    )


def time_steps(
    model: torch.nn.Module,
    reg: Regularizer,
    opt: torch.optim.Optimizer,
    batches: list,
    warm: int,
    precision: str,
    device: torch.device,
    num_classes: int,
) -> float:
    """Seconds per training step over ``batches`` after ``warm`` warm-up steps."""
    if warm:
        train_steps(model, reg, opt, batches[:warm], precision, device, num_classes)
    with Clock(device) as clk:
        train_steps(model, reg, opt, batches, precision, device, num_classes)
    return clk.seconds / len(batches)


def sync_sites(fn: Callable[[], Any], device: torch.device) -> Optional[list[str]]:
    """Where ``fn`` makes host-device syncs (:func:`lipsweep.trial.engine.host_sync_sites`);
    None on CPU, where there is no device to sync with."""
    from lipsweep.trial.engine import host_sync_sites

    return host_sync_sites(fn, device) if device.type == "cuda" else None


def syncs_per_step(run_steps: Callable[[int], Any], device: torch.device) -> dict[str, Any]:
    """Host syncs of the train loop split into per step and per epoch, by difference.

    ``run_steps(n)`` trains one epoch of ``n`` steps. With s(n) its syncs,
    per_step = (s(4) - s(2)) / 2 and per_epoch = s(2) - 2 per_step: the epoch-end
    non-finite check (1 expected) is not charged to the steps, and the every-N check
    (``nonfinite_check_every`` = 50) does not fire in 4 steps. ``sync_sites``: where each
    sync of the two runs came from, counted. Nulls on CPU.
    """
    two, four = sync_sites(lambda: run_steps(2), device), sync_sites(lambda: run_steps(4), device)
    if two is None or four is None:
        return {"syncs_per_step": None, "syncs_per_epoch_fixed": None, "sync_sites": None}
    per_step = (len(four) - len(two)) / 2
    return {
        "syncs_per_step": per_step,
        "syncs_per_epoch_fixed": len(two) - 2 * per_step,
        "sync_sites": dict(collections.Counter(two + four)),
    }


# ---------------------------------------------------------------- sections


def projected_batch(s: Suite) -> int:
    """The batch the projection needs: the space's (the largest quick batch with --quick)."""
    return max(s.sizes.batches) if s.quick else s.target.cfg.optim.batch_size


def _train_run(
    s: Suite, model: PixelModel, net: torch.nn.Module, mode: str, batch: int, r: dict[str, Any]
) -> None:
    """One ``train.runs`` entry: ms/step, images/s, peak memory and MFU of ``mode`` at ``batch``."""
    dev, sz, sec = s.device, s.sizes, s.data["train"]
    r.update(mode=mode, batch=batch)
    opt = build_optimizer(model, OptimConfig(lr=0.01))
    batches = random_batches(sz.steps, batch, s.num_classes, dev)
    precision = "bf16" if mode.startswith("bf16") else "fp32"
    reg = create_regularizer("none")
    with matmul_mode(mode):
        if mode == "bf16_compile":
            with Clock(dev) as clk:  # compilation (and recompilation) time
                train_steps(net, reg, opt, batches[:1], precision, dev, s.num_classes)
            r["compile_s"] = round(clk.seconds, 2)
        reset_peak(dev)
        step = time_steps(net, reg, opt, batches, sz.warmup, precision, dev, s.num_classes)
    r["step_ms"] = round(step * 1e3, 3)
    r["images_per_s"] = round(batch / step, 1)
    r["peak_mem_gib"] = peak_gib(dev)
    tflops = sec["flops_per_image"] * batch / step / 1e12
    peak = sec.get("matmul", {}).get("bf16_tflops")
    r["model_tflops"] = round(tflops, 5)
    r["mfu_vs_bf16_matmul"] = round(tflops / peak, 4) if peak else None
    _log.info(
        "train %-12s batch %4d: %8.2f ms/step  %8.0f img/s  peak %s GiB  MFU %s",
        mode,
        batch,
        r["step_ms"],
        r["images_per_s"],
        r["peak_mem_gib"],
        r["mfu_vs_bf16_matmul"],
    )


def phase_train(s: Suite) -> None:
    """Mandatory: the bf16 matmul rate and the step the projection needs (the space's
    precision at its batch)."""
    sec = s.data.setdefault("train", {})
    dev, sz = s.device, s.sizes
    with s.guard(sec, "matmul") as r:
        r["n"] = sz.matmul_n
        r["bf16_tflops"] = round(bf16_matmul_tflops(sz.matmul_n, dev), 5)
        _log.info("bf16 matmul %d^3: %.1f TFLOP/s", sz.matmul_n, r["bf16_tflops"])
    model = build_vit(sz, s.num_classes, dev)
    shape = model_shape(model)
    sec["model"] = shape
    sec["flops_per_image"] = vit_train_flops_per_image(shape)
    mode, batch = _projected_mode(s.target.cfg, dev.type), projected_batch(s)
    if mode == "bf16_compile":  # compiling is the optional last phase; measure uncompiled
        mode = "bf16"
    runs = sec.setdefault("runs", {})
    with s.guard(runs, f"{mode}_b{batch}") as r:
        _train_run(s, model, model, mode, batch, r)


def phase_train_modes(s: Suite) -> None:
    """Optional: every other mode x batch, and the FLOP count cross-check."""
    sec = s.data.setdefault("train", {})
    dev, sz = s.device, s.sizes
    model = build_vit(sz, s.num_classes, dev)
    sec.setdefault("flops_per_image", vit_train_flops_per_image(model_shape(model)))
    with s.guard(sec, "flop_counter") as r:
        r["flops_per_image"] = counted_train_flops_per_image(model, dev)
        r["ratio_to_analytic"] = round(r["flops_per_image"] / sec["flops_per_image"], 4)
    runs = sec.setdefault("runs", {})
    for mode in MODES[:-1]:
        for batch in sz.batches:
            if "step_ms" in runs.get(f"{mode}_b{batch}", {}):
                continue  # the mandatory phase measured it
            with s.guard(runs, f"{mode}_b{batch}") as r:
                _train_run(s, model, model, mode, batch, r)
        s.write()
    top = runs.get(f"bf16_b{max(sz.batches)}", {})
    sec["target_mfu_bf16_b512"] = {"target": 0.40, "measured": top.get("mfu_vs_bf16_matmul")}


def phase_compile(s: Suite) -> None:
    """Optional and last: bf16 + torch.compile. The first batch gets the static graph a trial
    runs (one batch size); the next ones the dynamic-batch graph of torch.compile's recompile."""
    sec = s.data.setdefault("train", {})
    dev, sz = s.device, s.sizes
    model = build_vit(sz, s.num_classes, dev)
    sec.setdefault("flops_per_image", vit_train_flops_per_image(model_shape(model)))
    # --quick on a CPU checks that the phase runs (TorchDynamo tracing the train step, AOT
    # autograd), not what Inductor's C++ codegen would time: its cold compile was 21 of the
    # quick suite's 62 s on 2 cores. Any other run compiles with Inductor.
    backend = "aot_eager" if s.quick and dev.type == "cpu" else "inductor"
    sec["compile_backend"] = backend
    compiled = torch.compile(model, backend=backend)
    runs = sec.setdefault("runs", {})
    for i, batch in enumerate(sz.compile_batches):
        with s.guard(runs, f"bf16_compile_b{batch}") as r:
            r["graph"] = "static" if i == 0 else "dynamic"
            _train_run(s, model, compiled, "bf16_compile", batch, r)
        s.write()


def section_regularizers(s: Suite) -> None:
    sec = s.data.setdefault("regularizers", {})
    dev, sz = s.device, s.sizes
    sec.update(batch=sz.reg_batch, precision="bf16", rounds=sz.rounds, steps=sz.steps)
    model = build_vit(sz, s.num_classes, dev)
    batches = random_batches(sz.steps, sz.reg_batch, s.num_classes, dev)
    variants = sec.setdefault("variants", {})
    times: dict[str, list[float]] = {k: [] for k in REGULARIZERS}
    for rnd in range(sz.rounds):
        order = (
            list(REGULARIZERS)[rnd % len(REGULARIZERS) :]
            + list(REGULARIZERS)[: rnd % len(REGULARIZERS)]
        )
        for name in order:
            spec = dict(REGULARIZERS[name])
            with s.guard(variants, name) as r:
                if "error" in r:
                    continue
                reg = create_regularizer(spec.pop("name"), **spec)
                reg.attach(model)
                try:
                    opt = build_optimizer(model, OptimConfig(lr=0.01))
                    times[name].append(
                        time_steps(
                            model,
                            reg,
                            opt,
                            batches,
                            sz.warmup if rnd == 0 else 1,
                            "bf16",
                            dev,
                            s.num_classes,
                        )
                    )
                    if rnd == 0:
                        r.update(
                            syncs_per_step(
                                lambda n: train_steps(
                                    model, reg, opt, batches[:n], "bf16", dev, s.num_classes
                                ),
                                dev,
                            )
                        )
                finally:
                    reg.detach()
        _log.info("regularizers: round %d/%d done", rnd + 1, sz.rounds)
    base = statistics.median(times["baseline"]) if times["baseline"] else None
    for name, ts in times.items():
        r = variants[name]
        if not ts:
            continue
        med = statistics.median(ts)
        r["step_ms"] = round(med * 1e3, 3)
        r["step_ms_rounds"] = [round(t * 1e3, 3) for t in ts]
        r["ratio"] = round(med / base, 4) if base else None
        if name in TARGET_RATIO:
            r["target_ratio"] = TARGET_RATIO[name]
        _log.info(
            "regularizer %-16s %8.2f ms/step  ratio %s  syncs/step %s",
            name,
            r["step_ms"],
            r["ratio"],
            r.get("syncs_per_step"),
        )


def section_checkpoint(s: Suite) -> None:
    from lipsweep.trial.checkpoint import load_latest, save_checkpoint

    sec = s.data.setdefault("checkpoint", {})
    dev, sz = s.device, s.sizes
    model = build_vit(sz, s.num_classes, dev)
    with s.guard(sec, "eval_clean") as r:
        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, 256, (sz.eval_images, 3, 32, 32), generator=g, dtype=torch.uint8)
        y = torch.randint(0, s.num_classes, (sz.eval_images,), generator=g)
        r.update(images=sz.eval_images, batch=256)
        for precision in ("fp32", "bf16"):
            with autocast_context(dev, precision):
                evaluate_clean(model, x[:256], y[:256], 256, dev)  # warm-up
                with Clock(dev) as clk:
                    evaluate_clean(model, x, y, 256, dev)
            r[f"{precision}_s"] = round(clk.seconds, 3)
            r[f"{precision}_s_per_10k"] = round(clk.seconds * 1e4 / sz.eval_images, 3)
        _log.info(
            "per-epoch eval: %.2f s (fp32) / %.2f s (bf16) per 10k images",
            r["fp32_s_per_10k"],
            r["bf16_s_per_10k"],
        )
    with s.guard(sec, "save") as r:
        opt = build_optimizer(model, OptimConfig(lr=0.01))
        train_steps(
            model,
            create_regularizer("none"),
            opt,
            random_batches(1, 8, s.num_classes, dev),
            "fp32",
            dev,
            s.num_classes,
        )  # momentum buffers exist
        root = Path(tempfile.mkdtemp(prefix="gpu_suite_ckpt_"))
        try:
            secs = []
            for epoch in (1, 2):
                with Clock(dev) as clk:
                    path = save_checkpoint(
                        root,
                        epoch,
                        model.net.state_dict(),
                        opt.state_dict(),
                        {},
                        {"history": []},
                        keep=2,
                    )
                secs.append(clk.seconds)
            r["save_s"] = round(statistics.median(secs), 3)
            r["bytes"] = sum(f.stat().st_size for f in path.iterdir())
            t0 = time.perf_counter()
            load_latest(root)
            r["load_s"] = round(time.perf_counter() - t0, 3)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        _log.info(
            "checkpoint: %.0f MB, save %.2f s, load %.2f s",
            r["bytes"] / 1e6,
            r["save_s"],
            r["load_s"],
        )


def _brief_model(s: Suite) -> tuple[PixelModel, torch.Tensor, torch.Tensor, dict[str, Any]]:
    """A ViT trained briefly on the embedded CIFAR-10 sample, and evaluation images for it."""
    dev, sz = s.device, s.sizes
    splits = train_to_device(
        load_splits(DataConfig(dataset="embedded", eval_size=0, train_size=sz.brief_train)), dev
    )
    model = build_vit(sz, 10, dev)
    cfg = OptimConfig(
        epochs=sz.brief_epochs,
        batch_size=128,
        optimizer="adamw",
        lr=5e-4,
        weight_decay=0.05,
        warmup_epochs=min(1, sz.brief_epochs),
    )
    opt = build_optimizer(model, cfg)
    reg = create_regularizer("none")
    n_steps = len(splits.x_train) // cfg.batch_size
    t0 = time.perf_counter()
    for epoch in range(1, sz.brief_epochs + 1):
        batches = list(train_batches(splits, cfg.batch_size, 0, epoch))
        stats = train_steps(model, reg, opt, batches, "bf16", dev, 10, epoch, n_steps, cfg)
    half = sz.attack_images // 2
    x = to_unit(torch.cat([splits.x_eval[:half], splits.x_train[: sz.attack_images - half]]))
    y = torch.cat([splits.y_eval[:half], splits.y_train[: sz.attack_images - half]])
    info = {
        "epochs": sz.brief_epochs,
        "train_images": len(splits.x_train),
        "train_s": round(time.perf_counter() - t0, 2),
        "last_loss": stats["loss"],
        "eval_images": len(x),
        "eval_images_from": "half embedded test, half train",
    }
    return model, x.to(dev), y.to(dev), info


def _trained_vs_random(s: Suite, model: PixelModel, x: torch.Tensor) -> None:
    """``lipschitz.trained_vs_random``: ||J_f|| by fp32 Lanczos and the token Jacobian (the
    default route) on the briefly trained ViT and on the same architecture at random init,
    the same images: ms per image and mean iterations. The routes' other figures come from
    random-init models; Lanczos stops on a residual, so its iterations follow the spectrum
    (the gap below sigma_1), which training changes."""
    from lipsweep.lipschitz import jacobian_norm_result
    from lipsweep.lipschitz.token_jacobian import TokenModel, token_embeddings

    sec = s.data.setdefault("lipschitz", {}).setdefault("trained_vs_random", {})
    dev, sz = s.device, s.sizes
    xs = x[: sz.lip_images]
    torch.manual_seed(0)
    models = {"trained": model.eval(), "random_init": build_vit(sz, 10, dev).eval()}
    sec.update(classes=10, images=len(xs), trained_model="attacks.model")
    routes: dict[str, Callable[[PixelModel], Any]] = {
        "jacobian_lanczos_fp32": lambda m: jacobian_norm_result(
            m, xs, 100, route="lanczos", precision="fp32"
        ),
        "tokens_default": lambda m: jacobian_norm_result(
            TokenModel(m, xs), token_embeddings(m, xs), 100
        ),
    }
    for route, fn in routes.items():
        for label, m in models.items():
            with s.guard(sec, f"{route}_{label}") as r:
                fn(m)  # warm-up
                with Clock(dev) as clk:
                    res = fn(m)
                r.update(
                    ms_per_image=round(clk.seconds * 1e3 / len(xs), 3),
                    mean_iterations=round(float(res.iterations.double().mean()), 2),
                    median_value=round(float(res.values.double().median()), 4),
                )
                _log.info("%s on the %s model: %s", route, label, r)
        a, b = sec.get(f"{route}_trained", {}), sec.get(f"{route}_random_init", {})
        if "mean_iterations" in a and "mean_iterations" in b and b["mean_iterations"]:
            sec[f"{route}_iterations_trained_over_random"] = round(
                a["mean_iterations"] / b["mean_iterations"], 3
            )
    s.write()


def _attack_rate(
    attack: Callable, x: torch.Tensor, y: torch.Tensor, batch: int, device: torch.device
) -> tuple[float, torch.Tensor]:
    """(images/s, adversarial images) of ``attack`` over ``x`` in batches."""
    torch.manual_seed(0)
    advs = []
    with Clock(device) as clk:
        for i in range(0, len(x), batch):
            advs.append(attack(x[i : i + batch], y[i : i + batch]))
    return len(x) / clk.seconds, torch.cat(advs)


@torch.no_grad()
def _accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int) -> float:
    model.eval()
    correct = sum(
        int((model(x[i : i + batch]).argmax(1) == y[i : i + batch]).sum())
        for i in range(0, len(x), batch)
    )
    return 100.0 * correct / len(x)


def section_attacks(s: Suite) -> None:
    from lipsweep.attacks import FGSM, PGD, AutoAttack
    from lipsweep.attacks._registry import AutoAttackSettings
    from lipsweep.vit.precision import tf32_matmuls

    sec = s.data.setdefault("attacks", {})
    dev, sz = s.device, s.sizes
    model, x, y, info = _brief_model(s)
    sec["model"] = info
    batch = 256
    sec["acc_clean"] = _accuracy(model, x, y, batch)
    _log.info("briefly trained model: clean accuracy %.1f%% on %d images", sec["acc_clean"], len(x))
    for cls, name, eps in ((PGD, "pgd4", 4), (FGSM, "fgsm", 4)):
        with s.guard(sec, name) as r:
            r.update(eps=f"{eps}/255", images=len(x), batch=batch)
            # fp32: strict; tf32: fp32 with TF32 matmuls, what a trial runs on CUDA
            # (evaluate_robustness scopes TF32 to the attack passes); bf16: autocast
            modes = ("fp32", "tf32", "bf16")
            rates: dict[str, list[float]] = {m: [] for m in modes}
            for rep in range(sz.rounds):
                for mode in modes[rep % 3 :] + modes[: rep % 3]:
                    attack = cls(model, eps / 255, precision="bf16" if mode == "bf16" else "fp32")
                    with tf32_matmuls(mode == "tf32"):
                        rate, adv = _attack_rate(attack, x, y, batch, dev)
                    rates[mode].append(rate)
                    if rep == 0:
                        with tf32_matmuls(False):
                            r[f"acc_{mode}"] = _accuracy(model, adv, y, batch)
            for mode, vals in rates.items():
                r[f"{mode}_images_per_s"] = round(statistics.median(vals), 1)
            for mode in ("tf32", "bf16"):
                r[f"{mode}_speedup"] = round(r[f"{mode}_images_per_s"] / r["fp32_images_per_s"], 3)
                r[f"acc_diff_{mode}_minus_fp32"] = round(r[f"acc_{mode}"] - r["acc_fp32"], 3)
            _log.info(
                "%s: %.0f img/s fp32, %.0f tf32, %.0f bf16; acc %.2f%% / %.2f%% / %.2f%%",
                name,
                r["fp32_images_per_s"],
                r["tf32_images_per_s"],
                r["bf16_images_per_s"],
                r["acc_fp32"],
                r["acc_tf32"],
                r["acc_bf16"],
            )
        s.write()
    _trained_vs_random(s, model, x)
    aa = sec.setdefault("autoattack", {})
    try:
        import pyautoattack  # noqa: F401
    except ImportError:
        aa["skipped"] = (
            "pyautoattack is not importable; run benchmarks/fetch_wheels.sh and "
            "install .whl/ (docs/benchmarks.md)"
        )
        _log.warning("AutoAttack skipped: %s", aa["skipped"])
        return
    aa.update(
        eps="2/255",
        iters=10,
        images=min(sz.aa_images, len(x)),
        note="each stage alone on the same images, labelled with the model's own predictions "
        "so that every image is attacked whatever the model's accuracy (a stage attacks only "
        "the correctly classified ones; timing only, n_fooled is against those labels); "
        "s_per_1000 is per attacked image",
    )
    n = aa["images"]
    with torch.no_grad(), tf32_matmuls(False):
        own = torch.cat([model(xb).argmax(1) for xb in x[:n].split(batch)])
    # the space's stages first (the projection needs them), then the other standard ones
    stages = list(dict.fromkeys([*s.target.cfg.robustness.aa_attacks, *AA_STAGES]))
    for stage in stages:
        with s.guard(aa, stage) as r:
            with tf32_matmuls(True):  # as evaluate_robustness runs it in a trial
                res = AutoAttack(
                    model,
                    2 / 255,
                    AutoAttackSettings(aa_attacks=[stage], aa_iters=10),
                    batch_size=batch,
                ).run(x[:n], own)
            st = res.stages[0]
            r.update(n_attacked=st.n_attacked, n_fooled=st.n_fooled, seconds=round(st.seconds, 3))
            r["s_per_1000"] = round(st.seconds * 1000 / st.n_attacked, 3) if st.n_attacked else None
            _log.info(
                "AutoAttack %-8s %4d attacked, %4d fooled, %.2f s (%s s/1000)",
                stage,
                st.n_attacked,
                st.n_fooled,
                st.seconds,
                r["s_per_1000"],
            )
        s.write()


def _head_split(s: Suite, model: PixelModel, x: torch.Tensor) -> dict[str, Any]:
    """measure_head_bounds' time, split into Lanczos matvecs, Ritz eigh and bound SVDs."""
    from lipsweep.lipschitz import (
        HeadLinearization,
        head_bounds_at,
        head_weights,
        measure_head_bounds,
    )
    from lipsweep.lipschitz._krylov import lanczos_top_eigenvalue, linalg_device, start_vector
    from lipsweep.lipschitz.head_bounds import AttentionInputs
    from lipsweep.lipschitz.jacobian import measurement_mode

    dev = s.device
    out: dict[str, Any] = {"images": len(x)}
    measure_head_bounds(model, x[:1])  # warm-up
    with Clock(dev) as clk:
        measure_head_bounds(model, x)
    out["measure_head_bounds_s"] = round(clk.seconds, 4)
    with measurement_mode(model), torch.no_grad(), AttentionInputs(model) as rec:
        model(x)
    inputs = [xi.double() for xi in rec.inputs]
    weights = [head_weights(a) for a in rec.blocks]
    # the Lanczos route, its Ritz eigh of T_j on the device and on the CPU
    # (linalg_placement 'same' vs 'cpu'); lanczos_s etc. are 'auto', what a trial runs
    places = (
        [("device", dev), ("cpu", torch.device("cpu"))] if dev.type != "cpu" else [("cpu", dev)]
    )
    for place, eigh_dev in places:
        matvec = lanczos = 0.0
        iters: list[float] = []
        for xl, wl in zip(inputs, weights):  # the route 'auto' takes here
            b, n, _ = xl.shape
            heads, d = wl.num_heads, wl.wv.shape[-1]
            lin = HeadLinearization(xl, wl)
            spent = [0.0]

            def op(u: torch.Tensor) -> torch.Tensor:
                _sync(dev)
                t0 = time.perf_counter()
                v = lin.jvp(lin.vjp(u.reshape(b, heads, n, d))).reshape(b * heads, n * d)
                _sync(dev)
                spent[0] += time.perf_counter() - t0
                return v

            with Clock(dev) as clk:
                res = lanczos_top_eigenvalue(
                    op, start_vector(b * heads, n * d, xl.dtype, dev), 300, 1e-8, eigh_dev
                )
            lanczos += clk.seconds
            matvec += spent[0]
            iters.append(float(res.iterations.double().mean()))
        out[f"lanczos_ritz_{place}_s"] = round(lanczos, 4)
        if eigh_dev == linalg_device(dev, "auto"):
            out["lanczos_s"] = round(lanczos, 4)
            out["matvec_s"] = round(matvec, 4)
            out["ritz_eigh_and_rest_s"] = round(lanczos - matvec, 4)
            out["lanczos_mean_iterations"] = round(statistics.mean(iters), 1)
    # the bounds' small SVDs/eigh on the inputs' device ('same') or on the CPU: inputs stay on
    # the device, as in a trial; only ``linalg_placement`` changes (its default 'auto' = cpu)
    for place, placement in (("device", "same"), ("cpu", "cpu")):
        head_bounds_at(inputs[0][:1], weights[0], linalg_placement=placement)  # warm-up
        with Clock(dev) as clk:
            for xl, wl in zip(inputs, weights):
                head_bounds_at(xl, wl, linalg_placement=placement)
        out[f"bounds_svd_{place}_s"] = round(clk.seconds, 4)
    m = len(x) * weights[0].num_heads
    for j in (8, 16, 32):
        t = torch.randn(m, j, j, dtype=torch.float64, device=dev)
        t = t + t.transpose(1, 2)
        for place in ("device", "cpu"):
            tgt = dev if place == "device" else torch.device("cpu")
            torch.linalg.eigh(t.to(tgt))
            with Clock(dev) as clk:
                for _ in range(10):
                    torch.linalg.eigh(t.to(tgt))[0].to(dev)
            out[f"ritz_eigh_{j}_{place}_ms"] = round(clk.seconds * 100, 4)
    return out


LIP_PARTS = ("jacobian", "tokens", "softmax", "heads")
"""The parts of ``lipschitz_summary``, each timed per image: ||J_f|| (pixels, with the logit
margin of its own forward), ||d f / d T|| (tokens), the softmax-Jacobian rows, the head bounds."""
_PART_OF = {"token_jacobian": "tokens", "softmax_jacobian": "softmax", "head_bounds": "heads"}


def _lip_estimators(cfg: Any, num_classes: int) -> dict[str, Callable[[PixelModel, Any], Any]]:
    """The summary's parts as a trial builds them from ``cfg`` (the space's LipschitzConfig):
    ``lipsweep.lipschitz.summary.summary_parts``, keyed by :data:`LIP_PARTS`."""
    from lipsweep.lipschitz.summary import summary_parts

    return {
        _PART_OF.get(name, "jacobian"): est
        for name, est, _ in summary_parts(cfg, num_classes)
        if name in _PART_OF or name.startswith("jacobian_")
    }


def phase_lipschitz(s: Suite) -> None:
    """Mandatory: seconds per image of each part of the space's Lipschitz summary, at its
    number of classes and settings (route, iterations, tolerance, parts switched on), batched
    as a trial batches them; the projection multiplies each by the space's image count."""
    from lipsweep.lipschitz.jacobian import resolve_route

    sec = s.data.setdefault("lipschitz", {})
    dev, sz, cfg = s.device, s.sizes, s.target.cfg.lipschitz
    c = s.num_classes
    route = resolve_route(cfg.lip_route, c)
    model = build_vit(sz, c, dev).eval()
    x = torch.rand(sz.summary_images, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    x = x.to(dev)
    parts = sec.setdefault("parts", {})
    parts.update(num_classes=c, route=route, batch=cfg.lip_batch_size)
    for name, est in _lip_estimators(cfg, c).items():
        with s.guard(parts, name) as r:
            xs = x[: sz.head_images] if name == "heads" else x
            est(model, xs[:1])  # warm-up
            with Clock(dev) as clk:
                for i in range(0, len(xs), cfg.lip_batch_size):
                    est(model, xs[i : i + cfg.lip_batch_size])
            r.update(images=len(xs), seconds=round(clk.seconds, 4))
            r["s_per_image"] = clk.seconds / len(xs)
            _log.info("lipschitz %-8s C=%d: %.2f ms/image", name, c, r["s_per_image"] * 1e3)
        s.write()


def phase_lipschitz_detail(s: Suite) -> None:
    """Optional: ||J_f|| at C = 10 and 100 against a forward+backward, the head bounds split
    into matvecs and eigh/SVD with their placement, and the whole ``lipschitz_summary`` timed
    against the sum of its parts (a check of the projection's per-part arithmetic)."""
    import torch.nn.functional as F

    from lipsweep.lipschitz import jacobian_norm_result, lipschitz_summary

    sec = s.data.setdefault("lipschitz", {})
    dev, sz = s.device, s.sizes
    g = torch.Generator().manual_seed(2)
    x = torch.rand(sz.summary_images, 3, 32, 32, generator=g).to(dev)
    models = {}
    for c in (10, 100):
        with s.guard(sec, f"jacobian_c{c}") as r:
            model = models[c] = build_vit(sz, c, dev).eval()
            xb = x[: sz.lip_images]
            yb = torch.arange(len(xb), device=dev) % c
            jacobian_norm_result(model, xb[:2], 100)  # warm-up
            with Clock(dev) as clk:
                loss = F.cross_entropy(model(xb), yb)
                loss.backward()
            model.zero_grad(set_to_none=True)
            fwd_bwd = clk.seconds
            with Clock(dev) as clk:
                res = jacobian_norm_result(model, xb, 100)
            r.update(
                images=len(xb),
                route=res.route,
                seconds=round(clk.seconds, 4),
                ms_per_image=round(clk.seconds * 1e3 / len(xb), 3),
                x_fwd_bwd=round(clk.seconds / fwd_bwd, 2),
                mean_iterations=round(float(res.iterations.double().mean()), 2),
            )
            _log.info(
                "||J_f|| C=%d (%s): %.1f ms/image, %.1fx fwd+bwd",
                c,
                res.route,
                r["ms_per_image"],
                r["x_fwd_bwd"],
            )
    with s.guard(sec, "head_bounds") as r:
        r.update(
            _head_split(s, models.get(10) or build_vit(sz, 10, dev).eval(), x[: sz.head_images])
        )
        _log.info("head bounds: %s", r)
    s.write()
    with s.guard(sec, "summary") as r:
        c = s.num_classes
        cfg = replace(
            s.target.cfg.lipschitz,
            lip_images=len(x),
            lip_softmax_images=0,
            lip_head_images=sz.head_images,
            lip_figures=False,
        )
        model = models.get(c) or build_vit(sz, c, dev).eval()
        with Clock(dev) as clk:
            lipschitz_summary(model, x, cfg)
        parts = sec.get("parts", {})
        predicted = sum(
            (parts[k]["s_per_image"] * (sz.head_images if k == "heads" else len(x)))
            for k in LIP_PARTS
            if "s_per_image" in parts.get(k, {})
        )
        r.update(
            num_classes=c,
            images=len(x),
            head_images=sz.head_images,
            seconds=round(clk.seconds, 3),
            parts_predicted_s=round(predicted, 3),
            ratio_to_parts=round(clk.seconds / predicted, 3) if predicted else None,
        )
        _log.info(
            "lipschitz_summary C=%d on %d images: %.2f s (parts predict %.2f s)",
            c,
            len(x),
            r["seconds"],
            predicted,
        )


def _train_step_ms_per_image(s: Suite) -> Optional[float]:
    """The projected training step's ms per image (the bf16 step at the space's batch on a
    GPU): the unit of the "forward-backward equivalents" below."""
    runs = s.data.get("train", {}).get("runs", {})
    mode = _projected_mode(s.target.cfg, s.device.type).replace("_compile", "")
    key = f"{mode}_b{projected_batch(s)}"
    r = runs.get(key, {})
    if "step_ms" not in r:
        return None
    return r["step_ms"] / r["batch"]


def phase_lipschitz_routes(s: Suite) -> None:
    """Optional: ||J_f|| and the token Jacobian by the per-step Lanczos the batched route
    replaced (benchmarks/lipschitz_reference.py, at the batch of 64 it ran at) and by
    ``jacobian_norm_result`` (fp32 and TF32 at 64, the default fp32 at the default
    ``lip_batch_size``), side by side on the same images, at C = 100 and 10: ms per image, the
    multiple of the training step's ms per image, mean iterations, and the largest relative
    deviation from the exact route in strict fp32 (C VJPs and an eigh)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from lipschitz_reference import reference_lanczos_norms

    from lipsweep.lipschitz import LipschitzConfig, jacobian_norm_result
    from lipsweep.lipschitz.token_jacobian import TokenModel, token_embeddings

    sec = s.data.setdefault("lipschitz", {}).setdefault("routes", {})
    dev, sz = s.device, s.sizes
    unit = _train_step_ms_per_image(s)
    big = LipschitzConfig().lip_batch_size if not s.quick else 2 * sz.lip_images
    sec.update(train_step_ms_per_image=unit, default_batch=big)
    g = torch.Generator().manual_seed(2)
    x = torch.rand(max(sz.lip_images, big), 3, 32, 32, generator=g).to(dev)

    def timed(r: dict[str, Any], n: int, fn: Callable[[], Any]) -> Any:
        with Clock(dev) as clk:
            res = fn()
        ms = clk.seconds * 1e3 / n
        r.update(images=n, ms_per_image=round(ms, 3))
        r["x_train_step"] = round(ms / unit, 2) if unit else None
        return res

    for c in (100, 10):
        model = build_vit(sz, c, dev).eval()
        xb = x[: sz.lip_images]
        exact = jacobian_norm_result(model, xb, 100, route="exact", precision="fp32").values

        def lanczos(xs: torch.Tensor, prec: str, m: Any = model) -> tuple[Any, Any]:
            return _values_iters(jacobian_norm_result(m, xs, 100, route="lanczos", precision=prec))

        variants: dict[str, Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]] = {
            "reference": lambda xs: reference_lanczos_norms(model, xs),
            "lanczos_fp32": lambda xs: lanczos(xs, "fp32"),
            "lanczos_tf32": lambda xs: lanczos(xs, "tf32"),
        }
        if c == 10:
            variants["exact_tf32"] = lambda xs: _values_iters(
                jacobian_norm_result(model, xs, 100, route="exact", precision="tf32")
            )
        for name, fn in variants.items():
            with s.guard(sec, f"c{c}_{name}") as r:
                fn(xb[:2])  # warm-up
                vals, iters = timed(r, len(xb), lambda: fn(xb))
                r["mean_iterations"] = round(float(iters.double().mean()), 2)
                dev_ = ((vals.double() - exact.double()).abs() / exact.double()).max()
                r["max_rel_dev_vs_exact_fp32"] = float(dev_)
                _log.info("||J_f|| C=%d %-12s %s", c, name, r)
            s.write()
        if c != 100:
            continue
        with s.guard(sec, f"c100_default_b{big}") as r:
            xs = x[:big]
            res = timed(r, big, lambda: jacobian_norm_result(model, xs, 100, batch_size=big))
            r["mean_iterations"] = round(float(res.iterations.double().mean()), 2)
            _log.info("||J_f|| C=100 default, batch %d: %s", big, r)
        tokens = {"reference": (xb, 64), f"default_b{big}": (x[:big], big)}
        for name, (xs, _b) in tokens.items():
            with s.guard(sec, f"tokens_c100_{name}") as r:
                tmodel, t = TokenModel(model, xs), token_embeddings(model, xs)
                fn = (
                    (lambda: reference_lanczos_norms(tmodel, t))
                    if name == "reference"
                    else (lambda: _values_iters(jacobian_norm_result(tmodel, t, 100)))
                )
                _, iters = timed(r, len(xs), fn)
                r["mean_iterations"] = round(float(iters.double().mean()), 2)
                _log.info("tokens C=100 %-12s %s", name, r)
        s.write()


def phase_probes(s: Suite) -> None:
    """Optional: one round of the per-epoch probes (PGD at each ``pgd_eps`` on
    ``probe_images``, the ||J_f|| median on ``probe_lip_images``, the trial's own functions)
    on the space's classes, against one training epoch of the space (its steps per epoch at
    the measured step time): the share a probe adds to each epoch at ``probe_every: 1``."""
    from lipsweep.trial.probes import probe_jacobian_median, probe_pgd

    sec = s.data.setdefault("probes", {})
    dev, cfg = s.device, s.target.cfg
    unit = _train_step_ms_per_image(s)
    model = build_vit(s.sizes, s.num_classes, dev).eval()
    g = torch.Generator().manual_seed(3)
    n_pgd, n_lip = cfg.probe.probe_images, cfg.probe.probe_lip_images
    if s.quick:
        n_pgd, n_lip = min(n_pgd, 16), min(n_lip, 4)
    x = torch.rand(max(n_pgd, n_lip), 3, 32, 32, generator=g).to(dev)
    with torch.no_grad():  # labels = the model's own predictions: every image is attacked,
        y = model(x).argmax(1)  # the upper bound a trained model's correct share stays under
    probe_pgd(model, x[:2], y[:2], cfg, dev)  # warm-up
    with Clock(dev) as pgd_clk:
        probe_pgd(model, x[:n_pgd], y[:n_pgd], cfg, dev)
    with Clock(dev) as lip_clk:
        probe_jacobian_median(model, x[:n_lip], cfg)
    n_split = SPLITS.get(cfg.data.dataset, (50_000, 0))[0]
    n_train = min(cfg.data.train_size or n_split, n_split)
    epoch_s = unit * n_train / 1e3 if unit else None
    probe_s = pgd_clk.seconds + lip_clk.seconds
    sec.update(
        probe_images=n_pgd,
        probe_lip_images=n_lip,
        pgd_s=round(pgd_clk.seconds, 3),
        jacobian_s=round(lip_clk.seconds, 3),
        train_epoch_s=round(epoch_s, 2) if epoch_s else None,
        share_of_epoch=round(probe_s / epoch_s, 4) if epoch_s else None,
    )
    _log.info("probes: %s", sec)


def _values_iters(res: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return res.values, res.iterations


def phase_regularizers_compiled(s: Suite) -> None:
    """Optional: the bf16 train step of each regularizer under torch.compile (Inductor on a
    GPU), at the regularizer batch: compile seconds (first step), ms per step, the ratio to
    the compiled baseline and to the same regularizer eager (``regularizers`` section), and
    the graph breaks TorchDynamo counted with their reasons."""
    from torch._dynamo.utils import counters

    sec = s.data.setdefault("regularizers", {}).setdefault("compiled", {})
    dev, sz = s.device, s.sizes
    backend = "aot_eager" if s.quick and dev.type == "cpu" else "inductor"
    sec["backend"] = backend
    batches = random_batches(sz.steps, sz.reg_batch, s.num_classes, dev)
    eager = s.data.get("regularizers", {}).get("variants", {})
    for name in ("baseline", "jasmin_k10_mean", "specformer", "jasmin_k10_max", "jasmin_k0_mean"):
        spec = dict(REGULARIZERS[name])
        with s.guard(sec, name) as r:
            torch._dynamo.reset()
            counters.clear()
            model = build_vit(sz, s.num_classes, dev)
            reg = create_regularizer(spec.pop("name"), **spec)
            reg.attach(model)
            try:
                compiled = torch.compile(model, backend=backend)
                opt = build_optimizer(model, OptimConfig(lr=0.01))
                with Clock(dev) as clk:
                    train_steps(compiled, reg, opt, batches[:1], "bf16", dev, s.num_classes)
                r["compile_s"] = round(clk.seconds, 2)
                r["graph_breaks"] = {str(k)[:200]: v for k, v in counters["graph_break"].items()}
                step = time_steps(
                    compiled, reg, opt, batches, sz.warmup, "bf16", dev, s.num_classes
                )
            finally:
                reg.detach()
            r["step_ms"] = round(step * 1e3, 3)
            base = sec.get("baseline", {}).get("step_ms")
            r["ratio"] = round(r["step_ms"] / base, 4) if base else None
            if "step_ms" in eager.get(name, {}):
                r["speedup_vs_eager"] = round(eager[name]["step_ms"] / r["step_ms"], 4)
            _log.info("compiled %-16s %s", name, r)
        s.write()


def _run_trial(s: Suite, r: dict[str, Any]) -> None:
    """One epoch of ``run_trial`` on the embedded CIFAR-10 sample, evaluation included."""
    from lipsweep.trial.run import run_trial

    dev, sz = s.device, s.sizes
    try:
        import pyautoattack  # noqa: F401

        attacks = {"aa_attacks": ["apgd-ce", "apgd-t"]}
    except ImportError:
        attacks = {"attacks": ["fgsm", "pgd"]}
    flat = {
        **sz.model,
        "img_size": 32,
        "patch_size": 4,
        "num_classes": 10,
        "dataset": "embedded",
        "train_size": sz.trial_train,
        "eval_size": sz.trial_eval,
        "epochs": 1,
        "batch_size": sz.trial_batch,
        "optimizer": "sgd",
        "lr": 0.01,
        "device": str(dev),
        "precision": "bf16",
        "attack_images": sz.trial_eval,
        "lip_images": sz.summary_images,
        "lip_head_images": sz.head_images,
        **attacks,
    }
    cfg = TrialConfig.from_flat(flat)
    out = Path(tempfile.mkdtemp(prefix="gpu_suite_trial_"))
    try:
        t0 = time.perf_counter()
        res = run_trial(cfg, out, progress=False)
        r["wall_s"] = round(time.perf_counter() - t0, 2)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    r["config"] = flat
    r["epoch"] = {
        k: res.history[0][k] for k in ("epoch_seconds", "train_images_per_s", "loss", "acc_clean")
    }
    r["metrics"] = {
        k: v
        for k, v in res.metrics.items()
        if k.startswith(("acc_", "eval_", "lip_jacobian_median"))
    }
    _log.info(
        "run_trial: %.1f s wall, epoch %.1f s, eval %.1f s attacks + %.1f s lipschitz",
        r["wall_s"],
        r["epoch"]["epoch_seconds"],
        r["metrics"].get("eval_attack_seconds", float("nan")),
        r["metrics"].get("eval_lipschitz_seconds", float("nan")),
    )


def phase_projection(s: Suite) -> None:
    """Mandatory, last of them: the projected trial of the space from what was measured."""
    sec = s.data.setdefault("trial", {})
    sec["projection"] = project_trial(s.data, s.target, s.device)
    p = sec["projection"]
    _log.info(
        "projection (%s): %s h, Lipschitz share %s, checkpoint share %s (every %d)",
        p["space"],
        p["hours"],
        p["lipschitz_share"],
        p["checkpoint_share"],
        p["assumptions"]["checkpoint_every"],
    )


def phase_run_trial(s: Suite) -> None:
    """Optional: one epoch of ``run_trial`` on the device, evaluation included."""
    with s.guard(s.data.setdefault("trial", {}), "run_trial") as r:
        _run_trial(s, r)


# The GPU machine has no network: no hub weights, no bucket. The smoke trial keeps every other
# setting of the space (ViT-B, patch 4, cuda, the evaluation) on the CIFAR-10 sample in the
# package, from random init; the JSON records these overrides next to the result.
SMOKE_OFFLINE = {"pretrained": "", "dataset": "embedded", "data_dir": ""}


SMOKE_MIN_S = 60.0
"""The smoke trial is skipped (and says so) when its cap, or what is left before --deadline-s,
is below this."""


def _run_echoed(cmd: list[str], timeout_s: Optional[float]) -> tuple[Optional[int], str]:
    """Run ``cmd``, echoing its output (lipsweep train's log: epochs, evaluation, then its
    metrics line) line by line to our stderr as ``smoke trial | ...`` while it runs, so a long
    trial shows progress. Returns (exit code, or None when killed after ``timeout_s``; its
    whole output, stdout and stderr interleaved)."""
    lines: list[str] = []

    def pump(stream: Any) -> None:
        for line in stream:
            lines.append(line)
            sys.stderr.write(f"smoke trial | {line}")
            sys.stderr.flush()

    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    reader = threading.Thread(target=pump, args=(proc.stdout,), daemon=True)
    reader.start()
    try:
        rc: Optional[int] = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = None
    reader.join(timeout=10)
    return rc, "".join(lines)


def smoke_trial(s: Suite, space: Path, timeout_s: Optional[float] = None) -> None:
    """The first trial of ``space`` through ``python -m lipsweep train`` (no Ray, no MLflow),
    with :data:`SMOKE_OFFLINE` applied where the space reads the network.

    ``timeout_s``: the trial is killed after this long (its output so far is kept in the JSON);
    below :data:`SMOKE_MIN_S` it is not started.
    """
    import yaml

    from lipsweep.data.remote import is_uri
    from lipsweep.search.space import load_space

    sec = s.data.setdefault("smoke_trial", {})
    if timeout_s is not None and timeout_s < SMOKE_MIN_S:
        sec["lipsweep_train"] = {
            "space": str(space),
            "skipped": f"{max(timeout_s, 0):.0f} s left for it (its cap or --deadline-s), "
            f"under the {SMOKE_MIN_S:.0f} s a smoke trial needs",
        }
        _log.warning("smoke trial: skipped (%s)", sec["lipsweep_train"]["skipped"])
        return
    with s.guard(sec, "lipsweep_train") as r:
        spec = load_space(space)
        flat = dict(spec.trials[0])
        if flat.get("pretrained") == "hub" or is_uri(str(flat.get("data_dir", ""))):
            r["offline_overrides"] = {
                k: v for k, v in SMOKE_OFFLINE.items() if k in flat or k == "dataset"
            }
            flat.update(r["offline_overrides"])
        work = Path(tempfile.mkdtemp(prefix="gpu_suite_smoke_"))
        try:
            cfg = work / "trial.yaml"
            cfg.write_text(yaml.safe_dump(flat))
            cmd = [sys.executable, "-m", "lipsweep", "train", str(cfg), "--out", str(work / "out")]
            r.update(
                space=str(space),
                resources={"cpu": spec.resources.cpu, "gpu": spec.resources.gpu},
                config=flat,
            )
            _log.info("smoke trial: %s", " ".join(cmd))
            t0 = time.perf_counter()
            rc, err = _run_echoed(cmd, timeout_s)
            r["wall_s"] = round(time.perf_counter() - t0, 2)
            r["output_tail"] = err[-3000:]
            if rc is None:
                raise RuntimeError(
                    f"lipsweep train killed after {timeout_s:.0f} s (its cap); its "
                    "output so far is in smoke_trial.lipsweep_train.output_tail"
                )
            r["rc"] = rc
            metrics = work / "out" / "metrics.json"
            if metrics.is_file():
                r["metrics"] = json.loads(metrics.read_text())
            if rc:
                raise RuntimeError(f"lipsweep train exited {rc}: {err.strip().splitlines()[-1:]}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        _log.info("smoke trial: rc %s, %.1f s", r.get("rc"), r.get("wall_s", float("nan")))


# ---------------------------------------------------------------- order and caps


class PhaseCapped(BaseException):
    """Raised in the main thread when a phase runs past its cap. A BaseException, so the
    measurement guards (which record an ``Exception`` and go on) let it through to the runner."""


@contextlib.contextmanager
def time_cap(seconds: float) -> Iterator[None]:
    """Raise :class:`PhaseCapped` in the body after ``seconds`` (SIGALRM; the main thread only,
    elsewhere the cap is not enforced). A timer already set (pytest-timeout) is restored."""
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise PhaseCapped(f"over its cap of {seconds:.0f} s")

    t0 = time.monotonic()
    old_handler = signal.signal(signal.SIGALRM, fire)
    old_delay, _ = signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay:
            signal.setitimer(signal.ITIMER_REAL, max(old_delay - (time.monotonic() - t0), 1e-3))


@dataclass(frozen=True)
class Phase:
    """One step of the suite: what it runs, into which JSON section, and whether the
    projection needs it (mandatory) or it only adds detail (optional)."""

    name: str
    section: str
    run: Callable[..., Optional[str]]
    mandatory: bool


PHASES = (
    Phase("train", "train", phase_train, True),
    Phase("regularizers", "regularizers", section_regularizers, True),
    Phase("checkpoint", "checkpoint", section_checkpoint, True),
    Phase("attacks", "attacks", section_attacks, True),
    Phase("lipschitz", "lipschitz", phase_lipschitz, True),
    Phase("projection", "trial", phase_projection, True),
    Phase("lipschitz_routes", "lipschitz", phase_lipschitz_routes, False),
    Phase("probes", "probes", phase_probes, False),
    Phase("regularizers_compiled", "regularizers", phase_regularizers_compiled, False),
    Phase("train_modes", "train", phase_train_modes, False),
    Phase("lipschitz_detail", "lipschitz", phase_lipschitz_detail, False),
    Phase("run_trial", "trial", phase_run_trial, False),
    Phase("compile", "train", phase_compile, False),
)
"""The order after the smoke trial: the mandatory phases (what the projection and the recorded
figures need), then the optional ones, compiling last (its cold compile is the longest and
least needed part)."""
MIN_PHASE_S = 5.0
"""A mandatory phase with less than this left before --deadline-s is skipped, not started."""
DEADLINE_MARGIN_S = 15.0
"""Kept free before --deadline-s for the final JSON write."""


def plan_phases(sections: list[str], smoke_space: Optional[Path]) -> list[Phase]:
    """The phases to run, in order: the smoke trial first (with ``--smoke-trial``), then
    :data:`PHASES` of the chosen sections."""
    plan = [p for p in PHASES if p.section in sections]
    if smoke_space is not None:

        def smoke(s: Suite, cap: Optional[float] = None) -> str:
            smoke_trial(s, smoke_space, cap)
            r = s.data["smoke_trial"]["lipsweep_train"]
            if "skipped" in r:
                return "skipped"
            if str(r.get("error", "")).startswith("RuntimeError: lipsweep train killed"):
                return "capped"
            return "error" if "error" in r else "done"

        plan.insert(0, Phase("smoke_trial", "smoke_trial", smoke, True))
    return plan


def run_phases(s: Suite, plan: list[Phase], deadline_s: Optional[float] = None) -> None:
    """Run ``plan`` in order, each phase under its cap (``Sizes.caps``), and record in
    ``meta.phases`` what each did: done, capped (stopped at its cap; what it measured is kept),
    skipped (an optional phase once --budget-s is spent or its cap no longer fits before
    --deadline-s; a mandatory one with under MIN_PHASE_S left) or error."""
    log = s.data["meta"].setdefault("phases", [])
    for ph in plan:
        cap = s.sizes.caps[ph.name]
        rec: dict[str, Any] = {"name": ph.name, "section": ph.section, "mandatory": ph.mandatory}
        log.append(rec)
        left = None if deadline_s is None else deadline_s - s.elapsed() - DEADLINE_MARGIN_S
        reason = None
        if not ph.mandatory and s.over_budget():
            reason = f"--budget-s of {s.sizes.budget_s:.0f} s spent"
        elif left is not None and not ph.mandatory and cap > left:
            reason = f"its cap of {cap:.0f} s does not fit in the {max(left, 0):.0f} s left"
        elif left is not None and left < MIN_PHASE_S:
            reason = f"{max(left, 0):.0f} s left before --deadline-s"
        if left is not None:
            cap = min(cap, max(left, 0.0))
        rec.update(cap_s=round(cap, 1), start_s=round(s.elapsed(), 1))
        if reason:
            rec.update(status="skipped", reason=reason, seconds=0.0)
            _log.warning("phase %s: skipped (%s)", ph.name, reason)
            continue
        _log.info("== %s (cap %.0f s, %.0f s elapsed)", ph.name, cap, s.elapsed())
        t0 = time.perf_counter()
        try:
            if ph.name == "smoke_trial":  # a subprocess, killed at its cap by _run_echoed
                rec["status"] = ph.run(s, cap) or "done"
            else:
                with time_cap(cap):
                    rec["status"] = ph.run(s) or "done"
        except PhaseCapped as cut:
            rec["status"] = "capped"
            _log.warning("phase %s: %s; what it measured is kept", ph.name, cut)
        except Exception as exc:  # noqa: BLE001 - the suite records and goes on
            msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            rec.update(status="error", error=msg)
            s.data["errors"].append(f"{ph.name}: {msg}")
            _log.error("%s failed: %s\n%s", ph.name, msg, traceback.format_exc(limit=4))
        finally:
            rec["seconds"] = round(time.perf_counter() - t0, 2)
            s.write()


# ---------------------------------------------------------------- main


def meta(device: torch.device, args: argparse.Namespace, sizes: Sizes) -> dict[str, Any]:
    import timm

    info: dict[str, Any] = {
        "argv": sys.argv[1:],
        "quick": args.quick,
        "device": str(device),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "budget_s": sizes.budget_s,
        "caps_s": sizes.caps,
    }
    try:
        import pyautoattack  # noqa: F401

        info["pyautoattack"] = getattr(pyautoattack, "__version__", "importable")
    except ImportError:
        info["pyautoattack"] = None
    if hasattr(os, "getloadavg"):
        info["loadavg_start"] = os.getloadavg()
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu=props.name,
            gpu_mem_gib=round(props.total_memory / 2**30, 1),
            sm_count=props.multi_processor_count,
            cuda=torch.version.cuda,
            capability=f"{props.major}.{props.minor}",
        )
    return info


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["cuda", "cpu"], required=True)
    p.add_argument("--quick", action="store_true", help="tiny shapes, same code path")
    p.add_argument("--out", required=True, type=Path, help="JSON file to write")
    p.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of {','.join(SECTIONS)}",
    )
    p.add_argument(
        "--phases",
        default=None,
        help="comma-separated phases to run, in the suite's order (default: all of the "
        "chosen sections; e.g. a second device call: train_modes,lipschitz_detail,"
        "run_trial,compile)",
    )
    p.add_argument(
        "--space",
        type=Path,
        default=DEFAULT_SPACE,
        help="the search space whose first trial is measured for and projected "
        "(default: search_spaces/paper_cifar100.yaml)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="soft time budget: the optional phases (other train modes, Lipschitz detail, "
        "run_trial, compile) are skipped once it is spent",
    )
    p.add_argument(
        "--cap-scale",
        type=float,
        default=1.0,
        help="multiply every phase's cap (a loaded CPU box needs more than the stated caps)",
    )
    p.add_argument(
        "--cap",
        action="append",
        default=[],
        metavar="PHASE=S",
        help="set one phase's cap in seconds (repeatable)",
    )
    p.add_argument(
        "--smoke-trial",
        nargs="?",
        type=Path,
        default=None,
        const=ROOT / "search_spaces" / "gpu_smoke.yaml",
        metavar="SPACE",
        help="also run the space's first trial via `python -m lipsweep train`",
    )
    p.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="hard limit in seconds from the suite's start (after imports): every phase's cap "
        "is cut to what is left minus 15 s, optional phases whose cap does not fit are "
        f"skipped, and the smoke trial is skipped under {SMOKE_MIN_S:.0f} s, so the JSON is "
        "always written in time",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: 1 for --device cpu --quick, where two threads "
        "on a shared 2-core box run 10x slower than one; else torch's own)",
    )
    args = p.parse_args(argv)
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        p.error(f"--sections: unknown {sorted(unknown)}; choose from {list(SECTIONS)}")
    caps = {}
    for item in args.cap:
        name, _, value = item.partition("=")
        try:
            caps[name] = float(value)
        except ValueError:
            p.error(f"--cap: {item!r} is not PHASE=SECONDS")
        if name not in QUICK.caps:
            p.error(f"--cap: unknown phase {name!r}; choose from {sorted(QUICK.caps)}")
        if not caps[name] > 0:
            p.error(f"--cap: {name} must be positive, got {value}")
    args.cap = caps
    known = {ph.name for ph in PHASES}
    if args.phases is not None and not set(args.phases.split(",")) <= known:
        unknown_phases = sorted(set(args.phases.split(",")) - known)
        p.error(f"--phases: unknown {unknown_phases}; choose from {sorted(known)}")
    if not args.cap_scale > 0:
        p.error(f"--cap-scale: must be positive, got {args.cap_scale}")
    if not args.space.is_file():
        p.error(f"--space: {args.space} is not a file")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch.cuda.is_available() is False on this machine")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    threads = (
        args.threads
        if args.threads is not None
        else (1 if args.device == "cpu" and args.quick else 0)
    )
    if threads:
        torch.set_num_threads(threads)
    sizes = QUICK if args.quick else FULL
    caps = {k: v * args.cap_scale for k, v in sizes.caps.items()} | args.cap
    budget = sizes.budget_s if args.budget_s is None else args.budget_s
    sizes = Sizes(**{**sizes.__dict__, "budget_s": budget, "caps": caps})
    device = torch.device(args.device)
    try:
        suite = Suite(args.out, device, sizes, args.quick, args.space)
    except ValueError as err:  # ConfigError included: the space's own one-line message
        print(f"gpu_suite.py: error: --space: {err}", file=sys.stderr)
        return 2
    suite.data["meta"] = meta(device, args, sizes)
    suite.data["meta"]["space"] = suite.target.path
    _log.info(
        "gpu_suite on %s (%s), quick=%s -> %s",
        device,
        suite.data["meta"].get("gpu", suite.data["meta"]["cpu"]),
        args.quick,
        args.out,
    )
    plan = plan_phases(args.sections.split(","), args.smoke_trial)
    if args.phases is not None:
        plan = [ph for ph in plan if ph.name in args.phases.split(",") or ph.name == "smoke_trial"]
    run_phases(suite, plan, args.deadline_s)
    if "projection" in suite.data.get("trial", {}):  # again, with what the optional phases
        try:  # added (the compiled step and ratios, above all)
            suite.data["trial"]["projection"] = project_trial(
                suite.data, suite.target, suite.device
            )
        except Exception as exc:  # noqa: BLE001 - the mandatory projection stays
            suite.data["errors"].append(f"final projection: {type(exc).__name__}: {exc}")
    suite.data["meta"]["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    suite.write()
    _log.info(
        "done in %.0f s; %d error(s); wrote %s",
        suite.elapsed(),
        len(suite.data["errors"]),
        args.out,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
