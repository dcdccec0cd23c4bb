"""What a killed driver leaves for ``--resume``: Tune's snapshot, the trial's final checkpoint,
the owner's heartbeat.

Real Tune objects (a ``Trial`` with its ``StorageContext`` and checkpoint manager, restored from
its JSON state the way ``Tuner.restore`` does; Tune's ``CallbackList`` calling the hooks) and
real MLflow on SQLite. No Ray cluster: nothing here starts a trial.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

import pytest
from _sweep_helpers import TINY_FLAT, client, empty_store, stub_trial

pytest.importorskip("ray")


def _trial(tmp_path: Path):
    return stub_trial(tmp_path)


def _checkpoint_folder(path: Path, epoch: int) -> Path:
    """A real lipsweep checkpoint (``save_checkpoint``: weights and checksums) at ``path``."""
    import torch

    from lipsweep.trial.checkpoint import save_checkpoint

    model = {"w": torch.full((2, 2), float(epoch))}
    opt = {"state": {}, "param_groups": [{"lr": 0.1, "params": [0]}]}
    written = save_checkpoint(path.parent / "tmp", epoch, model, opt, {}, {"epoch": epoch})
    written.rename(path)
    return path


def _report(trial, index: int, epoch: int, rows: list[dict], synced: bool = True) -> None:
    """What Tune does on a report with a checkpoint: the folder on storage, a row in
    result.json (on storage once a snapshot syncs it), the checkpoint registered (which
    deletes the oldest past num_to_keep) and the trial's checkpoint index moved on."""
    from ray.train import Checkpoint

    from lipsweep.sweep.ray_internals import training_result

    name = f"checkpoint_{index:06d}"
    path = _checkpoint_folder(Path(trial.storage.trial_fs_path) / name, epoch)
    row = {"epoch": epoch, "training_iteration": epoch, "checkpoint_dir_name": name}
    if synced:
        rows.append(row)
        (Path(trial.storage.trial_fs_path) / "result.json").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
    trial.on_checkpoint(training_result(Checkpoint(str(path)), row))


def _snapshot(trial) -> tuple[str, str]:
    """The trial's entry in an experiment snapshot (``TuneController.save_to_dir``)."""
    return trial.get_json_state()


def _restored(snapshot: tuple[str, str]):
    """The trial as ``Tuner.restore`` rebuilds it from an experiment snapshot."""
    from ray.tune.experiment import Trial

    trial = Trial.from_json_state(snapshot[0], stub=True)
    trial.restore_run_metadata(snapshot[1])
    trial.set_status(Trial.PENDING)
    return trial


def _step(trial) -> None:
    from ray.tune.callback import CallbackList

    from lipsweep.sweep.checkpoint_refs import CheckpointRepair

    CallbackList([CheckpointRepair()]).on_step_begin(iteration=0, trials=[trial])


def test_a_snapshot_naming_deleted_checkpoints_resumes_from_the_newest_whole_one(tmp_path, caplog):
    trial, rows = _trial(tmp_path), []
    _report(trial, 0, 1, rows)
    _report(trial, 1, 2, rows)
    snapshot = _snapshot(trial)  # names checkpoint_000001 (and 000000)
    _report(trial, 2, 3, rows)  # deletes 000000
    _report(trial, 3, 4, rows, synced=False)  # deletes 000001: the snapshot's latest is gone
    trial_dir = Path(trial.storage.trial_fs_path)
    # copied in part by a worker killed with its driver: a weights file is missing
    (_checkpoint_folder(trial_dir / "checkpoint_000004", 5) / "model.safetensors").unlink()
    assert not (trial_dir / "checkpoint_000001").exists()

    resumed = _restored(snapshot)
    assert resumed.checkpoint.path.endswith("checkpoint_000001")
    assert resumed.storage.current_checkpoint_index == 1
    with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
        _step(resumed)
    assert resumed.checkpoint.path == str(trial_dir / "checkpoint_000003")
    assert resumed.latest_checkpoint_result.metrics == {}  # newer than result.json's last sync
    manager = resumed.run_metadata.checkpoint_manager
    kept = [r.checkpoint.path for r in manager.best_checkpoint_results]
    assert kept == [str(trial_dir / "checkpoint_000002"), str(trial_dir / "checkpoint_000003")]
    assert manager.best_checkpoint_results[0].metrics["epoch"] == 3  # its result.json row
    assert resumed.storage.current_checkpoint_index == 4  # the next one is checkpoint_000005
    (line,) = [r.getMessage() for r in caplog.records]
    assert "checkpoint_000000, checkpoint_000001" in line and "from checkpoint_000003" in line


