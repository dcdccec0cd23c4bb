"""The ViT builder: one code path for ViT-B and tiny ViTs, pixel-space wrapper, resampling."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model_config

from lipsweep.core.config_base import ConfigError
from lipsweep.vit.models import ModelConfig, PixelModel, attention_modules, create_model


def test_tiny_vit_maps_pixels_to_logits():
    model = create_model(tiny_model_config())
    assert isinstance(model, PixelModel)
    out = model(torch.rand(3, 3, 32, 32))
    assert out.shape == (3, 10)
    assert len(list(attention_modules(model))) == 4
    assert all(a.qkv.bias is None for a in attention_modules(model))  # paper: no q/k/v bias
    assert model.net.patch_embed.proj.kernel_size == (4, 4)
    assert model.net.pos_embed.shape[1] == 65


def test_normalisation_lives_inside_the_model():
    model = create_model(tiny_model_config()).eval()
    x = torch.rand(2, 3, 32, 32)
    mean, std = model.mean, model.std
    assert torch.allclose(model(x), model.net((x - mean) / std))


@pytest.mark.slow
def test_vit_b16_224_checkpoint_resamples_to_32px_patch4(tmp_path):
    """A 224px/patch-16 ViT-B state dict loads into a 32px/patch-4 model (timm resampling)."""
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(0)
    src = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=1000)
    with torch.no_grad():  # a kernel constant over each 16x16 patch: resampling has an exact answer
        src.patch_embed.proj.weight.copy_(torch.randn(768, 3, 1, 1).expand(-1, -1, 16, 16))
    path = tmp_path / "vit_b16_224.safetensors"
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(path))
    cfg = ModelConfig(
        model="vit_base_patch16_224",
        img_size=32,
        patch_size=4,
        num_classes=10,
        pretrained=str(path),
    )
    model = create_model(cfg)
    net = model.net
    assert net.patch_embed.proj.weight.shape == (768, 3, 4, 4)
    assert net.pos_embed.shape == (1, 65, 768)
    # blocks are copied verbatim (qkv weight; the checkpoint's qkv bias is dropped)
    assert torch.equal(net.blocks[3].attn.qkv.weight, src.blocks[3].attn.qkv.weight)
    assert net.blocks[0].attn.qkv.bias is None
    # the CLS position embedding is kept, the grid part is interpolated (not random init)
    assert torch.allclose(net.pos_embed[0, 0], src.pos_embed[0, 0])
    # PI-resize (FlexiViT) keeps a patch's response: a constant 16x16 patch through the source
    # kernel and the same constant 4x4 patch through the resized one agree (bicubic antialiasing
    # at the borders costs a few percent), and the new kernel is nearly constant as well.
    old = src.patch_embed.proj.weight.sum(dim=(2, 3))  # response to ones(16, 16)
    new = net.patch_embed.proj.weight.sum(dim=(2, 3))  # response to ones(4, 4)
    assert ((new - old).abs() / old.abs()).max() < 0.05
    w = net.patch_embed.proj.weight
    assert (w.amax(dim=(2, 3)) / w.amin(dim=(2, 3)) - 1).abs().max() < 0.05
    assert net.head.weight.shape == (10, 768)
    assert model(torch.rand(1, 3, 32, 32)).shape == (1, 10)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(model="resnet50"), "model"),
        (dict(patch_size=5), "patch_size"),
        (dict(img_size=0), "img_size"),
        (dict(num_classes=-1), "num_classes"),
        (dict(embed_dim=130, num_heads=4), "num_heads"),
        (dict(pretrained="/no/such/file.safetensors"), "pretrained"),
        (dict(drop_path=1.5), "drop_path"),
    ],
)
def test_bad_model_config_names_the_field(kwargs, field):
    with pytest.raises(ConfigError) as exc:
        ModelConfig(**kwargs)
    assert exc.value.field == field


def test_unknown_timm_name_is_rejected_with_suggestions():
    cfg = ModelConfig(model="vit_tinyy_patch16_224")
    with pytest.raises(ConfigError, match="unknown timm model"):
        cfg.validate_name()


def _stage_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "deploy" / "stage_weights.py"
    spec = importlib.util.spec_from_file_location("stage_weights", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_staged_weights_load_offline_after_their_checksum(tmp_path, monkeypatch) -> None:
    """A worker with no network builds its model from the staged file: the weights are the
    staged ones, nothing is fetched, and a file that is not the staged one is refused."""
    import huggingface_hub
    import timm

    def no_network(*args, **kwargs):
        raise AssertionError("a download was attempted")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_network)
    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", no_network)
    kw = dict(img_size=32, patch_size=4, num_classes=10, depth=2, embed_dim=64, num_heads=2)
    torch.manual_seed(1)
    source = timm.create_model("vit_tiny_patch16_224", pretrained=False, qkv_bias=False, **kw)
    path = tmp_path / "vit_tiny.safetensors"
    sha = _stage_module().stage(source, path)
    cfg = ModelConfig(
        model="vit_tiny_patch16_224", pretrained=str(path), pretrained_sha256=sha, **kw
    )
    net = create_model(cfg).net
    body = {k: v for k, v in source.state_dict().items() if not k.startswith("head.")}
    assert len(body) > 20  # the head is the fine-tuned task's own: fresh, as from the hub
    for name, value in body.items():
        assert torch.equal(net.state_dict()[name], value), name
    path.write_bytes(path.read_bytes()[:-1] + b" ")  # one byte off: a damaged copy on a node
    with pytest.raises(ConfigError, match="pretrained_sha256.*stage it again"):
        create_model(cfg)


@pytest.mark.parametrize(
    ("pretrained", "sha", "words"),
    [("hub", "0" * 64, "checks a weights file"), ("", "0" * 64, "checks a weights file")],
)
def test_pretrained_sha256_needs_a_file(pretrained: str, sha: str, words: str) -> None:
    with pytest.raises(ConfigError, match=f"pretrained_sha256.*{words}"):
        tiny_model_config(pretrained=pretrained, pretrained_sha256=sha)
    with pytest.raises(ConfigError, match="pretrained_sha256.*64 lowercase hex"):
        tiny_model_config(pretrained=pretrained, pretrained_sha256="abc")


@pytest.mark.parametrize(
    "settings, field",
    [({"embed_dim": 64}, "embed_dim"), ({"num_heads": 5}, "num_heads"), ({}, None)],
)
def test_a_width_the_architectures_heads_do_not_divide_is_a_config_error(settings, field):
    """`train --set embed_dim=64` on vit_tiny (3 heads) is refused at validation, not by
    timm's assertion inside the trial: the architecture is built on the meta device first."""
    cfg = ModelConfig(model="vit_tiny_patch16_224", **settings)
    if field is None:
        cfg.validate_name()
        return
    with pytest.raises(ConfigError, match="multiple of num_heads") as err:
        cfg.validate_name()
    assert err.value.field == field
