"""One trial end to end: build, train with epoch checkpoints, resume, evaluate.

``run_trial`` knows nothing of Ray or MLflow. It reports through :class:`TrialCallbacks`
(minGPT-style hooks): the sweep's Tune trainable turns ``on_epoch_end`` into ``tune.report``
with a checkpoint, and the CLI's ``lipsweep train`` just logs. Randomness is re-seeded from
(seed, epoch) at the start of every epoch (model init, batch order, crops, flips and dropout,
drawn on the training device, where the uint8 train set lives) and MixUp/CutMix from
(seed, step), so a trial resumed from its epoch-e checkpoint produces the same weights as one
that was never interrupted (on the same device type). Epochs are checkpointed every
``checkpoint_every`` epochs and always at the last one. Every ``probe_every`` epochs the
epoch's metrics also carry the robustness probes (:mod:`lipsweep.trial.probes`).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from lipsweep.core.measurement import accuracy_se
from lipsweep.core.metric_names import ACC_CLEAN, LOSS, LOSS_CE, LOSS_REG, se_metric
from lipsweep.core.paths import write_atomic
from lipsweep.data.loading import (
    ImageSplits,
    create_mixup,
    load_splits,
    num_train_batches,
    to_unit,
    train_batches,
    train_to_device,
)
from lipsweep.regularizers import create_regularizer_from_config
from lipsweep.settings.config import TrialConfig
from lipsweep.trial.callbacks import EVALUATION_LOGGERS, TrialCallbacks
from lipsweep.trial.checkpoint import (
    Checkpoint,
    CheckpointError,
    config_mismatch,
    load_latest,
    save_checkpoint,
    unflatten_optimizer,
)
from lipsweep.trial.checkpoint_files import checkpoint_due  # noqa: F401  (re-exported)
from lipsweep.trial.engine import build_optimizer, evaluate_clean, resolve_device, train_one_epoch
from lipsweep.trial.probes import probe_set, run_probes
from lipsweep.vit.models import PixelModel, create_model

_log = logging.getLogger(__name__)
_eval_log = logging.getLogger(EVALUATION_LOGGERS[0])


@dataclass
class TrialResult:
    """What a finished trial hands back."""

    metrics: dict[str, float]
    history: list[dict[str, float]] = field(default_factory=list)
    checkpoint: Optional[Path] = None
    artifacts: Optional[Path] = None
    resumed_from_epoch: int = 0


def seed_everything(
    seed: int, epoch: int = 0, device: Optional[torch.device] = None
) -> torch.Generator:
    """Seed torch (all devices) and numpy for (seed, epoch); returns a generator on ``device``.

    The returned generator drives the crops and flips on the training device; timm's Mixup is
    re-seeded per step by the engine (:func:`lipsweep.trial.engine.mix_seed`).
    """
    s = seed * 1_000_003 + epoch
    torch.manual_seed(s)
    np.random.seed(s % (2**32))
    return torch.Generator(device=device or "cpu").manual_seed(s)


def _restore(
    ckpt: Checkpoint, model: PixelModel, optimizer: torch.optim.Optimizer, regularizer: Any
) -> None:
    model.net.load_state_dict(ckpt.model)
    optimizer.load_state_dict(unflatten_optimizer(ckpt.optimizer, ckpt.state["optimizer_meta"]))
    regularizer.load_state_dict(ckpt.regularizer)


def final_evaluation(
    model: PixelModel,
    x_eval: torch.Tensor,
    y_eval: torch.Tensor,
    cfg: TrialConfig,
    device: torch.device,
    artifacts: Path,
    progress: bool = False,
) -> dict[str, float]:
    """Robustness suite (clean, FGSM, PGD, AutoAttack) and Lipschitz summary on the eval subset."""
    from lipsweep.attacks import evaluate_robustness
    from lipsweep.lipschitz import lipschitz_summary

    x = to_unit(x_eval)
    model.eval()
    attacks = ", ".join(cfg.robustness.attacks) or "no attacks"
    _eval_log.info("final evaluation: clean accuracy and %s, then the Lipschitz summary", attacks)
    t0 = time.perf_counter()
    metrics = dict(
        evaluate_robustness(model, (x, y_eval), cfg.robustness, device=device, progress=progress)
    )
    metrics["eval_attack_seconds"] = time.perf_counter() - t0
    cap = cfg.lipschitz.lip_images
    _eval_log.info(
        "attacks done in %.0f s; the Lipschitz summary on %d images next",
        metrics["eval_attack_seconds"],
        min(cap, x.shape[0]) if cap else x.shape[0],
    )
    t0 = time.perf_counter()
    metrics.update(
        lipschitz_summary(model, x.to(device), cfg.lipschitz, out_dir=artifacts, progress=progress)
    )
    metrics["eval_lipschitz_seconds"] = time.perf_counter() - t0
    _eval_log.info("Lipschitz summary done in %.0f s", metrics["eval_lipschitz_seconds"])
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}


def run_trial(
    cfg: TrialConfig,
    out_dir: Path,
    callbacks: Optional[TrialCallbacks] = None,
    checkpoint_dir: Optional[Path] = None,
    progress: Optional[bool] = None,
    splits: Optional[ImageSplits] = None,
) -> TrialResult:
    """Train ``cfg`` (resuming from the newest intact checkpoint) and evaluate it.

    Args:
        cfg: the validated trial configuration.
        out_dir: where checkpoints (``checkpoints/``), artifacts and ``metrics.json`` go.
        callbacks: progress hooks (Tune reporting, logging).
        checkpoint_dir: resume from the checkpoints in this folder instead of
            ``out_dir/checkpoints`` (e.g. a restored Tune checkpoint).
        progress: show per-batch progress bars (default: when stderr is a terminal).
        splits: the trial's data, loaded and checked already (default: loaded here).
    """
    callbacks = callbacks or TrialCallbacks()
    progress = sys.stderr.isatty() if progress is None else progress
    out_dir = Path(out_dir)
    ckpt_root = out_dir / "checkpoints"
    device = resolve_device(cfg.run.device)
    splits = train_to_device(splits or load_splits(cfg.data, cfg.model.num_classes), device)

    seed_everything(cfg.run.seed)
    model = create_model(cfg.model).to(device)
    regularizer = create_regularizer_from_config(cfg.regularizer)
    regularizer.attach(model)
    optimizer = build_optimizer(model, cfg.optim)
    train_model = torch.compile(model) if cfg.run.compiles_on(device.type) else model

    ckpt = load_latest(Path(checkpoint_dir) if checkpoint_dir else ckpt_root)
    if ckpt is None and (ckpt_root.exists() and any(ckpt_root.iterdir())):
        _log.warning("no intact checkpoint in %s; restarting the trial from epoch 1", ckpt_root)
    start = 1
    history: list[dict[str, float]] = []
    if ckpt is not None and (why := config_mismatch(ckpt.state, cfg.to_flat())):
        raise CheckpointError(
            f"{ckpt.path} was trained under another configuration ({why}); it is not resumed "
            "under this one: use another output folder, or delete it to start over"
        )
    if ckpt is not None:
        _restore(ckpt, model, optimizer, regularizer)
        start = ckpt.epoch + 1
        history = list(ckpt.state.get("history", []))
        _log.info("resumed from %s (epoch %d of %d done)", ckpt.path, ckpt.epoch, cfg.optim.epochs)

    steps_per_epoch = num_train_batches(splits, cfg.optim.batch_size)
    if steps_per_epoch == 0:
        raise ValueError(f"no training batches: {len(splits.x_train)} images")
    mixup = create_mixup(cfg.data, cfg.model.num_classes)
    probes = probe_set(splits, cfg) if cfg.probe.enabled else None
    last_ckpt = ckpt.path if ckpt else None
    for epoch in range(start, cfg.optim.epochs + 1):
        gen = seed_everything(cfg.run.seed, epoch, device)
        batches = train_batches(splits, cfg.optim.batch_size, cfg.run.seed, epoch)
        if progress:
            from tqdm import tqdm

            batches = tqdm(
                batches,
                total=steps_per_epoch,
                leave=False,
                desc=f"epoch {epoch}/{cfg.optim.epochs}",
                file=sys.stderr,
            )
        stats = train_one_epoch(
            train_model,
            regularizer,
            optimizer,
            batches,
            optim_cfg=cfg.optim,
            data_cfg=cfg.data,
            device=device,
            precision=cfg.run.precision,
            gen=gen,
            mixup=mixup,
            step0=(epoch - 1) * steps_per_epoch,
            steps_per_epoch=steps_per_epoch,
            epoch=epoch,
            seed=cfg.run.seed,
            nonfinite_check_every=cfg.run.nonfinite_check_every,
        )
        stats[ACC_CLEAN] = evaluate_clean(
            model,
            splits.x_eval,
            splits.y_eval,
            cfg.robustness.attack_batch_size,
            device,
            precision="auto",
        )
        stats[se_metric(ACC_CLEAN)] = accuracy_se(stats[ACC_CLEAN], len(splits.y_eval))
        if probes is not None and cfg.probe.due(epoch):
            stats.update(run_probes(model, probes, cfg, device))
        stats["epoch"] = float(epoch)
        history.append(stats)
        epoch_ckpt = None
        if checkpoint_due(epoch, cfg.optim.epochs, cfg.run.checkpoint_every):
            epoch_ckpt = last_ckpt = save_checkpoint(
                ckpt_root,
                epoch,
                model.net.state_dict(),
                optimizer.state_dict(),
                regularizer.state_dict(),
                {"history": history, "config": cfg.to_flat()},
                keep=cfg.run.keep_checkpoints,
            )
        _log.info(
            "epoch %d/%d  loss %.4f (ce %.4f, reg %.4f)  acc_clean %.2f%%  %.1fs  %.0f img/s",
            epoch,
            cfg.optim.epochs,
            stats[LOSS],
            stats[LOSS_CE],
            stats[LOSS_REG],
            stats[ACC_CLEAN],
            stats["epoch_seconds"],
            stats["train_images_per_s"],
        )
        callbacks.on_epoch_end(epoch, stats, epoch_ckpt)

    regularizer.detach()
    artifacts = out_dir / "artifacts"
    metrics: dict[str, float] = {"epochs_done": float(cfg.optim.epochs)}
    if cfg.run.evaluate:
        metrics.update(
            final_evaluation(model, splits.x_eval, splits.y_eval, cfg, device, artifacts, progress)
        )
    else:
        metrics[ACC_CLEAN] = evaluate_clean(
            model, splits.x_eval, splits.y_eval, cfg.robustness.attack_batch_size, device
        )
    _write_json_atomic(out_dir / "metrics.json", metrics)
    callbacks.on_trial_end(metrics, artifacts)
    return TrialResult(
        metrics=metrics,
        history=history,
        checkpoint=last_ckpt,
        artifacts=artifacts if artifacts.exists() else None,
        resumed_from_epoch=start - 1,
    )


def _write_json_atomic(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True))
