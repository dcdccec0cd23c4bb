"""MLflow at the edge: one parent run per sweep, one child run per trial, written by the driver.

Why the driver and not the trials: Ray 2.60's ``setup_mlflow`` leaves runs RUNNING,
``MLflowLoggerCallback`` opens a second run per trial after ``Tuner.restore``, and neither knows
parent runs. lipsweep instead keys every child run by its Tune trial id (tag
``lipsweep.trial_id`` under the parent), so a resumed sweep finds the run it already has
instead of creating another. Only the driver process writes, so the default SQLite store never
sees two writers ("database is locked"); per-epoch metrics are logged with step = epoch and
de-duplicated against what the run already holds, so a restored trial never logs a step twice.

Every call retries transient failures (:class:`lipsweep.tracking.reader.TrackingReader`).
With ``buffer_writes=True`` (the sweep driver) writes that return nothing (metrics, params,
tags, run status) do not wait for an unreachable server: they queue
(:class:`lipsweep.tracking.buffer.WriteQueue`), so Tune's event loop (and the trials, which
wait for it in ``tune.report``) keeps going through an outage. A trial's artifacts
(:meth:`Tracker.log_artifacts_later`) never wait either: a background thread uploads them
(:class:`lipsweep.tracking.uploads.UploadQueue`), and the run's later writes (its end) are
held until they land, so a FINISHED run has its artifacts. :meth:`Tracker.flush` waits for
both, :meth:`Tracker.spill` and :meth:`Tracker.replay` carry what is left to the next
``--resume``. A full buffer raises :class:`TrackingError`. Calls that need an answer
(searches, creating a run) still block with retries.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, TypeVar

from lipsweep.tracking.buffer import Record, WriteQueue, append_records, replay_spill
from lipsweep.tracking.provenance import dataset_input, provenance_tags
from lipsweep.tracking.reader import TrackingReader
from lipsweep.tracking.schema import (
    RUNNING,
    TAG_FAILURE,
    TAG_HEARTBEAT,
    TAG_KIND,
    TAG_OWNER,
    TAG_PARENT,
    TAG_SWEEP_DIR,
    TAG_TRIAL_ID,
    SweepBusy,
    TrackingError,
)
from lipsweep.tracking.uploads import UploadQueue
from lipsweep.tracking.uri import redact_uri

_log = logging.getLogger("lipsweep.tracking")
T = TypeVar("T")


@dataclass
class Tracker(TrackingReader):
    """The reader plus the run lifecycle and (optionally buffered) writes."""

    reader: bool = False  # read commands that tag runs: never create a store
    buffer_writes: bool = False
    max_pending: int = 100_000
    max_uploads: int = 10_000
    _last_step: dict[str, int] = field(default_factory=dict, init=False)
    _queue: WriteQueue = field(init=False, repr=False)
    _uploads: Optional[UploadQueue] = field(default=None, init=False, repr=False)
    _upload_client: Any = field(default=None, init=False, repr=False)
    _uploading: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _held: dict[str, list[Record]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._queue = WriteQueue(
            self._apply, self.shown_uri, self.backoff_s, self.max_pending, self.max_backoff_s
        )

    def __getstate__(self) -> dict[str, Any]:  # Tune pickles callbacks; threads do not travel
        state = super().__getstate__()
        state["_uploads"] = state["_upload_client"] = None
        return state

    def _call(self, what: str, fn: Callable[[], T], local: Optional[str] = None) -> T:
        if self._queue.pending:
            self._queue.drain()  # give queued writes a chance first (rate-limited while down)
        return super()._call(what, fn, local)

    def _connect(self) -> Any:
        if self.buffer_writes:  # our retries and buffer decide, not urllib3's 4-min
            # backoff; a hung server costs at most 30 s per attempt (idle socket timeout)
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        return super()._connect()

    # -- buffered writes --------------------------------------------------------------------
    def _write(self, op: str, run_id: str, **args: Any) -> None:
        """One JSON-able write; queued behind earlier ones if MLflow is unreachable."""
        record = {"op": op, "run_id": run_id, **args}
        if self.buffer_writes:
            self.poll()
            if run_id in self._uploading:  # after the run's artifacts, as it was called
                self._held[run_id].append(record)
            else:
                self._queue.append(record)
        else:
            self._call(op, lambda: self._apply(record))

    def _apply(self, record: Record) -> None:
        from mlflow.entities import Metric, Param, RunTag

        op, run_id = record["op"], record["run_id"]
        if op == "log_batch":
            self.client.log_batch(
                run_id,
                metrics=[Metric(*m) for m in record.get("metrics", [])],
                params=[Param(*p) for p in record.get("params", [])],
                tags=[RunTag(*t) for t in record.get("tags", [])],
            )
        elif op == "set_terminated":
            self.client.set_terminated(run_id, status=record["status"])
        elif op == "update_run":
            self.client.update_run(run_id, status=record["status"])
        elif op == "log_inputs":
            from mlflow.entities import Dataset, DatasetInput, InputTag

            self.client.log_inputs(
                run_id,
                datasets=[
                    DatasetInput(
                        Dataset(**d), tags=[InputTag("mlflow.data.context", record["context"])]
                    )
                    for d in record["datasets"]
                ],
            )
        elif op == "log_artifacts":
            self._upload(record, self.client)
        else:  # pragma: no cover - records are built here
            raise ValueError(f"unknown MLflow write {op!r}")

    # -- artifacts off the caller's thread ----------------------------------------------------
    def log_artifacts_later(
        self,
        run_id: str,
        source: str,
        items: Iterable[tuple[str, str]],
        move: Iterable[str] = (),
    ) -> None:
        """Upload entries of the folder ``source`` (a local path or a storage URI such as
        ``s3://...``) to the run: each ``(name, artifact_path)``, a file or a folder; missing
        entries are skipped. With ``buffer_writes`` this returns at once: a background thread
        uploads (in order, retrying through an outage), and every later write to the run waits
        until the upload has landed, so the run ends only once its artifacts are in. Without,
        it uploads now. The entries named in ``move`` are deleted from ``source`` once the
        whole upload has landed (a failed delete is logged, not retried: the upload stands)."""
        record = {
            "op": "log_artifacts",
            "run_id": run_id,
            "source": source,
            "items": [[name, art] for name, art in items],
            "move": list(move),
        }
        if not self.buffer_writes:
            self._call("log_artifacts", lambda: self._apply(record), local=source)
            return
        self.poll()
        self.uploads.submit(record)
        self._uploading[run_id] = self._uploading.get(run_id, 0) + 1
        self._held.setdefault(run_id, [])

    @property
    def uploads(self) -> UploadQueue:
        """The background uploads (created with the first one)."""
        if self._uploads is None:
            self._uploads = UploadQueue(
                self._upload_in_thread,
                self.shown_uri,
                self.backoff_s,
                self.max_uploads,
                self.max_backoff_s,
            )
        return self._uploads

    def _upload_in_thread(self, record: Record) -> None:
        if self._upload_client is None:  # the thread's own client, never the caller's
            self._upload_client = self._connect()
        self._upload(record, self._upload_client)

    @staticmethod
    def _upload(record: Record, client: Any) -> None:
        from lipsweep.core.storage import local_folder

        run_id, items = record["run_id"], record["items"]
        with local_folder(record["source"], [name for name, _ in items]) as root:
            if not root.is_dir():
                raise FileNotFoundError(f"artifact folder {record['source']} does not exist")
            for name, artifact_path in items:
                path = root / name
                if path.is_dir():
                    client.log_artifacts(run_id, str(path), artifact_path)
                elif path.is_file():
                    client.log_artifact(run_id, str(path), artifact_path)
        if record.get("move"):
            from lipsweep.core.storage import remove_entries

            try:
                remove_entries(record["source"], record["move"])
            except OSError as err:  # the artifacts are in MLflow; a leftover copy costs storage
                _log.warning(
                    "uploaded, but could not remove %s from %s: %s",
                    ", ".join(record["move"]),
                    redact_uri(record["source"]),
                    err,
                )

    def poll(self) -> None:
        """Queue the writes held behind uploads that have landed since the last call; an
        upload that failed for good raises its :class:`TrackingError` here."""
        if self._uploads is None:
            return
        for run_id in self._uploads.completed():
            left = self._uploading.pop(run_id, 0) - 1
            if left > 0:
                self._uploading[run_id] = left
                continue
            for record in self._held.pop(run_id, []):
                self._queue.append(record)

    @property
    def pending(self) -> int:
        """Writes and uploads not yet delivered (queued, uploading, or held behind one)."""
        held = sum(len(records) for records in self._held.values())
        return len(self._queue) + (len(self._uploads) if self._uploads else 0) + held

    def flush(self, timeout_s: float = 600.0) -> int:
        """Block until every queued write and upload is delivered or ``timeout_s`` passes;
        returns how many are left (an upload that failed for good stays, to be spilled)."""
        deadline = time.monotonic() + timeout_s
        if self._uploads is not None:
            self._uploads.wait(timeout_s)
            try:
                self.poll()
            except TrackingError as err:
                _log.error("%s", err)
        self._queue.flush(max(0.0, deadline - time.monotonic()))
        return self.pending

    def spill(self, path: Path) -> int:
        """Append what is undelivered to ``path`` (JSON lines) and forget it: the queued
        writes, then the uploads, then the writes held behind them (replayed in that order)."""
        n = self._queue.spill(path)
        if self._uploads is not None:
            n += self._uploads.spill(path)
        n += append_records(path, [r for records in self._held.values() for r in records])
        self._held.clear()
        self._uploading.clear()
        return n

    def replay(self, path: Path) -> int:
        """Deliver the writes spilled to ``path`` (blocking, in order), then remove it."""
        return replay_spill(path, lambda r: self._call(r["op"], lambda: self._apply(r)))

    # -- parent -----------------------------------------------------------------------------
    def open_parent(
        self,
        sweep_dir: str,
        name: str,
        params: dict[str, Any],
        space_file: Optional[Path] = None,
        owner: Optional[str] = None,
        adopt: Optional[Callable[[Any], None]] = None,
        datasets: Iterable[dict[str, Any]] = (),
    ) -> str:
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
            run_id = self.create_run(
                name, {TAG_KIND: "sweep", TAG_SWEEP_DIR: sweep_dir, **owner_tags}
            )
            if owner:
                self._check_sole_parent(sweep_dir, run_id)
            self.log_params(run_id, params)
            self.log_datasets(run_id, datasets)
            if space_file is not None:
                self._call(
                    "log_artifact", lambda: self.client.log_artifact(run_id, str(space_file))
                )
        else:
            run_id = found.info.run_id
            if adopt is not None:
                adopt(found)
            self._write("update_run", run_id, status=RUNNING)
            if owner_tags:
                self.set_tags(run_id, owner_tags)
            _log.info("resuming parent run %s", run_id)
        return run_id

    def create_run(self, name: Optional[str], tags: dict[str, str]) -> str:
        """A new RUNNING run of the experiment, tagged with its provenance; its id."""
        run = self._call(
            "create_run",
            lambda: self.client.create_run(
                self.experiment_id, run_name=name, tags={**tags, **provenance_tags()}
            ),
        )
        return run.info.run_id

    def _check_sole_parent(self, sweep_dir: str, run_id: str) -> None:
        runs = self.search(
            f"tags.`{TAG_KIND}` = 'sweep' and tags.`{TAG_SWEEP_DIR}` = '{sweep_dir}'"
        )
        if len(runs) < 2:
            return
        first = min(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))
        if first.info.run_id != run_id:
            self._call("delete_run", lambda: self.client.delete_run(run_id))
            raise SweepBusy(
                f"sweep {sweep_dir} was started at the same time by "
                f"{first.data.tags.get(TAG_OWNER, 'another driver')} "
                f"(MLflow parent run {first.info.run_id})"
            )

    def heartbeat(self, run_id: str) -> None:
        """Tell other drivers this sweep's owner is alive (see :data:`TAG_HEARTBEAT`)."""
        self.set_tags(run_id, {TAG_HEARTBEAT: f"{time.time():.0f}"})

    # -- children ---------------------------------------------------------------------------
    def open_child(self, parent_id: str, trial_id: str, name: str, params: dict[str, Any]) -> str:
        """The child run of ``trial_id`` under ``parent_id``: found again, or created once."""
        run = self.find_child(parent_id, trial_id)
        if run is not None:
            run_id = run.info.run_id
            if run.info.status != RUNNING:
                self._write("update_run", run_id, status=RUNNING)
            steps = self.get_metric_history(run_id, "epoch")
            self._last_step[run_id] = max((int(m.step) for m in steps), default=0)
            return run_id
        run_id = self.create_run(
            name, {TAG_KIND: "trial", TAG_PARENT: parent_id, TAG_TRIAL_ID: trial_id}
        )
        self.log_params(run_id, params)
        self.log_datasets(run_id, [params])
        self._last_step[run_id] = 0
        return run_id

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        items = [(k, redact_uri(v)[:6000]) for k, v in sorted(params.items())]  # e.g. data_dir
        for i in range(0, len(items), 100):
            self._write("log_batch", run_id, params=items[i : i + 100])

    def log_datasets(
        self, run_id: str, configs: Iterable[dict[str, Any]], context: str = "train"
    ) -> None:
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
        batch = [
            (k, float(v), ts, step)
            for k, v in sorted(metrics.items())
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        for i in range(0, len(batch), 500):
            self._write("log_batch", run_id, metrics=batch[i : i + 500])
        if step > 0:
            self._last_step[run_id] = step
        return True

    def set_tags(self, run_id: str, tags: dict[str, Any]) -> None:
        self._write("log_batch", run_id, tags=[(k, str(v)) for k, v in tags.items()])

    def log_together(self, run_id: str, metrics: dict[str, float], tags: dict[str, Any]) -> None:
        """Metrics (step 0) and tags in ONE unbuffered MLflow batch: all land or none do."""
        from mlflow.entities import Metric, RunTag

        ts = int(time.time() * 1000)
        batch_m = [Metric(k, float(v), ts, 0) for k, v in sorted(metrics.items())]
        batch_t = [RunTag(k, str(v)[:5000]) for k, v in sorted(tags.items())]
        self._call(
            "log_batch", lambda: self.client.log_batch(run_id, metrics=batch_m, tags=batch_t)
        )

    def log_artifacts(
        self, run_id: str, local_dir: Path, artifact_path: Optional[str] = None
    ) -> None:
        self._call(
            "log_artifacts",
            lambda: self.client.log_artifacts(run_id, str(local_dir), artifact_path),
            local=str(local_dir),
        )

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

    # -- model registry ---------------------------------------------------------------------
    def register_model_version(
        self,
        name: str,
        source: str,
        run_id: str,
        description: str = "",
        alias: Optional[str] = None,
        model_id: Optional[str] = None,
    ) -> str:
        """Version ``source`` under the registered model ``name``, which is created the first
        time, with ``description``; ``alias`` then points at it. Returns the new version.

        ``source`` is ``runs:/ID/PATH`` or ``models:/<model_id>`` (an MLflow 3 LoggedModel of
        the run, given as ``model_id`` too): the version is then that model's files, and the
        LoggedModel lists the version (tag ``mlflow.modelVersions``, which a tracking server
        sets itself and a database store does not)."""
        self._call("create_registered_model", lambda: self._ensure_registered(name))
        mv = self._call(
            "create_model_version",
            lambda: self._create_version(name, source, run_id, description, model_id),
        )
        if model_id:
            self._call("set_logged_model_tags", lambda: self._list_version(model_id, mv))
        if alias:
            self._call(
                "set_registered_model_alias",
                lambda: self.client.set_registered_model_alias(name, alias, mv.version),
            )
        return str(mv.version)

    def _create_version(
        self, name: str, source: str, run_id: str, description: str, model_id: Optional[str]
    ) -> Any:
        from mlflow.tracking._tracking_service.utils import _use_tracking_uri

        # A database registry looks a models:/<model_id> source up with a client of the
        # GLOBAL tracking URI (MLflow 3's own TODO in SqlAlchemyStore.create_model_version),
        # so that URI is this store's for the call only; a tracking server resolves it itself.
        with _use_tracking_uri(self.tracking_uri):
            return self.client.create_model_version(
                name, source, run_id=run_id, description=description or None, model_id=model_id
            )

    def _list_version(self, model_id: str, mv: Any) -> None:
        from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

        tags = self.client.get_logged_model(model_id).tags
        listed = json.loads(tags.get(MLFLOW_MODEL_VERSIONS) or "[]")
        if not any((e["name"], str(e["version"])) == (mv.name, str(mv.version)) for e in listed):
            entry = {"name": mv.name, "version": mv.version}  # as a server writes it
            self.client.set_logged_model_tags(
                model_id, {MLFLOW_MODEL_VERSIONS: json.dumps([*listed, entry])}
            )

    def _ensure_registered(self, name: str) -> None:
        from mlflow.exceptions import MlflowException

        try:
            self.client.create_registered_model(name)
        except MlflowException as exc:
            if "already exists" not in str(exc).lower() and "RESOURCE_ALREADY_EXISTS" not in str(
                exc
            ):
                raise
