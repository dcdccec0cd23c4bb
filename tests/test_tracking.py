"""lipsweep.tracking's two halves on one real SQLite MLflow store: what the writer writes,
the reader (the one read API) reads back; the model registry call is idempotent on the name."""

from __future__ import annotations

import time
from pathlib import Path

from _sweep_helpers import sqlite_uri

from lipsweep.tracking import FINISHED, KILLED, Tracker, TrackingReader


def test_the_reader_reads_what_the_writer_wrote(tmp_path: Path) -> None:
    uri = sqlite_uri(tmp_path)
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
