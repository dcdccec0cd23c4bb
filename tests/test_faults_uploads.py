"""Artifact uploads off Tune's control loop, on real Ray, MLflow and storage.

Tune schedules nothing while a callback runs, so ``MlflowSweepCallback.on_trial_complete`` only
queues a finished trial's checkpoint and Lipschitz artifacts. The artifact store here is MLflow's
own local store behind a registered ``gated://`` scheme whose writes wait on a gate the test opens:
a hook that uploaded inline would wait for the gate; the hooks return at once, the run ends FINISHED
only once its artifacts are in, and what is still queued when the driver stops, or while the MLflow
server is down, arrives afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _sweep_helpers import (
    ROOT,
    TINY_FLAT,
    MlflowServer,
    client,
    empty_store,
    mlflow_client,
    ray_sandbox,
    sha256_of,
)
from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

pytestmark = [pytest.mark.faults, pytest.mark.ray]
GATE_S = 60.0  # an unopened gate lets a write through after this long (an inline upload waits)


class GatedArtifactRepository(LocalArtifactRepository):
    """MLflow's local artifact store whose writes wait until the test opens ``gate``."""

    gate = threading.Event()
    started = threading.Event()
    started_at = 0.0  # time.monotonic() of the first write
    marker: Path | None = None  # touched when the first write starts (a trial waits for it)

    def __init__(self, artifact_uri: str, *args: Any, **kwargs: Any) -> None:
        super().__init__("file://" + artifact_uri.removeprefix("gated://"), *args, **kwargs)

    @classmethod
    def _wait(cls) -> None:
        if not cls.started.is_set():
            cls.started_at = time.monotonic()
            cls.started.set()
            if cls.marker is not None:
                cls.marker.touch()
        if not cls.gate.wait(GATE_S):
            cls.gate.set()

    def log_artifact(self, local_file, artifact_path=None):
        self._wait()
        super().log_artifact(local_file, artifact_path)

    def log_artifacts(self, local_dir, artifact_path=None):
        self._wait()
        super().log_artifacts(local_dir, artifact_path)


@pytest.fixture
def gated(tmp_path):
    from mlflow.store.artifact.artifact_repository_registry import (
        _artifact_repository_registry as registry,
    )

    registry.register("gated", GatedArtifactRepository)
    GatedArtifactRepository.gate.clear()
    GatedArtifactRepository.started.clear()
    GatedArtifactRepository.marker = tmp_path / "upload_started"
    yield GatedArtifactRepository
    GatedArtifactRepository.gate.set()


def _npz_bytes(tag: str) -> bytes:
    """The stand-in lipschitz.npz of trial ``tag``: 1 KiB known from the tag alone, since the
    driver removes the source copy once MLflow has it."""
    return hashlib.sha256(tag.encode()).digest() * 32


def _final_folder(root: Path, tag: str) -> Path:
    """What a finished trial's final checkpoint folder holds (trainable.py), small."""
    root.mkdir(parents=True)
    (root / "model.safetensors").write_bytes(os.urandom(4096))
    (root / "config.json").write_text(json.dumps({"tag": tag}))
    (root / "metrics.json").write_text(json.dumps({"acc_clean": 50.0}))
    (root / "artifacts").mkdir()
    (root / "artifacts" / "lipschitz.npz").write_bytes(_npz_bytes(tag))
    return root


def toy_trial(config: dict[str, Any]) -> None:
    """A Tune trial shaped like lipsweep's: per-epoch reports, then a final report with the
    final checkpoint folder. With ``wait_for`` it keeps reporting until that file exists
    (the first artifact write has started), then three more epochs."""
    import tempfile

    from ray import tune

    from lipsweep.sweep.trainable import FINAL_KEY

    flat = config["trial"]
    marker = Path(flat["wait_for"]) if flat.get("wait_for") else None
    epoch, after = 0, 0
    while True:
        epoch += 1
        time.sleep(0.2)
        tune.report({"epoch": epoch, "loss": 1.0 / epoch, "loss_ce": 1.0 / epoch})
        after += marker is not None and marker.exists()
        if (marker is None and epoch >= flat["epochs"]) or after >= 3 or epoch >= 300:
            break
    final = _final_folder(Path(tempfile.mkdtemp()) / "final", flat["label"])
    tune.report(
        {"epoch": epoch, "acc_clean": 50.0, "epochs_done": epoch, FINAL_KEY: 1},
        checkpoint=tune.Checkpoint.from_directory(str(final)),
    )


