"""Fault injection: each test breaks one thing for real and asserts what survived.

Run alone with ``pytest -m faults``. The Ray tests (marked ``slow``) use a real local Ray in a
private RAY_TMPDIR and a real MLflow (SQLite store, or an ``mlflow server`` on 127.0.0.1), and
kill only processes they started. docs/reliability.md tabulates each fault, what happens and
its test.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _sweep_helpers import (
    FOUR,
    JASMIN_MEAN,
    NONE,
    TINY_FLAT,
    MlflowServer,
    children,
    client,
    cmdline,
    empty_store,
    parents,
    ray_sandbox,
    run_sweep_cli,
    runs,
    sha256_of,
    steps,
    sweep_cmd,
    sweep_process,
    trial_workers,
    wait_for,
    write_space,
)

pytestmark = [pytest.mark.faults, pytest.mark.ray]

SPEC_METRICS = (
    "acc_clean",
    "acc_fgsm_2",
    "acc_fgsm_4",
    "acc_pgd_2",
    "acc_pgd_4",
    "acc_aa_2",
    "lip_jacobian_mean",
    "lip_jacobian_median",
    "lip_jacobian_p90",
    "lip_jacobian_p99",
    "lip_jacobian_max",
)
EPOCH_METRICS = ("loss", "loss_ce", "loss_reg", "epoch_acc_clean", "lr", "epoch")
THREE = [NONE, JASMIN_MEAN, FOUR[3]]


def _assert_complete_history(uri: str, run, epochs: int) -> None:
    """Every epoch metric exactly at steps 1..E; each final metric logged exactly once."""
    assert run.info.status == "FINISHED", (run.info.run_id, run.info.status)
    for key in EPOCH_METRICS:
        assert steps(uri, run.info.run_id, key) == list(range(1, epochs + 1)), key
    for key in SPEC_METRICS:  # acc_clean included: the per-epoch value is epoch_acc_clean
        assert steps(uri, run.info.run_id, key) == [0], key
    assert run.data.metrics["epochs_done"] == epochs


def _log_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


# ---------------------------------------------------------------------------------------------
# 1. A trial's worker is SIGKILLed twice mid-training
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_worker_killed_twice_resumes_from_checkpoint_without_gaps(tmp_path):
    epochs = 6
    space = write_space(tmp_path, [NONE], epochs=epochs, fixed={"train_size": 512}, max_failures=2)
    uri, log = empty_store(tmp_path / "mlflow.db"), tmp_path / "sweep.log"
    killed = []
    with ray_sandbox() as box:
        with sweep_process(sweep_cmd(tmp_path, space), tmp_path, box, log) as proc:
            for after_epoch in (1, 3):  # kill while the next epoch is being trained
                wait_for(
                    lambda: _kid_epochs(uri) >= after_epoch,
                    900,
                    f"epoch {after_epoch} in MLflow",
                    proc,
                    poll_s=0.2,
                )
                time.sleep(0.5)
                workers = trial_workers(proc.pid)
                assert workers, "no Tune worker of this sweep to kill"
                assert not set(workers) & set(killed), "the killed worker is still alive"
                os.kill(workers[0], signal.SIGKILL)
                killed.append(workers[0])
                wait_for(lambda: workers[0] not in trial_workers(proc.pid), 60, "worker gone")
            proc.wait(timeout=1200)
    out = _log_text(log)
    assert proc.returncode == 0, out[-4000:]
    (kid,) = children(uri)
    _assert_complete_history(uri, kid, epochs)
    assert out.count("RETRYING from its last checkpoint") == 2, out[-3000:]
    # Resumed, not restarted: each failure costs at most the epoch in flight. A restart from
    # scratch after the second kill (epoch >= 3 done) would train >= 3 epochs again.
    trained = re.findall(r"\] epoch (\d+) ", out)
    print("epochs trained, in order:", trained, "killed workers:", killed)
    assert epochs <= len(trained) <= epochs + len(killed), trained


def _kid_epochs(uri: str) -> int:
    try:
        kids = children(uri)
        return len(steps(uri, kids[0].info.run_id)) if kids else 0
    except Exception:  # noqa: BLE001 - the store may not exist yet
        return 0


# ---------------------------------------------------------------------------------------------
# 2. The driver is SIGKILLed mid-sweep, then resumed
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_driver_sigkill_then_resume_finishes_each_trial_exactly_once(tmp_path):
    epochs = 3
    space = write_space(tmp_path, THREE, epochs=epochs)
    uri, log = empty_store(tmp_path / "mlflow.db"), tmp_path / "sweep.log"
    with ray_sandbox() as box:
        with sweep_process(sweep_cmd(tmp_path, space), tmp_path, box, log) as proc:
            # kill right after the first trial finished: others running / pending
            wait_for(lambda: _finished(uri) >= 1, 1200, "a finished trial", proc, poll_s=0.2)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        (parent,) = parents(uri)
        assert parent.info.status == "RUNNING"  # nobody could close it: that is the fault
        assert _finished(uri) < 3
        # Nothing of its Ray is left, the watchdog included (found by RAY_TMPDIR).
        # Before local_ray's watchdog, Ray's two agents lived about 60 s after the driver.
        killed_at = time.monotonic()
        while box.leftovers() and time.monotonic() - killed_at < 15:
            time.sleep(0.2)
        gone_after = time.monotonic() - killed_at
        orphans = [(pid, cmdline(pid)) for pid in box.leftovers()]
        assert not orphans, orphans
        resumed = run_sweep_cli(sweep_cmd(tmp_path, space, "--resume"), tmp_path, box)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr[-4000:]
        wait_for(lambda: not box.leftovers(), 60, "the resumed sweep's Ray to exit")
    kids = children(uri)
    assert len(kids) == 3 and len({r.data.tags["lipsweep.trial_id"] for r in kids}) == 3
    for r in kids:
        _assert_complete_history(uri, r, epochs)
    assert all(r.info.status != "RUNNING" for r in runs(uri))
    (parent,) = parents(uri)
    assert parent.info.status == "FINISHED"
    assert "3 finished, 0 stopped early, 0 failed, 0 not run, of 3 trials" in resumed.stdout
    print(
        f"the killed driver's Ray gone {gone_after:.1f} s after its exit",
        "| trials re-run by Tune but already finished in MLflow:",
        resumed.stderr.count("already completed in MLflow"),
        "| of them reported again from their final checkpoint, not re-evaluated:",
        resumed.stderr.count("reported again, not re-evaluated"),
    )


def _finished(uri: str) -> int:
    try:
        return sum(r.info.status == "FINISHED" for r in children(uri))
    except Exception:  # noqa: BLE001
        return 0


# ---------------------------------------------------------------------------------------------
# 3. The MLflow tracking server goes away mid-sweep and comes back
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_tracking_server_outage_loses_nothing(tmp_path):
    epochs = 4
    space = write_space(tmp_path, [NONE], epochs=epochs, fixed={"train_size": 512})
    server = MlflowServer(tmp_path)
    server.start()
    store = f"sqlite:///{tmp_path / 'server.db'}"  # read directly while the server is down
    log = tmp_path / "sweep.log"
    try:
        with ray_sandbox() as box:
            with sweep_process(
                sweep_cmd(tmp_path, space, tracking_uri=server.uri), tmp_path, box, log
            ) as proc:
                wait_for(
                    lambda: _kid_epochs(store) >= 1, 900, "epoch 1 in MLflow", proc, poll_s=0.2
                )
                server.stop()
                down, stored = time.time(), _kid_epochs(store)
                assert stored <= epochs - 2
                # Trials keep training while MLflow is down: later epochs reach the driver.
                wait_for(
                    lambda: re.search(rf"\] epoch {stored + 2} ", _log_text(log)) is not None,
                    600,
                    f"epoch {stored + 2} during the outage",
                    proc,
                )
                assert "buffering writes" in _log_text(log)
                assert _kid_epochs(store) == stored  # nothing reached the store meanwhile
                time.sleep(max(0.0, 15 - (time.time() - down)))  # an outage of >= 15 s
                server.start()
                proc.wait(timeout=1200)
        out = _log_text(log)
        assert proc.returncode == 0, out[-4000:]
        assert "buffered writes delivered" in out
        (kid,) = children(server.uri)
        _assert_complete_history(server.uri, kid, epochs)
        arts = {a.path for a in client(server.uri).list_artifacts(kid.info.run_id)}
        assert {"checkpoint", "lipschitz"} <= arts
        assert all(r.info.status != "RUNNING" for r in runs(server.uri))
        assert not list(tmp_path.rglob("lipsweep_mlflow_pending.jsonl"))
    finally:
        server.stop()


@pytest.mark.slow
def test_tracker_buffers_spills_and_replays_across_an_outage(tmp_path, monkeypatch):
    """The fallback when an outage outlasts the sweep: nothing dropped, all on disk, replayed."""
    from lipsweep.tracking import Tracker, TrackingError

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # restored after the test
    server = MlflowServer(tmp_path)
    server.start()
    try:
        tr = Tracker(
            server.uri, "exp", retries=1, backoff_s=0.1, buffer_writes=True, max_pending=50
        )
        parent = tr.open_parent("sweep-dir", "exp", {"a": 1})
        run = tr.open_child(parent, "t1", "t1", {"lr": 0.1})
        tr.log_metrics(run, {"loss": 1.0, "epoch": 1}, step=1)
        server.stop()
        t0 = time.time()
        for e in range(2, 6):
            tr.log_metrics(run, {"loss": 1.0 / e, "epoch": e}, step=e)
        tr.end(run, "FINISHED")
        assert time.time() - t0 < 15  # writes do not wait for the server
        assert tr.pending == 5  # four metric batches and the status, in order
        assert tr.flush(timeout_s=3) == 5  # still down: nothing delivered, nothing dropped
        spill = tmp_path / "spill.jsonl"
        assert tr.spill(spill) == 5 and tr.pending == 0
        with pytest.raises(TrackingError, match="max_pending"):  # full: loud, not lossy
            for i in range(100):
                tr.set_tags(run, {"x": i})
        assert tr.pending == 50
        server.start()
        assert Tracker(server.uri, "exp", buffer_writes=True).replay(spill) == 5
        assert not spill.exists()
        assert tr.flush(timeout_s=120) == 0
        c = client(server.uri)
        hist = c.get_metric_history(run, "loss")
        assert [(m.step, m.value) for m in hist] == [(e, 1.0 / e) for e in range(1, 6)]
        got = c.get_run(run)
        assert got.info.status == "FINISHED" and got.data.tags["x"] == "49"
    finally:
        server.stop()


def _driver(uri: str):
    """What one sweep driver holds: a fresh Tracker and the sweep callback on its parent run
    (adopted when an earlier driver opened it)."""
    from lipsweep.sweep.callbacks import MlflowSweepCallback
    from lipsweep.tracking import Tracker

    tracker = Tracker(uri, "exp")
    return tracker, MlflowSweepCallback(tracker, tracker.open_parent("dir", "exp", {}))


def test_epochs_lost_with_a_killed_driver_are_backfilled_from_the_checkpoint(tmp_path):
    """Driver SIGKILLed while MLflow was down: its buffered epochs died with it. The resumed
    trial's next report is past a gap; the callback fills it from the checkpoint history."""
    from types import SimpleNamespace

    from ray import tune

    from lipsweep.settings.config import TrialConfig
    from lipsweep.trial.checkpoint import save_checkpoint

    uri = empty_store(tmp_path / "mlflow.db")
    history = [
        {
            "loss": 2.0 / e,
            "loss_ce": 2.0 / e,
            "loss_reg": 0.0,
            "acc_clean": 10.0 * e,
            "lr": 1e-3,
            "epoch": float(e),
        }
        for e in (1, 2, 3)
    ]
    ckpt = save_checkpoint(
        tmp_path / "ckpt",
        3,
        {"w": torch.zeros(2)},
        {"state": {}, "param_groups": []},
        {},
        {"history": history},
    )
    flat = TrialConfig.from_flat(TINY_FLAT).to_flat()
    trial = SimpleNamespace(
        trial_id="t1",
        config={"trial": flat},
        last_result={},
        checkpoint=tune.Checkpoint.from_directory(str(ckpt)),
    )
    tracker, cb = _driver(uri)
    cb.on_trial_result(0, [], trial, dict(history[0]))  # epoch 1 reached MLflow
    # a new driver (fresh tracker) resumes; the trial restored at epoch 3 reports epoch 4
    tracker, cb = _driver(uri)
    cb.on_trial_start(0, [], trial)
    cb.on_trial_result(0, [], trial, {**history[0], "loss": 0.4, "epoch": 4.0})
    (kid,) = children(uri)
    loss = client(uri).get_metric_history(kid.info.run_id, "loss")
    assert [(m.step, m.value) for m in loss] == [(1, 2.0), (2, 1.0), (3, 2.0 / 3), (4, 0.4)]
    assert steps(uri, kid.info.run_id, "epoch_acc_clean") == [1, 2, 3, 4]


