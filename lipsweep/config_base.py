"""Validation helpers shared by every config dataclass.

A bad value raises :class:`ConfigError`, which names the field; the CLI turns it into exit
status 2 with one line (SPEC §3). Science modules use these too, so that a wrong argument to a
public function reads the same way as a wrong YAML key.
"""
from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, Iterable, Mapping


class UsageError(Exception):
    """A command-line usage problem (exit 2) that is not one config field: an unknown
    experiment, a non-empty --out, a sweep that already exists."""


class ConfigError(ValueError):
    """A configuration value is invalid. ``field`` names it; ``source`` names the file, if any."""

    def __init__(self, field: str, message: str, source: str | None = None) -> None:
        self.field = field
        self.message = message
        self.source = source
        super().__init__(self.format())

    def format(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}{self.field}: {self.message}"

    def with_source(self, source: str) -> "ConfigError":
        return ConfigError(self.field, self.message, source)


def check_positive(field: str, value: Any, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(field, f"must be a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(field, f"must be {bound}, got {value!r}")


def check_range(field: str, value: Any, lo: float, hi: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(field, f"must be a number, got {value!r}")
    if not lo <= value <= hi:
        raise ConfigError(field, f"must be in [{lo}, {hi}], got {value!r}")


def check_choice(field: str, value: Any, choices: Iterable[Any]) -> None:
    choices = list(choices)
    if value not in choices:
        raise ConfigError(field, f"must be one of {choices}, got {value!r}")


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(field: str, value: Any, tp: Any) -> Any:
    """Coerce YAML/Tune scalars to the annotated type, or raise ConfigError naming ``field``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:  # Optional[X]
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(field, value, inner[0])
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(field, f"must be a list, got {value!r}")
        item = args[0] if args else Any
        out = [_coerce(field, v, item) for v in value]
        return tuple(out) if origin is tuple else out
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(field, f"must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(field, f"must be an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(field, f"must be an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(field, f"must be a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):  # YAML reads "1e-2" as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(field, f"must be a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(field, f"must be a string, got {value!r}")
    return value


def from_mapping(cls: type, values: Mapping[str, Any], *, strict: bool = True) -> Any:
    """Build dataclass ``cls`` from ``values``, coercing types; unknown keys raise if strict."""
    types = _field_types(cls)
    if strict:
        unknown = sorted(set(values) - set(types))
        if unknown:
            raise ConfigError(unknown[0], f"unknown setting; known settings are "
                              f"{sorted(types)}")
    kwargs = {k: _coerce(k, v, types[k]) for k, v in values.items() if k in types}
    try:
        return cls(**kwargs)
    except TypeError as exc:  # pragma: no cover - guarded by the unknown-key check
        raise ConfigError(cls.__name__, str(exc)) from exc
