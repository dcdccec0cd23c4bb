"""lipsweep.tracking's two halves on one real SQLite MLflow store: what the writer writes,
the reader (the one read API) reads back; the model registry call is idempotent on the name."""

from __future__ import annotations

import time
from pathlib import Path

from _sweep_helpers import empty_store

from lipsweep.tracking import FINISHED, KILLED, Tracker, TrackingReader


def test_the_reader_reads_what_the_writer_wrote(tmp_path: Path) -> None:
    uri = empty_store(tmp_path / "mlflow.db")
    writer = Tracker(uri, "exp")
    old = writer.open_parent("dir-a", "sweep-a", {"num_trials": 2})
    time.sleep(0.01)
    new = writer.open_parent("dir-b", "sweep-b", {})
    done = writer.open_child(new, "t0", "trial-0", {"lr": 0.1})
    stopped = writer.open_child(new, "t1", "trial-1", {})
    for epoch in (1, 2):
        writer.log_metrics(done, {"loss": 1.0 / epoch, "epoch": epoch}, step=epoch)
    writer.end(done, FINISHED)
    writer.end(stopped, KILLED)
    art = tmp_path / "art"
    art.mkdir()
    (art / "model.txt").write_text("weights")
    writer.log_artifacts(done, art, "checkpoint")

    reader = TrackingReader(uri, "exp")
    assert reader.experiment_names() == ["Default", "exp"]
    assert [r.info.run_id for r in reader.sweep_parents()] == [new, old]
    assert [r.info.run_id for r in reader.finished_trials()] == [done]
    assert reader.find_child(new, "t1").info.run_id == stopped
    assert len(reader.runs()) == 4 and reader.get_run(done).data.params == {"lr": "0.1"}
    assert [(m.step, m.value) for m in reader.get_metric_history(done, "loss")] == [
        (1, 1.0),
        (2, 0.5),
    ]
    assert [a.path for a in reader.list_artifacts(done, "checkpoint")] == ["checkpoint/model.txt"]
    local = reader.download_artifacts(done, "checkpoint", tmp_path / "dl")
    assert (local / "model.txt").read_text() == "weights"
    assert TrackingReader(uri, "nope").runs() == []

    source = f"runs:/{done}/checkpoint"
    assert writer.register_model_version("m", source, done) == "1"
    assert writer.register_model_version("m", source, done) == "2"  # the name exists: reused


def test_max_backoff_s_caps_every_wait_between_retries() -> None:
    """Blocking calls, buffered writes and background uploads all wait at most max_backoff_s
    between tries (the outage tests set it low; 30 s by default). No server: the failures are
    transient errors raised by the call itself."""
    from lipsweep.tracking import TrackingError

    def down(*_: object) -> None:
        raise ConnectionError("connection refused")

    tr = Tracker("sqlite:///unused.db", "e", retries=6, backoff_s=0.1, max_backoff_s=0.1)
    t0 = time.monotonic()
    try:
        tr._call("log_batch", down)
    except TrackingError:
        pass
    assert time.monotonic() - t0 < 3.0  # 6 waits of 0.1 s; uncapped: 0.1 * (2**6 - 1) = 6.3 s

    writes = Tracker("sqlite:///unused.db", "e", backoff_s=1.0, max_backoff_s=2.0)._queue
    writes.apply = down
    writes.append({"op": "log_batch", "run_id": "r"})
    for _ in range(5):
        writes.drain(force=True)
    assert writes._flush_delay == 2.0  # uncapped: 32 s

    tries: list[float] = []

    def upload(record: dict) -> None:
        tries.append(time.monotonic())
        if len(tries) < 7:
            down()

    up = Tracker("sqlite:///unused.db", "e", backoff_s=0.1, max_backoff_s=0.1, buffer_writes=True)
    up._upload_in_thread = upload  # the queue's upload function, read when it is created
    queue = up.uploads
    queue.submit({"op": "log_artifacts", "run_id": "r"})
    assert queue.wait(30) == 0
    assert len(tries) == 7 and tries[-1] - tries[0] < 3.0  # uncapped: 6.3 s


