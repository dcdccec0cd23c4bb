"""A researcher's own images: an ``.npz`` file or an ImageFolder tree, checked before any run.

Both are checked when the config is built (so ``lipsweep train``/``sweep`` exit 2 with one line
naming the problem before anything is written) and loaded as uint8 arrays (N, 3, H, W) with
int64 labels. numpy and Pillow only; no torch.

npz
    Arrays ``x_train``, ``y_train``, ``x_test``, ``y_test``; optional ``label_names`` (one per
    class). Images uint8 (0-255), RGB, square, either NCHW ``(N, 3, H, W)`` or NHWC
    ``(N, H, W, 3)`` (the layout is detected from where the 3 is, NCHW when both fit).
    Labels are integers ``0 .. C-1``: ``C = len(label_names)`` if given; else an explicit
    ``num_classes`` setting, which wins when every label is below it; else it is inferred
    as ``max(y_train) + 1`` (then every test label must be a training class). Labels at or
    above C are refused, and so is C < 2 (a classifier needs two classes).

imagefolder (torchvision ``ImageFolder`` layout)
    ``data_dir/train/<class>/<image>`` and ``data_dir/test/<class>/<image>`` (.png, .jpg,
    .jpeg, .bmp, .webp). Classes are the sorted folder names of ``train/``; ``test/`` must
    have the same class folders. Every image must have the same square size (no resizing:
    resize beforehand, e.g. to 32x32 for the tiny ViT); grey or RGBA images are converted to
    RGB, and 16-bit grey images are scaled to 8 bits (``round(v * 255 / 65535)``), not
    clipped. The check decodes every image once, so a truncated or corrupt file, 32-bit
    pixels or a decompression bomb (a header claiming more than Pillow's
    ``MAX_IMAGE_PIXELS``) is refused naming the file, before anything is written.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np

from lipsweep.core.config_base import ConfigError

if TYPE_CHECKING:
    from PIL import Image

_log = logging.getLogger("lipsweep.data.loading")

NPZ_ARRAYS = ("x_train", "y_train", "x_test", "y_test")
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")  # Pillow's 16-bit grey PNG modes
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
SPLITS = ("train", "test")
FIELD = "data_dir"


@dataclass(frozen=True)
class SourceInfo:
    """What a checked source holds."""

    num_classes: int
    image_size: int
    layout: str  # "NCHW" or "NHWC" for npz, "files" for an image folder
    n_train: int
    n_test: int
    max_label: int = -1  # the highest label in either split
    classes_from: str = "the class folders"  # where num_classes comes from


def _fail(path: Path | str, problem: str, field: str = FIELD) -> ConfigError:
    return ConfigError(field, f"{path}: {problem}")


def _layout(name: str, x: np.ndarray, path: Path | str, field: str) -> str:
    if x.ndim != 4 or 3 not in (x.shape[1], x.shape[3]):
        raise _fail(
            path,
            f"{name} has shape {x.shape}; expected RGB images as NCHW "
            "(N, 3, H, W) or NHWC (N, H, W, 3)",
            field,
        )
    return "NCHW" if x.shape[1] == 3 else "NHWC"


def check_npz_arrays(
    path: Path | str,
    arrays: dict[str, np.ndarray],
    label_names: Optional[np.ndarray] = None,
    field: str = FIELD,
) -> SourceInfo:
    """Check the four arrays of a source (dtype, layout, labels, lengths; see module doc),
    found at ``path``; a ConfigError names ``field``."""
    layouts = {}
    for split in SPLITS:
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.dtype != np.uint8:
            raise _fail(
                path,
                f"x_{split} is {x.dtype}; expected uint8 pixels 0-255 (e.g. "
                "(x * 255).round().astype(np.uint8) for floats in [0, 1])",
                field,
            )
        layouts[split] = _layout(f"x_{split}", x, path, field)
        if len(x) == 0:
            raise _fail(path, f"x_{split} holds no images", field)
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            raise _fail(
                path,
                f"y_{split} must be a 1-D integer array of labels, got "
                f"{y.dtype} of shape {y.shape}",
                field,
            )
        if len(y) != len(x):
            raise _fail(path, f"x_{split} has {len(x)} images but y_{split} {len(y)} labels", field)
    if layouts["train"] != layouts["test"]:
        raise _fail(path, f"x_train is {layouts['train']} but x_test {layouts['test']}", field)
    hw = {
        s: (arrays[f"x_{s}"].shape[2:4] if layouts[s] == "NCHW" else arrays[f"x_{s}"].shape[1:3])
        for s in SPLITS
    }
    if hw["train"] != hw["test"] or hw["train"][0] != hw["train"][1]:
        raise _fail(
            path,
            f"images must be square and the same size in both splits, got "
            f"{hw['train']} (train) and {hw['test']} (test)",
            field,
        )
    y_tr, y_te = arrays["y_train"], arrays["y_test"]
    lo = min(int(y_tr.min()), int(y_te.min()))
    if lo < 0:
        raise _fail(path, f"labels must be 0 .. C-1, found {lo}", field)
    hi = max(int(y_tr.max()), int(y_te.max()))
    if label_names is not None:
        num_classes, source = len(label_names), f"{len(label_names)} label_names"
        if hi >= num_classes:
            raise _fail(path, label_range_problem(hi, num_classes, source), field)
    else:  # inferred; an explicit num_classes may be larger (TrialConfig checks the labels)
        num_classes, source = int(y_tr.max()) + 1, "the training labels"
    return SourceInfo(
        num_classes,
        int(hw["train"][0]),
        layouts["train"],
        len(y_tr),
        len(y_te),
        max_label=hi,
        classes_from=source,
    )


def label_range_problem(label: int, num_classes: int, source: str) -> str:
    return (
        f"label {label} is out of range: {source} give {num_classes} classes "
        f"(0 .. {num_classes - 1}); set num_classes if the data has more"
    )


def _read_npz(path: Path) -> tuple[dict[str, np.ndarray], Optional[np.ndarray]]:
    try:
        with np.load(path, allow_pickle=False) as d:
            missing = sorted(set(NPZ_ARRAYS) - set(d.files))
            if missing:
                raise _fail(path, f"lacks arrays {missing} (needs {list(NPZ_ARRAYS)})")
            names = d["label_names"] if "label_names" in d.files else None
            return {k: d[k] for k in NPZ_ARRAYS}, names
    except ConfigError:
        raise
    except Exception as err:  # not a zip, pickled objects, truncated file: one line
        raise _fail(path, f"not a readable .npz ({type(err).__name__}: {err})") from None


@functools.lru_cache(maxsize=8)
def _inspect_npz_cached(path: str, mtime_ns: int, size: int) -> SourceInfo:
    arrays, names = _read_npz(Path(path))
    return check_npz_arrays(Path(path), arrays, names)


def inspect_npz(path: str | Path) -> SourceInfo:
    """Check an npz source (cached per file version: a sweep builds many configs)."""
    st = Path(path).stat()
    return _inspect_npz_cached(str(path), st.st_mtime_ns, st.st_size)


def _standard(arrays: dict[str, np.ndarray], layout: str) -> tuple[np.ndarray, ...]:
    """Checked arrays as every source hands them on: images NCHW uint8, labels int64."""
    if layout == "NHWC":
        for s in SPLITS:
            arrays[f"x_{s}"] = np.ascontiguousarray(arrays[f"x_{s}"].transpose(0, 3, 1, 2))
    return tuple(
        arrays[k].astype(np.int64) if k.startswith("y_") else arrays[k] for k in NPZ_ARRAYS
    )


def load_npz(path: str | Path) -> tuple[np.ndarray, ...]:
    """Checked arrays (x_train, y_train, x_test, y_test), images NCHW uint8, labels int64."""
    arrays, names = _read_npz(Path(path))
    info = check_npz_arrays(Path(path), arrays, names)
    _log.info(
        "npz %s: %d classes, %dx%d images stored %s",
        path,
        info.num_classes,
        info.image_size,
        info.image_size,
        info.layout,
    )
    return _standard(arrays, info.layout)


def checked_arrays(
    dataset: str, arrays: object, num_classes: int, image_size: int
) -> tuple[np.ndarray, ...]:
    """What a dataset's ``arrays()`` returned, through the npz checks (dtype, layout, shape,
    labels) and against the config's ``num_classes`` and ``image_size``: NCHW uint8 images
    and int64 labels, or a ConfigError naming ``dataset``."""
    where = f"{dataset!r} arrays()"
    if not isinstance(arrays, (tuple, list)) or len(arrays) != len(NPZ_ARRAYS):
        got = len(arrays) if isinstance(arrays, (tuple, list)) else type(arrays).__name__
        raise _fail(where, f"must return the 4 arrays {list(NPZ_ARRAYS)}, got {got}", "dataset")
    named = dict(zip(NPZ_ARRAYS, (np.asarray(a) for a in arrays)))
    info = check_npz_arrays(where, named, field="dataset")
    if info.image_size != image_size:
        raise _fail(
            where,
            f"images are {info.image_size}x{info.image_size} but the dataset declares "
            f"{image_size}x{image_size}",
            "dataset",
        )
    if info.max_label >= num_classes:
        raise _fail(
            where,
            f"label {info.max_label} is out of range: the config has num_classes "
            f"{num_classes} (labels 0 .. {num_classes - 1})",
            "dataset",
        )
    return _standard(named, info.layout)


def _image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def _folder_index(root: Path) -> tuple[list[str], dict[str, list[tuple[Path, int]]]]:
    """(class names, {split: [(file, label)]}) of an ImageFolder tree, its layout checked."""
    classes: dict[str, list[str]] = {}
    for split in SPLITS:
        d = root / split
        if not d.is_dir():
            raise _fail(
                root,
                f"has no {split}/ folder (expected train/<class>/*.png and test/<class>/*.png)",
            )
        classes[split] = sorted(p.name for p in d.iterdir() if p.is_dir())
    if not classes["train"]:
        raise _fail(root, "train/ has no class folders")
    if classes["test"] != classes["train"]:
        diff = sorted(set(classes["train"]) ^ set(classes["test"]))
        raise _fail(
            root, f"train/ and test/ must have the same class folders; they differ in {diff[:5]}"
        )
    files: dict[str, list[tuple[Path, int]]] = {}
    for split in SPLITS:
        files[split] = []
        for label, name in enumerate(classes["train"]):
            found = _image_files(root / split / name)
            if split == "train" and not found:
                raise _fail(root, f"train/{name}/ holds no images ({', '.join(IMAGE_SUFFIXES)})")
            files[split] += [(f, label) for f in found]
        if not files[split]:
            raise _fail(root, f"{split}/ holds no images")
    return classes["train"], files


def rgb8(im: "Image.Image", name: str) -> np.ndarray:
    """(H, W, 3) uint8 pixels of a Pillow image: 16-bit grey scaled to 8 bits (Pillow's
    ``convert`` clips it at 255), 32-bit pixels refused (ValueError), the rest converted."""
    if im.mode in SIXTEEN_BIT_MODES:
        wide = np.asarray(im).astype(np.uint32)  # (H, W), 0..65535
        grey = ((wide * 255 + 32767) // 65535).astype(np.uint8)  # round(v * 255 / 65535)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if im.mode in ("I", "F"):
        raise ValueError(f"{name} has 32-bit {im.mode} pixels; save it with 8 or 16 bits")
    return np.asarray(im.convert("RGB"))


def _image_size(root: Path, files: dict[str, list[tuple[Path, int]]]) -> int:
    from PIL import Image, UnidentifiedImageError

    size: Optional[tuple[int, int]] = None
    for split in SPLITS:
        for f, _ in files[split]:
            try:
                with Image.open(f) as im:
                    s = im.size
                    im.load()  # a truncated or corrupt file fails here, not mid-training
                    rgb8(im, str(f.relative_to(root)))
            except (
                OSError,
                UnidentifiedImageError,
                Image.DecompressionBombError,
                SyntaxError,
                ValueError,
            ) as err:
                raise _fail(root, f"cannot read image {f.relative_to(root)}: {err}") from None
            if s[0] != s[1]:
                raise _fail(
                    root,
                    f"{f.relative_to(root)} is {s[0]}x{s[1]}; images must be "
                    "square (resize them beforehand)",
                )
            if size is None:
                size = s
            elif s != size:
                raise _fail(
                    root,
                    f"{f.relative_to(root)} is {s[0]}x{s[1]} but the others "
                    f"{size[0]}x{size[1]}; all images must have one size",
                )
    assert size is not None
    return size[0]


@functools.lru_cache(maxsize=8)
def _inspect_folder_cached(root: str, stamp: tuple[int, ...]) -> SourceInfo:
    classes, files = _folder_index(Path(root))
    size = _image_size(Path(root), files)
    n = len(classes)
    return SourceInfo(n, size, "files", len(files["train"]), len(files["test"]), max_label=n - 1)


def inspect_image_folder(root: str | Path) -> SourceInfo:
    """Check an ImageFolder tree (layout, classes, image sizes); cached while it is unchanged."""
    root = Path(root)
    if not root.is_dir():
        raise _fail(
            root, "no such folder; an image folder needs train/<class>/*.png and test/<class>/*.png"
        )
    dirs = [root] + [
        d
        for s in SPLITS
        if (root / s).is_dir()
        for d in [root / s, *sorted((root / s).iterdir())]
        if d.is_dir()
    ]
    return _inspect_folder_cached(str(root), tuple(d.stat().st_mtime_ns for d in dirs))


def load_image_folder(root: str | Path) -> tuple[np.ndarray, ...]:
    """(x_train, y_train, x_test, y_test) of an ImageFolder tree: uint8 NCHW RGB, int64."""
    from PIL import Image

    root = Path(root)
    info = inspect_image_folder(root)
    classes, files = _folder_index(root)
    out: list[np.ndarray] = []
    for split in SPLITS:
        x = np.empty((len(files[split]), 3, info.image_size, info.image_size), np.uint8)
        for i, (f, _) in enumerate(files[split]):
            with Image.open(f) as im:
                x[i] = rgb8(im, str(f)).transpose(2, 0, 1)  # (3, H, W)
        out += [x, np.array([lab for _, lab in files[split]], dtype=np.int64)]
    _log.info(
        "image folder %s: %d classes %s, %d train / %d test images of %dx%d",
        root,
        len(classes),
        classes[:5] + (["..."] if len(classes) > 5 else []),
        info.n_train,
        info.n_test,
        info.image_size,
        info.image_size,
    )
    return tuple(out)