def test_a_snapshot_whose_checkpoints_all_exist_is_left_alone(tmp_path, caplog):
    trial, rows = _trial(tmp_path), []
    _report(trial, 0, 1, rows)
    _report(trial, 1, 2, rows)
    resumed = _restored(_snapshot(trial))
    manager = resumed.run_metadata.checkpoint_manager
    with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
        _step(resumed)
    assert resumed.run_metadata.checkpoint_manager is manager
    assert resumed.checkpoint.path.endswith("checkpoint_000001")
    assert not caplog.records


def test_with_no_whole_checkpoint_left_the_trial_starts_over(tmp_path, caplog):
    trial, rows = _trial(tmp_path), []
    _report(trial, 0, 1, rows)
    snapshot = _snapshot(trial)
    shutil.rmtree(Path(trial.storage.trial_fs_path) / "checkpoint_000000")
    resumed = _restored(snapshot)
    with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
        _step(resumed)
    assert resumed.checkpoint is None  # Tune starts it without a restore
    assert "starts again from epoch 1" in caplog.records[0].getMessage()
    assert resumed.storage.current_checkpoint_index == 0


def test_a_final_checkpoint_newer_than_the_snapshot_is_restored_not_trained_past(tmp_path, caplog):
    """The snapshot's checkpoints all exist, but the trial went on after it: a newer epoch
    checkpoint leaves the snapshot alone (it may be a copy cut short); a whole final one (its
    metrics.json) becomes the one the trial restores from."""
    trial, rows = _trial(tmp_path), []
    _report(trial, 0, 1, rows)
    _report(trial, 1, 2, rows)
    snapshot = _snapshot(trial)
    trial_dir = Path(trial.storage.trial_fs_path)
    _checkpoint_folder(trial_dir / "checkpoint_000002", 3)  # an epoch checkpoint, not final
    resumed = _restored(snapshot)
    manager = resumed.run_metadata.checkpoint_manager
    with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
        _step(resumed)
    assert resumed.run_metadata.checkpoint_manager is manager and not caplog.records

    final = _checkpoint_folder(trial_dir / "checkpoint_000003", 4)
    (final / "metrics.json").write_text(json.dumps({"acc_clean": 0.5}))
    (final / "config.json").write_text("{}")
    resumed = _restored(snapshot)
    with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
        _step(resumed)
    assert resumed.checkpoint.path == str(final)
    assert resumed.storage.current_checkpoint_index == 3
    (line,) = [r.getMessage() for r in caplog.records]
    assert "final checkpoint checkpoint_000003" in line and "names checkpoint_000001" in line


def _cut_short(path: Path, keep_size: bool = False) -> None:
    """The bytes of ``path`` as an upload cut short leaves them: half of them, or (with
    ``keep_size``) all of them but the last megabyte's worth unwritten (zeros)."""
    data = path.read_bytes()
    half = len(data) // 2
    path.write_bytes(data[:half] + (b"\0" * (len(data) - half) if keep_size else b""))


@pytest.mark.parametrize("keep_size", [False, True], ids=["shorter", "same-size"])
def test_a_checkpoint_cut_short_is_not_resumed_from(tmp_path, caplog, keep_size):
    """Every name present, bytes missing (Tune uploads a folder's files on several threads):
    neither the newest folder, told by its size or else its checksum, nor a recorded one is
    resumed from; the newest whole one is."""
    trial, rows = _trial(tmp_path), []
    _report(trial, 0, 1, rows)
    _report(trial, 1, 2, rows)
    snapshot = _snapshot(trial)  # names checkpoint_000000 and 000001
    _report(trial, 2, 3, rows)  # deletes 000000
    _report(trial, 3, 4, rows, synced=False)  # deletes 000001
    trial_dir = Path(trial.storage.trial_fs_path)
    _cut_short(trial_dir / "checkpoint_000003" / "optimizer.safetensors", keep_size)
    resumed = _restored(snapshot)
    with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
        _step(resumed)
    assert resumed.checkpoint.path == str(trial_dir / "checkpoint_000002")
    assert resumed.storage.current_checkpoint_index == 3  # past the damaged folder too

    trial, rows = _trial(tmp_path / "b"), []  # the snapshot's own latest, cut short
    _report(trial, 0, 1, rows)
    _report(trial, 1, 2, rows)
    resumed = _restored(_snapshot(trial))
    trial_dir = Path(trial.storage.trial_fs_path)
    _cut_short(trial_dir / "checkpoint_000001" / "model.safetensors", keep_size)
    with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
        _step(resumed)
    if keep_size:  # the listing looks whole: the recorded one is left to the loader
        assert resumed.checkpoint.path.endswith("checkpoint_000001")
    else:
        assert resumed.checkpoint.path == str(trial_dir / "checkpoint_000000")
        assert "names checkpoint_000001, deleted or cut short" in caplog.records[-1].getMessage()


