"""``lipsweep confirm``: re-check a sweep's front with standard AutoAttack.

The sweep ranks its runs by a cheap AutoAttack (``acc_aa_2``: version 'custom', 10
iterations; docs/science.md §1.6). ``confirm`` re-evaluates the front's runs (``--top N``: the N
best by Pareto rank), or the named ones (``--run-id``), from their final checkpoints (the
``checkpoint/`` artifacts the driver logs, which ``lipsweep export`` also reads) with the
*standard* AutoAttack of Croce & Hein (ICML 2020): APGD-CE, APGD-T and FAB-T with 100
iterations and Square with 5000 queries, through pyautoattack unchanged
(:class:`lipsweep.attacks.autoattack.AutoAttack`, ``version='standard'``). It runs at the
run's AutoAttack eps values (param ``aa_eps``), on the whole test split of the run's data by
default; ``--images N`` takes the seeded, sorted subset of N test images (the sweep's own
evaluation subset when N is its ``eval_size``). It logs ``acc_aa_std_<eps>`` (percent) to the
same child runs, with tags saying the attack (``aa_std.version``, ``aa_std.iters``,
``aa_std.square_queries``, ``aa_std.images``, ``attack.acc_aa_std_<eps>``; see
:func:`lipsweep.attacks.autoattack_tags.autoattack_tags`), and prints the front re-ranked with
``acc_aa_std_<eps>`` in place of ``acc_aa_<eps>``.

Resumable: a run's metrics and tags go to MLflow in one batch once its evaluation is done, so
a killed confirm leaves every run either confirmed or untouched. A rerun skips (and logs as
skipped) each run that holds ``acc_aa_std_<eps>`` for all its eps from the same request (tag
``aa_std.request``: image count and budget), and evaluates the others. Within a run, the
outcome of each chunk of :data:`CHUNK_IMAGES` images is saved as it ends
(:mod:`lipsweep.decide.confirm_state`), and a rerun with the same defining settings resumes
after the chunks done ("resuming confirm of run X from image N of M"), with the result of an
uninterrupted run.

With ``--ray-address`` each run's evaluation is a Ray task on that cluster (one GPU if the cluster
has GPUs, else one CPU); without it the runs are evaluated one after the other in this process
and no Ray is started. :func:`evaluate_standard` knows nothing of Ray or MLflow.

Test-only budget knob: the environment variable ``LIPSWEEP_CONFIRM_ITERS`` (or the ``iters``
argument of :func:`evaluate_standard`) runs the same four attacks with that many iterations
and Square queries (version 'custom', tagged as such), because the standard attack takes
minutes per image batch on a CPU. It is not for results.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

from lipsweep.core.metric_names import AA_STD_PREFIX, aa_std_metric, aa_to_std

_log = logging.getLogger("lipsweep.confirm")

METRIC_PREFIX = AA_STD_PREFIX
TAG_PREFIX = "aa_std"
TAG_REQUEST = "aa_std.request"
ITERS_ENV = "LIPSWEEP_CONFIRM_ITERS"
"""Test-only: iterations/queries of a reduced-budget confirm (see the module docstring)."""
CHUNK_IMAGES = 1000
"""Images per AutoAttack call; progress (images done, ETA) is logged after each, and inside
each call per attack stage and batch (:meth:`AutoAttack.run` with ``progress``)."""


def confirm_metric(eps: int) -> str:
    """``acc_aa_std_<eps>``: standard AutoAttack accuracy at eps/255."""
    return aa_std_metric(eps)


@dataclass
class ConfirmOutcome:
    """What :func:`evaluate_standard` hands back: metrics and tags for the run."""

    metrics: dict[str, float]
    tags: dict[str, str]
    n_images: int
    seconds: float


@dataclass
class ConfirmJob:
    """One run to confirm."""

    run_id: str
    label: str
    eps: list[int]


def budget_iters(env: Optional[dict[str, str]] = None) -> Optional[int]:
    """The test-only reduced budget from :data:`ITERS_ENV`, or None (standard AutoAttack)."""
    from lipsweep.core.config_base import UsageError

    raw = (os.environ if env is None else env).get(ITERS_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise UsageError(f"${ITERS_ENV}: must be an integer >= 1 (test-only budget), got {raw!r}")
    return int(raw)


def request_key(images: int, iters: Optional[int]) -> str:
    """What a confirm was asked for; a run confirmed with the same key is not redone."""
    budget = "standard" if iters is None else f"custom-iters={iters}"
    return f"images={images or 'all'} budget={budget}"


# --------------------------------------------------------------------------- evaluation


def _trial_config(flat: dict[str, Any]):
    from lipsweep.settings.config import TrialConfig

    # the weights come from the checkpoint: never load (or download) the pretrained ones
    return TrialConfig.from_flat({**flat, "pretrained": ""})


def build_model(flat: dict[str, Any], weights: bytes):
    """The trial's network (a timm ViT, same code path for ViT-B and tiny ones) with the
    checkpoint's weights, wrapped to map [0, 1] pixels to logits; eval mode."""
    import timm
    from safetensors.torch import load as load_safetensors

    from lipsweep.vit.export_format import timm_spec
    from lipsweep.vit.models import PixelModel, model_normalization

    cfg = _trial_config(flat)
    spec = timm_spec(flat)
    net = timm.create_model(spec["model_name"], pretrained=False, **spec["kwargs"])
    net.load_state_dict(load_safetensors(weights))
    return PixelModel(net, *model_normalization(cfg.model)).eval()


