"""Validation helpers shared by every config dataclass.

A bad value raises :class:`ConfigError`, which names the field; the CLI turns it into exit
status 2 with one line (docs/contract.md). Science modules use these too, so that a wrong argument
to a public function reads the same way as a wrong YAML key.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import reprlib
import typing
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import yaml


class UsageError(Exception):
    """A usage problem (exit 2) that is not one config field: an unknown experiment, a
    non-empty ``out`` folder, a sweep that already exists.

    Raised from :mod:`lipsweep.api`, its text names option fields (``tracking_uri``);
    ``cli_text`` keeps the same message with the command line's flags (``--tracking-uri``),
    which the CLI prints."""

    cli_text: str | None = None


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


def key_name(key: Any) -> str:
    """A mapping key as an error's field name: the key itself if it reads as one, else its
    repr (so an empty, non-string or multi-line key still shows on one line)."""
    return key if isinstance(key, str) and key.strip() and key.isprintable() else repr(key)


INT_LIMIT = 2**63 - 1
"""Largest integer setting (int64: what torch, Tune and MLflow all hold)."""


def _short_repr() -> reprlib.Repr:
    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlong = 3, 120, 120, 120
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = r.maxfrozenset = 8
    return r


_SHORT = _short_repr()


def show(value: Any, limit: int = 80) -> str:
    """A ``repr(value)`` of at most ``limit`` characters, on one line. The work is bounded
    too (``reprlib``: 3 levels, 8 items, 120 characters each), so a huge or deeply shared
    value is never walked in full; ints past Python's digit limit print as a placeholder."""
    try:
        text = _SHORT.repr(value)
    except ValueError:  # ints past sys.get_int_max_str_digits()
        text = f"<{type(value).__name__} too large to print>"
    except RecursionError:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_max(field: str, value: Any, hi: int, why: str) -> None:
    """Refuse ``value > hi`` with the reason for the bound (``why``), naming ``field``."""
    if _real(value) and value > hi:
        raise ConfigError(field, f"must be <= {hi:,} ({why}), got {show(value)}")


MAX_YAML_BYTES = 1 << 20
"""Largest YAML document read (a trial config, a search space or one ``--set`` value)."""


class YamlRefused(yaml.YAMLError):
    """A YAML document that parses but is refused: an alias, or a duplicate key."""


