"""Fault injection: each test breaks one thing for real and asserts what survived.

Run alone with ``pytest -m faults``. The Ray tests (marked ``slow``) use a real local Ray in a
private RAY_TMPDIR and a real MLflow (SQLite store, or an ``mlflow server`` on 127.0.0.1), and
kill only processes they started. docs/reliability.md tabulates each fault, what happens and
its test.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import json
import os
import pickle
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
    ROOT,
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


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
            digests[epoch] = {p.name: _sha(p) for p in checkpoint.iterdir()}

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
    assert {p.name: _sha(p) for p in kept.iterdir()} == digests[1]  # byte for byte
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


# ---------------------------------------------------------------------------------------------
# 6. Security: nothing is ever unpickled
# ---------------------------------------------------------------------------------------------
class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _tiny_model():
    from lipsweep.vit.models import ModelConfig, create_model

    return create_model(ModelConfig(depth=2, embed_dim=64, num_heads=4))


def test_payloads_are_live(tmp_path):
    """Control: the payloads below do run code when unpickled the unsafe way."""
    marker = tmp_path / "pwned"
    pickle.loads(pickle.dumps(_Evil(marker)))
    assert marker.exists()
    marker.unlink()
    torch.save({"x": _Evil(marker)}, tmp_path / "evil.pth")
    torch.load(tmp_path / "evil.pth", weights_only=False)
    assert marker.exists()


def test_load_exported_rejects_a_pickle_payload(tmp_path):
    import lipsweep
    from lipsweep.decide.export import write_export
    from lipsweep.settings.config import TrialConfig
    from lipsweep.vit.export_format import build_config_json

    model = _tiny_model()
    flat = TrialConfig.from_flat({"depth": 2, "embed_dim": 64, "num_heads": 4}).to_flat()
    folder = write_export(
        tmp_path / "export",
        model.net.state_dict(),
        build_config_json(flat, (0.5,) * 3, (0.5,) * 3, {}),
        {},
    )
    x = torch.rand(2, 3, 32, 32)
    assert torch.allclose(lipsweep.load_exported(folder)(x), model.eval()(x))  # control
    marker = tmp_path / "pwned"
    for payload in (pickle.dumps(_Evil(marker)), _torch_pickle(_Evil(marker), tmp_path)):
        (folder / "model.safetensors").write_bytes(payload)
        with pytest.raises(Exception) as exc:
            lipsweep.load_exported(folder)
        assert (
            "header" in str(exc.value).lower() or "safetensor" in type(exc.value).__name__.lower()
        ), exc.value
        assert not marker.exists()


def _torch_pickle(obj, tmp_path: Path) -> bytes:
    path = tmp_path / "obj.pt"
    torch.save(obj, path)
    return path.read_bytes()


def test_pretrained_pth_is_loaded_weights_only(tmp_path):
    """A .pth passed as ``pretrained`` goes through timm's torch.load(weights_only=True)."""
    import timm

    from lipsweep.vit.models import ModelConfig, create_model

    src = timm.create_model(
        "vit_tiny_patch16_224", depth=2, embed_dim=64, num_heads=4, num_classes=10
    )
    good = tmp_path / "good.pth"
    torch.save(src.state_dict(), good)
    model = create_model(ModelConfig(depth=2, embed_dim=64, num_heads=4, pretrained=str(good)))
    key = "blocks.1.attn.qkv.weight"  # loaded (patch/pos-embed resampled to 32px, patch 4)
    assert torch.equal(model.net.state_dict()[key], src.state_dict()[key])
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pth"
    torch.save({"state_dict": _Evil(marker)}, evil)
    with pytest.raises(Exception, match="weights_only"):
        create_model(ModelConfig(depth=2, embed_dim=64, num_heads=4, pretrained=str(evil)))
    assert not marker.exists()


_UNSAFE = (
    "pickle.load",
    "pickle.loads",
    "pickle.Unpickler",
    "cPickle.load",
    "dill.load",
    "joblib.load",
    "marshal.load",
    "marshal.loads",
    "yaml.load",
    "yaml.unsafe_load",
    "yaml.full_load",
    "shelve.open",
)


