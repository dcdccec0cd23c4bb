"""Prepared datasets: pack CIFAR once, read it on every node through a per-node cache.

``lipsweep data prepare`` writes ``<dest>/<dataset>.npz`` (uint8 ``x_train`` (N, 3, 32, 32),
int64 ``y_train``, ``x_test``, ``y_test``) and, last, ``<dest>/<dataset>.npz.manifest.json``
(dataset, classes, counts, byte size and sha256). ``dest`` is a folder or a URI that
``pyarrow.fs`` opens (``s3://``, ``gs://``, ``file://``); a manifest exists only beside a
complete file.

A trial whose ``data_dir`` is such a URI calls :func:`fetch_prepared`: under an exclusive
``fcntl.flock`` on ``<cache>/<sha256>.lock`` it copies the file into
``<cache>/<sha256>/<name>`` (cache: ``$LIPSWEEP_DATA_CACHE`` or ``~/.cache/lipsweep/data``),
verifies the sha256 while copying and renames it into place. Concurrent trials on a node copy
once; the others wait on the lock and then read the cached copy. Every use checks the cached
copy again: its size and the (mtime, size, inode) stamp of its last full verification, and
the full sha256 when they differ; a copy that no longer matches is copied again. A missing or
damaged source is a :class:`ConfigError` naming ``data_dir``: the trial fails with that reason
and is not retried.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence

from lipsweep.core.config_base import ConfigError, show
from lipsweep.core.digest import file_sha256, stream_sha256
from lipsweep.core.paths import (
    WriteError,
    check_env_folder,
    check_folder,
    removing,
    write_atomic,
)
from lipsweep.data._registry import dataset_source, dataset_spec, prepared_datasets

if TYPE_CHECKING:
    import numpy as np
# numpy and the npz reader are imported where used: DataConfig (so `lipsweep sweep --dry-run`)
# calls only is_uri/check_uri/is_prepared here.

_log = logging.getLogger(__name__)

FORMAT = "lipsweep-data/1"
MANIFEST_SUFFIX = ".manifest.json"
CACHE_ENV = "LIPSWEEP_DATA_CACHE"
URI_SCHEMES = ("s3", "gs", "gcs", "file", "hdfs", "abfs", "abfss")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def is_uri(value: str) -> bool:
    """True for ``scheme://...`` (s3, gs, file, ...): read through pyarrow.fs and the cache."""
    return "://" in value


def is_prepared(data_dir: str) -> bool:
    """True when ``data_dir`` names a prepared .npz (a URI or a local file), not a folder."""
    return is_uri(data_dir) or data_dir.endswith(".npz")


def check_uri(field: str, uri: str) -> str:
    """Syntax check of a dataset URI, offline (pyarrow's s3 resolver would contact AWS);
    existence is checked where it is read: the trial."""
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    if (
        parts.scheme not in URI_SCHEMES
        or not parts.path.strip("/")
        or (parts.scheme != "file" and not parts.netloc)
    ):
        raise ConfigError(
            field,
            f"not a dataset URI {show(uri)}: use one of "
            f"{'://, '.join(URI_SCHEMES)}:// with a bucket and a path",
        )
    if not uri.endswith(".npz"):
        raise ConfigError(
            field,
            f"a dataset URI names a prepared .npz (from `lipsweep data prepare`), got {show(uri)}",
        )
    return uri


def cache_root() -> Path:
    """Per-node cache of prepared datasets: $LIPSWEEP_DATA_CACHE or ~/.cache/lipsweep/data,
    checked as every folder option is (ConfigError naming LIPSWEEP_DATA_CACHE)."""
    return check_env_folder(CACHE_ENV, Path.home() / ".cache" / "lipsweep" / "data")


