"""The training step, one epoch, and clean evaluation (nanoGPT/MAE-style small engine).

The loss of one step is ``loss = loss_ce + loss_reg`` with ``loss_reg = sum_n lam_n * term_n``:
a regularizer returns its un-weighted terms and their weights (docs/science.md §1.2-1.3), the
engine applies the weights and reports every part. A non-finite loss stops the trial with an
error that says where and what to change. The step itself never waits for the device:
loss parts are summed on the device and checked for finiteness every
``nonfinite_check_every`` steps and at epoch end, so a non-finite epoch is never checkpointed.
"""

from __future__ import annotations

import contextlib
import gc
import time
import traceback
import warnings
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lipsweep.core.metric_names import LOSS, LOSS_CE, LOSS_REG
from lipsweep.data.loading import DataConfig, augment, to_unit
from lipsweep.regularizers import Regularizer
from lipsweep.settings.config import OptimConfig
from lipsweep.vit.precision import bf16_autocast


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite."""


def resolve_device(name: str) -> torch.device:
    """'auto' picks CUDA when present; otherwise the named device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"device {name!r} requested but CUDA is not available; use device: auto or cpu"
        )
    return torch.device(name)


def autocast_context(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast for 'bf16' (and 'auto' on CUDA); a no-op for fp32."""
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    if not use_bf16:
        return contextlib.nullcontext()
    return bf16_autocast(device.type)


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """SGD with momentum (paper) or AdamW. ``weight_decay_scope='weights'`` spares norms, biases
    and embeddings; ``'all'`` decays every parameter (Hu et al.'s code)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        spared = p.ndim <= 1 or name.endswith(("pos_embed", "cls_token"))
        (no_decay if spared and cfg.weight_decay_scope == "weights" else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    return torch.optim.AdamW(groups, lr=cfg.lr)


NONFINITE_CHECK_EVERY = 50
"""Default steps between the non-finite-loss checks (the only host sync of the train loop)."""


class LossMonitor:
    """Per-step loss parts summed on the device, and the first non-finite step kept there.

    Reading a loss on the host stalls a GPU every step, so the loop only accumulates:
    :meth:`check` (one sync) runs every ``nonfinite_check_every`` steps and at epoch end.
    A non-finite loss may thus reach up to that many optimizer steps before the error, but
    the epoch is never checkpointed, so the bad weights never persist.
    """

    def __init__(self, device: torch.device) -> None:
        self.sums = torch.zeros(3, device=device)  # loss, ce, reg
        self.ok = torch.ones((), dtype=torch.bool, device=device)
        self.first_bad = torch.zeros(4, device=device)  # step, loss, ce, reg
        self.steps = 0

    def add(self, parts: torch.Tensor, step: int) -> None:
        """Accumulate (3,) loss parts of global step ``step`` without a host sync."""
        self.sums += parts
        bad = self.ok & ~torch.isfinite(parts[0])
        step_t = torch.full((1,), float(step), device=parts.device)
        self.first_bad = torch.where(bad, torch.cat([step_t, parts]), self.first_bad)
        self.ok &= ~bad
        self.steps += 1

    def check(self, epoch: int, lr: float) -> list[float]:
        """One host sync: raise NonFiniteLossError if any step so far was non-finite.

        Returns the summed loss parts.
        """
        vals = torch.cat([self.ok.view(1).float(), self.first_bad, self.sums]).tolist()
        if not vals[0]:
            step, loss, ce, reg = vals[1:5]
            raise NonFiniteLossError(
                f"loss became {loss} at epoch {epoch}, step {int(step)} (loss_ce={ce}, "
                f"loss_reg={reg}, lr={lr:.3g}); lower lr, enable clip_grad, or lower the "
                "regularizer weight"
            )
        return vals[5:]


def mix_seed(seed: int, step: int) -> int:
    """numpy seed of timm Mixup's draws at global ``step``: a pure function of (seed, step)."""
    return (seed * 1_000_003 + step * 7919 + 17) % (2**32)


def step_loss(
    model: nn.Module,
    regularizer: Regularizer,
    xb: torch.Tensor,
    yb: torch.Tensor,
    *,
    data_cfg: DataConfig,
    device: torch.device,
    precision: str,
    gen: torch.Generator,
    mixup: Optional[Callable],
    mix_seed_value: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The forward half of a step on a uint8 batch: augment, mix, forward, the loss parts.

    Returns (loss, loss_ce, loss_reg) with ``loss = loss_ce + sum_n lam_n term_n``
    (docs/science.md §1.2-1.3), on ``device``. Augmentation draws from ``gen``; timm's Mixup
    from numpy seeded with ``mix_seed_value``.
    """
    x = augment(to_unit(xb.to(device, non_blocking=True)), data_cfg, gen)
    y = yb.to(device, non_blocking=True)
    if mixup is not None:
        np.random.seed(mix_seed_value)  # timm draws lam and the box from numpy's global RNG
        x, target = mixup(x, y)
    else:
        target = y
    with autocast_context(device, precision):
        logits = model(x)
        loss_ce = F.cross_entropy(
            logits.float(), target, label_smoothing=0.0 if mixup else data_cfg.label_smoothing
        )
        terms = regularizer.terms()
        loss_reg = sum(
            (regularizer.weights[n] * t.float() for n, t in terms.items()),
            torch.zeros((), device=device),
        )
    return loss_ce + loss_reg, loss_ce, loss_reg


def train_step(
    model: nn.Module,
    regularizer: Regularizer,
    optimizer: torch.optim.Optimizer,
    xb: torch.Tensor,
    yb: torch.Tensor,
    *,
    optim_cfg: OptimConfig,
    data_cfg: DataConfig,
    device: torch.device,
    precision: str,
    gen: torch.Generator,
    mixup: Optional[Callable],
    lr: float,
    mix_seed_value: int = 0,
) -> torch.Tensor:
    """One optimizer step on a uint8 batch: :func:`step_loss`, backward, clip, step.

    Makes no host-device sync (no ``.item()``, ``.tolist()``, tensor ``bool`` or
    data-dependent shape). Returns the detached (3,) float32 parts (loss, loss_ce, loss_reg)
    on the device; the caller checks them for finiteness.
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss, loss_ce, loss_reg = step_loss(
        model,
        regularizer,
        xb,
        yb,
        data_cfg=data_cfg,
        device=device,
        precision=precision,
        gen=gen,
        mixup=mixup,
        mix_seed_value=mix_seed_value,
    )
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if optim_cfg.clip_grad > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), optim_cfg.clip_grad)
    optimizer.step()
    return torch.stack([loss.detach(), loss_ce.detach(), loss_reg.detach()]).float()


def train_one_epoch(
    model: nn.Module,
    regularizer: Regularizer,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    optim_cfg: OptimConfig,
    data_cfg: DataConfig,
    device: torch.device,
    precision: str,
    gen: torch.Generator,
    mixup: Optional[Callable],
    step0: int,
    steps_per_epoch: int,
    epoch: int,
    on_step: Optional[Callable[[int], None]] = None,
    seed: int = 0,
    nonfinite_check_every: int = NONFINITE_CHECK_EVERY,
) -> dict[str, float]:
    """Train for one pass over ``batches``; returns mean loss parts and throughput.

    Host syncs: one every ``nonfinite_check_every`` steps and one at the end (LossMonitor).
    ``gen`` must live on ``device``: a host generator would copy its draws to the device, a
    sync per draw, every step.
    """
    if gen.device.type != device.type:
        raise ValueError(
            f"gen is on {gen.device} but training runs on {device}: create it with "
            f"torch.Generator(device={str(device)!r}) (lipsweep.trial.run.seed_everything)"
        )
    model.train()
    monitor = LossMonitor(device)
    n_img, step, lr = 0, step0, optimizer.param_groups[0]["lr"]
    t0 = time.perf_counter()
    for xb, yb in batches:
        lr = optim_cfg.lr_at(step, steps_per_epoch)
        parts = train_step(
            model,
            regularizer,
            optimizer,
            xb,
            yb,
            optim_cfg=optim_cfg,
            data_cfg=data_cfg,
            device=device,
            precision=precision,
            gen=gen,
            mixup=mixup,
            lr=lr,
            mix_seed_value=mix_seed(seed, step),
        )
        monitor.add(parts, step)
        n_img += len(xb)
        step += 1
        if monitor.steps % nonfinite_check_every == 0:
            monitor.check(epoch, lr)
        if on_step is not None:
            on_step(step)
    sums = monitor.check(epoch, lr)
    seconds = time.perf_counter() - t0
    n_step = monitor.steps
    out = {k: v / max(1, n_step) for k, v in zip((LOSS, LOSS_CE, LOSS_REG), sums)}
    out.update(
        lr=optimizer.param_groups[0]["lr"],
        epoch_seconds=seconds,
        train_images_per_s=n_img / max(seconds, 1e-9),
        steps=float(n_step),
    )
    return out


def host_sync_sites(fn: Callable[[], Any], device: torch.device) -> list[str]:
    """Where ``fn()`` makes host-device syncs on CUDA (``torch.cuda.set_sync_debug_mode``).

    One entry per sync: the Python frames that led to it (innermost first, up to 6, as
    ``file:line``) and the message, marked ``[in garbage collection]`` where Python's collector
    was running (a finalizer of older objects, not ``fn``'s own code, then made the sync).
    Synchronises before and after, so only syncs made while ``fn`` runs count.
    ``host_sync_sites(lambda: train_step(...), device)`` should be empty.
    """
    if device.type != "cuda":
        raise ValueError(f"host_sync_sites needs a CUDA device, got {device}")
    sites: list[str] = []
    show = warnings.showwarning  # other warnings still show as they would
    collecting = False

    def on_gc(phase: str, info: dict) -> None:
        nonlocal collecting
        collecting = phase == "start"

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" not in str(message):
            show(message, category, filename, lineno, file, line)
            return
        frames = [f for f in traceback.extract_stack()[:-1] if "/warnings.py" not in f.filename]
        where = " <- ".join(f"{f.filename}:{f.lineno}" for f in reversed(frames[-6:]))
        gc_note = " [in garbage collection]" if collecting else ""
        sites.append(f"{where}: {str(message).splitlines()[0]}{gc_note}")

    torch.cuda.synchronize(device)
    prev = torch.cuda.get_sync_debug_mode()
    # Entering the mode warns once per process that it "does not yet detect all
    # synchronizing operations": that warning is no sync, so the recorder comes after it.
    torch.cuda.set_sync_debug_mode("warn")
    gc.callbacks.append(on_gc)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            fn()
    finally:
        torch.cuda.set_sync_debug_mode(prev)
        gc.callbacks.remove(on_gc)
    torch.cuda.synchronize(device)
    return sites


@torch.no_grad()
def evaluate_clean(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    device: torch.device,
    precision: str = "fp32",
) -> float:
    """Top-1 accuracy in percent of ``model`` on uint8 or [0, 1] images ``x``.

    ``precision`` as in :func:`autocast_context`: the per-epoch evaluation passes 'auto'
    (bf16 autocast on CUDA, fp32 on CPU, where bf16 autocast is slower); the default 'fp32'
    is strict. One host sync, at the end.
    """
    was_training = model.training
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    with autocast_context(device, precision):
        for i in range(0, len(x), batch_size):
            xb = x[i : i + batch_size].to(device, non_blocking=True)
            xb = to_unit(xb) if xb.dtype == torch.uint8 else xb
            yb = y[i : i + batch_size].to(device, non_blocking=True)
            correct += (model(xb).argmax(-1) == yb).sum()
    model.train(was_training)
    return 100.0 * correct.item() / max(1, len(x))
