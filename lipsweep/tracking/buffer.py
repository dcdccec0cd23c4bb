"""Writes that outlive an MLflow outage: an ordered in-memory queue, and its spill file.

A write that returns nothing (metrics, params, tags, run status) is a JSON-able record. While
the server is unreachable, records queue, in order, in a bounded deque that is retried on
every later call (at most every ``max_backoff_s``, 30 s by default) and drained by
:meth:`WriteQueue.flush`. What cannot be delivered by the end is appended to a JSON-lines spill
file and replayed on ``--resume``: a write is delivered, still queued, or on disk, never
silently dropped.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

from lipsweep.tracking.schema import TrackingError, local_io_cause, tracking_error, transient
from lipsweep.tracking.uri import redact_uri

_log = logging.getLogger("lipsweep.tracking")
Record = dict[str, Any]


class WriteQueue:
    """Queued writes, delivered in order by ``apply`` (which raises on failure)."""

    def __init__(
        self,
        apply: Callable[[Record], None],
        shown_uri: str,
        backoff_s: float,
        max_pending: int,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.apply, self.shown_uri = apply, shown_uri
        self.backoff_s, self.max_pending = backoff_s, max_pending
        self.max_backoff_s = max_backoff_s
        self.pending: deque[Record] = deque()
        self._next_try = 0.0
        self._flush_delay = 0.0

    def __len__(self) -> int:
        return len(self.pending)

    def append(self, record: Record) -> None:
        """Queue ``record`` behind earlier writes; a full queue raises TrackingError."""
        if len(self.pending) >= self.max_pending:
            raise TrackingError(
                f"MLflow at {self.shown_uri} unreachable for too long: "
                f"{len(self.pending)} writes buffered (max_pending)"
            )
        self.pending.append(record)
        self.drain(force=len(self.pending) == 1)

    def drain(self, force: bool = False) -> None:
        """Send queued writes in order until one fails; later attempts back off to
        ``max_backoff_s``."""
        if not self.pending or (not force and time.monotonic() < self._next_try):
            return
        while self.pending:
            record = self.pending[0]
            try:
                self.apply(record)
            except Exception as exc:  # noqa: BLE001 - MLflow raises many types for I/O
                if not transient(exc) or local_io_cause(exc):
                    raise tracking_error(record["op"], self.shown_uri, exc) from exc
                self._flush_delay = min(
                    max(self._flush_delay * 2, self.backoff_s), self.max_backoff_s
                )
                self._next_try = time.monotonic() + self._flush_delay
                _log.warning(
                    "MLflow unreachable (%s: %s); buffering writes (%d pending), retrying in %.0fs",
                    type(exc).__name__,
                    redact_uri(exc)[:200],
                    len(self.pending),
                    self._flush_delay,
                )
                return
            self.pending.popleft()
        if self._flush_delay:
            _log.warning("MLflow reachable again at %s; buffered writes delivered", self.shown_uri)
        self._flush_delay = 0.0

    def flush(self, timeout_s: float) -> int:
        """Block until every queued write is delivered or ``timeout_s`` passes; returns how
        many are left."""
        deadline = time.monotonic() + timeout_s
        while self.pending and time.monotonic() < deadline:
            self.drain(force=True)
            if self.pending:
                time.sleep(max(0.0, min(self._next_try, deadline) - time.monotonic()))
        return len(self.pending)

    def spill(self, path: Path) -> int:
        """Append the queued writes to ``path`` (JSON lines) and empty the queue."""
        n = append_records(path, list(self.pending))
        self.pending.clear()
        return n


def append_records(path: Path, records: list[Record]) -> int:
    """Append ``records`` to the spill file ``path`` (JSON lines, fsync'ed); how many."""
    if records:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as fh:
            for record in records:
                fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    return len(records)


def replay_spill(path: Path, deliver: Callable[[Record], None]) -> int:
    """Deliver the writes spilled to ``path`` in order, then remove it; on a TrackingError
    the file keeps what is left (and only that) for the next try."""
    if not path.is_file():
        return 0
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for i, record in enumerate(records):
        try:
            deliver(record)
        except TrackingError:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in records[i:]))
            os.replace(tmp, path)
            raise
    path.unlink()
    _log.info("delivered %d MLflow writes spilled by an earlier run (%s)", len(records), path)
    return len(records)
