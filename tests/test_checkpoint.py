"""Checkpoints: atomic writes, checksums, fallback past damage, and no pickle anywhere."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from lipsweep.trial.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    load_latest,
    save_checkpoint,
)


def _save(root, epoch, value=1.0, keep=2):
    model = {"w": torch.full((3, 3), value)}
    opt = {
        "state": {0: {"momentum_buffer": torch.full((3, 3), value * 2), "step": 4}},
        "param_groups": [{"lr": 0.1, "params": [0]}],
    }
    reg = {"u": torch.arange(3.0)}
    return save_checkpoint(root, epoch, model, opt, reg, {"history": [{"epoch": epoch}]}, keep=keep)


def test_round_trip_and_pruning(tmp_path):
    for e in range(1, 5):
        _save(tmp_path, e, value=float(e))
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch_0003", "epoch_0004"]
    ck = load_latest(tmp_path)
    assert ck.epoch == 4
    assert torch.equal(ck.model["w"], torch.full((3, 3), 4.0))
    assert ck.state["optimizer_meta"]["scalars"]["0"]["step"] == 4
    assert torch.equal(ck.regularizer["u"], torch.arange(3.0))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_truncated_latest_falls_back_to_previous(tmp_path, caplog):
    _save(tmp_path, 1, 1.0)
    path = _save(tmp_path, 2, 2.0)
    f = path / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match="checksum"):
        load_checkpoint(path)
    ck = load_latest(tmp_path)
    assert ck.epoch == 1
    assert "epoch_0002 is damaged" in caplog.text


def test_all_damaged_means_restart(tmp_path):
    path = _save(tmp_path, 1)
    (path / "state.json").write_text("{not json")
    assert load_latest(tmp_path) is None


def test_failed_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    _save(tmp_path, 1, 1.0)
    import lipsweep.trial.checkpoint as ck

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ck, "save_file", boom)
    with pytest.raises(CheckpointError, match="No space left"):
        _save(tmp_path, 2, 2.0)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch_0001"]
    assert load_latest(tmp_path).epoch == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_pickle_payload_is_never_executed(tmp_path):
    """A checkpoint whose weights file is a malicious pickle is rejected, not unpickled."""
    path = _save(tmp_path, 1)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (path / "model.safetensors").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(CheckpointError):
        load_checkpoint(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    "name", ["model.safetensors", "optimizer.safetensors", "regularizer.safetensors"]
)
def test_every_checkpoint_weights_file_is_verified_on_load(tmp_path, name):
    """Catches: a weights file (``regularizer.safetensors`` among them) loaded without its
    checksum being checked. The replacement is a valid safetensors file, so only the checksum
    can tell."""
    from safetensors.torch import save as save_bytes

    opt = {"state": {}, "param_groups": [{"lr": 0.1, "params": [0]}]}
    path = save_checkpoint(
        tmp_path, 1, {"w": torch.zeros(3)}, opt, {"u": torch.arange(3.0)}, {"history": []}
    )
    load_checkpoint(path)  # intact: loads
    (path / name).write_bytes(save_bytes({"u": torch.arange(3.0) + 1}))
    with pytest.raises(CheckpointError, match=f"{name} does not match its checksum"):
        load_checkpoint(path)
