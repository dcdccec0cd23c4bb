"""What lipsweep writes to MLflow besides metrics and params: its tags, run statuses, errors."""

from __future__ import annotations

import errno
from typing import Iterator, Optional

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


class LocalIOError(TrackingError):
    """A local file failed under an MLflow call (a full disk, ``ulimit -f``, a read-only or
    unreadable folder): the message names the file and the cause, not the tracking URI. A
    TrackingError, so a sweep stops and keeps its writes as for an outage; read commands
    exit 1 with its one line (:func:`lipsweep.api._decide.reading`)."""

    def __init__(self, message: str, path: str, errno_: int) -> None:
        super().__init__(message)
        self.path, self.errno = path, errno_


LOCAL_IO_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}
)
"""What an OSError on a local file says about the machine, never about the tracking server:
no space, a file past ``ulimit -f``, a quota, a read-only filesystem, no permission."""


def local_io_cause(exc: BaseException) -> Optional[OSError]:
    """The OSError of :data:`LOCAL_IO_ERRNOS` in ``exc``'s chain whose file, if it names one,
    is local (not a ``scheme://`` URI); None if there is none."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in LOCAL_IO_ERRNOS:
            name = e.filename2 if e.filename2 is not None else e.filename
            if name is None or "://" not in str(name):
                return e
    return None


def tracking_error(
    what: str, shown_uri: str, exc: BaseException, local: Optional[str] = None
) -> TrackingError:
    """The error to raise for MLflow call ``what`` that failed with ``exc``: a
    :class:`LocalIOError` naming the file (``local`` when the OSError names none) and the
    cause, for a local file's error; otherwise a TrackingError naming the call and the URI."""
    from lipsweep.tracking.uri import redact_uri

    cause = local_io_cause(exc)
    if cause is not None:
        names = [n for n in (cause.filename, cause.filename2) if n is not None]
        path = str(names[-1]) if names else (local or "a local file")
        why = cause.strerror or errno.errorcode.get(cause.errno, str(cause.errno))
        return LocalIOError(
            f"{path}: [Errno {cause.errno}] {why} (a local file, during MLflow {what}; "
            "not a tracking server error)",
            path,
            cause.errno,
        )
    return TrackingError(
        f"MLflow {what} failed at {shown_uri}: {type(exc).__name__}: {redact_uri(exc)}"
    )


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
