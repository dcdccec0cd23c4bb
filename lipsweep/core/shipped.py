"""The search spaces and trial configs shipped inside the package, addressable by name.

``lipsweep sweep smoke`` and ``lipsweep train tiny`` read ``lipsweep/search_spaces/smoke.yaml``
and ``lipsweep/configs/tiny.yaml`` from wherever lipsweep is installed (a wheel, no checkout);
``search_spaces/`` and ``configs/`` at the top of a checkout are links to the same folders, so
the documented paths keep working. An argument is a *name* when it is bare (no ``/``, no
``.yaml`` or ``.yml`` suffix) and no file of that name exists; anything else is a path, read as
before. Torch-, Ray- and MLflow-free (``lipsweep spaces`` and ``sweep --dry-run`` stay light).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from lipsweep.core.config_base import ConfigError

SPACES = "search_spaces"
"""Package folder of the shipped search spaces (``lipsweep spaces`` lists them)."""
CONFIGS = "configs"
"""Package folder of the shipped trial configs."""
_WHAT = {SPACES: "search space", CONFIGS: "config"}
_SUFFIXES = (".yaml", ".yml")


def shipped_folder(kind: str) -> Path:
    """The installed folder of ``kind`` (:data:`SPACES` or :data:`CONFIGS`)."""
    if kind not in _WHAT:
        raise ValueError(f"kind must be one of {sorted(_WHAT)}, got {kind!r}")
    return Path(str(resources.files("lipsweep") / kind))


def shipped_names(kind: str) -> list[str]:
    """The names (file stems) of the shipped files of ``kind``, sorted."""
    folder = shipped_folder(kind)
    return sorted(p.stem for p in folder.glob("*.yaml") if p.is_file())


def is_name(arg: str) -> bool:
    """A bare name (``smoke``), not a path (``search_spaces/smoke.yaml``, ``./smoke``)."""
    seps = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return (
        bool(arg)
        and not any(s in arg for s in seps)
        and not arg.endswith(_SUFFIXES)
        and not Path(arg).exists()  # a file named like that is read as it always was
    )


def resolve(kind: str, arg: str, field: str) -> str:
    """``arg`` as a path: a bare name becomes its shipped file, a path is returned unchanged.
    An unknown name raises :class:`ConfigError` naming ``field`` and listing the shipped names."""
    if not is_name(arg):
        return arg
    path = shipped_folder(kind) / f"{arg}.yaml"
    if not path.is_file():
        names = ", ".join(shipped_names(kind))
        raise ConfigError(
            field,
            f"no such file and no shipped {_WHAT[kind]} named {arg!r}; shipped: {names} "
            "(or give a path to a YAML file)",
        )
    return str(path)


def space_descriptions() -> list[tuple[str, str]]:
    """``(name, description)`` of every shipped space; the description is the first line of
    the space's ``description`` (empty if it has none). Reads the shipped YAML (trusted: it
    is the package's own), validates nothing."""
    import yaml

    out = []
    for name in shipped_names(SPACES):
        raw = yaml.safe_load((shipped_folder(SPACES) / f"{name}.yaml").read_text()) or {}
        lines = str(raw.get("description") or "").strip().splitlines()
        out.append((name, lines[0] if lines else ""))
    return out
