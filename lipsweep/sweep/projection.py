"""The projected device-hours of a trial and of a grid from measured unit costs, torch-free.

:func:`project_trial` takes a ``gpu_suite.py`` JSON (or the compact copy of its figures that
:data:`MEASURED_FILE` keeps for each measured GPU) and a space's first trial, and adds up every
part of the trial (training, per-epoch evaluation, checkpoints, attacks, the Lipschitz summary,
compilation) from the space's own counts and settings. ``benchmarks/gpu_suite.py`` writes its
``trial.projection`` with it, and ``lipsweep sweep SPACE --dry-run`` prints the grid's GPU-hours
with it (:func:`gpu_hours_lines`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Optional

from lipsweep.settings.config import TrialConfig
from lipsweep.trial.checkpoint_files import checkpoint_due

SPLITS = {"cifar10": (50_000, 10_000), "cifar100": (50_000, 10_000)}
"""(train, test) sizes of the whole splits, for a space's ``train_size: 0`` / ``eval_size: 0``."""
BASELINE_ACC = {"cifar100": (90.9, 26.85, 2.12), "cifar10": (98.56, 45.45, 2.13)}
"""The paper's baseline (clean, PGD-2, AA-2) accuracy in %, Table 3 (CIFAR-100) and Table 4
(CIFAR-10): the share of images each attack stage sees. FGSM, PGD and the first AutoAttack
stage attack the correct images; the second stage the ones the first left (taken as PGD-2's
survivors); later stages the final survivors. Another dataset: every stage sees every image."""
TARGET_HOURS = 0.125
"""The slowest regularizer's paper trial in <= 7.5 minutes on one H100."""
CHECKPOINT_SHARE_TARGET = 0.03
"""Checkpoints take <= 3 % of a projected trial."""


@dataclass
class Target:
    """The search space measured for and projected: its file, name, trial count and the
    validated config of its first trial (a grid's first point: the baseline in the paper
    spaces; the regularizers' cost enters as the measured step-time ratios)."""

    path: str
    name: str
    trials: int
    cfg: TrialConfig


def projected_mode(cfg: TrialConfig, device_type: str) -> str:
    """The train-step mode a trial of ``cfg`` runs on ``device`` (a key prefix of
    ``train.runs``): precision 'auto' is bf16 autocast on CUDA and fp32 elsewhere."""
    if cfg.run.compiles_on(device_type):
        return "bf16_compile"
    precision = cfg.run.precision
    if precision == "auto":
        precision = "bf16" if device_type == "cuda" else "fp32"
    return precision


