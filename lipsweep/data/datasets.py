"""The built-in datasets' sources: how each is checked and read (the family's index,
:mod:`lipsweep.data._registry`, declares them with their facts).

Every source has ``check(cfg)`` (when the config is built: torch-free, and numpy-free for
CIFAR; ConfigError naming ``data_dir``) and ``arrays(cfg)`` (on the trial's node: uint8
``(x_train, y_train, x_test, y_test)``). A prepared dataset URI (``s3://...``) is checked
for syntax by :class:`~lipsweep.data.config.DataConfig` and read through the node's cache
(:mod:`lipsweep.data.remote`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from lipsweep.core.config_base import ConfigError
from lipsweep.data.remote import is_prepared, is_uri, local_source

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from lipsweep.data.config import DataConfig
    from lipsweep.data.sources import SourceInfo


def embedded_path() -> Path:
    """Path of the CIFAR-10 sample shipped inside the package (2000 train / 500 test images)."""
    return Path(__file__).resolve().parent / "cifar10_sample.npz"


def embedded_rest_path() -> Path:
    """The rest of the shipped sample (2660 train / 346 test images; lipsweep/data/README.md):
    with :func:`embedded_path` it makes 'embedded_full', 4660 train / 846 test images."""
    return Path(__file__).resolve().parent / "cifar10_sample_rest.npz"


def _remote(cfg: DataConfig) -> bool:
    """True for a prepared dataset URI: read on the node, so nothing local to check."""
    if not is_uri(cfg.data_dir):
        return False
    if cfg.download:
        raise ConfigError(
            "download", "a prepared dataset URI needs no download; set download: false"
        )
    return True


@dataclass(frozen=True)
class Embedded:
    """The CIFAR-10 sample shipped in the package: its first file, or both (``full``)."""

    full: bool = False

    def check(self, cfg: DataConfig) -> Optional[SourceInfo]:
        return None

    def arrays(self, cfg: DataConfig) -> tuple[np.ndarray, ...]:
        import numpy as np

        from lipsweep.data.sources import load_npz

        first = load_npz(embedded_path())
        if not self.full:
            return first
        return tuple(np.concatenate(pair) for pair in zip(first, load_npz(embedded_rest_path())))


class Npz:
    """A local .npz of the four arrays (:mod:`lipsweep.data.sources`), or a prepared URI."""

    def check(self, cfg: DataConfig) -> Optional[SourceInfo]:
        if _remote(cfg):
            return None
        if not cfg.data_dir or not Path(cfg.data_dir).is_file():
            raise ConfigError(
                "data_dir", f"dataset 'npz' needs an existing .npz file, got {cfg.data_dir!r}"
            )
        from lipsweep.data.sources import inspect_npz  # numpy: only for this source

        return inspect_npz(cfg.data_dir)

    def arrays(self, cfg: DataConfig) -> tuple[np.ndarray, ...]:
        from lipsweep.data.sources import load_npz

        return load_npz(local_source(cfg.data_dir, cfg.dataset))


class ImageFolder:
    """``data_dir/train/<class>/*`` and ``data_dir/test/<class>/*`` (:mod:`.sources`)."""

    def check(self, cfg: DataConfig) -> Optional[SourceInfo]:
        if _remote(cfg):
            return None
        if not cfg.data_dir:
            raise ConfigError(
                "data_dir",
                "dataset 'imagefolder' needs the folder holding train/<class>/ and test/<class>/",
            )
        from lipsweep.data.sources import inspect_image_folder

        return inspect_image_folder(cfg.data_dir)

    def arrays(self, cfg: DataConfig) -> tuple[np.ndarray, ...]:
        from lipsweep.data.sources import load_image_folder

        return load_image_folder(cfg.data_dir)


@dataclass(frozen=True)
class TorchvisionCifar:
    """torchvision's CIFAR-10/100 (``torchvision.datasets.<cls>``) under a root folder, or a
    file from ``lipsweep data prepare`` (a local .npz or a URI)."""

    cls: str

    def check(self, cfg: DataConfig) -> Optional[SourceInfo]:
        if _remote(cfg):
            return None
        if is_prepared(cfg.data_dir):
            if not Path(cfg.data_dir).is_file():
                raise ConfigError(
                    "data_dir",
                    f"no such file {cfg.data_dir!r}; create it with `lipsweep data prepare`",
                )
        elif not cfg.download and (not cfg.data_dir or not Path(cfg.data_dir).is_dir()):
            raise ConfigError(
                "data_dir",
                f"no such folder {cfg.data_dir!r} for {cfg.dataset}; point it at a "
                "torchvision CIFAR root or a file from `lipsweep data prepare`, or set "
                "download: true",
            )
        return None

    def arrays(self, cfg: DataConfig) -> tuple[np.ndarray, ...]:
        if is_prepared(cfg.data_dir):  # URIs via the node's cache
            from lipsweep.data.sources import load_npz

            return load_npz(local_source(cfg.data_dir, cfg.dataset))
        return self.read_root(cfg.data_dir or ".", cfg.download)

    def read_root(self, root: str, download: bool) -> tuple[np.ndarray, ...]:
        """(x_train, y_train, x_test, y_test) under a torchvision root: uint8 (N, 3, 32, 32)
        images and int64 labels. The one reader of such a folder (a trial's data and
        `lipsweep data prepare`); RuntimeError if the folder lacks the dataset."""
        import numpy as np
        from torchvision import datasets

        out: list[np.ndarray] = []
        for train in (True, False):
            ds = getattr(datasets, self.cls)(root=root, train=train, download=download)
            out += [
                np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)),
                np.asarray(ds.targets, dtype=np.int64),
            ]
        return tuple(out)


EMBEDDED = Embedded()
EMBEDDED_FULL = Embedded(full=True)
NPZ = Npz()
IMAGE_FOLDER = ImageFolder()
CIFAR10 = TorchvisionCifar("CIFAR10")
CIFAR100 = TorchvisionCifar("CIFAR100")