def _raised(make_inner, make_outer=None) -> BaseException:
    """The exception ``make_outer`` raises while handling ``make_inner``'s (as MLflow's REST
    client wraps a requests error), or ``make_inner``'s alone."""
    try:
        try:
            raise make_inner()
        except BaseException:
            if make_outer is None:
                raise
            raise make_outer()  # noqa: B904 - implicit context, as MLflow raises it
    except BaseException as exc:  # noqa: BLE001
        return exc


def test_transient_is_decided_by_type_and_code_not_message_text() -> None:
    """A connection failure wrapped by MLflow's REST client, an MLflow 503 /
    429 / locked store, and a busy SQLite file are retried; a missing run, a bad request and
    an error that merely *says* "connection" or "503" are not."""
    import sqlite3

    import requests
    from mlflow.exceptions import MlflowException, RestException
    from mlflow.protos.databricks_pb2 import (
        INVALID_PARAMETER_VALUE,
        RESOURCE_DOES_NOT_EXIST,
        TEMPORARILY_UNAVAILABLE,
    )

    from lipsweep.tracking.schema import transient

    def api_failed() -> MlflowException:
        return MlflowException("API request to http://127.0.0.1:1/api failed with exception x")

    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorcode = 5  # what sqlite3 sets on a busy database (Python >= 3.11)
    retried = [
        ConnectionRefusedError(111, "refused"),
        _raised(lambda: requests.exceptions.ConnectionError("x"), api_failed),
        _raised(lambda: requests.exceptions.RetryError("too many 503 error responses"), api_failed),
        MlflowException("locked", error_code=TEMPORARILY_UNAVAILABLE),
        RestException({"error_code": "REQUEST_LIMIT_EXCEEDED", "message": "slow down"}),
        _raised(lambda: busy, lambda: RuntimeError("wrapped")),
    ]
    refused = [
        MlflowException("Run 'abc' not found", error_code=RESOURCE_DOES_NOT_EXIST),
        RestException({"error_code": "INVALID_PARAMETER_VALUE", "message": "bad key"}),
        MlflowException("bad", error_code=INVALID_PARAMETER_VALUE),
        ValueError("connection timed out, 503, temporarily unavailable"),  # text alone
        MlflowException("failed with error code 503"),  # no code: not by its text
        _raised(lambda: ValueError("x"), api_failed),
    ]
    assert [transient(e) for e in retried] == [True] * len(retried)
    assert [transient(e) for e in refused] == [False] * len(refused)


def test_artifact_downloads_draw_no_progress_bars_into_a_log(tmp_path, capsys, monkeypatch):
    """MLflow's tqdm bars ('Downloading artifacts: 100%|...') stay out of the logs of report
    and export (both download through TrackingReader): with stderr not a terminal they are off,
    as under `make` they always are."""
    import numpy as np

    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    monkeypatch.chdir(tmp_path)  # a SQLite store's artifacts go to ./mlruns (MLflow's default)
    uri = empty_store(tmp_path / "m.db")
    tracker = Tracker(uri, "e")
    parent = tracker.open_parent(str(tmp_path / "ray"), "e", {"space": "test"})
    lip = tmp_path / "lip"
    lip.mkdir()
    for name in ("a", "b"):
        np.savez(lip / f"{name}.npz", x=np.linspace(1.0, 2.0, 8))
    rid = tracker.open_child(parent, "t0", "t0", {"regularizer": "none", "seed": 0})
    tracker.log_artifacts(rid, lip, "lipschitz")
    tracker.end(rid, FINISHED)
    capsys.readouterr()
    got = TrackingReader(uri, "e").download_artifacts(rid, "lipschitz", tmp_path / "dl")
    err = capsys.readouterr().err
    assert sorted(p.name for p in Path(got).iterdir()) == ["a.npz", "b.npz"]
    assert "Downloading artifacts" not in err and "%|" not in err, err
