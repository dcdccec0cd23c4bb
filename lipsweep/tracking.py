"""MLflow at the edge: one parent run per sweep, one child run per trial, written by the driver.

Why the driver and not the trials: Ray 2.60's ``setup_mlflow`` leaves runs RUNNING,
``MLflowLoggerCallback`` opens a second run per trial after ``Tuner.restore``, and neither knows
parent runs. lipsweep instead keys every child run by its Tune trial id (tag
``lipsweep.trial_id`` under the parent), so a resumed sweep finds the run it already has
instead of creating another. Only the driver process writes, so the default SQLite store never
sees two writers ("database is locked"); per-epoch metrics are logged with step = epoch and
de-duplicated against what the run already holds, so a restored trial never logs a step twice.

Every call goes through :meth:`Tracker._call`, which retries transient failures (a tracking
server restarting) with backoff and otherwise raises :class:`TrackingError`.

With ``buffer_writes=True`` (the sweep driver) writes that return nothing (metrics, params,
tags, run status) do not wait for an unreachable server: they queue, in order, in a bounded
in-memory buffer that is retried on every later call and drained by :meth:`Tracker.flush`, so
Tune's event loop (and the trials, which wait for it in ``tune.report``) keeps going through
an outage. What cannot be delivered by the end is written to a JSON-lines spill file
(:meth:`Tracker.spill`) and replayed by :meth:`Tracker.replay` on ``--resume``: a write is
delivered, still queued, or on disk, never silently dropped. A full buffer raises
:class:`TrackingError`. Calls that need an answer (searches, creating a run, artifact uploads)
still block with retries, at most about ``sum(min(backoff_s * 2**i, 30))`` seconds.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import logging
import os
import re
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, TypeVar

_log = logging.getLogger(__name__)
T = TypeVar("T")

TAG_KIND = "lipsweep.kind"            # 'sweep' (parent) or 'trial' (child)
TAG_SWEEP_DIR = "lipsweep.sweep_dir"  # Tune experiment path, the parent's identity
TAG_TRIAL_ID = "lipsweep.trial_id"
TAG_PARENT = "mlflow.parentRunId"
TAG_EARLY_STOPPED = "lipsweep.early_stopped"
TAG_FAILURE = "lipsweep.failure"
TAG_CHECKPOINT = "lipsweep.checkpoint"
FINISHED, FAILED, KILLED, RUNNING = "FINISHED", "FAILED", "KILLED", "RUNNING"
TAG_VERSION = "lipsweep.version"
TAG_GIT_COMMIT = "mlflow.source.git.commit"  # MLflow's own tag: the UI shows it per run
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"  # what MLflow 3's UI reads to pick a view
EXPERIMENT_KIND = "custom_model_development"   # the model-training view, not the GenAI one
DATASET_FIELDS = ("dataset", "data_dir", "train_size", "eval_size", "eval_seed")


TAG_OWNER = "lipsweep.owner"          # 'host pid since' of the driver that holds the sweep
TAG_HEARTBEAT = "lipsweep.heartbeat"  # unix time of the owner's last sign of life
READ_HTTP_TIMEOUT_S = 8               # read commands: per-request timeout, no urllib3 retries
READ_RETRIES = 1                      # read commands: lipsweep's retries (2 tries, < 30 s)
DB_SCHEMES = ("postgresql", "mysql", "mssql")
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]*@")


@functools.lru_cache(maxsize=1)
def provenance_tags() -> dict[str, str]:
    """Tags every run gets: the lipsweep version and, when lipsweep runs from a git checkout,
    its commit (:data:`TAG_GIT_COMMIT`); no git or no checkout is not an error."""
    import lipsweep

    tags = {TAG_VERSION: lipsweep.__version__}
    pkg = Path(lipsweep.__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(pkg), "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return tags
    lines = out.stdout.split()
    if out.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == pkg.parent:
        tags[TAG_GIT_COMMIT] = lines[1]
    return tags


def dataset_input(config: dict[str, Any]) -> Optional[dict[str, str]]:
    """The MLflow dataset (name, digest, source; no data uploaded) of a flat trial config,
    or None without a ``dataset``. The digest hashes the fields that pick the images
    (:data:`DATASET_FIELDS`); the source is ``data_dir`` when set, else lipsweep's name."""
    if not config.get("dataset"):
        return None
    from mlflow.data.code_dataset_source import CodeDatasetSource
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    picked = {k: config.get(k) for k in DATASET_FIELDS}
    digest = hashlib.sha256(json.dumps(picked, sort_keys=True, default=str).encode())
    source = None
    if config.get("data_dir"):
        try:
            source = resolve_dataset_source(redact_uri(str(config["data_dir"])))
        except Exception:  # noqa: BLE001 - no MLflow source type for it: named below
            source = None
    if source is None:
        source = CodeDatasetSource({"lipsweep.dataset": str(config["dataset"]),
                                    "data_dir": redact_uri(str(config.get("data_dir") or ""))})
    ds = MetaDataset(source, name=str(config["dataset"]), digest=digest.hexdigest()[:16])
    entity = ds._to_mlflow_entity()
    return {"name": entity.name, "digest": entity.digest, "source_type": entity.source_type,
            "source": entity.source}


