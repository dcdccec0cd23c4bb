"""What lipsweep writes to MLflow besides metrics and params: its tags, run statuses, errors."""

from __future__ import annotations

TAG_KIND = "lipsweep.kind"  # 'sweep' (parent) or 'trial' (child)
TAG_SWEEP_DIR = "lipsweep.sweep_dir"  # Tune experiment path, the parent's identity
TAG_TRIAL_ID = "lipsweep.trial_id"
TAG_PARENT = "mlflow.parentRunId"
TAG_EARLY_STOPPED = "lipsweep.early_stopped"
TAG_STOPPED_BY = "lipsweep.stopped_by"  # why the scheduler stopped it: rung, dominating trials
TAG_FAILURE = "lipsweep.failure"
TAG_CHECKPOINT = "lipsweep.trial.checkpoint"
TAG_OWNER = "lipsweep.owner"  # 'host pid since' of the driver that holds the sweep
TAG_HEARTBEAT = "lipsweep.heartbeat"  # unix time of the owner's last sign of life
FINISHED, FAILED, KILLED, RUNNING = "FINISHED", "FAILED", "KILLED", "RUNNING"
TAG_VERSION = "lipsweep.version"
TAG_GIT_COMMIT = "mlflow.source.git.commit"  # MLflow's own tag: the UI shows it per run
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"  # what MLflow 3's UI reads to pick a view
EXPERIMENT_KIND = "custom_model_development"  # the model-training view, not the GenAI one
DATASET_FIELDS = ("dataset", "data_dir", "train_size", "eval_size", "eval_seed")


class TrackingError(RuntimeError):
    """MLflow could not be reached or refused a write after retries."""


class SweepBusy(RuntimeError):
    """Another live driver owns the sweep (its parent run), or the run may not be adopted."""


def transient(exc: BaseException) -> bool:
    """Connection-level failures are retried; bad requests are not."""
    text = f"{type(exc).__name__} {exc}".lower()
    return any(
        s in text
        for s in (
            "connection",
            "timed out",
            "timeout",
            "temporarily",
            "max retries",
            "503",
            "502",
            "504",
            "database is locked",
            "unavailable",
        )
    )
