"""A confirm's progress within one run: the per-image outcome of each attacked chunk, on disk.

:func:`lipsweep.decide.confirm.evaluate_standard` attacks a run's images a chunk at a time
(:data:`~lipsweep.decide.confirm.CHUNK_IMAGES`) and eps by eps. After each chunk it writes the
chunk's robust flags, with the settings that define the evaluation (run id, checkpoint and
image digests, attack, eps, image count, chunk size, device, package version), to
``<state root>/<run id>.json`` atomically (temporary file, then rename). A rerun with the same
settings reads the flags of the chunks done and attacks only the others; AutoAttack reseeds
every attack call with its fixed seed, so each chunk's outcome depends on that chunk alone and
the result equals an uninterrupted run's. Other settings, or an unreadable file, start the run
over with one log line saying why.

The state root is ``$LIPSWEEP_CONFIRM_STATE`` or ``~/.cache/lipsweep/confirm`` of the machine
that evaluates (a Ray worker's own, with ``--ray-address``). ``confirm`` removes a run's file
once the run's metrics are logged to MLflow; on a Ray cluster the worker's file stays, holding
every chunk, so a rerun there returns the result without attacking. Torch-, Ray- and MLflow-free.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from lipsweep.core.paths import check_env_folder, safe_folder_name, write_atomic

_log = logging.getLogger("lipsweep.confirm")

STATE_ENV = "LIPSWEEP_CONFIRM_STATE"
"""The folder of the state files (default ``~/.cache/lipsweep/confirm``)."""


def _default_root() -> Path:
    return Path.home() / ".cache" / "lipsweep" / "confirm"


def state_root() -> Path:
    """``$LIPSWEEP_CONFIRM_STATE`` or ``~/.cache/lipsweep/confirm``, checked as every folder
    option is (ConfigError naming the variable; the default's missing parents are made)."""
    return check_env_folder(STATE_ENV, _default_root())


def state_path(run_id: str) -> Path:
    """The state file of run ``run_id``."""
    return state_root() / f"{safe_folder_name(run_id)}.json"


def forget(run_id: str) -> None:
    """Remove run ``run_id``'s state file if this machine holds one (its result is logged);
    creates nothing, and a file that cannot be removed is left (a confirmed run is skipped)."""
    root = Path(os.environ.get(STATE_ENV) or _default_root()).expanduser()
    with contextlib.suppress(OSError):
        (root / f"{safe_folder_name(run_id)}.json").unlink(missing_ok=True)


@dataclass
class ConfirmState:
    """The robust flags of the chunks done, per eps, for one set of defining settings."""

    path: Path
    settings: dict[str, Any]
    done: dict[str, list[str]] = field(default_factory=dict)
    """eps numerator (as text) -> one string of '0'/'1' robust flags per chunk, in order."""

    @classmethod
    def open(cls, path: Path, settings: dict[str, Any], label: str) -> "ConfirmState":
        """The state at ``path`` if it was written for ``settings``; else an empty one (and
        one log line saying why the run starts over)."""
        settings = json.loads(json.dumps(settings))  # as the file holds them (lists, str keys)
        if not path.exists():
            return cls(path, settings)
        why = _mismatch(path, settings)
        if why is None:
            done = json.loads(path.read_text())["done"]
            return cls(path, settings, {k: list(v) for k, v in done.items()})
        _log.info("confirm of %s starts over from its first image: %s", label, why)
        return cls(path, settings)

    def chunks(self, eps: int) -> list[list[bool]]:
        """The robust flags of each chunk done at ``eps``, in order."""
        return [[c == "1" for c in flags] for flags in self.done.get(str(eps), [])]

    def images_done(self) -> int:
        """Images done, summed over the eps."""
        return sum(len(flags) for chunks in self.done.values() for flags in chunks)

    def record(self, eps: int, robust: Sequence[bool]) -> None:
        """Add the next chunk's flags at ``eps`` and write the file (atomically)."""
        self.done.setdefault(str(eps), []).append("".join("1" if r else "0" for r in robust))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps({"settings": self.settings, "done": self.done}))


def _mismatch(path: Path, settings: dict[str, Any]) -> Optional[str]:
    """None when the file at ``path`` was written for ``settings``; else the reason."""
    try:
        saved = json.loads(path.read_text())
        old, done = saved["settings"], saved["done"]
        if not isinstance(old, dict) or not isinstance(done, dict):
            raise ValueError("not a state file")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"its state file {path} is unreadable ({type(exc).__name__}: {exc})"
    changed = sorted(k for k in settings.keys() | old.keys() if settings.get(k) != old.get(k))
    if changed:
        return f"its state file {path} was written for other settings ({', '.join(changed)})"
    return None
