"""Data answers checked by value, and bad input refused before
anything is spent or written. Real files (npz, PNG through Pillow), real MLflow on SQLite."""

from __future__ import annotations

import hashlib
import logging
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import small_npz

from lipsweep.__main__ import main
from lipsweep.core.config_base import ConfigError
from lipsweep.data.sources import inspect_image_folder, load_image_folder
from lipsweep.settings.config import TrialConfig

SMALL = {"model": "vit_tiny_patch16_224", "depth": 1, "embed_dim": 32, "num_heads": 2}


def _npz(path: Path, y_train: np.ndarray, y_test: np.ndarray) -> Path:
    rng = np.random.default_rng(0)
    np.savez(
        path,
        x_train=rng.integers(0, 256, (len(y_train), 3, 8, 8), dtype=np.uint8),
        y_train=y_train,
        x_test=rng.integers(0, 256, (len(y_test), 3, 8, 8), dtype=np.uint8),
        y_test=y_test,
    )
    return path


def _cfg(path: Path, **extra) -> TrialConfig:
    return TrialConfig.from_flat(
        {**SMALL, "dataset": "npz", "data_dir": str(path), "img_size": 8, **extra}
    )


def test_explicit_num_classes_wins_when_every_label_is_below_it(tmp_path):
    """`num_classes: 100` is accepted though the training split lacks label 99 (no 'the
    training labels give 99 classes')."""
    path = _npz(tmp_path / "d.npz", np.arange(198) % 99, np.array([0, 99]))
    assert _cfg(path, num_classes=100).model.num_classes == 100
    with pytest.raises(ConfigError) as info:  # not given: inferred, and the test label is out
        _cfg(path)
    assert info.value.field == "data_dir" and "label 99 is out of range" in str(info.value)
    with pytest.raises(ConfigError) as info:  # given, but a label is at or above it
        _cfg(path, num_classes=50)
    assert info.value.field == "num_classes" and "has label 99" in str(info.value)


def test_one_class_data_is_refused_before_training(tmp_path):
    """A one-class npz is refused before training, not by the evaluation's 'C >= 2'."""
    path = _npz(tmp_path / "one.npz", np.zeros(20, np.int64), np.zeros(4, np.int64))
    with pytest.raises(ConfigError) as info:
        _cfg(path)
    assert info.value.field == "data_dir" and "give 1 class" in str(info.value)
    assert "at least 2" in str(info.value)


def _tree(root: Path, images: dict[str, "object"]) -> Path:
    """An ImageFolder tree: {'train/a/0.png': PIL image or bytes, ...}."""
    for rel, im in images.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(im, bytes):
            f.write_bytes(im)
        else:
            im.save(f)
    return root


def _rgb(seed: int):
    from PIL import Image

    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))


def test_16_bit_pngs_are_scaled_not_clipped(tmp_path):
    """16-bit grey is scaled, not clipped at 255 as Pillow's convert('RGB') does (99% of
    these pixels)."""
    from PIL import Image

    wide = (np.arange(64, dtype=np.uint32).reshape(8, 8) * 1040).astype(np.uint16)  # 0..65520
    root = _tree(
        tmp_path / "pets",
        {
            "train/a/0.png": Image.fromarray(wide),
            "train/b/0.png": _rgb(1),
            "test/a/0.png": _rgb(2),
            "test/b/0.png": _rgb(3),
        },
    )
    assert Image.open(root / "train/a/0.png").mode == "I;16"
    x_train = load_image_folder(root)[0]
    expected = np.floor(wide.astype(np.float64) * 255 / 65535 + 0.5).astype(np.uint8)
    for c in range(3):
        np.testing.assert_array_equal(x_train[0, c], expected)
    assert (x_train[0] == 255).mean() < 0.05


def _png_bytes(im) -> bytes:
    import io

    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def _claims_size(png: bytes, w: int, h: int) -> bytes:
    """The PNG with its IHDR width/height replaced (and its CRC recomputed)."""
    ihdr = png[12:29]  # b'IHDR' + 13 bytes of data
    data = struct.pack(">II", w, h) + ihdr[12:]
    chunk = b"IHDR" + data
    return png[:12] + chunk + struct.pack(">I", zlib.crc32(chunk)) + png[33:]


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda b: b[: len(b) // 2], "cannot read image train/a/0.png"),
        (lambda b: _claims_size(b, 100000, 100000), "decompression bomb"),
    ],
    ids=["truncated", "bomb-header"],
)
def test_a_damaged_png_is_refused_naming_it_before_anything_is_written(
    tmp_path, capsys, damage, problem
):
    """A truncated PNG is refused up front, not by `OSError: image file is truncated` after
    config.json is written (a header-only check passes it); a 100000x100000 header is
    refused without a DecompressionBombError traceback."""
    big = _rgb(0).resize((32, 32))
    root = _tree(
        tmp_path / "data" / "pets",
        {
            "train/a/0.png": damage(_png_bytes(big)),
            "train/b/0.png": big,
            "test/a/0.png": big,
            "test/b/0.png": big,
        },
    )
    with pytest.raises(ConfigError) as info:
        inspect_image_folder(root)
    assert info.value.field == "data_dir" and problem in str(info.value), str(info.value)
    out = tmp_path / "out"
    argv = ["train", "--set", "dataset=imagefolder", "--set", f"data_dir={root}"]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data_dir:" in err and not out.exists(), err


