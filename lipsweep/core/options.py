"""The field checks of the commands' options dataclasses (:mod:`lipsweep.api.options`).

Each check reads one field of a frozen dataclass in its ``__post_init__`` and raises
:class:`~lipsweep.core.config_base.ConfigError` naming the field (``num_cpus``); the command
line shows the flag's spelling instead (:mod:`lipsweep.cli`). Torch-free and light.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Optional

from lipsweep.core.config_base import ConfigError, UsageError, show

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
"""A SQLite MLflow store in the working folder (docs/contract.md)."""


def default_tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` or :data:`DEFAULT_TRACKING_URI`, read when options are made."""
    return os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_TRACKING_URI)


def default_ray_address() -> Optional[str]:
    """``$RAY_ADDRESS`` (None: a local Ray instance), read when options are made."""
    return os.environ.get("RAY_ADDRESS")


def cli(**spec: Any) -> dict[str, Any]:
    """A field's metadata for its command-line flag, where the field alone does not say it:
    ``flag`` (another spelling), ``positional``, ``metavar``, ``action``, ``nargs``,
    ``choices`` (a sequence, or a function returning one when the parser is built)
    (:mod:`lipsweep.cli.parser` reads it)."""
    return {"cli": spec}


def settings_field(owner: type, name: str, **spec: Any) -> Any:
    """An options field that is field ``name`` of settings dataclass ``owner`` (a
    scheduler's): its default and its doc (the flag's help) are read from there, so they are
    declared once; ``owner`` checks the value (the options' ``__post_init__`` builds it).
    ``spec``: as :func:`cli`."""
    meta = {"doc_from": (owner, name), **(cli(**spec) if spec else {})}
    return dataclasses.field(default=getattr(owner, name), metadata=meta)


def flag_of(f: dataclasses.Field) -> str:
    """How the command line spells option field ``f``: its ``cli(flag=...)``, a positional's
    metavar, or ``--`` and the name with dashes."""
    spec = f.metadata.get("cli", {})
    if spec.get("positional"):
        return spec.get("metavar", f.name.upper())
    return spec.get("flag", "--" + f.name.replace("_", "-"))


def fields_for_flags(text: str, cls: type) -> str:
    """``text`` with every flag of options dataclass ``cls`` (``--tracking-uri``) written as
    its field's name (``tracking_uri``)."""
    names = {flag_of(f): f.name for f in dataclasses.fields(cls)}
    return re.sub(r"--[a-z][a-z0-9-]*", lambda m: names.get(m.group(0), m.group(0)), text)


def set_field(obj: Any, name: str, value: Any) -> None:
    """Normalise field ``name`` of a frozen dataclass, in its ``__post_init__``."""
    object.__setattr__(obj, name, value)


def check_bool(obj: Any, name: str) -> None:
    if not isinstance(getattr(obj, name), bool):
        raise ConfigError(name, f"must be True or False, got {show(getattr(obj, name))}")


def check_text(obj: Any, name: str, optional: bool = False, path: bool = False) -> None:
    """A non-empty string (or, for ``path``, an ``os.PathLike``, kept as its string)."""
    value = getattr(obj, name)
    if value is None and optional:
        return
    if path and isinstance(value, os.PathLike):
        value = os.fspath(value)
        set_field(obj, name, value)
    if not isinstance(value, str) or not value:
        what = "a path" if path else "a non-empty string"
        raise ConfigError(name, f"must be {what}, got {show(value)}")


def check_texts(obj: Any, name: str) -> None:
    """None, or a sequence of non-empty strings (kept as a tuple; one string is one item)."""
    value = getattr(obj, name)
    if value is None:
        return
    items = (value,) if isinstance(value, str) else value
    try:
        items = tuple(items)
    except TypeError:
        raise ConfigError(name, f"must be a list of strings, got {show(value)}") from None
    for item in items:
        if not isinstance(item, str) or not item:
            raise ConfigError(name, f"must be a list of non-empty strings, got {show(item)}")
    set_field(obj, name, items)


def check_ray_address(obj: Any, name: str = "ray_address") -> None:
    """None, or a well-formed Ray address (``host:port``, ``ray://host:port``, ``auto``)."""
    check_text(obj, name, optional=True)
    value = getattr(obj, name)
    if value:
        from lipsweep.core.ray_address import parse_ray_address

        try:
            parse_ray_address(value, flag=name)
        except UsageError as err:
            raise ConfigError(name, str(err).removeprefix(f"{name} ")) from None


def check_experiment_name(name: str, field: str = "experiment") -> None:
    """A sweep's name (``experiment`` or the space's ``name``): letters, digits, - or _.
    It is a folder under the storage and part of MLflow filters, so no ``..``, ``/``, quotes."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(field, f"must be letters, digits, - or _, got {show(name)}")
