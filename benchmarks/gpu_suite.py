"""One command that measures lipsweep's GPU path (issue 17, item 6) and writes one JSON file.

    python benchmarks/gpu_suite.py --device cuda --out gpu_suite.json          # one H100, < 8 min
    python benchmarks/gpu_suite.py --device cpu --quick --out quick.json       # 2 CPUs, < 3 min

It runs on a machine with its own torch (>= 2.4; the device image has 2.11) and timm but no
Ray, MLflow, Optuna or network: it imports none of them, directly or through lipsweep, and uses
pyautoattack when it is importable (``benchmarks/fetch_wheels.sh`` puts a wheel in ``.whl/``),
else it skips AutoAttack with a warning. Every figure comes from lipsweep's own functions
(``engine.train_one_epoch``, the regularizers, ``attacks``, ``lipschitz``, ``checkpoint``,
``trial.run_trial``); each measurement is guarded, so one failure records an error string and
the suite goes on. The JSON is rewritten after every section, so a run cut short keeps what
it measured. ``--quick`` takes the same code path with tiny shapes (a 2-block width-64 ViT,
small batches and image counts). Sections:

- ``train``: ViT-B (patch 4, 32 px, 65 tokens, random init) train-step time and peak memory at
  batch 64/256/512 in fp32, TF32, bf16 and bf16 + torch.compile; model FLOP utilisation (FLOPs
  counted analytically, cross-checked with torch.utils.flop_counter) against a bf16 matmul
  measured in the same run.
- ``regularizers``: each regularizer's step time as a ratio to the baseline at ViT-B bf16 batch
  512 (CUDA events, interleaved rounds, medians) and its host syncs per step
  (``torch.cuda.set_sync_debug_mode``; null on CPU).
- ``checkpoint``: per-epoch clean evaluation (fp32 and bf16 autocast) and checkpoint save/load.
- ``attacks``: FGSM and PGD-4 images/s in fp32 and bf16 and the accuracy difference, and each
  AutoAttack stage alone in seconds per 1000 attacked images, on a briefly trained ViT.
- ``lipschitz``: ||J_f|| cost at C = 10 and C = 100, the trial-level summary at C = 100, and the
  head bounds split into matvec (Lanczos) and eigh/SVD time, with CPU vs device placement of the
  small eigh/SVD.
- ``trial``: a one-epoch ``run_trial`` on a CIFAR-shaped slice (the embedded CIFAR-10 sample) on
  the device, and the projected H100-hours of one paper trial with its arithmetic.

``--smoke-trial SPACE`` additionally runs the first trial of a search space (default
``search_spaces/gpu_smoke.yaml``) through ``python -m lipsweep train`` (no Ray, no MLflow) and
records it under ``smoke_trial``. ``benchmarks/gpu_report.py`` turns the JSON into the tables
of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lipsweep.regularizers import Regularizer, create_regularizer  # noqa: E402
from lipsweep.settings.config import OptimConfig, TrialConfig  # noqa: E402
from lipsweep.trial.data import (  # noqa: E402
    DataConfig,
    load_splits,
    to_unit,
    train_batches,
    train_to_device,
)
from lipsweep.trial.engine import (  # noqa: E402
    autocast_context,
    build_optimizer,
    evaluate_clean,
    train_one_epoch,  # noqa: E402
)
from lipsweep.trial.models import ModelConfig, PixelModel, create_model  # noqa: E402

_log = logging.getLogger("gpu_suite")

SECTIONS = ("train", "regularizers", "checkpoint", "attacks", "lipschitz", "trial")
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
PAPER = {
    "epochs": 40,
    "train_images": 50_000,
    "test_images": 10_000,
    "batch_size": 512,
    "num_classes": 100,
}
"""One paper trial (docs/science.md §2): ViT-B on CIFAR-100, 40 epochs at batch 512, whole test
split."""
PAPER_FRACTIONS = {"clean": 0.909, "after_pgd2": 0.2685, "after_aa2": 0.0212}
"""Share of test images each attack stage sees, from the paper's Table 3 baseline row (clean
90.9 %, PGD2 26.85 %, AA2 2.12 %): FGSM, PGD and APGD-CE attack the correct images; APGD-T
the ones APGD-CE left (taken as PGD2's survivors); FAB-T and Square the final survivors."""


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
)


# ---------------------------------------------------------------- helpers