def test_a_final_checkpoint_cut_short_after_the_snapshot_is_not_restored(tmp_path, caplog):
    """A final checkpoint newer than the snapshot whose weights are cut short: the trial
    resumes from the recorded checkpoint, and its next checkpoint goes past that folder."""
    trial, rows = _trial(tmp_path), []
    _report(trial, 0, 1, rows)
    snapshot = _snapshot(trial)
    final = _checkpoint_folder(Path(trial.storage.trial_fs_path) / "checkpoint_000001", 2)
    (final / "metrics.json").write_text(json.dumps({"acc_clean": 0.5}))
    _cut_short(final / "model.safetensors")
    resumed = _restored(snapshot)
    manager = resumed.run_metadata.checkpoint_manager
    with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
        _step(resumed)
    assert resumed.run_metadata.checkpoint_manager is manager and not caplog.records
    assert resumed.checkpoint.path.endswith("checkpoint_000000")
    assert resumed.storage.current_checkpoint_index == 1


def test_a_snapshot_without_checkpoints_restores_a_final_one_written_after_it(tmp_path, caplog):
    """``epochs: 1`` (or ``checkpoint_every`` >= epochs): the trial's only checkpoint is its
    final one. Written after the snapshot, it is restored (reported again, not trained
    again); cut short, the trial starts over, its next checkpoint past that folder."""
    trial = _trial(tmp_path)
    snapshot = _snapshot(trial)
    assert _restored(snapshot).checkpoint is None
    final = _checkpoint_folder(Path(trial.storage.trial_fs_path) / "checkpoint_000000", 1)
    (final / "metrics.json").write_text(json.dumps({"acc_clean": 0.5}))
    resumed = _restored(snapshot)
    with caplog.at_level(logging.WARNING, logger="lipsweep.sweep"):
        _step(resumed)
    assert resumed.checkpoint.path == str(final)
    assert resumed.storage.current_checkpoint_index == 0  # the next is checkpoint_000001
    (line,) = [r.getMessage() for r in caplog.records]
    assert "records no checkpoint" in line and "checkpoint_000000" in line

    _cut_short(final / "regularizer.safetensors")
    resumed = _restored(snapshot)
    _step(resumed)
    assert resumed.checkpoint is None
    assert resumed.storage.current_checkpoint_index == 0


def test_an_epoch_checkpoint_whose_result_tune_never_recorded_is_not_resumed_from(tmp_path):
    """A SIGINT between a worker's upload of epoch 1 and the driver's processing of its result:
    the snapshot records no checkpoint and ``result.json`` has no row for it. Resuming from it
    would leave epoch 1 out of the searcher's intermediate values and the scheduler's rungs, so
    the trial starts over (its next checkpoint past that folder); once ``result.json`` holds
    the row (the driver processed it), the trial resumes from it."""
    trial = _trial(tmp_path)
    snapshot = _snapshot(trial)
    epoch = _checkpoint_folder(Path(trial.storage.trial_fs_path) / "checkpoint_000000", 1)
    resumed = _restored(snapshot)
    _step(resumed)
    assert resumed.checkpoint is None
    assert resumed.storage.current_checkpoint_index == 0  # the next is checkpoint_000001

    row = {"epoch": 1, "training_iteration": 1, "checkpoint_dir_name": epoch.name}
    (epoch.parent / "result.json").write_text(json.dumps(row) + "\n")
    resumed = _restored(snapshot)
    _step(resumed)
    assert resumed.checkpoint.path == str(epoch)


def test_a_checkpoint_holding_a_link_is_neither_copied_nor_resumed_from(tmp_path):
    """A weights file that is a link (to ``/dev/zero`` it would fill the disk; here to a
    file outside the folder): the trainable copies nothing and trains from epoch 1, and the
    driver resumes the trial from the checkpoint before it."""
    from lipsweep.settings.config import TrialConfig
    from lipsweep.sweep.trainable import restore_checkpoint

    trial, rows = _trial(tmp_path), []
    _report(trial, 0, 1, rows)
    _report(trial, 1, 2, rows)
    snapshot = _snapshot(trial)
    src = Path(trial.storage.trial_fs_path) / "checkpoint_000001"
    outside = tmp_path / "elsewhere.safetensors"
    (src / "regularizer.safetensors").rename(outside)
    (src / "regularizer.safetensors").symlink_to(outside)

    cfg = TrialConfig.from_flat({**TINY_FLAT, "epochs": 3})
    work = tmp_path / "worker"
    assert restore_checkpoint(src, work / "checkpoints", work / "final", cfg) is None
    assert not (work / "checkpoints").exists() and not (work / "final").exists()

    resumed = _restored(snapshot)
    _step(resumed)
    assert resumed.checkpoint.path.endswith("checkpoint_000000")


