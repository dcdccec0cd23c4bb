"""An export opens with timm alone: ``timm.create_model("local-dir:EXPORT",
pretrained=True)`` builds the exported network with its weights, and on the same pixels,
normalised by the ``pretrained_cfg`` timm reads, gives the logits of ``lipsweep.load_exported``
(which normalises [0, 1] pixels itself)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from lipsweep.decide.export import card_body, write_export
from lipsweep.settings.config import TrialConfig
from lipsweep.vit.export_format import ExportError, build_config_json, load_exported, model_io
from lipsweep.vit.models import PixelModel, create_model

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


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return _export(tmp_path_factory.mktemp("timm") / "exp")


@pytest.mark.parametrize(
    "name", ["vit_tiny_patch16_224", "vit_base_patch16_224.orig_in21k_ft_in1k"]
)
def test_timm_opens_the_export_with_the_same_logits(tmp_path, name):
    """timm alone (no lipsweep code between) rebuilds the network with the export's weights;
    fed the pixels normalised with the mean/std timm resolves from config.json, it gives the
    logits lipsweep's wrapper gives on the raw [0, 1] pixels. Before the timm keys, timm's
    loader failed on config.json (no ``architecture``)."""
    import timm

    model, folder = _export(tmp_path / "exp", model=name)
    net = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
    data = timm.data.resolve_model_data_config(net)
    assert data["input_size"] == (3, 32, 32) and data["crop_pct"] == 1.0
    mean = torch.tensor(data["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(data["std"]).view(1, 3, 1, 1)
    x = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = load_exported(folder)(x)
        torch.testing.assert_close(net((x - mean) / std), ours, rtol=0, atol=1e-6)
        torch.testing.assert_close(ours, model(x), rtol=0, atol=1e-6)


def test_card_snippet_through_timm_preprocessing(exported):
    """The card's snippet, run as written: timm's own eval transform (resize to 32 at
    crop_pct 1, centre crop, to tensor, normalise) on a uint8 image feeds ``net`` the input
    lipsweep's wrapper builds from the same image in [0, 1]: same logits."""
    import numpy as np
    from PIL import Image

    _, folder = exported
    card = (folder / "README.md").read_text()
    (snippet,) = re.findall(r"```python\n(.*?)```", card, re.S)
    scope: dict = {}
    exec(snippet.replace("<this folder>", str(folder)), scope)  # noqa: S102 - the card's text
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in "ab"]
    with torch.no_grad():
        timm_logits = scope["net"](torch.stack([scope["transform"](im) for im in images]))
        pixels = torch.stack([torch.from_numpy(np.array(im)).permute(2, 0, 1) for im in images])
        ours = scope["model"](pixels.float() / 255)
    torch.testing.assert_close(timm_logits, ours, rtol=0, atol=1e-5)


def test_timm_fine_tunes_from_the_export(exported):
    """A new head (``num_classes=3``): timm keeps every other exported weight, as for any
    pretrained checkpoint (``pretrained_cfg.classifier`` names the head it drops)."""
    import timm

    model, folder = exported
    net = timm.create_model(f"local-dir:{folder}", pretrained=True, num_classes=3)
    assert net.head.weight.shape == (3, 64)
    assert torch.equal(net.blocks[1].mlp.fc2.weight, model.net.blocks[1].mlp.fc2.weight)
    assert torch.equal(net.pos_embed, model.net.pos_embed)


def _front_matter(card: str) -> dict:
    head, sep, _ = card.partition("\n---\n")
    assert card.startswith("---\n") and sep, card[:200]
    return yaml.safe_load(head[len("---\n") :])


def test_card_header_is_the_hub_metadata(tmp_path):
    """The YAML header parses, with PyYAML and with huggingface_hub's own card parser (local
    file, nothing pushed); its model-index names the metrics of the card's table, values as
    in metrics.json; a non-finite metric is left out of the header."""
    from huggingface_hub import ModelCard

    flat = TrialConfig.from_flat(TINY).to_flat()
    config = build_config_json(flat, (0.5,) * 3, (0.5,) * 3, {"run_name": "t0: specformer"})
    metrics = {"acc_clean": 27.0, "acc_pgd_4": 16.0, "lip_jacobian_median": 1.265}
    metrics["acc_aa_2"] = float("nan")
    net = create_model(TrialConfig.from_flat(flat).model).net
    folder = write_export(tmp_path / "exp", net.state_dict(), config, metrics)
    card = (folder / "README.md").read_text()
    meta = _front_matter(card)
    assert meta["library_name"] == "timm" and meta["pipeline_tag"] == "image-classification"
    (entry,) = meta["model-index"]
    assert entry["name"] == "t0: specformer"
    (result,) = entry["results"]
    assert result["dataset"]["type"] == flat["dataset"]
    assert [(m["name"], m["type"], m["value"]) for m in result["metrics"]] == [
        ("acc_clean", "accuracy", 27.0),
        ("acc_pgd_4", "accuracy", 16.0),
        ("lip_jacobian_median", "lip_jacobian_median", 1.265),
    ]
    hub = ModelCard.load(folder / "README.md").data
    assert [r.metric_name for r in hub.eval_results] == [m["name"] for m in result["metrics"]]
    assert "| `acc_clean` | 27 |" in card  # the table below the header is unchanged
    body = card_body(card)  # what MLflow's model version description gets
    assert body.startswith("# vit_tiny_patch16_224") and card.endswith(body)
    assert card_body(body) == body


TIMM_KEYS = ("architecture", "num_classes", "model_args", "pretrained_cfg")


def test_export_without_timm_keys_still_loads(exported, tmp_path):
    """An export written before the timm keys (config.json without them) loads as before."""
    model, folder = exported
    old = tmp_path / "old"
    shutil.copytree(folder, old)
    config = json.loads((old / "config.json").read_text())
    assert set(TIMM_KEYS) <= set(config)
    (old / "config.json").write_text(
        json.dumps({k: v for k, v in config.items() if k not in TIMM_KEYS})
    )
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(load_exported(old)(x), model(x))
    assert model_io(old)["num_classes"] == 10


@pytest.mark.parametrize(
    "field, edit",
    [
        ("architecture", lambda c: c.update(architecture="vit_small_patch16_224")),
        ("model_args.depth", lambda c: c["model_args"].update(depth=1)),
        ("model_args.qkv_bias", lambda c: c["model_args"].update(qkv_bias=0)),
        ("num_classes", lambda c: c.update(num_classes=100)),
        ("pretrained_cfg.mean", lambda c: c["pretrained_cfg"].update(mean=[0.5, 0.5, 0.5])),
    ],
)
def test_timm_keys_that_disagree_are_refused(exported, tmp_path, field, edit):
    """timm and load_exported would give different logits: one ExportError naming the field."""
    _, folder = exported
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    config = json.loads((bad / "config.json").read_text())
    edit(config)
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(ExportError) as err:
        load_exported(bad)
    assert err.value.field == field and err.value.file.endswith("config.json")
