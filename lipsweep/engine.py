"""The training step, one epoch, and clean evaluation (nanoGPT/MAE-style small engine).

The loss of one step is ``loss = loss_ce + loss_reg`` with ``loss_reg = sum_n lam_n * term_n``:
a regularizer returns its un-weighted terms and their weights (SPEC §2.2, §2.3; STYLE.md), the
engine applies the weights and reports every part. A non-finite loss stops the trial with an
error that says where and what to change, before the optimizer step can spread it.
"""
from __future__ import annotations

import contextlib
import math
import time
from typing import Callable, Iterable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from lipsweep.config import OptimConfig
from lipsweep.data import DataConfig, augment, to_unit
from lipsweep.regularizers import Regularizer


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite."""


def resolve_device(name: str) -> torch.device:
    """'auto' picks CUDA when present; otherwise the named device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} requested but CUDA is not available; "
                           "use device: auto or cpu")
    return torch.device(name)


def autocast_context(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast for 'bf16' (and 'auto' on CUDA); a no-op for fp32."""
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    if not use_bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """SGD with momentum (paper) or AdamW. ``weight_decay_scope='weights'`` spares norms, biases
    and embeddings; ``'all'`` decays every parameter (Specformer's code)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        spared = p.ndim <= 1 or name.endswith(("pos_embed", "cls_token"))
        (no_decay if spared and cfg.weight_decay_scope == "weights" else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    return torch.optim.AdamW(groups, lr=cfg.lr)


def train_one_epoch(model: nn.Module, regularizer: Regularizer, optimizer: torch.optim.Optimizer,
                    batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *,
                    optim_cfg: OptimConfig, data_cfg: DataConfig, num_classes: int,
                    device: torch.device, precision: str, gen: torch.Generator,
                    mixup: Optional[Callable], step0: int, steps_per_epoch: int, epoch: int,
                    on_step: Optional[Callable[[int], None]] = None) -> dict[str, float]:
    """Train for one pass over ``batches``; returns mean loss parts and throughput."""
    model.train()
    sums = {"loss": 0.0, "loss_ce": 0.0, "loss_reg": 0.0}
    n_img, n_step, step = 0, 0, step0
    t0 = time.perf_counter()
    for xb, yb in batches:
        x = augment(to_unit(xb.to(device, non_blocking=True)), data_cfg, gen)
        y = yb.to(device, non_blocking=True)
        if mixup is not None:
            x, target = mixup(x, y)
        else:
            target = y
        lr = optim_cfg.lr_at(step, steps_per_epoch)
        for group in optimizer.param_groups:
            group["lr"] = lr
        with autocast_context(device, precision):
            logits = model(x)
            loss_ce = F.cross_entropy(logits.float(), target,
                                      label_smoothing=0.0 if mixup else data_cfg.label_smoothing)
            terms = regularizer.terms()
            loss_reg = sum((regularizer.weights[n] * t.float() for n, t in terms.items()),
                           torch.zeros((), device=device))
        loss = loss_ce + loss_reg
        loss_val, ce_val, reg_val = (float(v) for v in
                                     torch.stack([loss.detach(), loss_ce.detach(),
                                                  loss_reg.detach()]).tolist())
        if not math.isfinite(loss_val):
            raise NonFiniteLossError(
                f"loss became {loss_val} at epoch {epoch}, step {step} (loss_ce={ce_val}, "
                f"loss_reg={reg_val}, lr={lr:.3g}); lower lr, enable clip_grad, or lower the "
                "regularizer weight")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if optim_cfg.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), optim_cfg.clip_grad)
        optimizer.step()
        sums["loss"] += loss_val
        sums["loss_ce"] += ce_val
        sums["loss_reg"] += reg_val
        n_img += len(xb)
        n_step += 1
        step += 1
        if on_step is not None:
            on_step(step)
    seconds = time.perf_counter() - t0
    out = {k: v / max(1, n_step) for k, v in sums.items()}
    out.update(lr=optimizer.param_groups[0]["lr"], epoch_seconds=seconds,
               train_images_per_s=n_img / max(seconds, 1e-9), steps=float(n_step))
    return out


@torch.no_grad()
def evaluate_clean(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int,
                   device: torch.device) -> float:
    """Top-1 accuracy in percent of ``model`` on uint8 or [0, 1] images ``x``."""
    was_training = model.training
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    for i in range(0, len(x), batch_size):
        xb = x[i:i + batch_size].to(device)
        xb = to_unit(xb) if xb.dtype == torch.uint8 else xb
        correct += (model(xb).argmax(-1) == y[i:i + batch_size].to(device)).sum()
    model.train(was_training)
    return 100.0 * correct.item() / max(1, len(x))