def test_final_metrics_logged_once_when_the_driver_died_before_ending_the_run(tmp_path):
    """A driver SIGKILLed after logging a trial's final metrics but before ending its run (CI
    one run caught acc_clean logged twice): the resumed trial completes again, and
    its final metrics are not logged a second time; the run ends FINISHED."""
    from types import SimpleNamespace

    from ray import tune

    from lipsweep.settings.config import TrialConfig
    from lipsweep.sweep.trainable import FINAL_KEY
    from lipsweep.trial.checkpoint import save_checkpoint

    uri = empty_store(tmp_path / "mlflow.db")
    ckpt = save_checkpoint(
        tmp_path / "ckpt", 1, {"w": torch.zeros(2)}, {"state": {}, "param_groups": []}, {}, {}
    )
    final = {"acc_clean": 30.0, "acc_pgd_4": 10.0, "epochs_done": 1.0}
    trial = SimpleNamespace(
        trial_id="t1",
        config={"trial": TrialConfig.from_flat(TINY_FLAT).to_flat()},
        last_result={**final, FINAL_KEY: True},
        checkpoint=tune.Checkpoint.from_directory(str(ckpt)),
    )
    tracker, cb = _driver(uri)
    cb.on_trial_start(0, [], trial)
    tracker.log_metrics(cb.runs["t1"], final, step=0)  # ... and the driver dies here
    tracker.flush()
    tracker, cb = _driver(uri)
    cb.on_trial_start(0, [], trial)
    cb.on_trial_complete(0, [], trial)
    tracker.flush()
    (kid,) = children(uri)
    assert kid.info.status == "FINISHED"
    for key in final:
        assert steps(uri, kid.info.run_id, key) == [0], key


