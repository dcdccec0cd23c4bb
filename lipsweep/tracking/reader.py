"""The one read API of lipsweep's MLflow store: experiments, sweep and trial runs, artifacts.

Every call goes through :meth:`TrackingReader._call`, which retries transient failures (a
tracking server restarting) with backoff and otherwise raises :class:`TrackingError`; a
blocking call waits at most about ``sum(min(backoff_s * 2**i, max_backoff_s))`` seconds
(``max_backoff_s`` is 30 s unless a test shortens it). A reader never creates a store or an
experiment (``reader=True``); :class:`lipsweep.tracking.writer.Tracker` extends it with the
writes.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from lipsweep.tracking.schema import (
    EXPERIMENT_KIND,
    FINISHED,
    TAG_EXPERIMENT_KIND,
    TAG_KIND,
    TAG_PARENT,
    TAG_SWEEP_DIR,
    TAG_TRIAL_ID,
    TrackingError,
    local_io_cause,
    tracking_error,
    transient,
)
from lipsweep.tracking.uri import redact_uri, sqlite_schema_lock

_log = logging.getLogger("lipsweep.tracking")
T = TypeVar("T")
READ_RETRIES = 1  # read commands: lipsweep's retries (2 tries, < 30 s)


@dataclass
class TrackingReader:
    """Retrying reads over ``MlflowClient`` for one experiment."""

    tracking_uri: str
    experiment: str
    retries: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0  # the longest wait between two tries (also of buffered writes)
    reader: bool = True  # never create a store (no schema lock file either) or an experiment
    _client: Any = field(default=None, init=False, repr=False)
    _experiment_id: Optional[str] = field(default=None, init=False)

    def __getstate__(self) -> dict[str, Any]:  # Tune pickles callbacks; clients do not travel
        state = self.__dict__.copy()
        state["_client"] = None
        state["tracking_uri"] = redact_uri(self.tracking_uri)  # no password in Tune's storage
        return state

    @property
    def shown_uri(self) -> str:
        """The tracking URI as logs and errors show it: without ``user:password@``."""
        return redact_uri(self.tracking_uri)

    def _call(self, what: str, fn: Callable[[], T], local: Optional[str] = None) -> T:
        """``fn()``, retried while its failure is transient; then a TrackingError, or a
        :class:`~lipsweep.tracking.schema.LocalIOError` naming the local file (``local`` if
        the error names none) when a local file failed (a full disk, no permission)."""
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - MLflow raises many types for I/O
                if attempt == self.retries or not transient(exc) or local_io_cause(exc):
                    raise tracking_error(what, self.shown_uri, exc, local) from exc
                _log.warning(
                    "MLflow %s failed (%s); retrying in %.0fs", what, redact_uri(exc), delay
                )
                time.sleep(delay)
                delay = min(delay * 2, self.max_backoff_s)
        raise AssertionError("unreachable")

    def _connect(self) -> Any:
        from mlflow.tracking import MlflowClient

        if not sys.stderr.isatty():  # tqdm bars of artifact transfers are noise in a log
            os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
            plain_mlflow_lines()
        lock = None if self.reader else sqlite_schema_lock(self.tracking_uri)
        try:  # the driver may create the store: its schema is made under a file lock
            return MlflowClient(tracking_uri=self.tracking_uri)
        finally:
            if lock is not None:
                lock.close()

    @property
    def client(self) -> Any:
        """The ``MlflowClient`` (for this package only: callers use the methods)."""
        if self._client is None:
            self._client = self._connect()
        return self._client

    # -- experiments ------------------------------------------------------------------------
    @property
    def experiment_id(self) -> str:
        """The experiment's id; a writer creates the experiment if it does not exist."""
        if self._experiment_id is None:
            exp = self._call(
                "get_experiment", lambda: self.client.get_experiment_by_name(self.experiment)
            )
            if exp is None and self.reader:
                raise TrackingError(f"no experiment {self.experiment!r} at {self.shown_uri}")
            if exp is None:
                self._experiment_id = self._call(
                    "create_experiment",
                    lambda: self.client.create_experiment(
                        self.experiment, tags={TAG_EXPERIMENT_KIND: EXPERIMENT_KIND}
                    ),
                )
            else:
                if exp.lifecycle_stage == "deleted":
                    raise TrackingError(
                        f"experiment {self.experiment!r} is deleted; restore it "
                        "in MLflow or choose another --experiment"
                    )
                self._experiment_id = exp.experiment_id
                if not self.reader and TAG_EXPERIMENT_KIND not in exp.tags:
                    self._call(
                        "set_experiment_tag",
                        lambda: self.client.set_experiment_tag(
                            exp.experiment_id, TAG_EXPERIMENT_KIND, EXPERIMENT_KIND
                        ),
                    )
        return self._experiment_id

    def existing_experiment_id(self) -> Optional[str]:
        """The experiment's id, or None if it does not exist (creates nothing)."""
        exp = self._call(
            "get_experiment", lambda: self.client.get_experiment_by_name(self.experiment)
        )
        return None if exp is None or exp.lifecycle_stage == "deleted" else exp.experiment_id

    def experiment_names(self) -> list[str]:
        """The names of the store's active experiments, sorted."""
        exps = self._call("search_experiments", lambda: self.client.search_experiments())
        return sorted(e.name for e in exps)

    def experiment_tags(self) -> dict[str, str]:
        """The experiment's tags (empty if it does not exist)."""
        exp = self._call(
            "get_experiment", lambda: self.client.get_experiment_by_name(self.experiment)
        )
        return dict(exp.tags) if exp is not None else {}

    def model_version_by_alias(self, name: str, alias: str) -> Any:
        """The registered model version ``name@alias`` (MLflow's ModelVersion)."""
        return self._call(
            "get_model_version_by_alias",
            lambda: self.client.get_model_version_by_alias(name, alias),
        )

    # -- runs -------------------------------------------------------------------------------
    def search(self, filter_string: str, experiment_id: Optional[str] = None) -> list:
        """Every run of the experiment (or ``experiment_id``) that matches ``filter_string``."""
        exp_id = experiment_id or self.experiment_id
        runs, token = [], None
        while True:
            page = self._call(
                "search_runs",
                lambda: self.client.search_runs(
                    [exp_id], filter_string=filter_string, max_results=1000, page_token=token
                ),
            )
            runs.extend(page)
            token = getattr(page, "token", None)
            if not token:
                return runs

    def runs(self) -> list:
        """Every run of the experiment; none if it does not exist (creates nothing)."""
        exp_id = self.existing_experiment_id()
        return [] if exp_id is None else self.search("", exp_id)

    def sweep_parents(self, experiment_id: Optional[str] = None) -> list:
        """The experiment's sweep (parent) runs, newest first."""
        runs = self.search(f"tags.`{TAG_KIND}` = 'sweep'", experiment_id)
        return sorted(runs, key=lambda r: r.info.start_time or 0, reverse=True)

    def finished_trials(self, experiment_id: Optional[str] = None) -> list:
        """The experiment's FINISHED trial (child) runs: ASHA's early stops end KILLED."""
        return self.search(
            f"tags.`{TAG_KIND}` = 'trial' and attributes.status = '{FINISHED}'", experiment_id
        )

    def find_parent_run(self, sweep_dir: str) -> Optional[Any]:
        """The sweep's (newest) parent run, or None."""
        runs = self.search(
            f"tags.`{TAG_KIND}` = 'sweep' and tags.`{TAG_SWEEP_DIR}` = '{sweep_dir}'"
        )
        return runs[0] if runs else None

    def children(self, parent_id: str) -> list:
        """The trial runs under the sweep run ``parent_id``."""
        return self.search(f"tags.`{TAG_PARENT}` = '{parent_id}'")

    def find_child(self, parent_id: str, trial_id: str) -> Optional[Any]:
        """The child run of ``trial_id`` under ``parent_id``, or None (creates nothing)."""
        found = self.search(
            f"tags.`{TAG_PARENT}` = '{parent_id}' and tags.`{TAG_TRIAL_ID}` = '{trial_id}'"
        )
        return found[0] if found else None

    def get_run(self, run_id: str) -> Any:
        """One run, with its params, metrics (latest values) and tags."""
        return self._call("get_run", lambda: self.client.get_run(run_id))

    def get_metric_history(self, run_id: str, key: str) -> list:
        """Every logged value of metric ``key`` of a run, with its step."""
        return self._call("get_metric_history", lambda: self.client.get_metric_history(run_id, key))

    # -- artifacts --------------------------------------------------------------------------
    def list_artifacts(self, run_id: str, path: Optional[str] = None) -> list:
        """The artifacts of a run directly under ``path``."""
        return self._call("list_artifacts", lambda: self.client.list_artifacts(run_id, path))

    def download_artifacts(self, run_id: str, path: str, dst: Path | str) -> Path:
        """Copy the run's artifact ``path`` (a file or folder) under ``dst``; its local path.

        Straight from the run's artifact store, keeping each file's error: MLflow's
        ``runs:/`` route swallows the real one (a full disk under ``dst``) and says only that
        the path may be wrong, and its per-file downloads keep only each error's text."""
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        root = self.get_run(run_id).info.artifact_uri
        Path(dst).mkdir(parents=True, exist_ok=True)

        def download() -> str:
            repo = get_artifact_repository(root, tracking_uri=self.tracking_uri)
            failures: list[BaseException] = []
            one_file = repo._download_file  # what MLflow's download runs per file

            def keeping_errors(remote_file_path: str, local_path: str) -> None:
                try:
                    one_file(remote_file_path=remote_file_path, local_path=local_path)
                except BaseException as exc:
                    failures.append(exc)
                    raise

            repo._download_file = keeping_errors
            try:
                return repo.download_artifacts(path, str(dst))
            except Exception as exc:
                if failures:
                    raise exc from failures[0]
                raise

        return Path(self._call("download_artifacts", download, local=str(dst)))


def _no_colour(record: logging.LogRecord) -> bool:
    if getattr(record, "color", None):
        record.color = None
    return True


def plain_mlflow_lines() -> None:
    """MLflow colours some of its log lines (``extra={"color": ...}``, raw ANSI codes in a log
    file): its handlers drop the colour (call it where stderr is not a terminal)."""
    for handler in logging.getLogger("mlflow").handlers:
        if _no_colour not in handler.filters:
            handler.addFilter(_no_colour)
