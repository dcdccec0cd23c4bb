"""Data for lipsweep: the embedded CIFAR-10 sample, torchvision CIFAR-10/100, or the user's own
images (an .npz file or an ImageFolder tree, checked when the config is built; see
:mod:`lipsweep.data_sources`).

Every source is loaded once into uint8 tensors (N, 3, 32, 32) and batched from memory; the
paper's augmentations (random crop with padding 4, horizontal flip; CutMix and MixUp through
timm's ``Mixup``; SPEC §2.7) run on whole batches on the training device. CIFAR-100 is 150 MB
as uint8, so this holds for the full datasets too and avoids DataLoader worker overhead.

Randomness is a pure function of (seed, epoch), so a resumed trial sees exactly the batches an
uninterrupted one would. The evaluation subset is a seeded, sorted subset of the test split:
every attack and every Lipschitz estimate of a trial sees the same images.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import torch
import torch.nn.functional as F

from lipsweep.config_base import ConfigError, absolute_path, check_choice, check_positive, check_range
from lipsweep.data_remote import check_uri, is_prepared, is_uri, local_source
from lipsweep.data_sources import (SourceInfo, inspect_image_folder, inspect_npz,
                                   load_image_folder, load_npz)

_log = logging.getLogger(__name__)

DATASETS = ("embedded", "embedded_full", "npz", "imagefolder", "cifar10", "cifar100")
# fixed sources; for 'npz' and 'imagefolder' the classes come from the data
NUM_CLASSES = {"embedded": 10, "embedded_full": 10, "cifar10": 10, "cifar100": 100}
CIFAR_IMAGE_SIZE = 32


def embedded_path() -> Path:
    """Path of the CIFAR-10 sample shipped inside the package (2000 train / 500 test images)."""
    return Path(__file__).resolve().parent / "data" / "cifar10_sample.npz"


def embedded_rest_path() -> Path:
    """The rest of the shipped sample (2660 train / 346 test images; lipsweep/data/README.md):
    with :func:`embedded_path` it makes 'embedded_full', 4660 train / 846 test images."""
    return Path(__file__).resolve().parent / "data" / "cifar10_sample_rest.npz"


@dataclass
class DataConfig:
    """Where the images come from and how training batches are augmented."""

    dataset: str = "embedded"
    """'embedded' (CIFAR-10 sample shipped in the package: 2000 train / 500 test images),
    'embedded_full' (the whole shipped sample: 4660 / 846, used by the study), 'npz' (a local
    file with x_train, y_train, x_test, y_test; uint8, NCHW or NHWC, any number of classes),
    'imagefolder' (data_dir/train/<class>/*.png and data_dir/test/<class>/*.png), 'cifar10' or
    'cifar100' (torchvision: local folder or download)."""
    data_dir: str = ""
    """For 'npz': the .npz file. For 'imagefolder': the folder holding train/ and test/. For
    'cifar10'/'cifar100': the torchvision root folder (the one holding cifar-10-batches-py /
    cifar-100-python), or a file from `lipsweep data prepare`: a local .npz or a URI (s3://,
    gs://, file://) that each node copies into its cache once."""
    download: bool = False
    """Let torchvision download CIFAR into data_dir if it is not there."""
    train_size: int = 0
    """Use only the first train_size training images (0 = all)."""
    eval_size: int = 500
    """Size of the seeded evaluation subset of the test split (0 = whole test split)."""
    eval_seed: int = 0
    """Seed of the evaluation subset; the same for every trial of a sweep."""
    crop_padding: int = 4
    """Random crop with this zero padding (0 disables)."""
    hflip: bool = True
    """Random horizontal flips."""
    mixup: float = 0.0
    """MixUp alpha (timm Mixup; 0 disables). The paper's recipe uses MixUp and CutMix."""
    cutmix: float = 0.0
    """CutMix alpha (timm Mixup; 0 disables)."""
    mix_prob: float = 1.0
    """Probability of applying MixUp/CutMix to a batch."""
    label_smoothing: float = 0.0
    """Label smoothing for the cross-entropy (also used by timm's Mixup targets)."""

    def __post_init__(self) -> None:
        check_choice("dataset", self.dataset, DATASETS)
        if is_uri(self.data_dir):  # a prepared dataset; the trial reads it (data_remote)
            check_uri("data_dir", self.data_dir)
        elif self.data_dir:  # relative to where the command runs: Tune workers run elsewhere
            self.data_dir = absolute_path("data_dir", self.data_dir)
        check_positive("train_size", self.train_size, allow_zero=True)
        check_positive("eval_size", self.eval_size, allow_zero=True)
        check_positive("crop_padding", self.crop_padding, allow_zero=True)
        check_positive("mixup", self.mixup, allow_zero=True)
        check_positive("cutmix", self.cutmix, allow_zero=True)
        check_range("mix_prob", self.mix_prob, 0.0, 1.0)
        check_range("label_smoothing", self.label_smoothing, 0.0, 0.99)
        self._source: Optional[SourceInfo] = None
        if is_uri(self.data_dir) and self.dataset != "embedded":
            if self.download:
                raise ConfigError("download", "a prepared dataset URI needs no download; "
                                  "set download: false")
        elif self.dataset == "npz":
            if not self.data_dir or not Path(self.data_dir).is_file():
                raise ConfigError("data_dir", f"dataset 'npz' needs an existing .npz file, got "
                                  f"{self.data_dir!r}")
            self._source = inspect_npz(self.data_dir)
        elif self.dataset == "imagefolder":
            if not self.data_dir:
                raise ConfigError("data_dir", "dataset 'imagefolder' needs the folder holding "
                                  "train/<class>/ and test/<class>/")
            self._source = inspect_image_folder(self.data_dir)
        elif self.dataset in ("cifar10", "cifar100") and is_prepared(self.data_dir):
            if not Path(self.data_dir).is_file():
                raise ConfigError("data_dir", f"no such file {self.data_dir!r}; create it "
                                  "with `lipsweep data prepare`")
        elif self.dataset in ("cifar10", "cifar100") and not self.download:
            if not self.data_dir or not Path(self.data_dir).is_dir():
                raise ConfigError("data_dir", f"no such folder {self.data_dir!r} for "
                                  f"{self.dataset}; point it at a torchvision CIFAR root or a "
                                  "file from `lipsweep data prepare`, or set download: true")

    @property
    def num_classes(self) -> int:
        """Classes of the source: fixed for CIFAR, read from the data for npz/imagefolder.

        An npz behind a URI is read only on the node: it must be a prepared CIFAR-10
        (:func:`lipsweep.data_remote.fetch_prepared` refuses any other), hence 10."""
        if self._source:
            return self._source.num_classes
        return NUM_CLASSES.get(self.dataset, 10)

    @property
    def image_size(self) -> int:
        """Side of the (square) images of the source."""
        return self._source.image_size if self._source else CIFAR_IMAGE_SIZE


@dataclass
class ImageSplits:
    """uint8 images (N, 3, H, W) and int64 labels for the train split and the eval subset."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    eval_indices: torch.Tensor


def _load_torchvision(cfg: DataConfig) -> tuple[np.ndarray, ...]:
    from torchvision import datasets

    cls = datasets.CIFAR10 if cfg.dataset == "cifar10" else datasets.CIFAR100
    out = []
    for train in (True, False):
        ds = cls(root=cfg.data_dir or ".", train=train, download=cfg.download)
        out += [np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)),
                np.asarray(ds.targets, dtype=np.int64)]
    return tuple(out)


def eval_subset_indices(n_test: int, size: int, seed: int) -> torch.Tensor:
    """Sorted, seeded subset of range(n_test) of the given size (all if size is 0 or >= n)."""
    if size <= 0 or size >= n_test:
        return torch.arange(n_test)
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n_test, generator=g)[:size].sort().values


def load_splits(cfg: DataConfig) -> ImageSplits:
    """Load the configured source into memory and cut the evaluation subset."""
    if cfg.dataset == "embedded":
        arrays = load_npz(embedded_path())
    elif cfg.dataset == "embedded_full":
        arrays = tuple(np.concatenate(pair) for pair in zip(load_npz(embedded_path()),
                                                              load_npz(embedded_rest_path())))
    elif cfg.dataset == "imagefolder":
        arrays = load_image_folder(cfg.data_dir)
    elif cfg.dataset == "npz" or is_prepared(cfg.data_dir):  # URIs via the node's cache
        arrays = load_npz(local_source(cfg.data_dir, cfg.dataset))
    else:
        arrays = _load_torchvision(cfg)
    x_tr, y_tr, x_te, y_te = (torch.from_numpy(np.asarray(a)) for a in arrays)
    if cfg.train_size:
        x_tr, y_tr = x_tr[:cfg.train_size], y_tr[:cfg.train_size]
    idx = eval_subset_indices(len(x_te), cfg.eval_size, cfg.eval_seed)
    _log.info("data %s: %d train, %d eval images", cfg.dataset, len(x_tr), len(idx))
    return ImageSplits(x_tr.to(torch.uint8), y_tr.long(), x_te[idx].to(torch.uint8),
                       y_te[idx].long(), idx)


def to_unit(x: torch.Tensor) -> torch.Tensor:
    """uint8 images to float pixels in [0, 1]."""
    return x.float().div_(255.0)


def augment(x: torch.Tensor, cfg: DataConfig, gen: torch.Generator) -> torch.Tensor:
    """Random crop (zero padding) and horizontal flip on a float batch (B, 3, H, W).

    Draws from ``gen`` on the generator's device (the training device in a trial, so the
    step never waits for the host) and makes no host sync.
    """
    b, _, h, w = x.shape
    gdev = gen.device
    if cfg.crop_padding:
        p = cfg.crop_padding
        padded = F.pad(x, (p, p, p, p))
        dy = torch.randint(0, 2 * p + 1, (b,), generator=gen, device=gdev).to(x.device)
        dx = torch.randint(0, 2 * p + 1, (b,), generator=gen, device=gdev).to(x.device)
        rows = (torch.arange(h, device=x.device).view(1, h) + dy.view(b, 1))  # (B, H)
        cols = (torch.arange(w, device=x.device).view(1, w) + dx.view(b, 1))  # (B, W)
        x = padded[torch.arange(b, device=x.device).view(b, 1, 1, 1),
                   torch.arange(x.shape[1], device=x.device).view(1, -1, 1, 1),
                   rows.view(b, 1, h, 1), cols.view(b, 1, 1, w)]
    if cfg.hflip:
        flip = (torch.rand(b, generator=gen, device=gdev) < 0.5).to(x.device).view(b, 1, 1, 1)
        x = torch.where(flip, x.flip(-1), x)
    return x


def create_mixup(cfg: DataConfig, num_classes: int):
    """timm's Mixup/CutMix, or None when both alphas are 0 (the paper's recipe uses both)."""
    if cfg.mixup <= 0 and cfg.cutmix <= 0:
        return None
    from timm.data import Mixup

    return Mixup(mixup_alpha=cfg.mixup, cutmix_alpha=cfg.cutmix, prob=cfg.mix_prob,
                 label_smoothing=cfg.label_smoothing, num_classes=num_classes)


def train_batches(splits: ImageSplits, batch_size: int, seed: int, epoch: int,
                  drop_last: bool = True) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Shuffled (uint8 images, labels) batches; the order depends only on (seed, epoch).

    The permutation is drawn, and the batches gathered, on the device that holds
    ``splits.x_train`` (see :func:`train_to_device`): no host round trip per batch. The
    order for a given (seed, epoch) is the same on every run on that device type.
    """
    n, dev = len(splits.x_train), splits.x_train.device
    g = torch.Generator(device=dev).manual_seed(seed * 100_003 + epoch)
    perm = torch.randperm(n, generator=g, device=dev)
    stop = n - n % batch_size if drop_last and n >= batch_size else n
    for i in range(0, stop, batch_size):
        idx = perm[i:i + batch_size]
        yield splits.x_train[idx], splits.y_train[idx]


def train_to_device(splits: ImageSplits, device: torch.device) -> ImageSplits:
    """The splits with the uint8 train set (and the eval subset) on ``device``.

    CIFAR-100's 50,000 training images are 150 MB as uint8: they fit on any GPU, so batching
    and augmentation never copy from the host during training.
    """
    return dataclasses.replace(splits, x_train=splits.x_train.to(device),
                               y_train=splits.y_train.to(device),
                               x_eval=splits.x_eval.to(device), y_eval=splits.y_eval.to(device))


def num_train_batches(splits: ImageSplits, batch_size: int, drop_last: bool = True) -> int:
    n = len(splits.x_train)
    return n // batch_size if drop_last and n >= batch_size else -(-n // batch_size)