def load_images(flat: dict[str, Any], images: int):
    """(x in [0, 1], y) of the run's test split: all of it (``images`` 0) or its seeded,
    sorted subset of ``images`` images (:func:`lipsweep.data.loading.eval_subset_indices`)."""
    from lipsweep.data.loading import load_eval, to_unit

    cfg = _trial_config(flat)
    x, y = load_eval(dataclasses.replace(cfg.data, eval_size=images), cfg.model.num_classes)
    return to_unit(x), y


def _attack(model, eps: float, robustness, iters: Optional[int]):
    from lipsweep.attacks._registry import STANDARD_ITERS, AutoAttackSettings
    from lipsweep.attacks.autoattack import AutoAttack

    if iters is None:
        settings = AutoAttackSettings(aa_version="standard", aa_iters=STANDARD_ITERS)
    else:
        settings = AutoAttackSettings(aa_version="custom", aa_iters=iters, aa_restarts=1)
    return AutoAttack(
        model,
        eps,
        settings,
        seed=robustness.attack_seed,
        batch_size=robustness.attack_batch_size,
        precision="fp32",
    )


def _log_estimate(
    model, x, y, eps: list[int], correct: int, n_classes: int, robustness, iters, label: str
) -> None:
    """Before any attack: how long the whole confirmation may take, from one timed
    forward-backward pass (the first stage attacks every clean-correct image; each later one
    only the images the earlier ones did not fool, so "at most" is the bound with none
    fooled)."""
    from lipsweep.vit.precision import tf32_matmuls

    attack = _attack(model, eps[0] / 255, robustness, iters)
    dev = next(model.parameters()).device
    batch = slice(0, robustness.attack_batch_size)
    with tf32_matmuls(False):
        step_s = attack.step_seconds(x[batch].to(dev), y[batch].to(dev))
    first, most = attack.estimate(correct, n_classes, step_s)
    stages = list(attack.stage_steps(n_classes))
    _log.info(
        "%s: AutoAttack %s on %d images (%d correct clean) at eps %s/255: estimated %.0f s "
        "for %s, at most %.0f s for all %d stages (each later stage attacks only the images "
        "the earlier ones did not fool); progress per stage follows",
        label,
        attack.version,
        x.shape[0],
        correct,
        ",".join(map(str, eps)),
        first * len(eps),
        stages[0],
        most * len(eps),
        len(stages),
    )


def _defining_settings(
    run_id: str,
    flat: dict[str, Any],
    weights: bytes,
    eps: list[int],
    images: int,
    x,
    y,
    attack,
    chunk: int,
    device: str,
) -> dict[str, Any]:
    """What defines a run's evaluation, so that saved chunks are reused only for the same one:
    run, checkpoint (weights and config digests), attack (its description, seed, batch size,
    target classes, precision, norm), eps, images (request, count, digest of the images and
    labels in order), chunk size, device type and the pyautoattack version."""
    import hashlib
    from importlib.metadata import version

    from lipsweep.trial.checkpoint import config_digest

    pixels = hashlib.sha256(x.contiguous().numpy().data)
    pixels.update(y.contiguous().numpy().data)
    return {
        "run_id": run_id,
        "weights_sha256": hashlib.sha256(weights).hexdigest(),
        "config_sha256": config_digest(flat),
        "attack": {
            **attack.describe(),
            "seed": attack.seed,
            "batch_size": attack.batch_size,
            "n_target_classes": attack.n_target_classes,
            "precision": attack.precision,
            "norm": "Linf",
        },
        "eps": list(eps),
        "images": images,
        "n_images": int(x.shape[0]),
        "images_sha256": pixels.hexdigest(),
        "chunk": chunk,
        "device": device,
        "pyautoattack": version("pyautoattack"),
    }