class Suite:
    """The JSON being built, the time budget, and the guard that keeps one failure local."""

    def __init__(self, out: Path, device: torch.device, sizes: Sizes, quick: bool) -> None:
        self.out, self.device, self.sizes, self.quick = out, device, sizes, quick
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

    Through lipsweep's own switch (``attacks.evaluate.tf32_matmuls``, the legacy per-backend
    flags): mixing it with ``torch.set_float32_matmul_precision`` leaves torch >= 2.9 in a
    state where ``torch.get_float32_matmul_precision()`` raises, and torch.compile calls it.
    """
    from lipsweep.attacks.evaluate import tf32_matmuls

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


def count_syncs(fn: Callable[[], Any], device: torch.device) -> Optional[int]:
    """Host-device synchronisations ``fn`` makes (:func:`lipsweep.trial.engine.count_host_syncs`);
    None on CPU, where there is no device to sync with."""
    from lipsweep.trial.engine import count_host_syncs

    return count_host_syncs(fn, device) if device.type == "cuda" else None


def syncs_per_step(run_steps: Callable[[int], Any], device: torch.device) -> dict[str, Any]:
    """Host syncs of the train loop split into per step and per epoch, by difference.

    ``run_steps(n)`` trains one epoch of ``n`` steps. With s(n) its syncs,
    per_step = (s(4) - s(2)) / 2 and per_epoch = s(2) - 2 per_step: the epoch-end
    non-finite check (1 expected) is not charged to the steps, and the every-N check
    (``nonfinite_check_every`` = 50) does not fire in 4 steps. Nulls on CPU.
    """
    two, four = count_syncs(lambda: run_steps(2), device), count_syncs(lambda: run_steps(4), device)
    if two is None or four is None:
        return {"syncs_per_step": None, "syncs_per_epoch_fixed": None}
    per_step = (four - two) / 2
    return {"syncs_per_step": per_step, "syncs_per_epoch_fixed": two - 2 * per_step}


# ---------------------------------------------------------------- sections


def section_train(s: Suite) -> None:
    sec = s.data.setdefault("train", {})
    dev, sz = s.device, s.sizes
    with s.guard(sec, "matmul") as r:
        r["n"] = sz.matmul_n
        r["bf16_tflops"] = round(bf16_matmul_tflops(sz.matmul_n, dev), 5)
        _log.info("bf16 matmul %d^3: %.1f TFLOP/s", sz.matmul_n, r["bf16_tflops"])
    model = build_vit(sz, PAPER["num_classes"], dev)
    shape = model_shape(model)
    sec["model"] = shape
    sec["flops_per_image"] = vit_train_flops_per_image(shape)
    with s.guard(sec, "flop_counter") as r:
        r["flops_per_image"] = counted_train_flops_per_image(model, dev)
        r["ratio_to_analytic"] = round(r["flops_per_image"] / sec["flops_per_image"], 4)
    peak = sec.get("matmul", {}).get("bf16_tflops")
    reg = create_regularizer("none")
    runs = sec.setdefault("runs", {})
    compiled = None
    for mode in MODES:
        for batch in sz.compile_batches if mode == "bf16_compile" else sz.batches:
            key = f"{mode}_b{batch}"
            with s.guard(runs, key, optional=mode == "bf16_compile") as r:
                if "skipped" in r:
                    continue
                r.update(mode=mode, batch=batch)
                if mode == "bf16_compile":
                    # the first batch gets the static graph a trial runs (one batch size);
                    # the next ones the dynamic-batch graph of torch.compile's recompile
                    r["graph"] = "static" if compiled is None else "dynamic"
                    if compiled is None:
                        compiled = torch.compile(model)
                net = compiled if mode == "bf16_compile" else model
                opt = build_optimizer(model, OptimConfig(lr=0.01))
                batches = random_batches(sz.steps, batch, PAPER["num_classes"], dev)
                precision = "bf16" if mode.startswith("bf16") else "fp32"
                with matmul_mode(mode):
                    if mode == "bf16_compile":
                        with Clock(dev) as clk:  # compilation (and recompilation) time
                            train_steps(
                                net, reg, opt, batches[:1], precision, dev, PAPER["num_classes"]
                            )
                        r["compile_s"] = round(clk.seconds, 2)
                    reset_peak(dev)
                    step = time_steps(
                        net, reg, opt, batches, sz.warmup, precision, dev, PAPER["num_classes"]
                    )
                r["step_ms"] = round(step * 1e3, 3)
                r["images_per_s"] = round(batch / step, 1)
                r["peak_mem_gib"] = peak_gib(dev)
                tflops = sec["flops_per_image"] * batch / step / 1e12
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
                del opt
        s.write()
    top = runs.get(f"bf16_b{max(sz.batches)}", {})
    sec["target_mfu_bf16_b512"] = {"target": 0.40, "measured": top.get("mfu_vs_bf16_matmul")}


def section_regularizers(s: Suite) -> None:
    sec = s.data.setdefault("regularizers", {})
    dev, sz = s.device, s.sizes
    sec.update(batch=sz.reg_batch, precision="bf16", rounds=sz.rounds, steps=sz.steps)
    model = build_vit(sz, PAPER["num_classes"], dev)
    batches = random_batches(sz.steps, sz.reg_batch, PAPER["num_classes"], dev)
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
                            PAPER["num_classes"],
                        )
                    )
                    if rnd == 0:
                        r.update(
                            syncs_per_step(
                                lambda n: train_steps(
                                    model, reg, opt, batches[:n], "bf16", dev, PAPER["num_classes"]
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
    model = build_vit(sz, PAPER["num_classes"], dev)
    with s.guard(sec, "eval_clean") as r:
        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, 256, (sz.eval_images, 3, 32, 32), generator=g, dtype=torch.uint8)
        y = torch.randint(0, PAPER["num_classes"], (sz.eval_images,), generator=g)
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
            random_batches(1, 8, PAPER["num_classes"], dev),
            "fp32",
            dev,
            PAPER["num_classes"],
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
    from lipsweep.attacks.evaluate import tf32_matmuls

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
        note="each stage alone on the same images (the cascade's first stage sees the "
        "correctly classified ones); s_per_1000 is per attacked image",
    )
    n = aa["images"]
    for stage in AA_STAGES:
        with s.guard(aa, stage, optional=True) as r:
            if "skipped" in r:
                continue
            with tf32_matmuls(True):  # as evaluate_robustness runs it in a trial
                res = AutoAttack(model, 2 / 255, attacks=[stage], iters=10, batch_size=batch).run(
                    x[:n], y[:n]
                )
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


def section_lipschitz(s: Suite) -> None:
    import torch.nn.functional as F

    from lipsweep.lipschitz import LipschitzConfig, jacobian_norm_result, lipschitz_summary

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
    with s.guard(sec, "summary_c100", optional=True) as r:
        if "skipped" not in r:
            cfg = LipschitzConfig(lip_figures=False)
            with Clock(dev) as clk:
                metrics = lipschitz_summary(models.get(100) or build_vit(sz, 100, dev), x, cfg)
            r.update(
                images=len(x),
                lip_images=cfg.lip_images,
                seconds=round(clk.seconds, 3),
                lip_head_images=cfg.lip_head_images,
                lip_jacobian_median=metrics.get("lip_jacobian_median"),
            )
            _log.info("lipschitz_summary C=100 on %d images: %.2f s", len(x), r["seconds"])


def section_trial(s: Suite) -> None:
    sec = s.data.setdefault("trial", {})
    sz = s.sizes
    with s.guard(sec, "run_trial", optional=True) as r:
        if "skipped" not in r:
            _run_trial(s, r)
    with s.guard(sec, "projection") as r:
        r.update(project_paper_trial(s.data, s.device, max(sz.batches)))


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


def _get(d: dict, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def project_paper_trial(
    data: dict[str, Any], device: torch.device | str, batch: int
) -> dict[str, Any]:
    """Device-hours of one paper trial (docs/science.md §2) from the suite's own figures, with the
    sums.

    ``batch`` is the largest batch the train section measured (512; smaller with --quick,
    where the step time is scaled linearly to 512).
    """
    p, f = PAPER, PAPER_FRACTIONS
    steps = p["train_images"] // p["batch_size"]
    step_s = (_get(data, "train", "runs", f"bf16_b{batch}", "step_ms") or float("nan")) / 1e3
    scale = p["batch_size"] / batch if batch else float("nan")  # quick mode: linear in batch
    n = p["test_images"]
    # per-epoch evaluation runs with precision 'auto': bf16 autocast on CUDA, fp32 on CPU;
    # the final clean pass and the attacks' accuracies are strict fp32, the attack passes TF32
    cuda = str(device).startswith("cuda")
    eval_epoch = _get(
        data, "checkpoint", "eval_clean", "bf16_s_per_10k" if cuda else "fp32_s_per_10k"
    ) or float("nan")
    eval_10k = _get(data, "checkpoint", "eval_clean", "fp32_s_per_10k") or float("nan")
    save_s = _get(data, "checkpoint", "save", "save_s") or float("nan")
    attack_key = "tf32_images_per_s" if cuda else "fp32_images_per_s"
    pgd = _get(data, "attacks", "pgd4", attack_key) or float("nan")
    fgsm = _get(data, "attacks", "fgsm", attack_key) or float("nan")
    aa = {
        st: (_get(data, "attacks", "autoattack", st, "s_per_1000") or float("nan")) / 1000
        for st in AA_STAGES
    }
    lip = _get(data, "lipschitz", "summary_c100", "seconds") or float("nan")
    lip_imgs = _get(data, "lipschitz", "summary_c100", "images") or 0
    lip_full = lip * (500 / lip_imgs) if lip_imgs else float("nan")  # lip_images = 500
    parts = {
        "train_s": p["epochs"] * steps * step_s * scale,
        "epoch_eval_s": p["epochs"] * eval_epoch * n / 1e4,
        "checkpoints_s": p["epochs"] * save_s,
        "final_clean_s": eval_10k * n / 1e4,
        "fgsm_2eps_s": 2 * n * f["clean"] / fgsm,
        "pgd4_2eps_s": 2 * n * f["clean"] / pgd,
        "aa_s": n
        * (
            f["clean"] * aa["apgd-ce"]
            + f["after_pgd2"] * aa["apgd-t"]
            + f["after_aa2"] * (aa["fab-t"] + aa["square"])
        ),
        "lipschitz_s": lip_full,
    }
    regs = data.get("regularizers", {}).get("variants", {})
    worst = max((v.get("ratio") or 1.0 for v in regs.values()), default=1.0)
    total = sum(parts.values())
    total_worst = total + parts["train_s"] * (worst - 1.0)
    missing = [k for k, v in parts.items() if not math.isfinite(v)]
    return {
        "device": str(device),
        "assumptions": {
            **p,
            "steps_per_epoch": steps,
            "measured_batch": batch,
            "batch_scale": scale,
            "fractions_attacked": f,
            "epoch_eval": "evaluate_clean on the whole test split every epoch, "
            + ("bf16 autocast (precision auto on CUDA)" if cuda else "fp32"),
            "checkpoint_every": 1,
            "attack_precision": "fp32, TF32 matmuls in the attack passes" if cuda else "fp32",
            "lip_images": 500,
            "note": "train_s = epochs x steps_per_epoch x bf16 step time (baseline) x "
            "batch_scale; attacks scale the suite's images/s to the attacked share "
            "of 10,000 images; AutoAttack stages use their s per 1000 attacked images",
        },
        "parts_s": {k: (round(v, 1) if math.isfinite(v) else None) for k, v in parts.items()},
        "missing": missing,
        "total_s": round(total, 1) if math.isfinite(total) else None,
        "hours": round(total / 3600, 4) if math.isfinite(total) else None,
        "hours_slowest_regularizer": round(total_worst / 3600, 4)
        if math.isfinite(total_worst)
        else None,
        "slowest_regularizer_ratio": worst,
        "target_hours": 0.25,
        "grid_31_trials_hours": round(31 * total / 3600, 2) if math.isfinite(total) else None,
    }


# The GPU machine has no network: no hub weights, no bucket. The smoke trial keeps every other
# setting of the space (ViT-B, patch 4, cuda, the evaluation) on the CIFAR-10 sample in the
# package, from random init; the JSON records these overrides next to the result.
SMOKE_OFFLINE = {"pretrained": "", "dataset": "embedded", "data_dir": ""}


SMOKE_MIN_S = 60.0
"""The smoke trial is skipped (and says so) when less than this is left before --deadline-s."""


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

    from lipsweep.sweep.space import load_space
    from lipsweep.trial.data_remote import is_uri

    sec = s.data.setdefault("smoke_trial", {})
    if timeout_s is not None and timeout_s < SMOKE_MIN_S:
        sec["lipsweep_train"] = {
            "skipped": f"{max(timeout_s, 0):.0f} s left before --deadline-s, under the "
            f"{SMOKE_MIN_S:.0f} s a smoke trial needs"
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
                    f"lipsweep train killed after {timeout_s:.0f} s (--deadline-s); its "
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
        "--budget-s",
        type=float,
        default=None,
        help="soft time budget: optional parts (compile, AutoAttack stages, the "
        "Lipschitz summary, run_trial) are skipped once it is spent",
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
        help="hard limit in seconds from the suite's start (after imports): the smoke trial "
        "gets what is left minus 15 s, is killed at that point with its output kept, and is "
        f"skipped under {SMOKE_MIN_S:.0f} s, so the JSON is always written in time",
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
    if args.budget_s is not None:
        sizes = Sizes(**{**sizes.__dict__, "budget_s": args.budget_s})
    device = torch.device(args.device)
    suite = Suite(args.out, device, sizes, args.quick)
    suite.data["meta"] = meta(device, args, sizes)
    _log.info(
        "gpu_suite on %s (%s), quick=%s -> %s",
        device,
        suite.data["meta"].get("gpu", suite.data["meta"]["cpu"]),
        args.quick,
        args.out,
    )
    runners = {
        "train": section_train,
        "regularizers": section_regularizers,
        "checkpoint": section_checkpoint,
        "attacks": section_attacks,
        "lipschitz": section_lipschitz,
        "trial": section_trial,
    }
    wanted = args.sections.split(",")
    for name in SECTIONS:
        if name not in wanted:
            continue
        _log.info("== %s (%.0f s elapsed)", name, suite.elapsed())
        with suite.guard(suite.data, name):
            runners[name](suite)
        suite.write()
    if args.smoke_trial is not None:
        left = None if args.deadline_s is None else args.deadline_s - suite.elapsed() - 15.0
        smoke_trial(suite, args.smoke_trial, left)
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
