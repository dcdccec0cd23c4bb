"""Ray Tune storage paths (``--storage``): a local folder, NFS, or a URI such as ``s3://``.

The one home of the storage rules: the default, how a path is resolved and checked (once),
whether it is remote (no lock file or spill file there), where an experiment lives in it and
where undelivered MLflow writes are spilled. Torch-, Ray- and MLflow-free.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Optional

from lipsweep.core.config_base import ConfigError, show
from lipsweep.core.paths import check_folder, write_atomic

SPILL_FILE = "lipsweep_mlflow_pending.jsonl"


def default_storage() -> str:
    """``$LIPSWEEP_STORAGE``, else ``./ray_results`` (absolute)."""
    return os.environ.get("LIPSWEEP_STORAGE", str(Path("ray_results").resolve()))


def check_storage(storage: str) -> None:
    """A --storage path that MLflow filters (quoted) and Tune can hold."""
    if any(c in storage for c in "'\"`") or not storage.isprintable():
        raise ConfigError(
            "--storage", f"must not contain quotes or control characters, got {show(storage)}"
        )


def resolve_storage(raw: Optional[str]) -> str:
    """The storage a sweep uses: ``raw`` (or ``$LIPSWEEP_STORAGE``, or ``./ray_results``), a
    local path checked as every folder option is (:func:`lipsweep.core.paths.check_folder`:
    not a file, a link or read-only) and made absolute, and checked (:func:`check_storage`);
    ConfigError naming --storage."""
    storage = raw or os.environ.get("LIPSWEEP_STORAGE")
    flag = "--storage" if raw else "LIPSWEEP_STORAGE"
    if not storage:
        storage, flag = default_storage(), "--storage"
    if "://" not in storage or storage.startswith("file://"):
        local = storage.removeprefix("file://")
        check_storage(local)
        checked = check_folder(flag, local, make_parents=not raw and flag == "--storage")
        prefix = "file://" if storage.startswith("file://") else ""
        storage = prefix + str(checked.resolve())
    check_storage(storage)
    return storage


def is_remote(storage: str) -> bool:
    """A URI that is not ``file://`` (s3://, gs://, ...): no local lock file or folder there."""
    return "://" in storage and not storage.startswith("file://")


def local_path(storage: str) -> Path:
    """The local folder of a storage path that is not remote (``file://`` dropped)."""
    return Path(storage.removeprefix("file://"))


def experiment_path(storage: str, name: str) -> str:
    """Tune's experiment folder: storage/name (storage may be a URI such as s3://...)."""
    return f"{storage.rstrip('/')}/{name}"


def storage_exists(path: str) -> bool:
    """Whether ``path`` (local or a pyarrow-readable URI) exists."""
    if is_remote(path):
        import pyarrow.fs as pafs

        fs, p = pafs.FileSystem.from_uri(path)
        return fs.get_file_info(p).type != pafs.FileType.NotFound
    return local_path(path).exists()


def spill_path(storage: str, experiment: str) -> Path:
    """Where undelivered MLflow writes go: the local experiment folder, else the cwd."""
    exp = experiment_path(storage, experiment)
    if is_remote(exp):
        return Path.cwd() / f".{experiment}-{SPILL_FILE}"
    return local_path(exp) / SPILL_FILE


def read_text(path: str) -> Optional[str]:
    """The text of the file ``path`` (local or a pyarrow-readable URI); ``None`` if absent."""
    if is_remote(path):
        import pyarrow.fs as pafs

        fs, p = pafs.FileSystem.from_uri(path)
        if fs.get_file_info(p).type == pafs.FileType.NotFound:
            return None
        with fs.open_input_stream(p) as fh:
            return fh.read().decode()
    try:
        return local_path(path).read_text()
    except FileNotFoundError:
        return None


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` (local: :func:`lipsweep.core.paths.write_atomic`)."""
    if is_remote(path):
        import pyarrow.fs as pafs

        fs, p = pafs.FileSystem.from_uri(path)
        with fs.open_output_stream(p) as fh:
            fh.write(text.encode())
        return
    write_atomic(local_path(path), text)


def remove_entries(source: str, names: Iterable[str]) -> None:
    """Delete the entries ``names`` (files or folders) of the folder ``source``, a local path or
    a pyarrow-readable URI; entries that do not exist are skipped."""
    if not is_remote(source):
        import shutil

        for name in names:
            path = local_path(source) / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        return
    import pyarrow.fs as pafs

    fs, base = pafs.FileSystem.from_uri(source)
    for name in names:
        target = f"{base.rstrip('/')}/{name}"
        kind = fs.get_file_info(target).type
        if kind == pafs.FileType.Directory:
            fs.delete_dir(target)
        elif kind == pafs.FileType.File:
            fs.delete_file(target)


@contextmanager
def local_folder(source: str, names: Iterable[str]) -> Iterator[Path]:
    """A local folder holding the entries ``names`` (files or folders) of the folder ``source``:
    ``source`` itself when it is a local path, else a temporary download of just those entries
    from a pyarrow-readable URI (``s3://``, ``gs://``, ``file://``), removed on exit. Entries
    that do not exist are left out."""
    if "://" not in source:
        yield Path(source)
        return
    import pyarrow.fs as pafs

    fs, base = pafs.FileSystem.from_uri(source)
    with tempfile.TemporaryDirectory(prefix="lipsweep-fetch-") as tmp:
        for name in names:
            src = f"{base.rstrip('/')}/{name}"
            kind = fs.get_file_info(src).type
            if kind == pafs.FileType.NotFound:
                continue
            dst = Path(tmp) / name
            (dst if kind == pafs.FileType.Directory else dst.parent).mkdir(
                parents=True, exist_ok=True
            )
            pafs.copy_files(
                src,
                str(dst),
                source_filesystem=fs,
                destination_filesystem=pafs.LocalFileSystem(),
            )
        yield Path(tmp)
