"""Artifact uploads off Tune's control loop: a bounded queue drained by one background thread.

Copying a trial's checkpoint into MLflow (hundreds of MB for ViT-B, and a download first when
Tune's storage is ``s3://``) took seconds to minutes inside Tune's event loop, which schedules
nothing while a callback runs. :class:`UploadQueue` takes an upload as a
JSON-able record and returns at once; its thread delivers the records in order, one at a time,
retrying transient failures (an MLflow outage) with backoff up to ``max_backoff_s`` (30 s by
default). The controller learns which runs' uploads landed from :meth:`UploadQueue.completed`
(the writes that must follow them, such as the run's end, wait in
:class:`lipsweep.tracking.writer.Tracker` until then). What is not delivered when the driver
stops is spilled like any buffered write and replayed on ``--resume``: an upload is
delivered, still queued, or on disk, never silently dropped.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from pathlib import Path
from typing import Callable, Optional

from lipsweep.tracking.buffer import Record, append_records
from lipsweep.tracking.schema import TrackingError, local_io_cause, tracking_error, transient
from lipsweep.tracking.uri import redact_uri

_log = logging.getLogger("lipsweep.tracking")
STOP_WAIT_S = 60.0  # spill: how long an upload in flight may finish before it is spilled too


class UploadQueue:
    """Upload records delivered in order by ``upload`` (which raises on failure) on a thread."""

    def __init__(
        self,
        upload: Callable[[Record], None],
        shown_uri: str,
        backoff_s: float,
        max_pending: int,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.upload, self.shown_uri = upload, shown_uri
        self.backoff_s, self.max_pending = backoff_s, max_pending
        self.max_backoff_s = max_backoff_s
        self.pending: deque[Record] = deque()
        self._done: deque[str] = deque()
        self._failure: Optional[TrackingError] = None
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._stop = False

    def __len__(self) -> int:
        with self._cond:
            return len(self.pending)

    def submit(self, record: Record) -> None:
        """Queue ``record`` behind earlier uploads and return; a full queue raises."""
        with self._cond:
            if len(self.pending) >= self.max_pending:
                raise TrackingError(
                    f"MLflow at {self.shown_uri} unreachable for too long: "
                    f"{len(self.pending)} artifact uploads queued (max_pending)"
                )
            self.pending.append(record)
            self._stop = False
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._work, name="lipsweep-mlflow-uploads", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def completed(self) -> list[str]:
        """Run ids whose upload landed since the last call, in order; an upload that failed
        for good raises its TrackingError here, on the caller's thread (it stays queued)."""
        with self._cond:
            done = list(self._done)
            self._done.clear()
            if self._failure is not None and not done:
                raise self._failure
        return done

    def wait(self, timeout_s: float) -> int:
        """Block until every upload landed (or one failed for good) or ``timeout_s`` passes;
        returns how many are left."""
        with self._cond:
            self._cond.wait_for(lambda: not self.pending or self._failure, timeout_s)
            return len(self.pending)

    def spill(self, path: Path) -> int:
        """Stop the thread (an upload in flight gets ``STOP_WAIT_S`` to finish), append what
        is left to ``path`` (JSON lines) and empty the queue; returns how many."""
        thread = self._thread
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if thread is not None:
            thread.join(STOP_WAIT_S)  # one still in flight after that is spilled as well:
        with self._cond:  # delivering an upload twice rewrites the same files
            records = list(self.pending)
            self.pending.clear()
            self._failure = None
        return append_records(path, records)

    # -- the thread ---------------------------------------------------------------------------
    def _work(self) -> None:
        delay = 0.0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stop or (self.pending and not self._failure))
                if self._stop:
                    return
                record = self.pending[0]
            try:
                self.upload(record)
            except Exception as exc:  # noqa: BLE001 - MLflow raises many types for I/O
                shown = f"{type(exc).__name__}: {redact_uri(exc)}"
                if not transient(exc) or local_io_cause(exc):
                    what = f"{record['op']} of run {record['run_id']}"
                    with self._cond:
                        self._failure = tracking_error(
                            what, self.shown_uri, exc, record.get("source")
                        )
                        self._cond.notify_all()
                    _log.error("artifact upload failed: %s", shown[:500])
                    return
                delay = min(max(delay * 2, self.backoff_s), self.max_backoff_s)
                _log.warning(
                    "MLflow unreachable for an artifact upload (%s); %d uploads queued, "
                    "retrying in %.0fs",
                    shown[:200],
                    len(self),
                    delay,
                )
                with self._cond:
                    self._cond.wait_for(lambda: self._stop, delay)
                continue
            if delay:
                _log.warning("MLflow reachable again; queued artifact uploads resume")
            delay = 0.0
            with self._cond:
                if self.pending and self.pending[0] is record:  # not spilled meanwhile
                    self.pending.popleft()
                self._done.append(record["run_id"])
                self._cond.notify_all()