def _get(d: dict, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _num(v: Any) -> float:
    """A measured number, NaN where it is missing (0 is a measurement, not a gap)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _step_seconds(data: dict[str, Any], mode: str, batch: int) -> tuple[float, int, str]:
    """(seconds per step at ``batch``, the batch it was measured at, its ``train.runs`` key):
    the run at ``batch`` itself, else the largest measured batch of ``mode`` scaled linearly
    (--quick measures tiny batches); NaN when ``mode`` has none."""
    runs = _get(data, "train", "runs") or {}
    measured = {
        int(k.rsplit("_b", 1)[1]): v["step_ms"] / 1e3
        for k, v in runs.items()
        if k.rsplit("_b", 1)[0] == mode and isinstance(v, dict) and v.get("step_ms")
    }
    if not measured:
        return float("nan"), 0, f"{mode}_b{batch}"
    at = batch if batch in measured else max(measured)
    return measured[at] * batch / at, at, f"{mode}_b{at}"


def _aa_fractions(dataset: str, stages: int) -> tuple[list[float], float, str]:
    """(share of images each AutoAttack stage sees, share FGSM/PGD see, their source)."""
    if dataset not in BASELINE_ACC:
        return [1.0] * stages, 1.0, f"no paper baseline for {dataset}: every stage, every image"
    clean, pgd2, aa2 = (v / 100 for v in BASELINE_ACC[dataset])
    table = "Table 3" if dataset == "cifar100" else "Table 4"
    shares = [clean, pgd2] + [aa2] * max(stages - 2, 0)
    return shares[:stages], clean, f"paper {table} baseline ({dataset})"


def checkpoint_epochs(epochs: int, every: int) -> list[int]:
    """The epochs a trial checkpoints (:func:`lipsweep.trial.checkpoint_files.checkpoint_due`)."""
    return [e for e in range(1, epochs + 1) if checkpoint_due(e, epochs, every)]


def preemption_loss(epochs: int, every: int) -> dict[str, Any]:
    """What a preemption loses with checkpoints every ``every`` epochs.

    A trial resumes from its last *uploaded* checkpoint: every due epoch before the last one
    (``tune.report`` with a checkpoint); the last epoch's checkpoint travels only with the final
    report, after the final evaluation (``sweep/trainable.py``). So a preemption in epoch e
    loses the epochs since the last uploaded checkpoint before e, e included, and one during the
    final evaluation loses the epochs after the last uploaded checkpoint and the evaluation.
    """
    uploaded = [0] + [e for e in checkpoint_epochs(epochs, every) if e < epochs]
    in_training = max(e - max(u for u in uploaded if u < e) for e in range(1, epochs + 1))
    return {
        "restore_points": uploaded[1:],
        "epochs_lost_max_in_training": in_training,
        "epochs_lost_in_final_evaluation": epochs - uploaded[-1],
    }


def project_trial(data: dict[str, Any], target: Target, device: object) -> dict[str, Any]:
    """Device-seconds of one trial of ``target`` (its first grid point) from the suite's own
    figures, with every part, every assumption and where each came from.

    Every count and setting is read from the space: epochs, batch, train/eval split sizes
    (``train_size``/``eval_size`` 0 = the whole split), precision and compile, the per-epoch
    evaluation, ``checkpoint_every``, the attacks with their radii, steps, iterations and
    ``attack_images`` (0 = every evaluation image), and the Lipschitz image counts
    (``lip_images`` 0 = every evaluation image) with the parts switched on.
    """
    cfg, dev_type = target.cfg, str(device).split(":")[0]
    cuda = dev_type == "cuda"
    data_cfg, optim, robust, lip, run = (
        cfg.data,
        cfg.optim,
        cfg.robustness,
        cfg.lipschitz,
        cfg.run,
    )
    if data_cfg.dataset in SPLITS:
        n_train_split, n_test_split = SPLITS[data_cfg.dataset]
    else:
        raise ValueError(
            f"dataset: the whole-split sizes of {data_cfg.dataset!r} are unknown to the "
            f"projection (known: {sorted(SPLITS)})"
        )
    n_train = min(data_cfg.train_size or n_train_split, n_train_split)
    n_eval = min(data_cfg.eval_size or n_test_split, n_test_split)
    n_att = min(robust.attack_images or n_eval, n_eval)
    n_lip = min(lip.lip_images or n_eval, n_eval)
    n_soft = min(lip.lip_softmax_images or n_lip, n_lip)
    n_head = min(lip.lip_head_images or n_lip, n_lip)
    epochs, batch = optim.epochs, optim.batch_size
    steps = n_train // batch if n_train >= batch else 1  # drop_last, as num_train_batches

    mode = projected_mode(cfg, dev_type)
    step_s, measured_batch, step_key = _step_seconds(data, mode, batch)
    if not math.isfinite(step_s) and mode == "bf16_compile":  # compile is optional, last
        mode = "bf16"
        step_s, measured_batch, step_key = _step_seconds(data, mode, batch)
    eval_key = "bf16_s_per_10k" if cuda else "fp32_s_per_10k"  # precision 'auto'
    eval_epoch = _num(_get(data, "checkpoint", "eval_clean", eval_key)) / 1e4
    eval_fp32 = _num(_get(data, "checkpoint", "eval_clean", "fp32_s_per_10k")) / 1e4
    save_s = _num(_get(data, "checkpoint", "save", "save_s"))
    ckpts = checkpoint_epochs(epochs, run.checkpoint_every)
    attack_key = "bf16" if robust.attack_precision == "bf16" else ("tf32" if cuda else "fp32")
    rate = {
        a: _num(_get(data, "attacks", a, f"{attack_key}_images_per_s")) for a in ("fgsm", "pgd4")
    }
    aa_shares, atk_share, shares_from = _aa_fractions(data_cfg.dataset, len(robust.aa_attacks))
    evaluate = run.evaluate
    used = set(robust.attacks) if evaluate else set()

    def aa_stage_s(stage: str) -> float:
        per = _num(_get(data, "attacks", "autoattack", stage, "s_per_1000"))
        return per / 1000 * robust.aa_iters / 10 * robust.aa_restarts

    lip_parts = _get(data, "lipschitz", "parts") or {}

    def per_image(part: str) -> float:
        return _num(_get(lip_parts, part, "s_per_image"))

    lip_counts = {"jacobian": n_lip}
    if lip.lip_tokens:
        lip_counts["tokens"] = n_lip
    if lip.lip_softmax:
        lip_counts["softmax"] = n_soft
    if lip.lip_head_bounds:
        lip_counts["heads"] = n_head
    lipschitz_s = sum(n * per_image(k) for k, n in lip_counts.items()) if evaluate else 0.0
    parts = {
        "train_s": epochs * steps * step_s,
        "epoch_eval_s": epochs * n_eval * eval_epoch,
        "checkpoints_s": len(ckpts) * save_s,
        "final_clean_s": (n_att if evaluate else n_eval) * eval_fp32,
        "fgsm_s": len(robust.fgsm_eps) * n_att * atk_share / rate["fgsm"]
        if "fgsm" in used
        else 0.0,
        "pgd_s": len(robust.pgd_eps)
        * robust.pgd_restarts
        * n_att
        * atk_share
        * (robust.pgd_steps / 4)
        / rate["pgd4"]
        if "pgd" in used
        else 0.0,
        "aa_s": len(robust.aa_eps)
        * n_att
        * sum(f * aa_stage_s(st) for f, st in zip(aa_shares, robust.aa_attacks))
        if "autoattack" in used
        else 0.0,
        "lipschitz_s": lipschitz_s,
    }
    regs = data.get("regularizers", {}).get("variants", {})
    compiled = {
        k: v for k, v in data.get("regularizers", {}).get("compiled", {}).items() if type(v) is dict
    }
    use_compiled = mode == "bf16_compile" and any("ratio" in v for v in compiled.values())
    if mode == "bf16_compile":  # one cold compilation per trial: the longest one measured
        firsts = [v.get("compile_s") for v in compiled.values()]
        firsts.append(_get(data, "train", "runs", step_key, "compile_s"))
        parts["compile_s"] = max((_num(v) for v in firsts if v is not None), default=math.nan)
    if use_compiled:
        regs = compiled
    worst = max((v.get("ratio") or 1.0 for v in regs.values()), default=1.0)
    total = sum(parts.values())
    total_worst = total + parts["train_s"] * (worst - 1.0)
    missing = [k for k, v in parts.items() if not math.isfinite(v)]
    epoch_s = steps * step_s + n_eval * eval_epoch
    final_eval_s = total - parts["train_s"] - parts["epoch_eval_s"] - parts["checkpoints_s"]

    def share(v: float) -> Optional[float]:
        return round(v / total, 4) if math.isfinite(v) and math.isfinite(total) else None

    def ckpt_share(every: int) -> float:
        n = len(checkpoint_epochs(epochs, every))
        return n * save_s / (total + (n - len(ckpts)) * save_s)

    meets = [n for n in range(1, epochs + 1) if ckpt_share(n) <= CHECKPOINT_SHARE_TARGET]
    loss = preemption_loss(epochs, run.checkpoint_every)
    lost_train = loss["epochs_lost_max_in_training"] * epoch_s
    lost_final = loss["epochs_lost_in_final_evaluation"] * epoch_s + final_eval_s

    def r(v: float, digits: int = 1) -> Optional[float]:
        return round(v, digits) if math.isfinite(v) else None

    return {
        "space": target.path,
        "space_name": target.name,
        "trial": "the space's first trial (its baseline); regularizers enter as step ratios",
        "device": str(device),
        "assumptions": {
            "dataset": data_cfg.dataset,
            "epochs": epochs,
            "batch_size": batch,
            "train_images": n_train,
            "steps_per_epoch": steps,
            "eval_images": n_eval,
            "attack_images": n_att,
            "lip_images": n_lip,
            "lip_softmax_images": n_soft if lip.lip_softmax else 0,
            "lip_head_images": n_head if lip.lip_head_bounds else 0,
            "lip_parts": lip_counts,
            "num_classes": cfg.model.num_classes,
            "train_mode": mode,
            "train_step_key": step_key,
            "measured_batch": measured_batch,
            "batch_scale": batch / measured_batch if measured_batch else None,
            "epoch_eval": f"evaluate_clean on {n_eval} images every epoch, "
            + ("bf16 autocast (precision auto on CUDA)" if cuda else "fp32"),
            "checkpoint_every": run.checkpoint_every,
            "checkpoints": len(ckpts),
            "checkpoint_upload": "OPEN: not measured (the GPU machine has no network); "
            "checkpoints_s is the local save (host copy, safetensors, sha256, fsync)",
            "attacks": sorted(used),
            "attack_precision": attack_key,
            "fgsm_eps": robust.fgsm_eps,
            "pgd_eps": robust.pgd_eps,
            "pgd_steps": robust.pgd_steps,
            "pgd_restarts": robust.pgd_restarts,
            "aa_eps": robust.aa_eps,
            "aa_attacks": robust.aa_attacks,
            "aa_iters": robust.aa_iters,
            "aa_restarts": robust.aa_restarts,
            "attacked_shares": {"fgsm_pgd": atk_share, "aa_stages": aa_shares},
            "attacked_shares_from": shares_from,
            "regularizer_ratios": "compiled" if use_compiled else "eager",
            "note": "train_s = epochs x steps_per_epoch x step time (scaled linearly from "
            "measured_batch), compile_s the longest cold compilation measured; PGD scales "
            "the measured PGD-4 by pgd_steps / 4, AutoAttack the measured 10-iteration "
            "stages by aa_iters / 10 x aa_restarts; the Lipschitz parts are the measured "
            "seconds per image x the space's image counts",
        },
        "parts_s": {k: r(v) for k, v in parts.items()},
        "missing": missing,
        "total_s": r(total),
        "hours": r(total / 3600, 4),
        "hours_slowest_regularizer": r(total_worst / 3600, 4),
        "slowest_regularizer_ratio": worst,
        "target_hours": TARGET_HOURS,
        "within_target": bool(total_worst <= TARGET_HOURS * 3600)
        if math.isfinite(total_worst)
        else None,
        "lipschitz_share": share(parts["lipschitz_s"]),
        "checkpoint_share": share(parts["checkpoints_s"]),
        "checkpoint_share_target": CHECKPOINT_SHARE_TARGET,
        "checkpoint_every_for_target": (meets[0] if meets else None)
        if math.isfinite(total)
        else None,
        "preemption": {
            **loss,
            "epoch_s": r(epoch_s),
            "lost_s_max_in_training": r(lost_train),
            "lost_s_in_final_evaluation": r(lost_final),
        },
        "grid_trials": target.trials,
        "grid_hours": r(target.trials * total / 3600, 2),
    }


# ------------------------------------------------- the measured GPUs `--dry-run` projects on

MEASURED_FILE = "gpu_measured.json"
"""Beside this module: for each measured GPU, the figures :func:`project_trial` reads, cut from
its kept ``benchmarks/gpu_suite_<gpu>.json`` by ``benchmarks/gpu_measured.py``."""
RAY_TYPES = {"NVIDIA H100 80GB HBM3": "H100", "NVIDIA H200": "H200"}
"""Ray's accelerator type of each GPU name that ``nvidia-smi`` gives for a measured GPU."""


def compact_figures(data: dict[str, Any]) -> dict[str, Any]:
    """The parts of a ``gpu_suite.py`` JSON that :func:`project_trial` reads, with the
    ‖J_f‖ and token-Jacobian parts at the default batch (``lipschitz.batch``) where measured."""

    def pick(d: Any, keys: tuple[str, ...]) -> dict[str, Any]:
        return {k: d[k] for k in keys if isinstance(d, dict) and k in d}

    runs = {
        k: pick(v, ("step_ms", "compile_s"))
        for k, v in (_get(data, "train", "runs") or {}).items()
        if isinstance(v, dict)
    }
    regs = data.get("regularizers", {})
    parts = {
        k: pick(v, ("s_per_image",)) for k, v in (_get(data, "lipschitz", "parts") or {}).items()
    }
    batch = _get(data, "trial", "projection_lipschitz_batch", "lipschitz_from")
    if batch is not None:
        b = int(batch.split("batch ")[1].split(",")[0])
        for part, key in (("jacobian", "jacobian"), ("tokens", "tokens")):
            parts[part]["s_per_image"] = (
                data["lipschitz"]["batch"][f"{key}_b{b}"]["ms_per_image"] / 1e3
            )
    attacks = data.get("attacks", {})
    return {
        "gpu": data["meta"]["gpu"],
        "ray_accelerator_type": RAY_TYPES.get(data["meta"]["gpu"]),
        "measured_utc": data["meta"]["started_utc"],
        "measured_for": data["meta"]["space"],
        "train": {"runs": runs},
        "checkpoint": {
            "eval_clean": pick(
                _get(data, "checkpoint", "eval_clean"), ("fp32_s_per_10k", "bf16_s_per_10k")
            ),
            "save": pick(_get(data, "checkpoint", "save"), ("save_s",)),
        },
        "attacks": {
            **{
                a: pick(
                    attacks.get(a), tuple(f"{p}_images_per_s" for p in ("fp32", "tf32", "bf16"))
                )
                for a in ("fgsm", "pgd4")
            },
            "autoattack": {
                k: pick(v, ("s_per_1000",))
                for k, v in attacks.get("autoattack", {}).items()
                if isinstance(v, dict)
            },
        },
        "lipschitz": {"parts": parts},
        "regularizers": {
            "variants": {
                k: pick(v, ("ratio",))
                for k, v in regs.get("variants", {}).items()
                if isinstance(v, dict)
            },
            "compiled": {
                k: pick(v, ("ratio", "compile_s"))
                for k, v in regs.get("compiled", {}).items()
                if isinstance(v, dict)
            },
        },
    }


def measured_gpus() -> list[dict[str, Any]]:
    """The kept figures of every measured GPU (:data:`MEASURED_FILE`)."""
    text = resources.files("lipsweep.sweep").joinpath(MEASURED_FILE).read_text()
    return json.loads(text)["gpus"]


def grid_hours(spec: Any, figures: dict[str, Any]) -> tuple[float, float, float]:
    """(baseline hours summed over the grid's trials, the same at the slowest measured
    regularizer's step ratio, the largest trial's baseline hours) on one measured GPU."""
    low = high = largest = 0.0
    for flat in spec.trials:
        target = Target(spec.path, spec.name, len(spec.trials), TrialConfig.from_flat(flat))
        p = project_trial(figures, target, "cuda")
        low += p["hours"]
        high += p["hours_slowest_regularizer"]
        largest = max(largest, p["hours"])
    return low, high, largest


def gpu_hours_lines(spec: Any) -> list[str]:
    """``--dry-run``'s projection of the grid's GPU-hours on the GPU the space names
    (``resources.accelerator_type``), or on each measured GPU when it names none; a GPU type
    never measured is said to be so."""
    if spec.resources.gpu <= 0 or not spec.trials:
        return []
    gpus = measured_gpus()
    kind = spec.resources.accelerator_type
    lines = [
        "projected GPU-hours (figures measured without Ray; a range: every trial at the "
        "baseline's step to every trial at the slowest measured regularizer's):"
    ]
    chosen = [g for g in gpus if kind is None or g["ray_accelerator_type"] == kind]
    if kind is not None and not chosen:
        names = ", ".join(g["ray_accelerator_type"] for g in gpus)
        return lines + [f"  {kind}: never measured (measured: {names}); no projection"]
    if kind is None:
        lines.append("  the space names no accelerator_type; on each measured GPU:")
    for g in chosen:
        low, high, largest = grid_hours(spec, g)
        digits = 1 if low >= 1 else 3
        lines.append(
            f"  {g['gpu']} ({g['measured_utc'][:10]}, unit costs of "
            f"{Path(g['measured_for']).stem}): {len(spec.trials)} trials "
            f"{low:.{digits}f}-{high:.{digits}f} GPU-h, longest baseline trial {largest:.3f} h"
        )
    return lines
