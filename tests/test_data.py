"""Data: embedded sample, npz/imagefolder/torchvision loaders, eval subset, augmentations."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SHARED_NPZ

from lipsweep.core.config_base import ConfigError
from lipsweep.data.datasets import embedded_path, embedded_rest_path
from lipsweep.data.loading import (
    DataConfig,
    augment,
    create_mixup,
    eval_subset_indices,
    load_splits,
    train_batches,
)

KEYS = ("x_train", "y_train", "x_test", "y_test")
# sha256 of the shared cifar10_subset.npz arrays (x_train, y_train, x_test, y_test bytes)
SUBSET_SHA256 = "f97595d27ee0de20351c8951afe750780c60743887d66e368ee67dee2906fe5b"


@pytest.fixture(scope="module")
def ref() -> dict[str, np.ndarray]:
    """The whole shipped sample (4660 train / 846 test), as cifar10_subset.npz holds it."""
    a, b = np.load(embedded_path()), np.load(embedded_rest_path())
    return {k: np.concatenate([a[k], b[k]]) for k in KEYS} | {"label_names": a["label_names"]}


def test_shipped_sample_is_the_studys_real_cifar10_subset(ref):
    emb = np.load(embedded_path())
    assert emb["x_train"].shape == (2000, 3, 32, 32) and emb["x_train"].dtype == np.uint8
    assert ref["x_train"].shape == (4660, 3, 32, 32) and ref["x_test"].shape == (846, 3, 32, 32)
    h = hashlib.sha256()
    for k in KEYS:
        h.update(np.ascontiguousarray(ref[k]).tobytes())
    assert h.hexdigest() == SUBSET_SHA256
    if SHARED_NPZ.is_file():
        shared = np.load(SHARED_NPZ)
        assert all(np.array_equal(ref[k], shared[k]) for k in KEYS)
    size = embedded_path().stat().st_size + embedded_rest_path().stat().st_size
    assert size <= 15 * 2**20
    s = load_splits(DataConfig(dataset="embedded_full", eval_size=500))
    assert s.x_train.shape == (4660, 3, 32, 32)
    assert torch.equal(s.x_eval, torch.from_numpy(ref["x_test"][s.eval_indices.numpy()]))


def test_study_reads_the_shipped_sample_not_a_shared_folder():
    root = Path(__file__).resolve().parents[1]
    for rel in ("search_spaces/study_cifar10_sample.yaml", "docs/study.md", "Makefile"):
        assert "shared/data" not in (root / rel).read_text(), rel


def test_eval_subset_is_seeded_sorted_and_stable():
    a = eval_subset_indices(846, 100, seed=3)
    assert torch.equal(a, eval_subset_indices(846, 100, seed=3))
    assert not torch.equal(a, eval_subset_indices(846, 100, seed=4))
    assert torch.equal(a, a.sort().values) and len(a.unique()) == 100
    assert torch.equal(eval_subset_indices(846, 0, 0), torch.arange(846))


def test_npz_source_and_eval_subset(tmp_path, ref):
    path = tmp_path / "d.npz"
    np.savez(path, **ref)
    cfg = DataConfig(dataset="npz", data_dir=str(path), eval_size=200, train_size=300)
    s = load_splits(cfg)
    assert s.x_train.shape == (300, 3, 32, 32) and cfg.num_classes == 10
    idx = s.eval_indices.numpy()
    assert torch.equal(s.x_eval, torch.from_numpy(ref["x_test"][idx]))
    # the labels of the same images, not the first 200 labels (which differ here)
    assert torch.equal(s.y_eval, torch.from_numpy(ref["y_test"][idx]).long())
    assert not np.array_equal(ref["y_test"][idx], ref["y_test"][: len(idx)])


def test_torchvision_cifar10_local_folder(tmp_path, monkeypatch, ref):
    """The torchvision loader reads a local folder in the standard python-batches layout."""
    import pickle  # building the fixture folder in the standard layout needs pickle

    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    x = ref["x_train"].reshape(len(ref["x_train"]), -1)
    for i in range(5):
        part = slice(i * 932, (i + 1) * 932)
        with open(root / f"data_batch_{i + 1}", "wb") as fh:
            pickle.dump({"data": x[part], "labels": ref["y_train"][part].tolist()}, fh)
    with open(root / "test_batch", "wb") as fh:
        pickle.dump({"data": ref["x_test"].reshape(846, -1), "labels": ref["y_test"].tolist()}, fh)
    with open(root / "batches.meta", "wb") as fh:
        pickle.dump({"label_names": list(ref["label_names"])}, fh)
    cfg = DataConfig(dataset="cifar10", data_dir=str(tmp_path), eval_size=0)
    import torchvision.datasets.cifar as tvc

    # the md5 sums torchvision checks are those of the full batches, not of this subset
    monkeypatch.setattr(tvc, "check_integrity", lambda *a, **k: True)
    s = load_splits(cfg)
    assert torch.equal(s.x_train, torch.from_numpy(ref["x_train"]))
    assert torch.equal(s.y_eval, torch.from_numpy(ref["y_test"]).long())


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(dataset="imagenet"), "dataset"),
        (dict(dataset="cifar10", data_dir="/no/such/dir"), "data_dir"),
        (dict(dataset="npz", data_dir="/no/such.npz"), "data_dir"),
        (dict(eval_size=-1), "eval_size"),
        (dict(mix_prob=2.0), "mix_prob"),
    ],
)
def test_bad_data_config_names_the_field(kwargs, field):
    with pytest.raises(ConfigError) as exc:
        DataConfig(**kwargs)
    assert exc.value.field == field


def test_batches_depend_only_on_seed_and_epoch():
    s = load_splits(DataConfig(eval_size=10))
    a = [y for _, y in train_batches(s, 64, seed=1, epoch=2)]
    b = [y for _, y in train_batches(s, 64, seed=1, epoch=2)]
    c = [y for _, y in train_batches(s, 64, seed=1, epoch=3)]
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not all(torch.equal(u, v) for u, v in zip(a, c))
    assert len(a) == 2000 // 64


def test_augment_crop_and_flip_are_real_and_seeded():
    x = torch.rand(16, 3, 32, 32)
    cfg = DataConfig(crop_padding=4, hflip=True)
    a = augment(x, cfg, torch.Generator().manual_seed(0))
    b = augment(x, cfg, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == x.shape
    # every output is a shifted (and maybe flipped) copy of its input, zero-filled at borders
    for i in range(16):
        found = False
        for img in (x[i], x[i].flip(-1)):
            padded = torch.nn.functional.pad(img, (4, 4, 4, 4))
            for dy in range(9):
                for dx in range(9):
                    if torch.equal(padded[:, dy : dy + 32, dx : dx + 32], a[i]):
                        found = True
        assert found
    none = augment(x, DataConfig(crop_padding=0, hflip=False), torch.Generator())
    assert torch.equal(none, x)


def test_mixup_is_timms_and_mixes_targets():
    from timm.data import Mixup

    mix = create_mixup(DataConfig(mixup=0.8, cutmix=1.0), 10)
    assert isinstance(mix, Mixup)
    np.random.seed(0)
    x, t = mix(torch.rand(8, 3, 32, 32), torch.arange(8))
    assert t.shape == (8, 10) and torch.allclose(t.sum(-1), torch.ones(8))
    assert create_mixup(DataConfig(), 10) is None


# --- the researcher's own data: npz with any number of classes, and an ImageFolder tree ---


def _npz(path: Path, n_classes: int = 100, layout: str = "NHWC", **over) -> Path:
    rng = np.random.default_rng(0)
    shape = (lambda n: (n, 32, 32, 3)) if layout == "NHWC" else (lambda n: (n, 3, 32, 32))
    arrays = {
        "x_train": rng.integers(0, 256, shape(300), dtype=np.uint8),
        "y_train": np.arange(300) % n_classes,
        "x_test": rng.integers(0, 256, shape(50), dtype=np.uint8),
        "y_test": np.arange(50) % n_classes,
    }
    arrays.update(over)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def test_npz_with_100_classes_nhwc_sets_num_classes(tmp_path):
    from lipsweep.settings.config import TrialConfig

    path = _npz(tmp_path / "c100.npz")
    cfg = TrialConfig.from_flat({"dataset": "npz", "data_dir": str(path), "eval_size": 0})
    assert cfg.data.num_classes == 100 and cfg.model.num_classes == 100
    s = load_splits(cfg.data)
    raw = np.load(path)
    assert s.x_train.shape == (300, 3, 32, 32)  # NHWC in the file, NCHW in memory
    assert torch.equal(s.x_train, torch.from_numpy(raw["x_train"].transpose(0, 3, 1, 2)))
    assert s.y_eval.dtype == torch.int64 and int(s.y_train.max()) == 99
    with pytest.raises(ConfigError) as exc:  # an explicit num_classes must match the data
        TrialConfig.from_flat({"dataset": "npz", "data_dir": str(path), "num_classes": 10})
    assert exc.value.field == "num_classes"


def _png_tree(root: Path, sizes: dict[str, tuple[int, int]] | None = None) -> Path:
    """train/ and test/ with classes cat, dog, frog; 32x32 PNGs (one greyscale)."""
    from PIL import Image

    rng = np.random.default_rng(1)
    for split, n in (("train", 4), ("test", 2)):
        for c in ("cat", "dog", "frog"):
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                size = (sizes or {}).get(f"{split}/{c}/{i}", (32, 32))
                img = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
                im = (
                    Image.fromarray(img).convert("L")
                    if (c, i) == ("frog", 0)
                    else Image.fromarray(img)
                )
                im.save(root / split / c / f"{i}.png")
    return root


def test_image_folder_source(tmp_path):
    from PIL import Image

    from lipsweep.settings.config import TrialConfig

    root = _png_tree(tmp_path / "pets")
    cfg = TrialConfig.from_flat({"dataset": "imagefolder", "data_dir": str(root), "eval_size": 0})
    assert cfg.model.num_classes == 3 and cfg.data.image_size == 32
    s = load_splits(cfg.data)
    assert s.x_train.shape == (12, 3, 32, 32) and s.x_eval.shape == (6, 3, 32, 32)
    assert s.y_train.tolist() == [0] * 4 + [1] * 4 + [2] * 4  # sorted class folders
    dog1 = np.array(Image.open(root / "test" / "dog" / "1.png")).transpose(2, 0, 1)
    assert torch.equal(s.x_eval[3], torch.from_numpy(dog1))
    grey = np.array(Image.open(root / "train" / "frog" / "0.png"))
    assert torch.equal(s.x_train[8], torch.from_numpy(np.stack([grey] * 3)))


def _cli_refuses(tmp_path, capsys, data: Path, dataset: str, problem: str) -> None:
    """`lipsweep train` on a bad source: exit 2, one line naming data_dir and the problem,
    nothing created."""
    from lipsweep.__main__ import main

    out = tmp_path / "out"
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(
        ["train", "--set", f"dataset={dataset}", "--set", f"data_dir={data}", "--out", str(out)]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "data_dir:" in err[0] and problem in err[0], err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not out.exists()


@pytest.mark.parametrize(
    "over,problem",
    [
        (
            dict(x_train=np.zeros((300, 32, 32, 3), np.float32)),
            "x_train is float32; expected uint8",
        ),
        (dict(x_test=np.zeros((50, 32, 32), np.uint8)), "x_test has shape (50, 32, 32)"),
        (dict(y_train=np.arange(299) % 100), "x_train has 300 images but y_train 299 labels"),
        (dict(y_test=np.full(50, 100)), "label 100 is out of range"),
        (dict(label_names=np.array(["a"] * 10)), "label 99 is out of range: 10 label_names"),
        (dict(y_train=-(np.arange(300) % 3)), "labels must be 0 .. C-1"),
        (dict(y_train=np.linspace(0, 1, 300)), "y_train must be a 1-D integer array"),
        (dict(x_test=np.zeros((50, 3, 32, 32), np.uint8)), "x_train is NHWC but x_test NCHW"),
        (dict(x_test=np.zeros((50, 24, 24, 3), np.uint8)), "images must be square and the same"),
        (dict(y_test=None), "lacks arrays ['y_test']"),
    ],
)
def test_bad_npz_is_refused_in_one_line(tmp_path, capsys, over, problem):
    (tmp_path / "data").mkdir()
    path = _npz(tmp_path / "data" / "bad.npz", **over)
    _cli_refuses(tmp_path, capsys, path, "npz", problem)


def test_a_file_that_is_no_npz_is_refused(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.npz").write_text("not a zip")
    _cli_refuses(tmp_path, capsys, tmp_path / "data" / "x.npz", "npz", "not a readable .npz")


@pytest.mark.parametrize(
    "breakage,problem",
    [
        ("no_test", "has no test/ folder"),
        ("extra_class", "same class folders; they differ in ['emu']"),
        ("empty_class", "train/dog/ holds no images"),
        ("odd_size", "train/cat/1.png is 32x24; images must be square"),
        ("two_sizes", "test/dog/0.png is 28x28 but the others 32x32"),
        ("broken", "cannot read image train/cat/0.png"),
        ("missing", "no such folder"),
    ],
)
def test_bad_image_folder_is_refused_in_one_line(tmp_path, capsys, breakage, problem):
    import shutil

    sizes = {"odd_size": {"train/cat/1": (32, 24)}, "two_sizes": {"test/dog/0": (28, 28)}}
    root = _png_tree(tmp_path / "data" / "pets", sizes.get(breakage))
    if breakage == "no_test":
        shutil.rmtree(root / "test")
    elif breakage == "extra_class":
        (root / "test" / "emu").mkdir()
    elif breakage == "empty_class":
        for f in (root / "train" / "dog").iterdir():
            f.unlink()
    elif breakage == "broken":
        (root / "train" / "cat" / "0.png").write_bytes(b"\x89PNG truncated")
    elif breakage == "missing":
        root = tmp_path / "data" / "nope"
    _cli_refuses(tmp_path, capsys, root, "imagefolder", problem)


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100"])
def test_download_true_accepts_a_cifar_folder_that_does_not_exist_yet(tmp_path, dataset):
    """The first download creates the folder: building the config must not refuse it."""
    absent = tmp_path / "absent"
    cfg = DataConfig(dataset=dataset, data_dir=str(absent), download=True)
    assert cfg.download and cfg.data_dir == str(absent) and not absent.exists()
    with pytest.raises(ConfigError) as exc:  # without download, the folder must be there
        DataConfig(dataset=dataset, data_dir=str(absent))
    assert exc.value.field == "data_dir"


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100", "npz"])
def test_a_prepared_dataset_uri_with_download_true_is_refused(dataset):
    uri = "s3://bucket/cifar.npz"
    assert DataConfig(dataset=dataset, data_dir=uri).data_dir == uri  # read on the node
    with pytest.raises(ConfigError, match="needs no download") as exc:
        DataConfig(dataset=dataset, data_dir=uri, download=True)
    assert exc.value.field == "download"


def test_cifar100_normalization_is_the_published_cifar100_channel_mean_and_std():
    """The CIFAR-100 training set's per-channel pixel mean and std (RGB, in [0, 1]), as
    published with pytorch-cifar100 (weiaicunzai, conf/global_settings.py); CIFAR-10's mean
    (0.4914, 0.4822, 0.4465) is 0.016 away in red."""
    from lipsweep.vit.config import normalizations

    mean, std = normalizations()["cifar100"]
    assert mean == pytest.approx((0.50708, 0.48655, 0.44092), abs=5e-4)
    assert std == pytest.approx((0.26733, 0.25644, 0.27615), abs=5e-4)


# --- labels and images checked by value before anything is spent or written ---
_SMALL_MODEL = {"model": "vit_tiny_patch16_224", "depth": 1, "embed_dim": 32, "num_heads": 2}


def _labelled_npz(path: Path, y_train: np.ndarray, y_test: np.ndarray) -> Path:
    rng = np.random.default_rng(0)
    np.savez(
        path,
        x_train=rng.integers(0, 256, (len(y_train), 3, 8, 8), dtype=np.uint8),
        y_train=y_train,
        x_test=rng.integers(0, 256, (len(y_test), 3, 8, 8), dtype=np.uint8),
        y_test=y_test,
    )
    return path


def _npz_trial(path: Path, **extra):
    from lipsweep.settings.config import TrialConfig

    return TrialConfig.from_flat(
        {**_SMALL_MODEL, "dataset": "npz", "data_dir": str(path), "img_size": 8, **extra}
    )


def test_explicit_num_classes_wins_when_every_label_is_below_it(tmp_path):
    """`num_classes: 100` is accepted though the training split lacks label 99 (no 'the
    training labels give 99 classes')."""
    path = _labelled_npz(tmp_path / "d.npz", np.arange(198) % 99, np.array([0, 99]))
    assert _npz_trial(path, num_classes=100).model.num_classes == 100
    with pytest.raises(ConfigError) as info:  # not given: inferred, and the test label is out
        _npz_trial(path)
    assert info.value.field == "data_dir" and "label 99 is out of range" in str(info.value)
    with pytest.raises(ConfigError) as info:  # given, but a label is at or above it
        _npz_trial(path, num_classes=50)
    assert info.value.field == "num_classes" and "has label 99" in str(info.value)


def test_one_class_data_is_refused_before_training(tmp_path):
    """A one-class npz is refused before training, not by the evaluation's 'C >= 2'."""
    path = _labelled_npz(tmp_path / "one.npz", np.zeros(20, np.int64), np.zeros(4, np.int64))
    with pytest.raises(ConfigError) as info:
        _npz_trial(path)
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

    from lipsweep.data.sources import load_image_folder

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
    import struct
    import zlib

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
    from lipsweep.__main__ import main
    from lipsweep.data.sources import inspect_image_folder

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
