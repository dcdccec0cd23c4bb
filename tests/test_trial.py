"""One trial without Ray: interrupt + rerun resumes after the last checkpoint, bit-identically."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from lipsweep.checkpoint import list_checkpoints
from lipsweep.config import TrialConfig
from lipsweep.engine import NonFiniteLossError
from lipsweep.trial import TrialCallbacks, run_trial

TINY = {"depth": 2, "embed_dim": 64, "num_heads": 4, "train_size": 192, "eval_size": 32,
        "epochs": 3, "batch_size": 64, "optimizer": "sgd", "lr": 0.05, "mixup": 0.8,
        "cutmix": 1.0, "evaluate": False, "regularizer": "specformer", "lam_v": 1e-2}


class _Interrupt(Exception):
    pass


class _StopAfter(TrialCallbacks):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.seen: list[int] = []

    def on_epoch_end(self, epoch, metrics, checkpoint) -> None:
        self.seen.append(epoch)
        if epoch == self.epoch:
            raise _Interrupt


def _weights(out):
    return load_file(str(list_checkpoints(out / "checkpoints")[-1] / "model.safetensors"))


def test_interrupted_trial_resumes_to_identical_weights(tmp_path):
    cfg = TrialConfig.from_flat(TINY)
    run_trial(cfg, tmp_path / "straight", progress=False)
    with pytest.raises(_Interrupt):
        run_trial(cfg, tmp_path / "cut", callbacks=_StopAfter(2), progress=False)
    again = _StopAfter(99)
    result = run_trial(cfg, tmp_path / "cut", callbacks=again, progress=False)
    assert again.seen == [3]  # epochs 1-2 were not repeated
    assert result.resumed_from_epoch == 2
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "cut")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # Specformer's persistent power vectors travel with the checkpoint too
    ra = load_file(str(list_checkpoints(tmp_path / "straight" / "checkpoints")[-1]
                       / "regularizer.safetensors"))
    rb = load_file(str(list_checkpoints(tmp_path / "cut" / "checkpoints")[-1]
                       / "regularizer.safetensors"))
    assert ra and all(torch.equal(ra[k], rb[k]) for k in ra)


def test_non_finite_loss_stops_with_a_clear_error(tmp_path):
    flat = {k: v for k, v in TINY.items() if k != "lam_v"}
    cfg = TrialConfig.from_flat({**flat, "regularizer": "none", "lr": 1e6, "clip_grad": 0.0,
                                 "epochs": 1})
    with pytest.raises(NonFiniteLossError, match="lower lr"):
        run_trial(cfg, tmp_path / "nan", progress=False)
