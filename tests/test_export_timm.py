"""An export opens with timm alone (issue 29 §2): ``timm.create_model("local-dir:EXPORT",
pretrained=True)`` builds the exported network with its weights, and on the same pixels,
normalised by the ``pretrained_cfg`` timm reads, gives the logits of ``lipsweep.load_exported``
(which normalises [0, 1] pixels itself)."""

from __future__ import annotations

from pathlib import Path

import torch

from lipsweep.decide.export import build_config_json, load_exported, write_export
from lipsweep.settings.config import TrialConfig
from lipsweep.trial.models import PixelModel, create_model

TINY = {"depth": 2, "embed_dim": 64, "num_heads": 4}


def _export(folder: Path, **settings) -> tuple[torch.nn.Module, Path]:
    """A tiny ViT through lipsweep's builder, exported with a mean/std per channel (a mix-up
    of channels or of mean and std shows); returns the wrapped network the export holds."""
    flat = TrialConfig.from_flat({**TINY, **settings}).to_flat()
    net = create_model(TrialConfig.from_flat(flat).model).net
    mean, std = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
    config = build_config_json(flat, mean, std, {"run_id": "r1"})
    folder = write_export(folder, net.state_dict(), config, {"acc_clean": 50.0})
    return PixelModel(net, mean, std).eval(), folder


def test_tagged_model_name_loads(tmp_path):
    """A trial of ``vit_base_patch16_224.orig_in21k_ft_in1k`` (the paper spaces' model) was
    refused by load_exported: the pretrained tag failed the ``vit_*`` name check."""
    model, folder = _export(tmp_path / "exp", model="vit_base_patch16_224.orig_in21k_ft_in1k")
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(load_exported(folder)(x), model(x))