@pytest.mark.parametrize(
    "name, problem",
    [
        ("", "MLflow refuses the model name ''"),
        ("a/b", "cannot contain '/'"),
        ("x" * 300, "at most 256"),
    ],
    ids=["empty", "slash", "long"],
)
def test_export_register_name_is_checked_first(tmp_path, capsys, name, problem):
    """'' is refused (it would register nothing and exit 0), and a refused name is found
    before the export is written, by an error naming --register, not --tracking-uri."""
    out = tmp_path / "export"
    uri = f"sqlite:///{tmp_path / 'absent' / 'mlflow.db'}"
    argv = ["export", "--experiment", "x", "--out", str(out), "--tracking-uri", uri]
    assert main([*argv, "--register", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: --register:" in err and problem in err, err
    assert not out.exists() and not (tmp_path / "absent").exists()


def test_data_prepare_with_a_bad_source_creates_no_dest(tmp_path, capsys):
    """Exit 2 for an unreadable --source, and --dest not created."""
    bad = tmp_path / "bad.npz"
    bad.write_text("not a zip")
    dest = tmp_path / "prefix"  # its parent exists: the folder-option rule lets it through
    argv = ["data", "prepare", "--dataset", "cifar10", "--source", str(bad), "--dest", str(dest)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--source:" in err, err
    assert not dest.exists()


def test_a_modified_cached_dataset_is_checked_and_copied_again(tmp_path, monkeypatch, caplog):
    """A prepared dataset's cached copy is used again only after its sha256 is checked, so a
    modified copy is not."""
    from lipsweep.data.remote import fetch_prepared, read_manifest

    monkeypatch.setenv("LIPSWEEP_DATA_CACHE", str(tmp_path / "cache"))
    src = small_npz(tmp_path / "src.npz")
    dest = f"file://{tmp_path}/bucket"
    assert (
        main(["data", "prepare", "--dataset", "cifar10", "--source", str(src), "--dest", dest]) == 0
    )
    uri = f"{dest}/cifar10.npz"
    sha = read_manifest(uri).sha256
    cached = fetch_prepared(uri, "cifar10")
    assert fetch_prepared(uri, "cifar10") == cached  # unchanged: used as it is
    data = bytearray(cached.read_bytes())
    data[-100] ^= 0xFF  # same size: only the sha256 can tell
    cached.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING)
    again = fetch_prepared(uri, "cifar10")
    assert hashlib.sha256(again.read_bytes()).hexdigest() == sha
    assert "does not match its sha256" in caplog.text


@pytest.mark.parametrize(
    "settings, field",
    [({"embed_dim": 64}, "embed_dim"), ({"num_heads": 5}, "num_heads"), ({}, None)],
)
def test_a_width_the_architectures_heads_do_not_divide_is_a_config_error(settings, field):
    """`train --set embed_dim=64` on vit_tiny (3 heads) is refused at validation, not by
    timm's assertion inside the trial: the architecture is built on the meta device first."""
    from lipsweep.core.config_base import ConfigError
    from lipsweep.vit.config import ModelConfig

    cfg = ModelConfig(model="vit_tiny_patch16_224", **settings)
    if field is None:
        cfg.validate_name()
        return
    with pytest.raises(ConfigError, match="multiple of num_heads") as err:
        cfg.validate_name()
    assert err.value.field == field


def _damage(text: bytes, name: str, how: str) -> bytes:
    if name == "config.json":
        return b"{not json" if how == "text" else b"[1, 2]"
    return {"cut": text[: len(text) // 2], "empty": b"", "header": struct.pack("<Q", 2**62)}[how]


@pytest.mark.parametrize(
    "name,how,problem",
    [
        ("model.safetensors", "cut", "incomplete metadata"),
        ("model.safetensors", "empty", "header too small"),
        ("model.safetensors", "header", "header too large"),
        ("config.json", "text", "not JSON"),
        ("config.json", "list", "a JSON list, not a mapping"),
    ],
)
def test_export_of_a_damaged_checkpoint_names_the_run_and_the_artifact(
    tmp_path, capsys, name, how, problem
):
    """A run's checkpoint artifacts logged whole, then one damaged: exit 2, one line."""
    import json

    import torch
    from _sweep_helpers import empty_store, mlflow_client
    from safetensors.torch import save

    from lipsweep.tracking.schema import TAG_KIND

    uri = empty_store(tmp_path / "m.db")
    c = mlflow_client(uri)
    exp = c.create_experiment("e", artifact_location=str(tmp_path / "art"))
    run = c.create_run(exp, tags={TAG_KIND: "trial"}).info.run_id
    ck = tmp_path / "ck"
    ck.mkdir()
    files = {
        "config.json": json.dumps(TrialConfig.from_flat(SMALL).to_flat()).encode(),
        "model.safetensors": save({"w": torch.zeros(64)}),
    }
    files[name] = _damage(files[name], name, how)
    for file, data in files.items():
        (ck / file).write_bytes(data)
    c.log_artifacts(run, str(ck), "checkpoint")
    c.set_terminated(run)
    out = tmp_path / "out"
    argv = ["export", "--experiment", "e", "--run-id", run, "--out", str(out)]
    assert main([*argv, "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    (line,) = [s for s in err.splitlines() if s.startswith("lipsweep export:")]
    assert "Traceback" not in err and f"run {run}: its checkpoint/{name} artifact" in line, err
    assert problem in line and not out.exists(), line