def test_a_restored_final_checkpoint_is_reported_again_not_evaluated_again(tmp_path):
    """The trainable's restore: a final checkpoint of its own config (the driver died after
    its final report, before Tune's snapshot) comes back with its metrics; an epoch
    checkpoint, or another config's final, resumes training as before."""
    from lipsweep.settings.config import TrialConfig
    from lipsweep.sweep.trainable import restore_checkpoint

    cfg = TrialConfig.from_flat({**TINY_FLAT, "epochs": 2})
    src = _checkpoint_folder(tmp_path / "checkpoint_000001", 2)
    (src / "metrics.json").write_text(json.dumps({"acc_clean": 50.0}))
    (src / "config.json").write_text(cfg.to_json())
    work = tmp_path / "worker"
    got = restore_checkpoint(src, work / "checkpoints", work / "final", cfg)
    assert got == {"acc_clean": 50.0}
    assert sorted(p.name for p in (work / "final").iterdir()) == sorted(
        p.name for p in src.iterdir()
    )
    assert not (work / "checkpoints").exists()  # nothing for run_trial: nothing is re-run

    other = TrialConfig.from_flat({**TINY_FLAT, "epochs": 3})
    assert restore_checkpoint(src, work / "c2", work / "f2", other) is None
    resumed = work / "c2" / "epoch_0002"
    assert "metrics.json" not in {p.name for p in resumed.iterdir()}
    assert (resumed / "model.safetensors").is_file()

    (src / "model.safetensors").write_bytes(b"not the weights")  # damaged: evaluated again
    assert restore_checkpoint(src, work / "c3", work / "f3", cfg) is None
    assert not (work / "f3").exists()
    (src / "metrics.json").unlink()  # an epoch checkpoint
    assert restore_checkpoint(src, work / "c4", work / "f4", cfg) is None
    assert (work / "c4" / "epoch_0002" / "state.json").is_file()


def test_the_owner_heartbeat_is_refreshed_from_tunes_loop(tmp_path):
    """A remote driver's liveness is its parent run's heartbeat tag (sweep/driver.py): Tune's
    loop must call the hook that refreshes it."""
    from ray.tune.callback import CallbackList

    from lipsweep.sweep.heartbeat import Heartbeat
    from lipsweep.tracking import TAG_HEARTBEAT, Tracker

    uri = empty_store(tmp_path / "mlflow.db")
    tracker = Tracker(uri, "exp")
    parent = tracker.open_parent("s3://b/exp", "exp", {}, owner="h 1 T0")
    tracker.set_tags(parent, {TAG_HEARTBEAT: "0"})
    tracker.flush()
    callbacks = CallbackList([Heartbeat(tracker, parent, every_s=0.0)])
    callbacks.on_step_begin(iteration=0, trials=[])
    callbacks.on_step_end(iteration=0, trials=[])
    tracker.flush()
    beat = float(client(uri).get_run(parent).data.tags[TAG_HEARTBEAT])
    assert abs(beat - time.time()) < 60


def test_every_on_method_of_a_lipsweep_tune_callback_is_a_hook_tune_calls():
    """A misspelt hook is never called and nothing says so (``on_step`` looks like one; Tune
    calls ``on_step_begin`` and ``on_step_end``)."""
    import importlib
    import inspect
    import pkgutil

    from ray.tune import Callback

    import lipsweep.sweep

    hooks = {n for n in dir(Callback) if n.startswith("on_")}
    found = {}
    for info in pkgutil.walk_packages(lipsweep.sweep.__path__, "lipsweep.sweep."):
        for obj in vars(importlib.import_module(info.name)).values():
            if inspect.isclass(obj) and issubclass(obj, Callback) and obj is not Callback:
                found[obj.__qualname__] = {n for n in vars(obj) if n.startswith("on_")} - hooks
    assert {"Heartbeat", "CheckpointRepair", "MlflowSweepCallback"} <= set(found)
    assert not {k: v for k, v in found.items() if v}