@dataclass(frozen=True)
class Manifest:
    """What ``data prepare`` wrote beside the .npz; the sha256 guards every copy."""

    dataset: str
    file: str
    sha256: str
    bytes: int
    num_classes: int
    train: int
    test: int

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, **self.__dict__}, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> "Manifest":
        """Parse and check a manifest. Its ``file`` becomes a path in the cache, so it must be a
        plain file name (no ``/``, ``..``, absolute path or NUL) and ``sha256`` 64 hex digits:
        anything else is refused here, before any byte is copied."""
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict) or raw.get("format") != FORMAT:
                raise ValueError(f"format is not {FORMAT}")
            m = cls(**{k: raw[k] for k in cls.__dataclass_fields__})
            m._check()
            return m
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError("data_dir", f"damaged manifest {where}: {exc}") from None

    def _check(self) -> None:
        f = self.file
        if (
            not isinstance(f, str)
            or f in ("", ".", "..")
            or f.startswith(".")
            or any(c in f for c in "/\\\x00")
            or not f.isprintable()
            or len(f.encode()) > 255
        ):
            raise ValueError(f"file must be a plain file name inside the cache, got {show(f)}")
        if not isinstance(self.sha256, str) or not _SHA256.fullmatch(self.sha256):
            raise ValueError(f"sha256 must be 64 hex digits, got {show(self.sha256)}")
        for key in ("bytes", "num_classes", "train", "test"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{key} must be a whole number >= 0, got {show(value)}")


# --- pack ---------------------------------------------------------------------------------------


def _arrays_from_source(dataset: str, source: Path, download: bool) -> dict[str, np.ndarray]:
    """(x_train, y_train, x_test, y_test) from an .npz or a torchvision CIFAR root folder."""
    from lipsweep.data.sources import NPZ_ARRAYS, load_npz

    if source.suffix == ".npz":  # the npz source's own reader and checks
        try:
            return dict(zip(NPZ_ARRAYS, load_npz(source)))
        except ConfigError as err:
            raise ConfigError("--source", err.message) from None
    try:
        arrays = dataset_source(dataset).read_root(str(source), download)  # type: ignore[attr-defined]
    except RuntimeError as exc:  # "Dataset not found or corrupted"
        raise ConfigError(
            "--source", f"{source}: {exc}; pass --download to fetch it there"
        ) from None
    return dict(zip(NPZ_ARRAYS, arrays))


def _check_arrays(dataset: str, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    import numpy as np

    spec = dataset_spec(dataset)
    classes, shape = spec.num_classes, (3, spec.image_size, spec.image_size)
    out = {}
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim != 4 or x.shape[1:] != shape or x.dtype != np.uint8:
            raise ConfigError(
                "--source", f"x_{split} must be uint8 (N, {', '.join(map(str, shape))}), got "
                f"{x.dtype} {x.shape}"
            )  # fmt: skip
        if y.shape != (len(x),) or not np.issubdtype(y.dtype, np.integer):
            raise ConfigError("--source", f"y_{split} must be {len(x)} integer labels")
        if len(y) and not 0 <= int(y.min()) <= int(y.max()) < classes:
            raise ConfigError("--source", f"y_{split} labels outside [0, {classes}) for {dataset}")
        out[f"x_{split}"], out[f"y_{split}"] = x, y.astype(np.int64)
    return out


def prepare(dataset: str, source: Path, dest: str, download: bool = False) -> Manifest:
    """Pack ``source`` into ``dest``/<dataset>.npz plus its manifest; returns the manifest.

    Everything is checked before the first write: ``--dest`` (a local folder through
    :func:`lipsweep.core.paths.check_folder`), and that no output is an input (``--source``
    is never rewritten in place). Each file is written through a temporary that a failure
    removes (WriteError, one line)."""
    import io

    import numpy as np

    if dataset not in prepared_datasets():
        raise ConfigError("--dataset", f"must be one of {prepared_datasets()}, got {show(dataset)}")
    if not source.exists() and not download:
        raise ConfigError("--source", f"no such file or folder {show(str(source))}")
    local = None if is_uri(dest) and not dest.startswith("file://") else _local_dest(dest)
    name = f"{dataset}.npz"
    if local is not None:
        _refuse_overwriting_source(source, [local / name, local / f"{name}{MANIFEST_SUFFIX}"])
    # a remote --dest is parsed now and created only after the source checks out
    fs, base = (None, "") if local is not None else _dest_fs(dest)
    arrays = _check_arrays(dataset, _arrays_from_source(dataset, source, download))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    data = buf.getvalue()
    manifest = Manifest(
        dataset,
        name,
        hashlib.sha256(data).hexdigest(),
        len(data),
        dataset_spec(dataset).num_classes,
        len(arrays["y_train"]),
        len(arrays["y_test"]),
    )
    if local is not None:
        local.mkdir(parents=True, exist_ok=True)
        write_atomic(local / name, data)
        write_atomic(local / f"{name}{MANIFEST_SUFFIX}", manifest.to_json())
    else:
        fs.create_dir(base, recursive=True)
        _write_object(fs, f"{base}/{name}", data)
        _write_object(fs, f"{base}/{name}{MANIFEST_SUFFIX}", manifest.to_json().encode())
    _log.info(
        "prepared %s: %d train / %d test images, %.1f MB, sha256 %s",
        dataset,
        manifest.train,
        manifest.test,
        manifest.bytes / 1e6,
        manifest.sha256[:12],
    )
    return manifest


def _local_dest(dest: str) -> Path:
    """A local ``--dest`` (a path or ``file://``), checked as every folder option is; a
    ``file://`` URI is a prefix like ``s3://bucket/prefix``, so its missing folders are made."""
    if dest.startswith("file://"):
        from urllib.parse import unquote, urlsplit

        parts = urlsplit(dest)
        if parts.netloc not in ("", "localhost"):
            raise ConfigError("--dest", f"a file:// URI names no host, got {show(dest)}")
        return check_folder("--dest", unquote(parts.path), make_parents=True)
    return check_folder("--dest", dest)


def _refuse_overwriting_source(source: Path, outputs: Sequence[Path]) -> None:
    """ConfigError(--dest) when an output would replace the ``--source`` file (the same path,
    a link to it, or a hard link): it would be rewritten in place, losing what it holds."""
    if not source.is_file():
        return
    for out in outputs:
        if out.resolve() == source.resolve() or (out.exists() and os.path.samefile(out, source)):
            raise ConfigError(
                "--dest",
                f"{show(str(out))} would overwrite --source {show(str(source))}; "
                "choose another --dest (an input is never rewritten in place)",
            )


def _dest_fs(dest: str) -> tuple[Any, str]:
    """The filesystem and base path of a remote ``--dest``, checked but not created yet."""
    import pyarrow.fs as pafs

    try:
        fs, base = pafs.FileSystem.from_uri(dest)
    except (ValueError, OSError, TypeError) as exc:
        raise ConfigError(
            "--dest", f"not a URI pyarrow can open {show(dest)}: {str(exc).splitlines()[0]}"
        ) from None
    return fs, base.rstrip("/")


def _write_object(fs: Any, path: str, data: bytes) -> None:
    """One whole object on an object store (no partial object is ever visible)."""
    try:
        with fs.open_output_stream(path) as out:
            out.write(data)
    except OSError as exc:
        raise WriteError(f"could not write {path}: {str(exc).splitlines()[0]}") from exc


# --- read ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read_manifest(uri: str) -> Manifest:
    """The manifest beside a prepared dataset URI; ConfigError(data_dir) if it is not there."""
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(uri)
    where = f"{uri}{MANIFEST_SUFFIX}"
    try:
        info = fs.get_file_info(path + MANIFEST_SUFFIX)
        if info.type != pafs.FileType.File:
            raise ConfigError(
                "data_dir",
                f"no prepared dataset at {uri} (missing {where}); "
                "create it with `lipsweep data prepare --dest ...`",
            )
        with fs.open_input_stream(path + MANIFEST_SUFFIX) as f:
            return Manifest.from_json(f.read().decode(), where)
    except OSError as exc:  # credentials, network, permissions
        raise ConfigError("data_dir", f"cannot read {where}: {str(exc).splitlines()[0]}") from None


def fetch_prepared(uri: str, dataset: Optional[str] = None) -> Path:
    """Local path of the prepared dataset at ``uri``, copied into the per-node cache once.

    Raises ConfigError(data_dir) for a missing, mismatched or corrupted source (not retried).
    """
    import pyarrow.fs as pafs

    manifest = read_manifest(uri)
    if dataset not in (None, "npz") and manifest.dataset != dataset:
        raise ConfigError("data_dir", f"{uri} holds {manifest.dataset}, but dataset is {dataset}")
    if dataset == "npz" and manifest.num_classes != 10:
        raise ConfigError(
            "data_dir", f"{uri} holds {manifest.dataset}; use dataset: {manifest.dataset}"
        )
    root = cache_root()
    target = root / manifest.sha256 / manifest.file
    if _cached_copy_ok(target, manifest):
        return target
    with _locked(root / f"{manifest.sha256}.lock"):
        if _cached_copy_ok(target, manifest):  # another trial copied it while we waited
            _log.info("data %s: cached copy %s", uri, target)
            return target
        if target.exists():
            _log.warning(
                "data %s: the cached copy %s does not match its sha256 (modified or "
                "damaged); copying it again",
                uri,
                target,
            )
            target.unlink()
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        fs, path = pafs.FileSystem.from_uri(uri)
        with removing(tmp, str(target), errors=()):  # any exception: no temporary left
            try:
                with fs.open_input_stream(path) as src, open(tmp, "wb") as dst:
                    digest = stream_sha256(src, sink=dst)
                    dst.flush()
                    os.fsync(dst.fileno())
            except OSError as exc:
                raise ConfigError(
                    "data_dir", f"cannot read {uri}: {str(exc).splitlines()[0]}"
                ) from None
            if digest != manifest.sha256:
                raise ConfigError(
                    "data_dir",
                    f"{uri} does not match its manifest's sha256 "
                    "(changed or damaged); prepare it again",
                )
            os.replace(tmp, target)
        _stamp(target).write_text(json.dumps(_stat_key(target)))
        _log.info("data %s: copied %.1f MB into %s", uri, manifest.bytes / 1e6, target)
    return target


def _stamp(target: Path) -> Path:
    return target.with_name(f".{target.name}.verified")


def _stat_key(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_mtime_ns, st.st_size, st.st_ino]


def _cached_copy_ok(target: Path, manifest: Manifest) -> bool:
    """Whether the cached copy is the manifest's file, checked on every use: cheaply (its size
    and the (mtime, size, inode) recorded when its sha256 was last verified), and by the full
    sha256 when that stamp does not match (then the stamp is renewed)."""
    try:
        key = _stat_key(target)
    except OSError:
        return False
    if key[1] != manifest.bytes:
        return False
    try:
        if json.loads(_stamp(target).read_text()) == key:
            return True
    except (OSError, ValueError):
        pass
    if file_sha256(target) != manifest.sha256:
        return False
    _stamp(target).write_text(json.dumps(key))
    return True


def local_source(data_dir: str, dataset: str) -> Path:
    """A prepared dataset as a local file: the file itself, or its cached copy for a URI."""
    return fetch_prepared(data_dir, dataset) if is_uri(data_dir) else Path(data_dir)


# --- sweeps -------------------------------------------------------------------------------------


def check_sweep_download(num_trials: int, trials: Sequence[Mapping[str, Any]]) -> None:
    """Refuse ``download: true`` in a sweep of 2 or more trials: they would race on one folder."""
    if num_trials > 1 and any(t.get("download") for t in trials):
        raise ConfigError(
            "download",
            "concurrent trials would race on one download; prepare "
            "the dataset once with `lipsweep data prepare --dataset ... --dest "
            "...` and set data_dir to it",
        )