class TrackingError(RuntimeError):
    """MLflow could not be reached or refused a write after retries."""


class SweepBusy(RuntimeError):
    """Another live driver owns the sweep (its parent run), or the run may not be adopted."""


def redact_uri(text: str) -> str:
    """``text`` with the userinfo (``user:password@``) of every URI in it replaced by
    ``***@``: what logs, error lines and exports show or store instead of a credential."""
    return _USERINFO.sub(r"\1***@", str(text))


def _sqlite_path(uri: str) -> Optional[Path]:
    """The file of a ``sqlite:///`` URI (relative to the cwd, or absolute with 4 slashes)."""
    rest = uri[len("sqlite://"):].split("?", 1)[0]
    if not rest.startswith("/") or rest == "/":
        return None  # sqlite:// (in memory) or a host part: not a file
    return Path(rest[1:])


def check_tracking_uri(uri: str, must_exist: bool) -> None:
    """Refuse a ``--tracking-uri`` MLflow cannot use, before anything is written or waited on.

    Accepted: ``sqlite:///FILE``, ``http(s)://``, and ``postgresql|mysql|mssql://`` when their
    SQLAlchemy driver is installed. With ``must_exist`` (read commands) a SQLite file must
    already hold an MLflow store: reading never creates one. Raises UsageError naming the flag.
    """
    from lipsweep.config_base import UsageError

    shown = redact_uri(uri)
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme == "sqlite":
        path = _sqlite_path(uri)
        if path is None:
            raise UsageError(f"--tracking-uri {shown}: not a SQLite file; use sqlite:///FILE "
                             "(relative) or sqlite:////ABS/PATH")
        if must_exist:
            _check_mlflow_db(path, shown)
        elif not path.parent.is_dir():
            raise UsageError(f"--tracking-uri {shown}: folder {path.parent} does not exist")
        return
    if scheme in ("http", "https"):
        if must_exist:  # fail fast instead of MLflow's minutes of urllib3 retries
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(READ_HTTP_TIMEOUT_S))
        return
    if scheme.split("+", 1)[0] in DB_SCHEMES:
        try:
            from sqlalchemy.engine import make_url

            make_url(uri).get_dialect().import_dbapi()
        except Exception as exc:  # noqa: BLE001 - a missing driver or an unparsable URL
            raise UsageError(f"--tracking-uri {shown}: database driver not usable "
                             f"({type(exc).__name__}: {redact_uri(exc)})") from None
        return
    what = "a folder (MLflow's file store)" if scheme in ("", "file") else f"scheme {scheme!r}"
    raise UsageError(f"--tracking-uri {shown}: {what} is not supported; use sqlite:///FILE, "
                     "http(s)://HOST:PORT or postgresql://...")


def _check_mlflow_db(path: Path, shown: str) -> None:
    import sqlite3

    from lipsweep.config_base import UsageError

    if not path.is_file():
        raise UsageError(f"--tracking-uri {shown}: no MLflow store at {path} (nothing "
                         "created); check the path")
    try:
        con = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in con.execute("select name from sqlite_master")}
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise UsageError(f"--tracking-uri {shown}: {path} is not a SQLite database ({exc})"
                         ) from None
    if not {"alembic_version", "experiments", "runs"} <= tables:
        raise UsageError(f"--tracking-uri {shown}: {path} holds no MLflow store (nothing "
                         "created); check the path")


