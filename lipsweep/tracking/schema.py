"""What lipsweep writes to MLflow besides metrics and params: its tags, run statuses, errors."""

from __future__ import annotations

from typing import Iterator

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


TRANSIENT_MLFLOW_CODES = frozenset(
    {"TEMPORARILY_UNAVAILABLE", "DEADLINE_EXCEEDED", "REQUEST_LIMIT_EXCEEDED", "RESOURCE_EXHAUSTED"}
)
"""MLflow error codes worth a retry: 503, 504 and 429 (MLflow's own mapping), and a SQL store's
``OperationalError`` (a locked SQLite file), which MLflow raises as TEMPORARILY_UNAVAILABLE."""
_SQLITE_BUSY_OR_LOCKED = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (primary result codes)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what it was raised from or during (``__cause__``, ``__context__``, a
    SQLAlchemy error's ``orig``), each once."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen or len(seen) > 20:
            continue
        seen.add(id(e))
        yield e
        orig = getattr(e, "orig", None)
        todo += [e.__cause__, e.__context__] + ([orig] if isinstance(orig, BaseException) else [])


def transient(exc: BaseException) -> bool:
    """Whether a failed MLflow call may pass by itself and is retried, decided by exception
    type and status code (never by message text): a connection refused, reset or timed out
    (Python's, requests' or urllib3's, including urllib3 giving up after MLflow's own retries
    of 429/5xx responses), an MLflow error whose code is in :data:`TRANSIENT_MLFLOW_CODES`, or
    a busy or locked SQLite file, anywhere in the exception's chain. A bad request, a missing
    run or a refused credential is not retried."""
    import sqlite3

    import requests
    import urllib3
    from mlflow.exceptions import MlflowException

    kinds = (
        ConnectionError,
        TimeoutError,
        requests.exceptions.ConnectionError,
        requests.exceptions.Timeout,
        requests.exceptions.RetryError,
        requests.exceptions.ChunkedEncodingError,
        urllib3.exceptions.MaxRetryError,
        urllib3.exceptions.ProtocolError,
        urllib3.exceptions.TimeoutError,
        urllib3.exceptions.NewConnectionError,
    )
    for e in _chain(exc):
        if isinstance(e, kinds):
            return True
        if isinstance(e, MlflowException) and e.error_code in TRANSIENT_MLFLOW_CODES:
            return True
        code = getattr(e, "sqlite_errorcode", None)
        if isinstance(e, sqlite3.OperationalError) and code is not None:
            if code & 0xFF in _SQLITE_BUSY_OR_LOCKED:
                return True
    return False