class _StrictLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses aliases (``*name``: a "billion laughs" document expands
    exponentially when walked) and duplicate mapping keys (the last one would silently win)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise YamlRefused(
                f"YAML aliases are not allowed (*{show(event.anchor, 40)} at line "
                f"{event.start_mark.line + 1}); write the value out"
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # unhashable: the base class names it
                if duplicate:
                    raise YamlRefused(
                        f"duplicate key {show(key, 40)} at line "
                        f"{key_node.start_mark.line + 1}; give each key once"
                    )
                seen.add(key)
        return super().construct_mapping(node, deep)


def load_yaml_text(text: str) -> Any:
    """Parse one YAML document safely: no aliases, no duplicate keys, at most
    ``MAX_YAML_BYTES``. Raises ``yaml.YAMLError`` (:class:`YamlRefused` for the refusals)."""
    if len(text) > MAX_YAML_BYTES:
        raise YamlRefused(
            f"{len(text):,} characters is larger than the {MAX_YAML_BYTES:,} "
            "allowed for a config or search space"
        )
    loader = _StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite(value: Any) -> bool:
    """A real number (not a bool), finite, and not an int past :data:`INT_LIMIT` (one a float,
    torch, Tune or MLflow could not hold)."""
    if not _real(value):
        return False
    return abs(value) <= INT_LIMIT if isinstance(value, int) else math.isfinite(value)


def check_positive(field: str, value: Any, allow_zero: bool = False) -> None:
    if not finite(value):
        raise ConfigError(field, f"must be a number, got {show(value)}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(field, f"must be {bound}, got {show(value)}")


def check_int(field: str, value: Any, minimum: int | None = None, why: str = "") -> int:
    """``value`` if it is an integer (not a bool) >= ``minimum``, else ConfigError(field);
    ``why`` follows the bound in the error (`` (0: the whole test split)``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field, f"must be an integer, got {show(value)}")
    if minimum is not None and value < minimum:
        raise ConfigError(field, f"must be >= {minimum}{why}, got {show(value)}")
    return value


def check_range(field: str, value: Any, lo: float, hi: float) -> None:
    if not finite(value):
        raise ConfigError(field, f"must be a number, got {show(value)}")
    if not lo <= value <= hi:
        raise ConfigError(field, f"must be in [{lo}, {hi}], got {show(value)}")


def check_choice(field: str, value: Any, choices: Iterable[Any]) -> None:
    choices = list(choices)
    if value not in choices:
        raise ConfigError(field, f"must be one of {choices}, got {show(value)}")


def absolute_path(field: str, value: str) -> str:
    """``value`` made absolute against the current folder (``~`` expanded), so that a config
    built where the command runs still points at the same file inside a Tune worker."""
    try:
        path = Path(value).expanduser().resolve()
        path.exists()  # stat once here: a name too long or a bad byte fails with the field
        return str(path)
    except (OSError, ValueError, RuntimeError) as exc:
        raise ConfigError(field, f"not a usable path {show(value)}: {exc}") from None


@functools.lru_cache(maxsize=None)
def _field_types(cls: type) -> Mapping[str, Any]:
    """Field name -> resolved type of dataclass ``cls``, once per class (``get_type_hints``
    compiles every string annotation: 3/4 of a 31-trial dry run's validation time)."""
    hints = typing.get_type_hints(cls)
    return MappingProxyType({f.name: hints[f.name] for f in dataclasses.fields(cls)})


_TYPE_WORDS = {bool: "true or false", str: "a string", int: "an integer", float: "a number"}


def _coerce(field: str, value: Any, tp: Any) -> Any:
    """Coerce YAML/Tune scalars to the annotated type, or raise ConfigError naming ``field``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:  # Optional[X]
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _coerce(field, value, inner[0])
        for arm in inner:  # Union[bool, str]: the first type the value fits
            try:
                return _coerce(field, value, arm)
            except ConfigError:
                pass
        words = " or ".join(_TYPE_WORDS.get(a, getattr(a, "__name__", str(a))) for a in inner)
        raise ConfigError(field, f"must be {words}, got {show(value)}")
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(field, f"must be a list, got {show(value)}")
        item = args[0] if args else Any
        out = [_coerce(field, v, item) for v in value]
        return tuple(out) if origin is tuple else out
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(field, f"must be true or false, got {show(value)}")
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(field, f"must be an integer, got {show(value)}")
        if abs(value) > INT_LIMIT:
            raise ConfigError(field, f"out of range (|value| <= 2**63 - 1), got {show(value)}")
        return value
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(field, f"must be a number, got {show(value)}")
        if isinstance(value, (int, float, str)):  # YAML reads "1e-2" as a string
            try:
                return float(value)
            except OverflowError:
                raise ConfigError(field, f"too large for a number, got {show(value)}") from None
            except ValueError:
                pass
        raise ConfigError(field, f"must be a number, got {show(value)}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(field, f"must be a string, got {show(value)}")
    return value


def from_mapping(cls: type, values: Mapping[str, Any], *, strict: bool = True) -> Any:
    """Build dataclass ``cls`` from ``values``, coercing types; unknown keys raise if strict."""
    types = _field_types(cls)
    if strict:
        unknown = sorted((k for k in values if k not in types), key=str)
        if unknown:
            raise ConfigError(
                key_name(unknown[0]), f"unknown setting; known settings are {sorted(types)}"
            )
    kwargs = {k: _coerce(k, v, types[k]) for k, v in values.items() if k in types}
    try:
        return cls(**kwargs)
    except TypeError as exc:  # pragma: no cover - guarded by the unknown-key check
        raise ConfigError(cls.__name__, str(exc)) from exc
