"""Data for lipsweep: the embedded CIFAR-10 sample, torchvision CIFAR-10/100, or the user's own
images (an .npz file or an ImageFolder tree, checked when the config is built; see
:mod:`lipsweep.data.sources`).

Every source is loaded once into uint8 tensors (N, 3, 32, 32) and batched from memory; the
paper's augmentations (random crop with padding 4, horizontal flip; CutMix and MixUp through
timm's ``Mixup``; docs/science.md §2) run on whole batches on the training device. CIFAR-100 is 150
MB as uint8, so this holds for the full datasets too and avoids DataLoader worker overhead.

Randomness is a pure function of (seed, epoch), so a resumed trial sees exactly the batches an
uninterrupted one would. The evaluation subset is a seeded, sorted subset of the test split:
every attack and every Lipschitz estimate of a trial sees the same images.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Iterator, Optional

import torch
import torch.nn.functional as F

from lipsweep.data._registry import dataset_source
from lipsweep.data.config import DataConfig

_log = logging.getLogger(__name__)


@dataclass
class ImageSplits:
    """uint8 images (N, 3, H, W) and int64 labels for the train split and the eval subset."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    eval_indices: torch.Tensor


def eval_subset_indices(n_test: int, size: int, seed: int) -> torch.Tensor:
    """Sorted, seeded subset of range(n_test) of the given size (all if size is 0 or >= n)."""
    if size <= 0 or size >= n_test:
        return torch.arange(n_test)
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n_test, generator=g)[:size].sort().values


def load_splits(cfg: DataConfig, num_classes: Optional[int] = None) -> ImageSplits:
    """Load the configured source into memory (its dataset member's ``arrays``, checked by
    :func:`~lipsweep.data.sources.checked_arrays` against ``num_classes``, the model's,
    else the data's) and cut the evaluation subset."""
    from lipsweep.data.sources import checked_arrays

    arrays = checked_arrays(
        cfg.dataset,
        dataset_source(cfg.dataset).arrays(cfg),
        num_classes or cfg.num_classes,
        cfg.image_size,
    )
    x_tr, y_tr, x_te, y_te = (torch.from_numpy(a) for a in arrays)
    if cfg.train_size:
        x_tr, y_tr = x_tr[: cfg.train_size], y_tr[: cfg.train_size]
    idx = eval_subset_indices(len(x_te), cfg.eval_size, cfg.eval_seed)
    _log.info("data %s: %d train, %d eval images", cfg.dataset, len(x_tr), len(idx))
    return ImageSplits(
        x_tr.to(torch.uint8), y_tr.long(), x_te[idx].to(torch.uint8), y_te[idx].long(), idx
    )


def load_eval(
    cfg: DataConfig, num_classes: Optional[int] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The evaluation subset alone (uint8 images, int64 labels), for a command that attacks a
    trained model and needs no training split (``lipsweep confirm``); checked as
    :func:`load_splits` checks them."""
    from lipsweep.data.sources import checked_arrays

    arrays = checked_arrays(
        cfg.dataset,
        dataset_source(cfg.dataset).arrays(cfg),
        num_classes or cfg.num_classes,
        cfg.image_size,
    )
    x_te, y_te = (torch.from_numpy(a) for a in arrays[2:])
    idx = eval_subset_indices(len(x_te), cfg.eval_size, cfg.eval_seed)
    _log.info("data %s: %d eval images of %d test images", cfg.dataset, len(idx), len(x_te))
    return x_te[idx].to(torch.uint8), y_te[idx].long()


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
        rows = torch.arange(h, device=x.device).view(1, h) + dy.view(b, 1)  # (B, H)
        cols = torch.arange(w, device=x.device).view(1, w) + dx.view(b, 1)  # (B, W)
        x = padded[
            torch.arange(b, device=x.device).view(b, 1, 1, 1),
            torch.arange(x.shape[1], device=x.device).view(1, -1, 1, 1),
            rows.view(b, 1, h, 1),
            cols.view(b, 1, 1, w),
        ]
    if cfg.hflip:
        flip = (torch.rand(b, generator=gen, device=gdev) < 0.5).to(x.device).view(b, 1, 1, 1)
        x = torch.where(flip, x.flip(-1), x)
    return x


def create_mixup(cfg: DataConfig, num_classes: int):
    """timm's Mixup/CutMix, or None when both alphas are 0 (the paper's recipe uses both)."""
    if cfg.mixup <= 0 and cfg.cutmix <= 0:
        return None
    from timm.data import Mixup

    return Mixup(
        mixup_alpha=cfg.mixup,
        cutmix_alpha=cfg.cutmix,
        prob=cfg.mix_prob,
        label_smoothing=cfg.label_smoothing,
        num_classes=num_classes,
    )


def train_batches(
    splits: ImageSplits, batch_size: int, seed: int, epoch: int, drop_last: bool = True
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
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
        idx = perm[i : i + batch_size]
        yield splits.x_train[idx], splits.y_train[idx]


def train_to_device(splits: ImageSplits, device: torch.device) -> ImageSplits:
    """The splits with the uint8 train set (and the eval subset) on ``device``.

    CIFAR-100's 50,000 training images are 150 MB as uint8: they fit on any GPU, so batching
    and augmentation never copy from the host during training.
    """
    return dataclasses.replace(
        splits,
        x_train=splits.x_train.to(device),
        y_train=splits.y_train.to(device),
        x_eval=splits.x_eval.to(device),
        y_eval=splits.y_eval.to(device),
    )


def num_train_batches(splits: ImageSplits, batch_size: int, drop_last: bool = True) -> int:
    n = len(splits.x_train)
    return n // batch_size if drop_last and n >= batch_size else -(-n // batch_size)
