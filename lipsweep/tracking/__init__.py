"""MLflow, written and read through one small API.

:mod:`~lipsweep.tracking.reader` is the one read API (``TrackingReader``: experiments, runs,
metric histories, artifacts); :mod:`~lipsweep.tracking.writer` adds the run lifecycle of a
sweep (``Tracker``), with its outage buffer in :mod:`~lipsweep.tracking.buffer`;
:mod:`~lipsweep.tracking.uri` checks and redacts tracking URIs; the tags and statuses lipsweep
writes are in :mod:`~lipsweep.tracking.schema`. Nothing outside this package touches the
``MlflowClient`` (``.client``) or the retrying ``_call``.
"""

from __future__ import annotations

from lipsweep.tracking.provenance import dataset_input, provenance_tags
from lipsweep.tracking.reader import READ_RETRIES, TrackingReader
from lipsweep.tracking.schema import (
    DATASET_FIELDS,
    EXPERIMENT_KIND,
    FAILED,
    FINISHED,
    KILLED,
    RUNNING,
    TAG_CHECKPOINT,
    TAG_EARLY_STOPPED,
    TAG_EXPERIMENT_KIND,
    TAG_FAILURE,
    TAG_GIT_COMMIT,
    TAG_HEARTBEAT,
    TAG_KIND,
    TAG_OWNER,
    TAG_PARENT,
    TAG_STOPPED_BY,
    TAG_SWEEP_DIR,
    TAG_TRIAL_ID,
    TAG_VERSION,
    LocalIOError,
    SweepBusy,
    TrackingError,
)
from lipsweep.tracking.uri import (
    READ_HTTP_TIMEOUT_S,
    check_tracking_uri,
    redact_uri,
    sqlite_schema_lock,
)
from lipsweep.tracking.writer import Tracker

__all__ = [
    "DATASET_FIELDS",
    "EXPERIMENT_KIND",
    "TAG_EXPERIMENT_KIND",
    "TAG_GIT_COMMIT",
    "TAG_VERSION",
    "dataset_input",
    "provenance_tags",
    "FAILED",
    "FINISHED",
    "KILLED",
    "READ_HTTP_TIMEOUT_S",
    "READ_RETRIES",
    "RUNNING",
    "TAG_CHECKPOINT",
    "TAG_EARLY_STOPPED",
    "TAG_FAILURE",
    "TAG_HEARTBEAT",
    "TAG_KIND",
    "TAG_OWNER",
    "TAG_PARENT",
    "TAG_STOPPED_BY",
    "TAG_SWEEP_DIR",
    "TAG_TRIAL_ID",
    "SweepBusy",
    "Tracker",
    "TrackingError",
    "LocalIOError",
    "TrackingReader",
    "check_tracking_uri",
    "redact_uri",
    "sqlite_schema_lock",
]