def _unsafe_loads(source: str, name: str) -> list[str]:
    """Deserialisation calls that can run code: torch.load without weights_only=True,
    np.load with allow_pickle=True, and the pickle family."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func)
        kw = {k.arg: k.value for k in node.keywords}
        where = f"{name}:{node.lineno} {func}"
        if func.endswith("torch.load"):
            ok = (
                isinstance(kw.get("weights_only"), ast.Constant)
                and kw["weights_only"].value is True
            )
            if not ok:
                found.append(where)
        elif func in ("np.load", "numpy.load"):
            v = kw.get("allow_pickle")
            if v is not None and not (isinstance(v, ast.Constant) and v.value is False):
                found.append(where)
        elif func in _UNSAFE:
            found.append(where)
    return found


def test_no_unsafe_deserialisation_in_the_package():
    bad = [
        "torch.load(f)",
        "torch.load(f, weights_only=False)",
        "pickle.loads(b)",
        "np.load(p, allow_pickle=True)",
        "yaml.load(t)",
    ]
    for snippet in bad:  # control: the scanner flags each of these
        assert _unsafe_loads(snippet, "x.py"), snippet
    assert not _unsafe_loads("torch.load(f, map_location='cpu', weights_only=True)", "x.py")
    files = sorted((ROOT / "lipsweep").rglob("*.py"))
    assert len(files) > 20
    found = [hit for f in files for hit in _unsafe_loads(f.read_text(), str(f.relative_to(ROOT)))]
    assert found == []


# ---------------------------------------------------------------------------------------------
# 7. What an adversarial pass broke (export --force, YAML bombs, loader trust, bounds)
# ---------------------------------------------------------------------------------------------
def _tiny_export(folder: Path):
    from lipsweep.decide.export import write_export
    from lipsweep.settings.config import TrialConfig
    from lipsweep.vit.export_format import build_config_json

    model = _tiny_model()
    flat = TrialConfig.from_flat({"depth": 2, "embed_dim": 64, "num_heads": 4}).to_flat()
    config = build_config_json(flat, (0.5,) * 3, (0.5,) * 3, {})
    return (
        model,
        config,
        write_export(folder, model.net.state_dict(), config, {"acc": 1.0}, force=True),
    )


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): _sha(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def test_export_force_replaces_only_a_previous_export(tmp_path, monkeypatch, capsys):
    """--force never removes a folder that is not a previous export."""
    import lipsweep.decide.export as ex
    from lipsweep.__main__ import main
    from lipsweep.core.config_base import UsageError

    work = tmp_path / "work"
    pkg = work / "pkg"  # e.g. --out <clone>/lipsweep
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    monkeypatch.chdir(work)
    model, config, _ = _tiny_export(tmp_path / "scratch")
    state = model.net.state_dict()
    before = _tree(tmp_path)
    unmarked = work / "unmarked"  # only export file names, but no marker: not ours
    unmarked.mkdir()
    (unmarked / "config.json").write_text("{}")
    for out, why in (
        (pkg, "not a lipsweep export"),
        (unmarked, "not a lipsweep export"),
        (Path(".."), "working folder"),
        (Path("."), "working folder"),
        (tmp_path, "working folder"),
    ):
        with pytest.raises(UsageError, match=why):
            ex.write_export(out, state, config, {}, force=True)
    assert _tree(tmp_path) == {
        **before,
        "work/unmarked/config.json": _sha(unmarked / "config.json"),
    }
    # the CLI refuses before anything is written (no MLflow store is created)
    rc = main(
        [
            "export",
            "--experiment",
            "x",
            "--out",
            "..",
            "--force",
            "--tracking-uri",
            f"sqlite:///{tmp_path / 'm.db'}",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "working folder" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "m.db").exists()
    # a previous export holding anything else is not replaced either
    _, _, prev = _tiny_export(work / "exp")
    (prev / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="notes.txt"):
        ex.write_export(prev, state, config, {}, force=True)
    (prev / "notes.txt").unlink()
    # a failure while writing the new export leaves the existing one whole (write beside, swap)
    old = _tree(prev)
    monkeypatch.setattr(ex, "_model_card", lambda *a: (_ for _ in ()).throw(OSError(28, "full")))
    with pytest.raises(OSError):
        ex.write_export(prev, state, config, {"acc": 2.0}, force=True)
    assert _tree(prev) == old and sorted(p.name for p in work.iterdir()) == [
        "exp",
        "pkg",
        "unmarked",
    ]
    monkeypatch.undo()
    monkeypatch.chdir(work)
    ex.write_export(prev, state, config, {"acc": 2.0}, force=True)  # a real re-export
    assert json.loads((prev / "metrics.json").read_text()) == {"acc": 2.0}
    assert (prev / ex.MARKER).is_file() and sorted(p.name for p in work.iterdir()) == [
        "exp",
        "pkg",
        "unmarked",
    ]


def _laughs(levels: int) -> str:
    """A "billion laughs" YAML value: 9**levels strings from a few hundred bytes."""
    lines = ['&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "[" + ", ".join(lines) + "]"


@pytest.mark.parametrize("where", ["space name", "grid value", "trial config", "train --set"])
def test_yaml_alias_bomb_is_refused_before_it_is_walked(tmp_path, capsys, where):
    """A billion-laughs document is refused in every YAML entry point."""
    from lipsweep.__main__ import main

    bomb = _laughs(9)
    assert len(bomb) < 1000
    path = tmp_path / "doc.yaml"
    argv = {
        "space name": ["sweep", str(path), "--dry-run"],
        "grid value": ["sweep", str(path), "--dry-run"],
        "trial config": ["train", str(path), "--out", str(tmp_path / "o")],
        "train --set": ["train", "--set", f"aggregation={bomb}", "--out", str(tmp_path / "o")],
    }[where]
    path.write_text(
        {
            "space name": f"name: {bomb}\ngrid:\n  - regularizer: none\n",
            "grid value": f"name: b\ngrid:\n  - regularizer: jasmin\n    k: {bomb}\n",
            "trial config": f"epochs: 1\naggregation: {bomb}\n",
            "train --set": "{}",
        }[where]
    )
    t0 = time.perf_counter()
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and len(err) < 400, err[:400]
    assert "aliases are not allowed" in err, err[:400]
    assert time.perf_counter() - t0 < 10 and not (tmp_path / "o").exists()


def test_show_never_walks_a_huge_shared_value():
    """An error message reprs a bounded part of the value, whatever it is."""
    from lipsweep.core.config_base import ConfigError, check_positive, show

    value = ["lol"] * 9
    for _ in range(12):  # 9**13 (2.5e12) leaves, shared: a full repr would never end
        value = [value] * 9
    t0 = time.perf_counter()
    assert len(show(value)) <= 80
    with pytest.raises(ConfigError) as exc:
        check_positive("epochs", value)
    assert len(exc.value.format()) < 200 and time.perf_counter() - t0 < 1


def test_duplicate_yaml_keys_are_refused(tmp_path, capsys):
    """Two equal keys are refused: the last one does not win silently."""
    from lipsweep.__main__ import main

    space, trial = tmp_path / "s.yaml", tmp_path / "t.yaml"
    space.write_text("name: d\nfixed:\n  epochs: 1\n  epochs: 40\ngrid:\n  - regularizer: none\n")
    trial.write_text("epochs: 1\nlr: 0.1\nepochs: 3\n")
    for argv in (
        ["sweep", str(space), "--dry-run"],
        ["train", str(trial), "--out", str(tmp_path / "o")],
        ["train", "--set", "fgsm_eps={a: 1, a: 2}", "--out", str(tmp_path / "o")],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "duplicate key" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "setting,value",
    [
        ("embed_dim", 10**9),
        ("depth", 10**6),
        ("batch_size", 10**12),
        ("epochs", 10**9),
        ("img_size", 2**20),
        ("num_classes", 10**9),
        ("aa_iters", 10**9),
        ("aa_restarts", 10**6),
        ("pgd_steps", 10**9),
        ("pgd_restarts", 10**6),
        ("attack_images", 10**12),
        ("attack_batch_size", 10**9),
        ("lip_iters", 10**9),
        ("lip_head_iters", 10**9),
        ("lip_images", 10**12),
        ("lip_batch_size", 10**9),
    ],
)
def test_sizes_and_iteration_counts_have_upper_bounds_that_say_why(setting, value):
    """No unbounded size or iteration count; the message gives the reason."""
    from lipsweep.core.config_base import ConfigError
    from lipsweep.settings.config import TrialConfig

    with pytest.raises(ConfigError) as exc:
        TrialConfig.from_flat({**TINY_FLAT, setting: value})
    assert exc.value.field == setting and re.search(r"must be <= [\d,]+ \(.+\)", exc.value.message)


def test_pretrained_must_be_a_weights_file_checked_before_config_json(tmp_path, capsys):
    """``pretrained: /etc/passwd`` exits 2 before config.json is written."""
    import timm

    from lipsweep.__main__ import main
    from lipsweep.vit.models import ModelConfig

    fake = tmp_path / "w.safetensors"
    fake.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    text = tmp_path / "w.pth"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n")
    for bad in ("/etc/passwd", str(fake), str(text)):
        out = tmp_path / "o"
        rc = main(["train", "--set", f"pretrained={bad}", "--set", "depth=2", "--out", str(out)])
        err = capsys.readouterr().err
        assert rc == 2 and "pretrained" in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()
    good = tmp_path / "good.pth"  # control: a real torch.save state dict is accepted
    torch.save(timm.create_model("vit_tiny_patch16_224", depth=2).state_dict(), good)
    assert ModelConfig(depth=2, pretrained=str(good)).pretrained == str(good)


def _save_ck(root: Path, epoch: int):
    from lipsweep.trial.checkpoint import save_checkpoint

    opt = {
        "state": {0: {"momentum_buffer": torch.full((3,), 2.0 * epoch), "step": 4}},
        "param_groups": [{"lr": 0.1, "params": [0]}],
    }
    return save_checkpoint(
        root,
        epoch,
        {"w": torch.full((3,), float(epoch))},
        opt,
        {"u": torch.arange(3.0)},
        {"history": []},
        keep=5,
    )


def _sabotage(case: str, ck: Path, outside: Path) -> None:
    state = json.loads((ck / "state.json").read_text())
    digests = state["sha256"]
    if case == "dotdot":  # tampered weights moved out, the record points at them
        evil = outside / "evil.safetensors"
        from safetensors.torch import save_file

        save_file({"w": torch.full((3,), 666.0)}, str(evil))
        digests.pop("model.safetensors")
        digests["../../../outside/evil.safetensors"] = _sha(evil)
    elif case == "absolute":
        evil = outside / "abs.safetensors"
        evil.write_bytes((ck / "model.safetensors").read_bytes())
        digests[str(evil)] = _sha(evil)
    elif case == "fifo":  # on main, hashing a FIFO blocks forever
        os.mkfifo(ck / "pipe")
        digests["pipe"] = "0" * 64
    elif case == "symlink":
        target = outside / "link.safetensors"
        target.write_bytes((ck / "model.safetensors").read_bytes())
        (ck / "model.safetensors").unlink()
        (ck / "model.safetensors").symlink_to(target)
    elif case == "empty sha256":  # tampered weights with no checksums left to compare
        from safetensors.torch import save_file

        save_file({"w": torch.full((3,), 666.0)}, str(ck / "model.safetensors"))
        state["sha256"] = {}
    elif case == "unlisted weights":
        from safetensors.torch import save_file

        save_file({"w": torch.full((3,), 666.0)}, str(ck / "model.safetensors"))
        digests.pop("model.safetensors")
    else:  # malformed records: [], null, wrong types
        state = {
            "list": [],
            "null": None,
            "epoch str": {**state, "epoch": "2"},
            "sha256 list": {**state, "sha256": list(digests)},
            "meta str": {**state, "optimizer_meta": "x"},
        }[case]
    (ck / "state.json").write_text(json.dumps(state))


@pytest.mark.parametrize(
    "case",
    [
        "dotdot",
        "absolute",
        "fifo",
        "symlink",
        "empty sha256",
        "unlisted weights",
        "list",
        "null",
        "epoch str",
        "sha256 list",
        "meta str",
    ],
)
def test_checkpoint_loader_trusts_nothing_in_state_json(tmp_path, caplog, case):
    """Escapes, special files, missing checksums and malformed records mean
    "damaged": the loader falls back to the previous checkpoint and says so."""
    import threading

    from lipsweep.trial.checkpoint import load_latest

    root, outside = tmp_path / "run" / "checkpoints", tmp_path / "outside"
    outside.mkdir()
    _save_ck(root, 1)
    _sabotage(case, _save_ck(root, 2), outside)
    got = []
    worker = threading.Thread(target=lambda: got.append(load_latest(root)), daemon=True)
    worker.start()
    worker.join(30)
    assert got, "the loader hung (a FIFO or device was opened)"
    assert got[0].epoch == 1 and torch.equal(got[0].model["w"], torch.full((3,), 1.0))
    assert "epoch_0002 is damaged" in caplog.text and "falling back" in caplog.text


@pytest.mark.parametrize(
    "case,file,field",
    [
        ("resnet", "config.json", "timm.model_name"),
        ("hub name", "config.json", "timm.model_name"),
        ("checkpoint_path kwarg", "config.json", "timm.kwargs.checkpoint_path"),
        ("std 0", "config.json", "normalization.std"),
        ("embed_dim 1e9", "config.json", "timm.kwargs.embed_dim"),
        ("wider than the weights", "model.safetensors", "tensor"),
        ("symlink out", "model.safetensors", "file"),
        ("not json", "config.json", "json"),
        ("missing key", "config.json", "timm"),
        ("bad header", "model.safetensors", "header"),
        ("trailing bytes", "model.safetensors", "header"),
        ("F8_E8M0 weights", "model.safetensors", "tensor"),
    ],
)
def test_load_exported_trusts_nothing_in_the_folder(tmp_path, case, file, field):
    """Only lipsweep's ViTs, built locally, sizes checked against the weights
    file before allocation, no links out; each refusal one ExportError naming file and field."""
    import lipsweep

    model, _, folder = _tiny_export(tmp_path / "export")
    x = torch.rand(2, 3, 32, 32)
    assert torch.allclose(lipsweep.load_exported(folder)(x), model.eval()(x))  # control
    cfg = json.loads((folder / "config.json").read_text())
    if case == "resnet":
        cfg["timm"] = {"model_name": "resnet18", "kwargs": {"num_classes": 10}}
    elif case == "hub name":
        cfg["timm"]["model_name"] = "hf-hub:timm/vit_tiny_patch16_224.augreg_in21k"
    elif case == "checkpoint_path kwarg":
        cfg["timm"]["kwargs"]["checkpoint_path"] = str(tmp_path / "x.pth")
    elif case == "std 0":
        cfg["normalization"]["std"] = [0, 0, 0]
    elif case == "embed_dim 1e9":
        cfg["timm"]["kwargs"]["embed_dim"] = 1e9
    elif case == "wider than the weights":  # 230 MB model if allocated; 300 kB file
        cfg["timm"]["kwargs"].update(embed_dim=1536, num_heads=4)
        cfg["model_args"].update(embed_dim=1536, num_heads=4)  # timm agrees, the weights not
    elif case == "symlink out":
        target = tmp_path / "elsewhere.safetensors"
        (folder / "model.safetensors").rename(target)
        (folder / "model.safetensors").symlink_to(target)
    elif case == "not json":
        cfg = "{"
    elif case == "missing key":
        del cfg["timm"]
    elif case == "bad header":
        (folder / "model.safetensors").write_bytes(b"\xff" * 64)
    elif case == "trailing bytes":  # offsets no longer tile the data section
        with (folder / "model.safetensors").open("ab") as fh:
            fh.write(b"\0" * 8)
    elif case == "F8_E8M0 weights":  # a dtype the hand-written parser did not know
        from safetensors.torch import load_file, save_file

        state = load_file(folder / "model.safetensors")
        state["head.bias"] = state["head.bias"].to(torch.float8_e8m0fnu)
        save_file(state, folder / "model.safetensors")
    (folder / "config.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    with pytest.raises(Exception) as exc:
        lipsweep.load_exported(folder)
    assert type(exc.value).__name__ == "ExportError", repr(exc.value)[:300]
    assert exc.value.file == str(folder / file) and exc.value.field.startswith(field), exc.value
    assert str(exc.value).startswith(f"{folder / file}: {field}") and "\n" not in str(exc.value)
    if case == "F8_E8M0 weights":
        assert "dtype F8_E8M0 is not a float" in str(exc.value), exc.value
