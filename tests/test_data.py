"""Data: embedded sample, npz/torchvision loaders, seeded eval subset, augmentations."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import SHARED_NPZ
from lipsweep.config_base import ConfigError
from lipsweep.data import (DataConfig, augment, create_mixup, embedded_path,
                           eval_subset_indices, load_splits, train_batches)


def test_embedded_sample_is_real_cifar10_from_the_shared_file():
    emb = np.load(embedded_path())
    ref = np.load(SHARED_NPZ)
    assert emb["x_train"].shape == (2000, 3, 32, 32) and emb["x_train"].dtype == np.uint8
    assert np.array_equal(emb["x_train"], ref["x_train"][:2000])
    assert np.array_equal(emb["y_test"], ref["y_test"][:500])
    assert embedded_path().stat().st_size < 8 * 2**20


def test_eval_subset_is_seeded_sorted_and_stable():
    a = eval_subset_indices(846, 100, seed=3)
    assert torch.equal(a, eval_subset_indices(846, 100, seed=3))
    assert not torch.equal(a, eval_subset_indices(846, 100, seed=4))
    assert torch.equal(a, a.sort().values) and len(a.unique()) == 100
    assert torch.equal(eval_subset_indices(846, 0, 0), torch.arange(846))


def test_npz_source_and_eval_subset(tmp_path):
    cfg = DataConfig(dataset="npz", data_dir=str(SHARED_NPZ), eval_size=200, train_size=300)
    s = load_splits(cfg)
    ref = np.load(SHARED_NPZ)
    assert s.x_train.shape == (300, 3, 32, 32)
    assert torch.equal(s.x_eval, torch.from_numpy(ref["x_test"][s.eval_indices.numpy()]))


def test_torchvision_cifar10_local_folder(tmp_path, monkeypatch):
    """The torchvision loader reads a local folder in the standard python-batches layout."""
    import pickle  # building the fixture folder in the standard layout needs pickle

    ref = np.load(SHARED_NPZ)
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    x = ref["x_train"].reshape(len(ref["x_train"]), -1)
    for i in range(5):
        part = slice(i * 932, (i + 1) * 932)
        with open(root / f"data_batch_{i + 1}", "wb") as fh:
            pickle.dump({"data": x[part], "labels": ref["y_train"][part].tolist()}, fh)
    with open(root / "test_batch", "wb") as fh:
        pickle.dump({"data": ref["x_test"].reshape(846, -1),
                     "labels": ref["y_test"].tolist()}, fh)
    with open(root / "batches.meta", "wb") as fh:
        pickle.dump({"label_names": list(ref["label_names"])}, fh)
    cfg = DataConfig(dataset="cifar10", data_dir=str(tmp_path), eval_size=0)
    import torchvision.datasets.cifar as tvc

    # the md5 sums torchvision checks are those of the full batches, not of this subset
    monkeypatch.setattr(tvc, "check_integrity", lambda *a, **k: True)
    s = load_splits(cfg)
    assert torch.equal(s.x_train, torch.from_numpy(ref["x_train"]))
    assert torch.equal(s.y_eval, torch.from_numpy(ref["y_test"]).long())


@pytest.mark.parametrize("kwargs,field", [
    (dict(dataset="imagenet"), "dataset"),
    (dict(dataset="cifar10", data_dir="/no/such/dir"), "data_dir"),
    (dict(dataset="npz", data_dir="/no/such.npz"), "data_dir"),
    (dict(eval_size=-1), "eval_size"),
    (dict(mix_prob=2.0), "mix_prob"),
])
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
                    if torch.equal(padded[:, dy:dy + 32, dx:dx + 32], a[i]):
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
