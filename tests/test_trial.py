"""One trial without Ray: interrupt + rerun resumes after the last checkpoint, bit-identically."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from lipsweep.settings.config import TrialConfig
from lipsweep.trial.checkpoint import list_checkpoints
from lipsweep.trial.engine import NonFiniteLossError
from lipsweep.trial.run import TrialCallbacks, checkpoint_due, run_trial

TINY = {
    "depth": 2,
    "embed_dim": 64,
    "num_heads": 4,
    "train_size": 192,
    "eval_size": 32,
    "epochs": 3,
    "batch_size": 64,
    "optimizer": "sgd",
    "lr": 0.05,
    "mixup": 0.8,
    "cutmix": 1.0,
    "evaluate": False,
    "regularizer": "specformer",
    "lam_v": 1e-2,
}


class _Interrupt(Exception):
    pass


class _StopAfter(TrialCallbacks):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.seen: list[int] = []
        self.checkpoints: list = []

    def on_epoch_end(self, epoch, metrics, checkpoint) -> None:
        self.seen.append(epoch)
        self.checkpoints.append(checkpoint and checkpoint.name)
        if epoch == self.epoch:
            raise _Interrupt


def _weights(out):
    return load_file(str(list_checkpoints(out / "checkpoints")[-1] / "model.safetensors"))


DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    ),
]


@pytest.mark.parametrize("device", DEVICES)
def test_interrupted_trial_resumes_to_identical_weights(tmp_path, device):
    """The train set, shuffling, crops and flips live on ``device`` (device generators)."""
    cfg = TrialConfig.from_flat({**TINY, "device": device})
    # checkpointing does not touch the randomness: every 2nd epoch, and always the last
    straight = _StopAfter(99)
    run_trial(
        TrialConfig.from_flat({**TINY, "device": device, "checkpoint_every": 2}),
        tmp_path / "straight",
        callbacks=straight,
        progress=False,
    )
    assert straight.checkpoints == [None, "epoch_0002", "epoch_0003"]
    assert [p.name for p in list_checkpoints(tmp_path / "straight" / "checkpoints")] == [
        "epoch_0002",
        "epoch_0003",
    ]
    with pytest.raises(_Interrupt):
        run_trial(cfg, tmp_path / "cut", callbacks=_StopAfter(2), progress=False)
    again = _StopAfter(99)
    result = run_trial(cfg, tmp_path / "cut", callbacks=again, progress=False)
    assert again.seen == [3]  # epochs 1-2 were not repeated
    assert result.resumed_from_epoch == 2
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "cut")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # Specformer's persistent power vectors travel with the checkpoint too
    ra = load_file(
        str(list_checkpoints(tmp_path / "straight" / "checkpoints")[-1] / "regularizer.safetensors")
    )
    rb = load_file(
        str(list_checkpoints(tmp_path / "cut" / "checkpoints")[-1] / "regularizer.safetensors")
    )
    assert ra and all(torch.equal(ra[k], rb[k]) for k in ra)


def test_non_finite_loss_stops_with_a_clear_error(tmp_path):
    flat = {k: v for k, v in TINY.items() if k != "lam_v"}
    cfg = TrialConfig.from_flat(
        {**flat, "regularizer": "none", "lr": 1e6, "clip_grad": 0.0, "epochs": 1}
    )
    with pytest.raises(NonFiniteLossError, match="lower lr"):
        run_trial(cfg, tmp_path / "nan", progress=False)


def test_checkpoint_every_counts_epochs_and_always_keeps_the_last():
    assert [e for e in range(1, 8) if checkpoint_due(e, 7, 3)] == [3, 6, 7]
    assert [e for e in range(1, 7) if checkpoint_due(e, 6, 3)] == [3, 6]
    assert [e for e in range(1, 4) if checkpoint_due(e, 3, 1)] == [1, 2, 3]
    assert [e for e in range(1, 4) if checkpoint_due(e, 3, 10)] == [3]


def test_the_final_evaluation_logs_its_progress(tmp_path, caplog, monkeypatch):
    """Minutes of silence after the last epoch: it says what runs, each attack's result, a
    progress line while a long attack runs (here every batch) and when the Lipschitz part
    starts and ends."""
    import logging

    from lipsweep.attacks import evaluate
    from lipsweep.trial.run import final_evaluation
    from lipsweep.vit.models import create_model

    monkeypatch.setattr(evaluate, "PROGRESS_EVERY_S", 0.0)
    cfg = TrialConfig.from_flat(
        {**TINY, "depth": 1, "embed_dim": 32, "num_heads": 2, "eval_size": 16}
        | {"attacks": ["fgsm"], "attack_batch_size": 8, "lip_images": 2, "lip_tokens": False}
        | {"lip_softmax": False, "lip_head_bounds": False, "lip_figures": False}
    )
    torch.manual_seed(0)
    model = create_model(cfg.model).eval()
    x = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    y = torch.arange(16) % 10
    with caplog.at_level(logging.INFO, logger="lipsweep"):
        final_evaluation(model, x, y, cfg, torch.device("cpu"), tmp_path)
    text = caplog.text
    assert "final evaluation: clean accuracy and fgsm, then the Lipschitz summary" in text
    assert "robustness: 1/2 batches done (now clean)" in text
    assert "acc_fgsm_4 = " in text
    assert "the Lipschitz summary on 2 images next" in text and "Lipschitz summary done in" in text