@pytest.mark.usefixtures("ray_in_this_process")
@pytest.mark.slow
def test_slow_artifact_store_never_blocks_tunes_loop_and_every_artifact_arrives(
    tmp_path, monkeypatch, gated
):
    """Real Ray Tune (2 CPUs) + SQLite MLflow whose artifact store is gated: both trials end
    and ``fit`` returns while no artifact write can land; each hook returns in well under a
    second, and the other trial's results keep being processed during the upload. The driver's
    shutdown (``_deliver``) then delivers every artifact, byte for byte, and only then are
    the runs FINISHED."""
    import ray
    from ray import tune

    from lipsweep.settings.config import TrialConfig
    from lipsweep.sweep.callbacks import MlflowSweepCallback
    from lipsweep.sweep.driver import _deliver
    from lipsweep.tracking import Tracker

    uri = empty_store(tmp_path / "mlflow.db")
    mlflow_client(uri).create_experiment("exp", artifact_location=f"gated://{tmp_path}/art")
    tracker = Tracker(uri, "exp", buffer_writes=True)
    parent = tracker.open_parent("dir", "exp", {})
    timings: list[tuple[str, float, float]] = []  # (hook, start, seconds)

    class Timed(MlflowSweepCallback):
        def on_trial_result(self, *a, **k):
            t0 = time.monotonic()
            super().on_trial_result(*a, **k)
            timings.append(("result", t0, time.monotonic() - t0))

        def on_trial_complete(self, *a, **k):
            t0 = time.monotonic()
            super().on_trial_complete(*a, **k)
            timings.append(("complete", t0, time.monotonic() - t0))

    base = TrialConfig.from_flat(TINY_FLAT).to_flat()
    trials = [
        {**base, "seed": 1, "epochs": 1, "label": "quick"},
        {**base, "seed": 2, "epochs": 1, "label": "long", "wait_for": str(gated.marker)},
    ]
    with ray_sandbox() as box:
        monkeypatch.setenv("RAY_TMPDIR", box.dir)
        monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
        try:
            tuner = tune.Tuner(
                tune.with_resources(toy_trial, {"cpu": 1}),
                param_space={"trial": tune.grid_search(trials)},
                tune_config=tune.TuneConfig(max_concurrent_trials=2),
                run_config=tune.RunConfig(
                    name="exp",
                    storage_path=str(tmp_path / "ray_results"),
                    callbacks=[Timed(tracker, parent)],
                    verbose=0,
                ),
            )
            t0 = time.monotonic()
            results = tuner.fit()
            fit_s = time.monotonic() - t0
        finally:
            ray.shutdown()
    assert not results.errors, results.errors
    print(f"fit {fit_s:.1f}s; slowest hooks:", sorted(timings, key=lambda t: -t[2])[:3])
    assert {h for h, _, _ in timings} == {"result", "complete"}
    assert max(s for _, _, s in timings) < 2.0, timings  # an inline upload waits >= GATE_S
    # the controller went on while an upload was stuck: the long trial's later epochs
    assert sum(h == "result" and t > gated.started_at for h, t, _ in timings) >= 3, timings
    assert not gated.gate.is_set(), "fit returned only after the gate opened by timeout"
    kids = [r for r in client(uri).runs() if r.data.tags.get("lipsweep.kind") == "trial"]
    assert len(kids) == 2 and {r.info.status for r in kids} == {"RUNNING"}
    assert tracker.pending >= 2  # two uploads, each run's end held behind its own

    gated.gate.set()
    spill = tmp_path / "spill.jsonl"
    assert _deliver(tracker, spill, 120) == 0 and not spill.exists()
    reader = client(uri)
    for run in reader.runs():
        if run.data.tags.get("lipsweep.kind") != "trial":
            continue  # the parent: the driver ends it after _deliver
        assert run.info.status == "FINISHED", run.info
        rid = run.info.run_id
        src = Path(run.data.tags["lipsweep.trial.checkpoint"])
        got = reader.download_artifacts(rid, "", tmp_path / "dl" / rid)
        for name in ("model.safetensors", "config.json", "metrics.json"):
            assert sha256_of(got / "checkpoint" / name) == sha256_of(src / name), name
        tag = json.loads((src / "config.json").read_text())["tag"]
        assert (got / "lipschitz" / "lipschitz.npz").read_bytes() == _npz_bytes(tag)
        assert not (src / "artifacts").exists()  # stored once: in MLflow, not in Tune's storage
        assert run.data.metrics["acc_clean"] == 50.0