def evaluate_standard(
    flat: dict[str, Any],
    weights: bytes,
    eps: list[int],
    images: int = 0,
    iters: Optional[int] = None,
    device: Optional[str] = None,
    label: str = "",
    chunk: int = CHUNK_IMAGES,
    run_id: Optional[str] = None,
) -> ConfirmOutcome:
    """Standard AutoAttack accuracy of one trial's checkpoint at each eps (numerators / 255).

    Args:
        flat: the trial's flat config (its checkpoint's ``config.json``).
        weights: the bytes of its ``model.safetensors``.
        eps: eps numerators over 255 (the run's ``aa_eps``).
        images: test images to use (0: the whole test split).
        iters: None for standard AutoAttack; test-only reduced budget otherwise.
        device: None picks CUDA when available.
        label: how progress lines name the run.
        chunk: images per AutoAttack call (progress and resume granularity; it is part of
            what the result depends on, as AutoAttack batches the images of a call).
        run_id: the run's MLflow id: each chunk's outcome is saved to its state file and a
            rerun with the same settings resumes after the chunks done
            (:mod:`lipsweep.decide.confirm_state`); None saves nothing.
    """
    import torch

    from lipsweep.attacks.autoattack_tags import autoattack_tags
    from lipsweep.attacks.checks import check_perturbation
    from lipsweep.decide.confirm_state import ConfirmState, state_path
    from lipsweep.vit.precision import tf32_matmuls

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    robustness = _trial_config(flat).robustness
    model = build_model(flat, weights).to(dev)
    x, y = load_images(flat, images)
    n, total = x.shape[0], x.shape[0] * len(eps)
    state = None
    if run_id is not None:
        probe = _attack(model, eps[0] / 255, robustness, iters)
        settings = _defining_settings(
            run_id, flat, weights, eps, images, x, y, probe, chunk, dev.type
        )
        state = ConfirmState.open(state_path(run_id), settings, label or f"run {run_id}")
    resumed = done = state.images_done() if state is not None else 0
    if resumed:
        _log.info(
            "resuming confirm of %s from image %d of %d (state file %s)",
            label or f"run {run_id}",
            resumed,
            total,
            state.path,
        )
    t0 = time.perf_counter()
    metrics: dict[str, float] = {}
    tags = {TAG_REQUEST: request_key(images, iters)}
    with torch.no_grad(), tf32_matmuls(False):
        logits = [model(x[i : i + chunk].to(dev)).cpu() for i in range(0, n, chunk)]
        clean = torch.cat([z.argmax(1) for z in logits]) == y
    tags[f"{TAG_PREFIX}.acc_clean"] = f"{100.0 * float(clean.float().mean()):.2f}"
    if done < total:
        n_classes = logits[0].shape[-1]
        _log_estimate(model, x, y, eps, int(clean.sum()), n_classes, robustness, iters, label)
    for e in eps:
        name, attack = confirm_metric(e), _attack(model, e / 255, robustness, iters)
        robust = torch.zeros(n, dtype=torch.bool)
        saved = state.chunks(e) if state is not None else []
        for k, i in enumerate(range(0, n, chunk)):
            if k < len(saved):  # attacked before the interruption, with the same settings
                robust[i : i + len(saved[k])] = torch.tensor(saved[k], dtype=torch.bool)
                continue
            xb, yb = x[i : i + chunk].to(dev), y[i : i + chunk].to(dev)
            with tf32_matmuls(False):  # the confirmation is strict fp32 throughout
                res = attack.run(xb, yb, progress=True)
            for msg in check_perturbation(res.x_adv, xb, e / 255, name) + res.warnings:
                _log.warning("%s %s: %s", label, name, msg)
            robust[i : i + xb.shape[0]] = res.robust
            if state is not None:
                state.record(e, res.robust.tolist())
            done += xb.shape[0]
            elapsed = time.perf_counter() - t0
            _log.info(
                "%s %s: %d/%d images (%d/%d over all eps), robust so far %.2f%%, "
                "%.0f s elapsed, ETA %.0f s",
                label,
                name,
                i + xb.shape[0],
                n,
                done,
                total,
                100.0 * float(robust[: i + xb.shape[0]].float().mean()),
                elapsed,
                elapsed / (done - resumed) * (total - done),
            )
        metrics[name] = 100.0 * float(robust.float().mean())
        tags.update(autoattack_tags(name, attack.describe(), n, e, prefix=TAG_PREFIX))
    seconds = time.perf_counter() - t0
    tags[f"{TAG_PREFIX}.seconds"] = f"{seconds:.1f}"
    return ConfirmOutcome(metrics, tags, n, seconds)


