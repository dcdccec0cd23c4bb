"""The Ray Tune function trainable: one lipsweep trial inside a Tune worker.

It uses Tune's current API only: ``tune.get_checkpoint`` to resume, ``tune.report`` every
epoch, with a ``tune.Checkpoint`` on the epochs the trial checkpoints (``checkpoint_every``;
``ray.train.report`` raises inside Tune in Ray 2.60). Checkpoints are written to the worker's
local disk first; Tune uploads each reported one once. Tune's checkpoint is the source of truth
on restart: local leftovers of a crashed attempt are wiped, so a retried trial continues exactly
after the last *checkpointed* epoch (with ``checkpoint_every`` 1, the default, it never reports
an epoch twice or skips one; with more, it repeats the epochs after its last checkpoint).

The last epoch is reported without a checkpoint: its checkpoint (the weights, ~690 MB for
ViT-B with SGD momentum) travels once, in the final report, which carries the evaluation
metrics, ``lipsweep_final = 1``, and a checkpoint folder holding the weights, ``config.json``,
``metrics.json`` and the Lipschitz artifacts, which the driver copies into MLflow and then
removes from Tune's storage (they are stored once, in MLflow; the checkpoint keeps the
weights, config and metrics). (A failure
during the final evaluation therefore retrains the epochs after the last uploaded checkpoint.)
A trial that Tune restores from its final checkpoint (it had ended, and the driver that took
its final report died before Tune's next snapshot) reports that checkpoint's metrics again
instead of evaluating a second time.

A deterministic failure (a non-finite loss, a configuration error such as a missing remote
dataset, or a GPU that Ray assigned but CUDA cannot see) is reported as ``lipsweep_error``
instead of raised, so Tune does not burn retries on it; the driver marks the MLflow run FAILED
with that reason. The device is decided once per trial by
:func:`lipsweep.trial.device.decide_device` from the GPU
ids Ray assigned, and the decision is logged.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from lipsweep.core.config_base import ConfigError
from lipsweep.core.logs import DATE_FORMAT, LOG_FORMAT
from lipsweep.search.space_display import trial_label
from lipsweep.settings.config import TrialConfig
from lipsweep.sweep.signals import quiet_worker_exit
from lipsweep.trial.callbacks import EVALUATION_LOGGERS, TrialCallbacks
from lipsweep.trial.checkpoint_files import (
    ARTIFACTS,
    FINAL_CONFIG,
    FINAL_METRICS,
    STATE_FILE,
    irregular,
)

_log = logging.getLogger(__name__)
FINAL_KEY = "lipsweep_final"
ERROR_KEY = "lipsweep_error"


class _EvaluationLines(logging.StreamHandler):
    """A worker's final-evaluation lines on its stderr, which Ray shows on the driver
    (``log_to_driver``), each naming the trial as the driver's own lines do: the evaluation
    takes minutes to hours with no Tune event, and its progress is what shows it is alive."""

    def __init__(self) -> None:
        super().__init__()
        self.trial = ""
        self.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))

    def format(self, record: logging.LogRecord) -> str:
        head, _, body = super().format(record).partition(": ")
        return f"{head}: {self.trial} {body}"


def show_evaluation_lines(trial: str) -> None:
    """Show this worker's final-evaluation log lines (INFO and up), named by ``trial``; once
    per process (a reused worker renames them)."""
    import sys

    handler = next(
        (
            h
            for h in logging.getLogger(EVALUATION_LOGGERS[0]).handlers
            if isinstance(h, _EvaluationLines)
        ),
        None,
    )
    if handler is None:
        handler = _EvaluationLines()
        for name in EVALUATION_LOGGERS:
            logger = logging.getLogger(name)
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
            logger.propagate = False  # shown once, here
    handler.setStream(sys.stderr)
    handler.trial = trial


def flat_config(config: dict[str, Any]) -> dict[str, Any]:
    """Tune's sampled config -> the flat trial dict (grid sweeps nest it under 'trial')."""
    return dict(config["trial"]) if "trial" in config else dict(config)


class _TuneReporter(TrialCallbacks):
    """Per-epoch ``tune.report``; the final report is sent by ``train_trial``, which knows
    the last checkpoint."""

    def __init__(self, workdir: Path, cfg: TrialConfig) -> None:
        self.workdir = workdir
        self.cfg = cfg

    def on_epoch_end(
        self, epoch: int, metrics: dict[str, float], checkpoint: Optional[Path]
    ) -> None:
        from ray import tune

        if checkpoint is None or epoch >= self.cfg.optim.epochs:  # the final report uploads it
            tune.report({**metrics, "epoch": epoch})
            return
        tune.report(
            {**metrics, "epoch": epoch}, checkpoint=tune.Checkpoint.from_directory(str(checkpoint))
        )