@pytest.mark.slow
def test_uploads_wait_out_an_mlflow_outage_and_spill_and_replay_past_one(tmp_path, monkeypatch):
    """Real ``mlflow server``, killed: queuing uploads and ends returns at once. One run's
    upload is spilled (the outage outlasts the flush) and replayed by a new tracker; the
    other's is retried by the background thread and lands when the server is back. Each run
    ends FINISHED after its artifacts, in the spill file too."""
    from lipsweep.tracking import Tracker

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    src = {t: _final_folder(tmp_path / t, t) for t in ("a", "b")}
    items = [("artifacts", "lipschitz"), ("model.safetensors", "checkpoint")]
    server = MlflowServer(tmp_path)
    server.start()
    try:
        # retries at most 1 s apart: the restarted server is used at once, not up to 30 s later
        tr = Tracker(
            server.uri, "exp", retries=1, backoff_s=0.2, max_backoff_s=1.0, buffer_writes=True
        )
        parent = tr.open_parent("sweep-dir", "exp", {})
        run = {t: tr.open_child(parent, t, t, {"t": t}) for t in ("a", "b")}
        server.stop()
        t0 = time.monotonic()
        tr.log_metrics(run["a"], {"acc_clean": 1.0}, step=0)
        tr.log_artifacts_later(run["a"], str(src["a"]), items)
        tr.end(run["a"], "FINISHED")
        assert tr.flush(timeout_s=2) == 3  # metrics, upload, end: nothing lands, nothing lost
        spill = tmp_path / "spill.jsonl"
        assert tr.spill(spill) == 3 and tr.pending == 0
        ops = [json.loads(line)["op"] for line in spill.read_text().splitlines()]
        assert ops == ["log_batch", "log_artifacts", "set_terminated"]
        tr.log_artifacts_later(run["b"], str(src["b"]), items)
        tr.end(run["b"], "FINISHED")
        assert time.monotonic() - t0 < 10  # 2 s of it the flush; the calls never waited
        assert tr.pending == 2
        server.start()
        assert tr.flush(timeout_s=120) == 0  # the thread's retries got through
        assert Tracker(server.uri, "exp", buffer_writes=True).replay(spill) == 3
        assert not spill.exists()
        reader = client(server.uri)
        for t in ("a", "b"):
            got = reader.get_run(run[t])
            assert got.info.status == "FINISHED"
            dl = reader.download_artifacts(run[t], "", tmp_path / "dl" / t)
            assert sha256_of(dl / "checkpoint" / "model.safetensors") == sha256_of(
                src[t] / "model.safetensors"
            )
            assert sha256_of(dl / "lipschitz" / "lipschitz.npz") == sha256_of(
                src[t] / "artifacts" / "lipschitz.npz"
            )
        assert reader.get_run(run["a"]).data.metrics["acc_clean"] == 1.0
    finally:
        server.stop()


def test_a_run_ends_only_after_its_artifacts_and_a_lost_folder_is_loud(tmp_path, gated):
    """SQLite store, no Ray: the end of a run waits behind its upload (other runs' writes do
    not); a ``file://`` source is fetched like ``s3://``; a source folder that is gone fails
    loudly on the caller's thread, stays counted and is spilled, not dropped. A tracker with
    an upload in flight still pickles (Tune pickles its callbacks)."""
    from lipsweep.tracking import Tracker, TrackingError

    uri = empty_store(tmp_path / "mlflow.db")
    mlflow_client(uri).create_experiment("exp", artifact_location=f"gated://{tmp_path}/art")
    tr = Tracker(uri, "exp", buffer_writes=True)
    parent = tr.open_parent("dir", "exp", {})
    a, b, c = (tr.open_child(parent, t, t, {}) for t in "abc")
    src = _final_folder(tmp_path / "src", "a")
    items = [("model.safetensors", "checkpoint"), ("artifacts", "lipschitz")]
    tr.log_artifacts_later(a, f"file://{src}", items, move=["artifacts"])
    tr.end(a, "FINISHED")
    tr.end(b, "FINISHED")
    assert gated.started.wait(10)
    assert pickle.loads(pickle.dumps(tr))._uploads is None
    assert tr.flush(timeout_s=0.5) == 2  # the upload and a's end; b ended
    status = {r.info.run_id: r.info.status for r in client(uri).runs()}
    assert (status[a], status[b]) == ("RUNNING", "FINISHED")
    assert (src / "artifacts" / "lipschitz.npz").is_file()  # kept until the upload lands
    gated.gate.set()
    assert tr.flush(timeout_s=30) == 0
    assert client(uri).get_run(a).info.status == "FINISHED"
    dl = client(uri).download_artifacts(a, "checkpoint", tmp_path / "dl")
    assert sha256_of(dl / "model.safetensors") == sha256_of(src / "model.safetensors")
    # moved: in MLflow once, gone from the source; the rest stays
    assert not (src / "artifacts").exists() and (src / "model.safetensors").is_file()
    lip = client(uri).download_artifacts(a, "lipschitz", tmp_path / "dl2")
    assert (Path(lip) / "lipschitz.npz").stat().st_size == 1024

    tr.log_artifacts_later(c, str(tmp_path / "gone"), [("model.safetensors", "checkpoint")])
    tr.end(c, "FINISHED")
    tr.uploads.wait(30)
    with pytest.raises(TrackingError, match="does not exist"):
        tr.poll()
    assert tr.flush(timeout_s=1) == 2
    assert tr.spill(tmp_path / "spill.jsonl") == 2 and tr.pending == 0
    assert client(uri).get_run(c).info.status == "RUNNING"
