"""Data settings (torch-free): where a trial's images come from and how they are augmented.

Kept apart from the tensor code in :mod:`lipsweep.data.loading` so that a trial config (and
``lipsweep sweep --dry-run``) validates without importing torch (or numpy, unless the source
is an npz file or an image folder, which are inspected here); the augmentations are the
paper's recipe (docs/science.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from lipsweep.core.config_base import absolute_path, check_positive, check_range
from lipsweep.data._registry import DATASETS, dataset_source, dataset_spec
from lipsweep.data.remote import check_uri, is_uri

if TYPE_CHECKING:
    from lipsweep.data.sources import SourceInfo


@dataclass
class DataConfig:
    """Where the images come from and how training batches are augmented."""

    dataset: str = "embedded"
    """A member of the dataset family (``lipsweep data`` lists them): 'embedded' (CIFAR-10
    sample shipped in the package: 2000 train / 500 test images), 'embedded_full' (the whole
    shipped sample: 4660 / 846, used by the study), 'npz' (a local file with x_train,
    y_train, x_test, y_test; uint8, NCHW or NHWC, any number of classes), 'imagefolder'
    (data_dir/train/<class>/*.png and data_dir/test/<class>/*.png), 'cifar10' or 'cifar100'
    (torchvision: local folder or download)."""
    data_dir: str = ""
    """What the dataset reads. For 'npz': the .npz file. For 'imagefolder': the folder holding
    train/ and test/. For 'cifar10'/'cifar100': the torchvision root folder (the one holding
    cifar-10-batches-py / cifar-100-python), or a file from `lipsweep data prepare`: a local
    .npz or a URI (s3://, gs://, file://) that each node copies into its cache once."""
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
        DATASETS.entry(self.dataset)  # an unknown name: ConfigError naming `dataset`
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
        self._source: Optional[SourceInfo] = dataset_source(self.dataset).check(self)

    @property
    def source(self) -> Optional[SourceInfo]:
        """What a checked source read from its files (``None`` when its spec fixes its facts:
        CIFAR and embedded)."""
        return self._source

    @property
    def num_classes(self) -> int:
        """Classes of the source: its spec's, else read from the data (npz/imagefolder).

        An npz behind a URI is read only on the node: it must be a prepared CIFAR-10
        (:func:`lipsweep.data.remote.fetch_prepared` refuses any other), hence 10."""
        if self._source:
            return self._source.num_classes
        return dataset_spec(self.dataset).num_classes or 10

    @property
    def stats(self) -> Optional[tuple[tuple[float, ...], tuple[float, ...]]]:
        """The dataset's pixel (mean, std), if its member gives them (CIFAR's)."""
        spec = dataset_spec(self.dataset)
        return (spec.mean, spec.std) if spec.mean is not None else None

    @property
    def image_size(self) -> int:
        """Side of the (square) images of the source."""
        if self._source:
            return self._source.image_size
        return dataset_spec(self.dataset).image_size or 32