def restore_checkpoint(
    src: Path, ckpt_root: Path, final: Path, cfg: TrialConfig
) -> Optional[dict[str, Any]]:
    """Put the checkpoint Tune restored (folder ``src``) under ``ckpt_root``, where
    ``run_trial`` resumes from it. A final checkpoint of this very config (its
    ``metrics.json`` and ``config.json``: the trial had ended, and the driver that took its
    final report died before its snapshot said so) is copied to ``final`` instead and its
    metrics returned, to be reported again without a second evaluation, once its weights
    match their checksums; None otherwise (``run_trial``'s loader falls back from a damaged
    checkpoint to epoch 1). A folder holding a link or a special file anywhere is not copied
    at all (copying follows links: one to ``/dev/zero`` fills the disk); the driver's
    :mod:`~lipsweep.sweep.checkpoint_refs` does not count such a folder as whole and resumes
    from the previous one."""
    from lipsweep.trial.checkpoint import CheckpointError, load_checkpoint

    if (odd := irregular(str(src))) is not None:
        _log.warning(
            "checkpoint %s holds %s, a link or special file; not restored, training from epoch 1",
            src,
            odd,
        )
        return None
    metrics, config = src / FINAL_METRICS, src / FINAL_CONFIG
    if (
        metrics.is_file()
        and config.is_file()
        and _json_or_none(config) == json.loads(cfg.to_json())
    ):
        try:
            load_checkpoint(src)  # the weights handed on again are verified
        except CheckpointError as err:
            _log.warning("final checkpoint %s is damaged (%s); not reported again", src, err)
        else:
            reported = _json_or_none(metrics)
            if isinstance(reported, dict):
                shutil.rmtree(final, ignore_errors=True)
                shutil.copytree(src, final, symlinks=True, copy_function=_link_or_copy)
                return reported
    state = _json_or_none(src / STATE_FILE)
    if not (isinstance(state, dict) and isinstance(state.get("epoch"), int)):
        _log.warning("checkpoint %s has no readable %s; training from epoch 1", src, STATE_FILE)
        return None
    epoch = state["epoch"]
    ckpt_root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(
        src,
        ckpt_root / f"epoch_{epoch:04d}",
        symlinks=True,  # a link made after the check stays a link, which the loader refuses
        ignore=shutil.ignore_patterns(ARTIFACTS, FINAL_METRICS, FINAL_CONFIG),
    )
    _log.info("restored Tune checkpoint of epoch %d", epoch)
    return None


def _json_or_none(path: Path) -> Any:
    """The JSON in ``path``, or None if it is unreadable or not JSON (a copy cut short)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _restore_from_tune(ckpt_root: Path, final: Path, cfg: TrialConfig) -> Optional[dict[str, Any]]:
    """Replace local checkpoints by Tune's (:func:`restore_checkpoint`)."""
    from ray import tune

    shutil.rmtree(ckpt_root, ignore_errors=True)
    ckpt = tune.get_checkpoint()
    if ckpt is None:
        return None
    with ckpt.as_directory() as src:
        return restore_checkpoint(Path(src), ckpt_root, final, cfg)


def _report_final(metrics: dict[str, Any], final: Path, cfg: TrialConfig) -> None:
    """The trial's last report: its evaluation ``metrics``, ``lipsweep_final = 1`` and the
    final checkpoint folder ``final`` (module docstring)."""
    from ray import tune

    tune.report(
        {**metrics, "epoch": cfg.optim.epochs, FINAL_KEY: 1},
        checkpoint=tune.Checkpoint.from_directory(str(final)),
    )


def _assigned_gpus() -> list[str]:
    """GPU ids Ray assigned to this trial's worker ([] when resources.gpu is 0)."""
    import ray

    return [str(g) for g in ray.get_gpu_ids()]


def _link_or_copy(src: str, dst: str) -> None:
    """Hard-link ``src`` to ``dst`` (same file system), else copy it."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def train_trial(config: dict[str, Any]) -> None:
    """Tune entry point: train, evaluate and report one trial."""
    from ray import tune

    from lipsweep.trial.device import choose_device
    from lipsweep.trial.engine import NonFiniteLossError
    from lipsweep.trial.run import run_trial  # torch: in the worker, never in the driver

    quiet_worker_exit()  # this process is a Ray worker
    flat = flat_config(config)
    cfg = TrialConfig.from_flat(flat)
    show_evaluation_lines(f"{tune.get_context().get_trial_id()} [{trial_label(flat)}]")
    logging.getLogger("ray.tune").setLevel(logging.WARNING)  # one INFO line per checkpoint
    logging.getLogger("ray.train").setLevel(logging.WARNING)
    workdir = Path(os.getcwd()) / "lipsweep_trial"
    ckpt_root, final = workdir / "checkpoints", workdir / "final"
    reported = _restore_from_tune(ckpt_root, final, cfg)
    if reported is not None:
        _log.warning(
            "%s: restored its final checkpoint; its metrics are reported again, not re-evaluated",
            tune.get_context().get_trial_id(),
        )
        _report_final(reported, final, cfg)
        return
    try:
        # WARNING: a Tune worker shows lipsweep's INFO lines nowhere; this one must be seen
        device = choose_device(cfg.run.device, _assigned_gpus(), level=logging.WARNING)
        run_cfg = replace(cfg, run=replace(cfg.run, device=device))
        result = run_trial(run_cfg, workdir, callbacks=_TuneReporter(workdir, cfg), progress=False)
    except (NonFiniteLossError, ConfigError) as err:
        _log.error("trial failed: %s", err)
        tune.report({ERROR_KEY: str(err), "epoch": 0})
        return
    shutil.rmtree(final, ignore_errors=True)
    shutil.copytree(result.checkpoint, final, copy_function=_link_or_copy)  # no 2nd local copy
    if result.artifacts is not None:
        shutil.copytree(result.artifacts, final / ARTIFACTS)
    (final / FINAL_METRICS).write_text(json.dumps(result.metrics, indent=2, sort_keys=True))
    (final / FINAL_CONFIG).write_text(cfg.to_json())
    _report_final(result.metrics, final, cfg)
