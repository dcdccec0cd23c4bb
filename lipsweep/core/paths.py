"""Folder options and the outputs written into them: the one home of the path rules.

Every option or environment variable that names a folder lipsweep writes (``train --out``,
``export --out``, ``report --out``, ``data prepare --dest``, ``sweep --storage``, ``demo --out``
and ``--storage``, ``$LIPSWEEP_DATA_CACHE``, ``$LIPSWEEP_CONFIRM_STATE``) goes through
:func:`check_folder` before anything is written: a file, a folder under a file, a symbolic
link, a missing parent, a name the filesystem cannot hold and a folder that cannot be written
(EACCES, EROFS) are each one :class:`ConfigError` naming the option (exit 2). A folder that a
command may *replace* (``train --overwrite``, ``export --force``) must in addition hold that
command's marker file and be neither the working folder nor one of its ancestors
(:func:`check_replaceable`).

Writes go through a temporary sibling that is removed on any exception
(:func:`removing`, :func:`write_atomic`); a failed write is one :class:`WriteError` line
(exit 1). Torch-, Ray- and MLflow-free.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Optional

from lipsweep.core.config_base import ConfigError, UsageError, show

NAME_MAX = 255
"""Longest file name (bytes) of the filesystems lipsweep runs on (ext4, xfs, NFS, tmpfs)."""


class WriteError(OSError):
    """An output could not be written (disk full, ``ulimit -f``, I/O error); its temporary
    was removed and what was there before is untouched. The CLI prints it as one line, exit 1.
    An OSError, so code that handles a failed write keeps handling it."""


def _abs(raw: str | os.PathLike) -> Path:
    """``raw`` with ``~`` expanded, made absolute without following links."""
    return Path(os.path.abspath(Path(raw).expanduser()))


def check_folder(flag: str, raw: str | os.PathLike, make_parents: bool = False) -> Path:
    """The absolute folder that ``flag`` names, checked before anything is written.

    Refused (ConfigError naming ``flag``): a file, a folder under a file, a symbolic link
    (dangling or not), a missing parent folder (unless ``make_parents``: a default such as
    ``runs/train``), a name longer than :data:`NAME_MAX` bytes or holding a NUL, and a folder
    that cannot be written (the nearest existing folder is probed with an empty folder that is
    removed at once, so EACCES and EROFS are seen as they are, also by root)."""
    text = os.fspath(raw)
    shown = show(text)
    if not text or "\x00" in text:
        raise ConfigError(flag, f"not a usable folder name {shown}")
    path = _abs(text)
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise ConfigError(flag, f"{shown}: a name in it is longer than {NAME_MAX} bytes")
    if path.is_symlink():
        raise ConfigError(
            flag, f"{shown} is a symbolic link; name the folder it points to, or another one"
        )
    existing = path
    while not os.path.lexists(existing):
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == path else f"lies under {show(str(existing))}, a file"
        raise ConfigError(flag, f"{shown} {what}, not a folder; choose another {flag}")
    if existing != path and existing != path.parent and not make_parents:
        raise ConfigError(
            flag,
            f"{shown}: its parent folder {show(str(path.parent))} does not exist; "
            "create it first (a mistyped parent is not created)",
        )
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".lipsweep-probe-", dir=existing))
    except OSError as exc:
        raise ConfigError(
            flag, f"{shown}: cannot write in {show(str(existing))} ({exc.strerror})"
        ) from None
    return path


def shown_path(path: str | os.PathLike) -> str:
    """``path`` as lipsweep prints it: relative to the working folder when it lies under it
    (``exports/smoke-best``), else as given."""
    text = os.fspath(path)
    try:
        rel = _abs(text).relative_to(Path.cwd())
    except ValueError:
        return text
    return str(rel)


def safe_folder_name(name: str) -> str:
    """A folder name made from ``name`` (an MLflow experiment, which another tool may have
    named ``../x``, ``/abs`` or ``a/b``) that stays inside the folder it is joined to: every
    character but letters, digits, ``-``, ``_`` and ``.`` becomes ``_``, leading dots are
    dropped, and a changed name gets 8 hex digits of its SHA-256 so two names stay apart."""
    import hashlib

    kept = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in name)
    kept = kept.lstrip(".")[:100]
    if kept == name and kept:
        return kept
    return f"{kept or 'experiment'}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def check_env_folder(env: str, default: Path) -> Path:
    """The folder of environment variable ``env`` (checked as :func:`check_folder` does,
    naming ``env``), else ``default`` (whose missing parents are created)."""
    raw = os.environ.get(env)
    if raw:
        return check_folder(env, raw)
    return check_folder(env, default, make_parents=True)


def refuse_working_folder(flag: str, path: Path) -> None:
    """UsageError if ``path`` is the working folder or one of its ancestors: lipsweep never
    writes a folder of its own there, nor deletes one, whatever it holds."""
    real, cwd = path.resolve(), Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        raise UsageError(
            f"{flag} {show(os.fspath(path))} is the working folder or one of its ancestors; "
            "lipsweep never writes or replaces such a folder"
        )


def check_replaceable(flag: str, raw: str | os.PathLike, marker: str, what: str) -> Optional[Path]:
    """The folder ``flag`` names if a command may delete and rewrite it, else None if it is
    missing or empty; UsageError unless it holds ``marker`` (the file that command writes
    into every folder it makes). Never the working folder or an ancestor of it, never a file
    or a symbolic link, whatever it holds."""
    path = _abs(raw)
    if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
        raise UsageError(f"{flag} {show(os.fspath(raw))} is not a folder; nothing was replaced")
    if not path.exists():
        return None
    refuse_working_folder(flag, path)
    if not any(path.iterdir()):
        return None
    mark = path / marker
    if mark.is_symlink() or not mark.is_file():
        raise UsageError(
            f"{flag} {show(os.fspath(raw))} is not {what} (no {marker} file); only a folder "
            "lipsweep wrote is replaced: remove it yourself or choose another folder"
        )
    return path


# --- writing ----------------------------------------------------------------------------------


def temporary_sibling(path: Path) -> Path:
    """The hidden temporary name of ``path`` while it is written: ``.<name>.tmp-<pid>``."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def removing(
    tmp: Path, what: str, errors: tuple[type[BaseException], ...] = (OSError,)
) -> Iterator[Path]:
    """Yield ``tmp`` (a file or folder being written); remove it on any exception and
    whatever is left of it at the end (after a rename, nothing is). An exception of
    ``errors`` becomes one :class:`WriteError` ``could not write <what>: <why>``; any other
    is re-raised as it is."""
    try:
        yield tmp
    except errors as exc:
        _remove(tmp)
        why = getattr(exc, "strerror", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
        raise WriteError(f"could not write {what}: {why}; nothing was replaced") from exc
    except BaseException:
        _remove(tmp)
        raise
    finally:
        if os.path.lexists(tmp):
            _remove(tmp)


def write_atomic(path: Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through its temporary sibling (fsync'ed, then renamed);
    a failure leaves ``path`` as it was and no temporary (WriteError)."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = temporary_sibling(path)
    with removing(tmp, str(path)):
        with open(tmp, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    return path
