"""The dataset family on the one registry mechanism (:mod:`lipsweep.core.registry`).

Torch- and numpy-free: this is the family's index. Each built-in is declared here by the
import path of its source class with its light facts (:class:`DatasetSpec`: classes, image
size, pixel mean/std, what ``data_dir`` holds, whether ``lipsweep data prepare`` packs it),
so a config naming a dataset (``dataset``) knows its classes and image size without reading
anything. The source class (:class:`DatasetSource`) checks a config's files when the config
is built and reads the four arrays when a trial loads them; the built-ins live in
:mod:`lipsweep.data.datasets`.

Adding a built-in dataset: its source class in :mod:`lipsweep.data.datasets` (or a file of
its own) and one ``DATASETS.declare(...)`` line below (docs/architecture.md); a plugin or a
test registers one with ``@register_dataset("name", ...)`` giving the spec's fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Protocol

from lipsweep.core.config_base import ConfigError, show
from lipsweep.core.registry import Family

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from lipsweep.data.sources import SourceInfo

Stats = tuple[float, float, float]


@dataclass(frozen=True)
class DatasetSpec:
    """What a config needs of a dataset, known without reading it."""

    files: str
    """What ``data_dir`` names for it (the file layout), shown in ``lipsweep data``."""
    num_classes: Optional[int] = None
    """Its classes (None: read from the data when the config is checked)."""
    image_size: Optional[int] = 32
    """Side of its square images (None: read from the data)."""
    mean: Optional[Stats] = None
    """Per-channel pixel mean in [0, 1] (``normalization: <name>`` uses it), if known."""
    std: Optional[Stats] = None
    """Per-channel pixel std in [0, 1], with ``mean``."""
    preparable: bool = False
    """``lipsweep data prepare`` packs it, and a trial reads a prepared .npz or URI of it."""

    def __post_init__(self) -> None:
        if not isinstance(self.files, str) or not self.files:
            raise TypeError(f"a dataset needs its files (what data_dir names), got {self.files!r}")
        for name in ("num_classes", "image_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"dataset {name} must be a positive integer, got {value!r}")
        if (self.mean is None) != (self.std is None):
            raise ValueError("a dataset gives both mean and std, or neither")
        for name in ("mean", "std"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(float(v) for v in value))
                if len(getattr(self, name)) != 3:
                    raise ValueError(f"dataset {name} needs 3 channels, got {value!r}")


class DatasetSource(Protocol):
    """How a dataset is checked and read: ``check`` when the config is built (torch-free;
    ConfigError naming ``data_dir``), ``arrays`` on the trial's node. ``cfg`` is the trial's
    :class:`~lipsweep.data.config.DataConfig` (which reads this module: not imported here)."""

    def check(self, cfg: Any) -> Optional["SourceInfo"]:
        """The files' facts (None when the spec fixes them); ConfigError if they are not there."""
        ...

    def arrays(self, cfg: Any) -> tuple["np.ndarray", ...]:
        """``(x_train, y_train, x_test, y_test)``: uint8 (N, 3, H, W) or (N, H, W, 3) and
        integer labels, checked when loaded (:func:`lipsweep.data.sources.checked_arrays`)."""
        ...


DATASETS: Family[Any] = Family(
    "dataset",
    spec_type=DatasetSpec,
    unknown=lambda name, known: ConfigError("dataset", f"must be one of {known}, got {show(name)}"),
)

_D = "lipsweep.data.datasets"
_CIFAR_FOLDER = (
    "a torchvision CIFAR root folder, or a file from `lipsweep data prepare` (a local .npz or "
    "a URI: s3://, gs://, file://)"
)
# The built-in datasets: name, source, facts. The CIFAR mean/std are Hu et al.'s
# (``train/utils.py`` of its public code).
DATASETS.declare(
    "embedded",
    f"{_D}:EMBEDDED",
    spec=DatasetSpec("nothing: the CIFAR-10 sample shipped in the package", num_classes=10),
)
DATASETS.declare(
    "embedded_full",
    f"{_D}:EMBEDDED_FULL",
    spec=DatasetSpec("nothing: the whole shipped CIFAR-10 sample", num_classes=10),
)
DATASETS.declare(
    "npz",
    f"{_D}:NPZ",
    spec=DatasetSpec("an .npz with x_train, y_train, x_test, y_test", image_size=None),
)
DATASETS.declare(
    "imagefolder",
    f"{_D}:IMAGE_FOLDER",
    spec=DatasetSpec("a folder of train/<class>/ and test/<class>/ images", image_size=None),
)
DATASETS.declare(
    "cifar10",
    f"{_D}:CIFAR10",
    spec=DatasetSpec(
        _CIFAR_FOLDER,
        num_classes=10,
        mean=(0.4914, 0.4822, 0.4465),
        std=(0.2471, 0.2435, 0.2616),
        preparable=True,
    ),
)
DATASETS.declare(
    "cifar100",
    f"{_D}:CIFAR100",
    spec=DatasetSpec(
        _CIFAR_FOLDER,
        num_classes=100,
        mean=(0.5071, 0.4867, 0.4408),
        std=(0.2675, 0.2565, 0.2761),
        preparable=True,
    ),
)

# The family's names (methods of the one family object): ``@register_dataset("name",
# files=..., num_classes=...)`` adds a source (an object or class with ``check`` and
# ``arrays``); ``dataset_spec(name)`` reads its facts without reading any data.
register_dataset = DATASETS.register
unregister_dataset = DATASETS.unregister
list_datasets = DATASETS.names
is_dataset = DATASETS.is_member
dataset_spec = DATASETS.spec


def dataset_source(name: str) -> DatasetSource:
    """The source of dataset ``name`` (a registered class is instantiated without arguments)."""
    obj = DATASETS.load(name)
    return obj() if isinstance(obj, type) else obj


def prepared_datasets() -> list[str]:
    """The datasets ``lipsweep data prepare`` packs."""
    return [n for n in list_datasets() if dataset_spec(n).preparable]


def dataset_stats() -> dict[str, tuple[Stats, Stats]]:
    """``{name: (mean, std)}`` of every dataset whose pixel statistics are known."""
    return {n: (s.mean, s.std) for n in list_datasets() if (s := dataset_spec(n)).mean}