# --------------------------------------------------------------------------- command edge


def run_eps(params: dict[str, str]) -> list[int]:
    """The run's AutoAttack eps numerators (param ``aa_eps``; the suite's default if absent)."""
    from lipsweep.attacks.config import RobustnessConfig

    raw = params.get("aa_eps")
    if raw is None:
        return list(RobustnessConfig().aa_eps)
    return [int(v) for v in json.loads(raw)]


def is_confirmed(run, eps: list[int], request: str) -> bool:
    """The run holds ``acc_aa_std_<eps>`` for every eps from the same request."""
    return run.data.tags.get(TAG_REQUEST) == request and all(
        confirm_metric(e) in run.data.metrics for e in eps
    )


def choose_runs(
    tracker, experiment: str, run_ids: Optional[Sequence[str]], top: Optional[int]
) -> list[str]:
    """Run ids to confirm: ``--run-id``s, or the runs of the ``--top`` N by Pareto rank
    (default: the front), in rank order. Over arms (an arm with >= 2 seeds, as ``pareto``
    ranks them) N counts arms and every run of a chosen arm is confirmed; else N counts runs
    (ties: the first objective's value, then the id)."""
    from lipsweep.core.config_base import UsageError
    from lipsweep.decide.sweep_runs import load_sweep_runs, sweep_front

    if run_ids:
        sweep = load_sweep_runs(tracker)
        for rid in run_ids:
            if rid not in sweep.runs:
                raise UsageError(
                    f"--run-id {rid} is not a FINISHED trial run of experiment {experiment!r}"
                )
        return list(dict.fromkeys(run_ids))
    sweep, front = sweep_front(tracker, None)
    first = front.objectives[0]
    sign = 1.0 if first.direction == "max" else -1.0
    if front.by_arms:
        arms = sorted(
            (i for i, r in enumerate(front.arm_ranks) if r > 0),
            key=lambda i: (
                front.arm_ranks[i],
                -sign * front.arm_stat(i, first.name).mean,
                front.arms[i].arm_id,
            ),
        )
        arms = [i for i in arms if front.arm_ranks[i] == 1] if top is None else arms[:top]
        return [run.run_id for i in arms for run in front.arms[i].runs]
    ranks = front.ranks

    def key(i: int) -> tuple:
        v = sweep.records[i]["metrics"].get(first.name, float("nan"))
        return ranks[i], -sign * v, sweep.records[i]["run_id"]

    order = sorted((i for i in range(len(ranks)) if ranks[i] > 0), key=key)
    if top is None:
        order = [i for i in order if ranks[i] == 1]
    else:
        order = order[:top]
    return [sweep.records[i]["run_id"] for i in order]


def run_local(
    tracker, jobs: list[ConfirmJob], images: int, iters: Optional[int]
) -> Iterator[tuple[ConfirmJob, Optional[ConfirmOutcome], Optional[BaseException]]]:
    """Evaluate the jobs one after the other in this process (checkpoints fetched lazily)."""
    from lipsweep.decide.sweep_runs import download_checkpoint

    for job in jobs:
        try:
            flat, weights = download_checkpoint(tracker, job.run_id)
            out = evaluate_standard(
                flat, weights, job.eps, images, iters, label=job.label, run_id=job.run_id
            )
        except Exception as exc:  # noqa: BLE001 - one failed run must not stop the others
            yield job, None, exc
            continue
        yield job, out, None


def log_outcome(tracker, run_id: str, out: ConfirmOutcome) -> None:
    """Metrics and tags in one MLflow batch: a run is confirmed entirely or not at all."""
    tracker.log_together(run_id, out.metrics, out.tags)


def std_objectives():
    """The default objectives with ``acc_aa_<eps>`` replaced by ``acc_aa_std_<eps>``."""
    from lipsweep.decide.pareto import DEFAULT_OBJECTIVES, Objective

    return tuple(Objective(aa_to_std(o.name), o.direction) for o in DEFAULT_OBJECTIVES)


def reranked_table(tracker) -> str:
    """The front of the experiment (its arms, as ``pareto`` ranks them, or its runs) ranked
    with the standard AutoAttack accuracy."""
    from lipsweep.decide.front import build_front
    from lipsweep.decide.sweep_runs import load_sweep_runs

    return build_front(load_sweep_runs(tracker).records, std_objectives()).table