# ---------------------------------------------------------------------------------------------
# 4-5. Disk full while checkpointing; a truncated checkpoint; resume = uninterrupted
# ---------------------------------------------------------------------------------------------
def _tiny_cfg(epochs: int):
    from lipsweep.settings.config import TrialConfig

    return TrialConfig.from_flat(
        {**TINY_FLAT, "epochs": epochs, "evaluate": False, "train_size": 128}
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The reference: 3 epochs in one go."""
    from lipsweep.trial.run import run_trial

    out = tmp_path_factory.mktemp("uninterrupted")
    run_trial(_tiny_cfg(3), out, progress=False)
    return out / "checkpoints" / "epoch_0003"


def _assert_same_tensors(a: Path, b: Path) -> None:
    from safetensors.torch import load_file

    for name in ("model.safetensors", "optimizer.safetensors"):
        ta, tb = load_file(str(a / name)), load_file(str(b / name))
        assert ta.keys() == tb.keys(), name
        for k in ta:
            assert torch.equal(ta[k], tb[k]), (name, k)


@pytest.mark.slow
def test_disk_full_during_checkpoint_keeps_previous_and_resumes(
    tmp_path, monkeypatch, uninterrupted
):
    import lipsweep.trial.checkpoint as ck
    from lipsweep.trial.run import TrialCallbacks, run_trial

    real_save, calls = ck.save_file, []

    def save_file(tensors, filename, *a, **kw):
        calls.append(filename)
        if len(calls) == 5:  # epoch 2: model.safetensors written, optimizer's fails
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)
        return real_save(tensors, filename, *a, **kw)

    digests = {}

    class Record(TrialCallbacks):
        def on_epoch_end(self, epoch, metrics, checkpoint):
            digests[epoch] = {p.name: sha256_of(p) for p in checkpoint.iterdir()}

    monkeypatch.setattr(ck, "save_file", save_file)
    with pytest.raises(ck.CheckpointError) as exc:
        run_trial(_tiny_cfg(3), tmp_path, callbacks=Record(), progress=False)
    msg = str(exc.value)
    assert "No space left on device" in msg and "epoch_0002" in msg
    assert "previous checkpoint is untouched" in msg
    root = tmp_path / "checkpoints"
    assert [p.name for p in ck.list_checkpoints(root)] == ["epoch_0001"]
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name]  # atomic: no leftovers
    kept = root / "epoch_0001"
    assert {p.name: sha256_of(p) for p in kept.iterdir()} == digests[1]  # byte for byte
    assert ck.load_checkpoint(kept).epoch == 1  # checksums verified
    monkeypatch.setattr(ck, "save_file", real_save)  # space freed: rerun the trial
    result = run_trial(_tiny_cfg(3), tmp_path, progress=False)
    assert result.resumed_from_epoch == 1
    _assert_same_tensors(root / "epoch_0003", uninterrupted)


class _Interrupt(Exception):
    pass


@pytest.mark.slow
def test_resume_gives_identical_weights(tmp_path, uninterrupted):
    """Interrupted after epoch 2 and run again == never interrupted, bit for bit."""
    from lipsweep.trial.run import TrialCallbacks, run_trial

    class StopAfter2(TrialCallbacks):
        def on_epoch_end(self, epoch, metrics, checkpoint):
            if epoch == 2:
                raise _Interrupt

    with pytest.raises(_Interrupt):
        run_trial(_tiny_cfg(3), tmp_path, callbacks=StopAfter2(), progress=False)
    result = run_trial(_tiny_cfg(3), tmp_path, progress=False)
    assert result.resumed_from_epoch == 2
    assert [h["epoch"] for h in result.history] == [1.0, 2.0, 3.0]
    _assert_same_tensors(tmp_path / "checkpoints" / "epoch_0003", uninterrupted)
    ref = json.loads((uninterrupted / "state.json").read_text())["history"]
    assert [h["loss"] for h in result.history] == [h["loss"] for h in ref]


def _train_cli(out: Path) -> subprocess.CompletedProcess:
    sets = [
        f"{k}={json.dumps(v)}"
        for k, v in {**TINY_FLAT, "train_size": 128, "epochs": 2, "evaluate": False}.items()
    ]
    argv = [sys.executable, "-m", "lipsweep", "train", "--out", str(out)]
    for s in sets:
        argv += ["--set", s]
    return subprocess.run(argv, cwd=out.parent, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_truncated_checkpoint_falls_back_and_says_so(tmp_path):
    from safetensors.torch import load_file

    out = tmp_path / "run"
    first = _train_cli(out)
    assert first.returncode == 0, first.stderr[-3000:]
    root = out / "checkpoints"
    reference = {
        k: v.clone()
        for k, v in load_file(  # copies: load_file may map the file we truncate
            str(root / "epoch_0002" / "model.safetensors")
        ).items()
    }
    weights = root / "epoch_0002" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # truncated
    second = _train_cli(out)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "checkpoint epoch_0002 is damaged" in second.stderr
    assert "falling back to the previous one" in second.stderr
    assert re.search(r"resumed from \S+epoch_0001 \(epoch 1 of 2 done\)", second.stderr)
    retrained = load_file(str(root / "epoch_0002" / "model.safetensors"))
    assert all(torch.equal(reference[k], retrained[k]) for k in reference)
    for ckpt in root.iterdir():  # now damage every checkpoint: the trial restarts
        (ckpt / "state.json").write_text("{truncated")
    third = _train_cli(out)
    assert third.returncode == 0, third.stderr[-3000:]
    assert (
        "no intact checkpoint" in third.stderr
        and "restarting the trial from epoch 1" in third.stderr
    )
    restarted = load_file(str(root / "epoch_0002" / "model.safetensors"))
    assert all(torch.equal(reference[k], restarted[k]) for k in reference)