def sqlite_schema_lock(uri: str):
    """An exclusive file lock beside a SQLite store (``<db>.lock``), held while MLflow
    creates or migrates its schema, so two fresh drivers never race on ``duplicate column
    name``. Returns an open file to close, or None for other stores."""
    path = _sqlite_path(uri) if uri.lower().startswith("sqlite://") else None
    if path is None or not path.parent.is_dir():
        return None
    fh = open(path.with_name(path.name + ".lock"), "a")
    fcntl.flock(fh, fcntl.LOCK_EX)
    return fh


@dataclass
class Tracker:
    """Thin, retrying wrapper over ``MlflowClient`` for one experiment."""

    tracking_uri: str
    experiment: str
    retries: int = 5
    backoff_s: float = 1.0
    buffer_writes: bool = False
    max_pending: int = 100_000
    reader: bool = False  # read commands: never create a store (no schema lock file either)
    _client: Any = field(default=None, init=False, repr=False)
    _experiment_id: Optional[str] = field(default=None, init=False)
    _last_step: dict[str, int] = field(default_factory=dict, init=False)
    _pending: deque = field(default_factory=deque, init=False, repr=False)
    _next_try: float = field(default=0.0, init=False, repr=False)
    _flush_delay: float = field(default=0.0, init=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:  # Tune pickles callbacks; clients do not travel
        state = self.__dict__.copy()
        state["_client"] = None
        state["tracking_uri"] = redact_uri(self.tracking_uri)  # no password in Tune's storage
        return state

    @property
    def shown_uri(self) -> str:
        """The tracking URI as logs and errors show it: without ``user:password@``."""
        return redact_uri(self.tracking_uri)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        if self._pending:
            self._drain()  # give queued writes a chance first (rate-limited while down)
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - MLflow raises many types for I/O
                if attempt == self.retries or not _transient(exc):
                    raise TrackingError(f"MLflow {what} failed at {self.shown_uri}: "
                                        f"{type(exc).__name__}: {redact_uri(exc)}") from exc
                _log.warning("MLflow %s failed (%s); retrying in %.0fs", what, redact_uri(exc),
                             delay)
                time.sleep(delay)
                delay = min(delay * 2, 30.0)
        raise AssertionError("unreachable")

    # -- buffered writes --------------------------------------------------------------------
    def _write(self, op: str, run_id: str, **args: Any) -> None:
        """One JSON-able write; queued behind earlier ones if MLflow is unreachable."""
        record = {"op": op, "run_id": run_id, **args}
        if not self.buffer_writes:
            self._call(op, lambda: self._apply(record))
            return
        if len(self._pending) >= self.max_pending:
            raise TrackingError(f"MLflow at {self.shown_uri} unreachable for too long: "
                                f"{len(self._pending)} writes buffered (max_pending)")
        self._pending.append(record)
        self._drain(force=len(self._pending) == 1)

    def _drain(self, force: bool = False) -> None:
        """Send queued writes in order until one fails; later attempts back off to 30 s."""
        if not self._pending or (not force and time.monotonic() < self._next_try):
            return
        while self._pending:
            record = self._pending[0]
            try:
                self._apply(record)
            except Exception as exc:  # noqa: BLE001 - MLflow raises many types for I/O
                if not _transient(exc):
                    raise TrackingError(f"MLflow {record['op']} failed at {self.shown_uri}:"
                                        f" {type(exc).__name__}: {redact_uri(exc)}") from exc
                self._flush_delay = min(max(self._flush_delay * 2, self.backoff_s), 30.0)
                self._next_try = time.monotonic() + self._flush_delay
                _log.warning("MLflow unreachable (%s: %s); buffering writes (%d pending), "
                             "retrying in %.0fs", type(exc).__name__, redact_uri(exc)[:200],
                             len(self._pending), self._flush_delay)
                return
            self._pending.popleft()
        if self._flush_delay:
            _log.warning("MLflow reachable again at %s; buffered writes delivered",
                         self.shown_uri)
        self._flush_delay = 0.0

    def _apply(self, record: dict[str, Any]) -> None:
        from mlflow.entities import Metric, Param, RunTag

        op, run_id = record["op"], record["run_id"]
        if op == "log_batch":
            self.client.log_batch(run_id, metrics=[Metric(*m) for m in record.get("metrics", [])],
                                  params=[Param(*p) for p in record.get("params", [])],
                                  tags=[RunTag(*t) for t in record.get("tags", [])])
        elif op == "set_terminated":
            self.client.set_terminated(run_id, status=record["status"])
        elif op == "update_run":
            self.client.update_run(run_id, status=record["status"])
        elif op == "log_inputs":
            from mlflow.entities import Dataset, DatasetInput, InputTag

            self.client.log_inputs(run_id, datasets=[DatasetInput(
                Dataset(**d), tags=[InputTag("mlflow.data.context", record["context"])])
                for d in record["datasets"]])
        else:  # pragma: no cover - records are built here
            raise ValueError(f"unknown MLflow write {op!r}")

    @property
    def pending(self) -> int:
        """Writes queued because MLflow was unreachable."""
        return len(self._pending)

    def flush(self, timeout_s: float = 600.0) -> int:
        """Block until every queued write is delivered or ``timeout_s`` passes; returns how
        many are left."""
        deadline = time.monotonic() + timeout_s
        while self._pending and time.monotonic() < deadline:
            self._drain(force=True)
            if self._pending:
                time.sleep(max(0.0, min(self._next_try, deadline) - time.monotonic()))
        return len(self._pending)

    def spill(self, path: Path) -> int:
        """Append the queued writes to ``path`` (JSON lines) and empty the queue."""
        n = len(self._pending)
        if n:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as fh:
                for record in self._pending:
                    fh.write(json.dumps(record) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            self._pending.clear()
        return n

    def replay(self, path: Path) -> int:
        """Deliver the writes spilled to ``path`` (blocking, in order), then remove it."""
        if not path.is_file():
            return 0
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for i, record in enumerate(records):
            try:
                self._call(record["op"], lambda: self._apply(record))
            except TrackingError:  # keep what is left (and only that) for the next try
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_text("".join(json.dumps(r) + "\n" for r in records[i:]))
                os.replace(tmp, path)
                raise
        path.unlink()
        _log.info("delivered %d MLflow writes spilled by an earlier run (%s)", len(records), path)
        return len(records)

    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            if self.buffer_writes:  # our retries and buffer decide, not urllib3's 4-min
                # backoff; a hung server costs at most 30 s per attempt (idle socket timeout)
                os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
                os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")

            lock = None if self.reader else sqlite_schema_lock(self.tracking_uri)
            try:  # the driver may create the store: its schema is made under a file lock
                self._client = MlflowClient(tracking_uri=self.tracking_uri)
            finally:
                if lock is not None:
                    lock.close()
        return self._client

    @property
    def experiment_id(self) -> str:
        if self._experiment_id is None:
            exp = self._call("get_experiment",
                             lambda: self.client.get_experiment_by_name(self.experiment))
            if exp is None and self.reader:
                raise TrackingError(f"no experiment {self.experiment!r} at {self.shown_uri}")
            if exp is None:
                self._experiment_id = self._call(
                    "create_experiment", lambda: self.client.create_experiment(
                        self.experiment, tags={TAG_EXPERIMENT_KIND: EXPERIMENT_KIND}))
            else:
                if exp.lifecycle_stage == "deleted":
                    raise TrackingError(f"experiment {self.experiment!r} is deleted; restore it "
                                        "in MLflow or choose another --experiment")
                self._experiment_id = exp.experiment_id
                if not self.reader and TAG_EXPERIMENT_KIND not in exp.tags:
                    self._call("set_experiment_tag", lambda: self.client.set_experiment_tag(
                        exp.experiment_id, TAG_EXPERIMENT_KIND, EXPERIMENT_KIND))
        return self._experiment_id

    def existing_experiment_id(self) -> Optional[str]:
        """The experiment's id, or None if it does not exist (creates nothing)."""
        exp = self._call("get_experiment",
                         lambda: self.client.get_experiment_by_name(self.experiment))
        return None if exp is None or exp.lifecycle_stage == "deleted" else exp.experiment_id

    def search(self, filter_string: str, experiment_id: Optional[str] = None) -> list:
        exp_id = experiment_id or self.experiment_id
        runs, token = [], None
        while True:
            page = self._call("search_runs", lambda: self.client.search_runs(
                [exp_id], filter_string=filter_string, max_results=1000, page_token=token))
            runs.extend(page)
            token = getattr(page, "token", None)
            if not token:
                return runs

    # -- parent -----------------------------------------------------------------------------
    def find_parent_run(self, sweep_dir: str) -> Optional[Any]:
        """The sweep's (newest) parent run, or None."""
        runs = self.search(f"tags.`{TAG_KIND}` = 'sweep' and tags.`{TAG_SWEEP_DIR}` = "
                           f"'{sweep_dir}'")
        return runs[0] if runs else None

    def find_parent(self, sweep_dir: str) -> Optional[str]:
        run = self.find_parent_run(sweep_dir)
        return run.info.run_id if run is not None else None

    def open_parent(self, sweep_dir: str, name: str, params: dict[str, Any],
                    space_file: Optional[Path] = None, owner: Optional[str] = None,
                    adopt: Optional[Callable[[Any], None]] = None,
                    datasets: Iterable[dict[str, Any]] = ()) -> str:
        """Find (on resume) or create the sweep's parent run and mark it RUNNING.

        ``owner`` ('host pid since') is tagged on the run with a heartbeat; ``adopt(run)``
        decides whether an existing parent may be taken over (it raises if not). A new parent
        that finds an older one created at the same time for the same sweep deletes itself
        and raises :class:`SweepBusy`: MLflow arbitrates where no file lock can. A new parent
        records the distinct datasets of the flat trial configs ``datasets`` as inputs.
        """
        found = self.find_parent_run(sweep_dir)
        owner_tags = {TAG_OWNER: owner, TAG_HEARTBEAT: f"{time.time():.0f}"} if owner else {}
        if found is None:
            run = self._call("create_run", lambda: self.client.create_run(
                self.experiment_id, run_name=name,
                tags={TAG_KIND: "sweep", TAG_SWEEP_DIR: sweep_dir, **owner_tags,
                      **provenance_tags()}))
            run_id = run.info.run_id
            if owner:
                self._check_sole_parent(sweep_dir, run_id)
            self.log_params(run_id, params)
            self.log_datasets(run_id, datasets)
            if space_file is not None:
                self._call("log_artifact",
                           lambda: self.client.log_artifact(run_id, str(space_file)))
        else:
            run_id = found.info.run_id
            if adopt is not None:
                adopt(found)
            self._write("update_run", run_id, status=RUNNING)
            if owner_tags:
                self.set_tags(run_id, owner_tags)
            _log.info("resuming parent run %s", run_id)
        return run_id

    def _check_sole_parent(self, sweep_dir: str, run_id: str) -> None:
        runs = self.search(f"tags.`{TAG_KIND}` = 'sweep' and tags.`{TAG_SWEEP_DIR}` = "
                           f"'{sweep_dir}'")
        if len(runs) < 2:
            return
        first = min(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))
        if first.info.run_id != run_id:
            self._call("delete_run", lambda: self.client.delete_run(run_id))
            raise SweepBusy(f"sweep {sweep_dir} was started at the same time by "
                            f"{first.data.tags.get(TAG_OWNER, 'another driver')} "
                            f"(MLflow parent run {first.info.run_id})")

    def heartbeat(self, run_id: str) -> None:
        """Tell other drivers this sweep's owner is alive (see :data:`TAG_HEARTBEAT`)."""
        self.set_tags(run_id, {TAG_HEARTBEAT: f"{time.time():.0f}"})

    # -- children ---------------------------------------------------------------------------
    def children(self, parent_id: str) -> list:
        return self.search(f"tags.`{TAG_PARENT}` = '{parent_id}'")

    def find_child(self, parent_id: str, trial_id: str) -> Optional[Any]:
        """The child run of ``trial_id`` under ``parent_id``, or None (creates nothing)."""
        found = self.search(f"tags.`{TAG_PARENT}` = '{parent_id}' and "
                            f"tags.`{TAG_TRIAL_ID}` = '{trial_id}'")
        return found[0] if found else None

    def open_child(self, parent_id: str, trial_id: str, name: str,
                   params: dict[str, Any]) -> str:
        """The child run of ``trial_id`` under ``parent_id``: found again, or created once."""
        run = self.find_child(parent_id, trial_id)
        if run is not None:
            run_id = run.info.run_id
            if run.info.status != RUNNING:
                self._write("update_run", run_id, status=RUNNING)
            steps = self._call("get_metric_history",
                               lambda: self.client.get_metric_history(run_id, "epoch"))
            self._last_step[run_id] = max((int(m.step) for m in steps), default=0)
            return run_id
        run = self._call("create_run", lambda: self.client.create_run(
            self.experiment_id, run_name=name,
            tags={TAG_KIND: "trial", TAG_PARENT: parent_id, TAG_TRIAL_ID: trial_id,
                  **provenance_tags()}))
        self.log_params(run.info.run_id, params)
        self.log_datasets(run.info.run_id, [params])
        self._last_step[run.info.run_id] = 0
        return run.info.run_id

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        items = [(k, str(v)[:6000]) for k, v in sorted(params.items())]
        for i in range(0, len(items), 100):
            self._write("log_batch", run_id, params=items[i:i + 100])

    def log_datasets(self, run_id: str, configs: Iterable[dict[str, Any]],
                     context: str = "train") -> None:
        """Record the distinct datasets of flat trial configs as MLflow inputs of the run
        (:func:`dataset_input`; a config without ``dataset`` adds none)."""
        found = {}
        for config in configs:
            ds = dataset_input(config)
            if ds is not None:
                found.setdefault((ds["name"], ds["digest"]), ds)
        if found:
            self._write("log_inputs", run_id, datasets=list(found.values()), context=context)

    def last_step(self, run_id: str) -> int:
        """The highest epoch step logged (or queued) for ``run_id`` by this tracker."""
        return self._last_step.get(run_id, 0)

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> bool:
        """Log ``metrics`` at ``step`` unless that step was already logged (returns False)."""
        if step <= self._last_step.get(run_id, 0) and step > 0:
            return False
        ts = int(time.time() * 1000)
        batch = [(k, float(v), ts, step) for k, v in sorted(metrics.items())
                 if isinstance(v, (int, float)) and not isinstance(v, bool)]
        for i in range(0, len(batch), 500):
            self._write("log_batch", run_id, metrics=batch[i:i + 500])
        if step > 0:
            self._last_step[run_id] = step
        return True

    def set_tags(self, run_id: str, tags: dict[str, Any]) -> None:
        self._write("log_batch", run_id, tags=[(k, str(v)) for k, v in tags.items()])

    def log_artifacts(self, run_id: str, local_dir: Path, artifact_path: Optional[str] = None
                      ) -> None:
        self._call("log_artifacts", lambda: self.client.log_artifacts(
            run_id, str(local_dir), artifact_path))

    def log_artifact(self, run_id: str, local_file: Path, artifact_path: Optional[str] = None
                     ) -> None:
        self._call("log_artifact", lambda: self.client.log_artifact(
            run_id, str(local_file), artifact_path))

    def end(self, run_id: str, status: str) -> None:
        self._write("set_terminated", run_id, status=status)

    def end_running_children(self, parent_id: str, status: str, reason: str) -> int:
        """Close children still RUNNING (e.g. after an interrupt); returns how many."""
        n = 0
        for run in self.children(parent_id):
            if run.info.status == RUNNING:
                self.set_tags(run.info.run_id, {TAG_FAILURE: reason})
                self.end(run.info.run_id, status)
                n += 1
        return n

    def finished_children(self, parent_id: str) -> list:
        return [r for r in self.children(parent_id) if r.info.status == FINISHED]


def _transient(exc: BaseException) -> bool:
    """Connection-level failures are retried; bad requests are not."""
    text = f"{type(exc).__name__} {exc}".lower()
    return any(s in text for s in ("connection", "timed out", "timeout", "temporarily",
                                   "max retries", "503", "502", "504", "database is locked",
                                   "unavailable"))


def sweep_parents(tracker: Tracker, experiment_id: str) -> Iterable:
    return tracker.search(f"tags.`{TAG_KIND}` = 'sweep'", experiment_id)
