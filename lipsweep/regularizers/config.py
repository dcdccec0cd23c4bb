"""Regularizer settings: one flat dataclass, part of each trial's flat config (docs/contract.md
params).

Its fields are ``regularizer`` plus every registered spec's settings (:mod:`.builtin`), in
registration order; registering a regularizer adds its fields. None means "does not apply to
this regularizer". Setting a field that belongs to another regularizer is an error
(ConfigError naming the field). Defaults filled for the applicable fields when left None:

- ``jasmin``: k=0, lam=1e-2, aggregation='mean' (the paper's first Table 3 row).
- ``specformer``: if none of lam_q/lam_k/lam_v is given, all three are 1e-2 (the paper's joint
  setting); if some are given, the others are 0.0. At least one must be > 0: a Specformer
  with all lambdas 0 is the baseline in disguise (use ``regularizer: none``), and likewise
  JaSMin with lam=0. spec_power_iters=1 (the authors' one iteration per step).
- ``none``: nothing may be set.

Each rule lives once, in the spec, and runs here; classes built from this config don't
re-check.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

import lipsweep.regularizers.builtin  # noqa: F401  (registers the built-in specs)
from lipsweep.core.config_base import ConfigError, from_mapping
from lipsweep.regularizers._registry import (
    all_settings,
    find_spec,
    get_regularizer_class,
    list_regularizers,
    on_change,
    regularizer_spec,
    regularizer_specs,
)

if TYPE_CHECKING:  # pragma: no cover
    from lipsweep.regularizers.base import Regularizer


class RegularizerConfig:
    """Which attention regularizer a trial trains with, and its settings (paper Sec. 4-5).

    A dataclass whose fields follow the registry (see :func:`_sync_fields`)."""

    regularizer: str = "none"

    def __post_init__(self) -> None:
        if not isinstance(self.regularizer, str) or self.regularizer not in list_regularizers():
            raise ConfigError(
                "regularizer", f"must be one of {list_regularizers()}, got {self.regularizer!r}"
            )
        spec = regularizer_spec(self.regularizer)
        own = {s.name for s in spec.settings}
        for s in all_settings():
            if getattr(self, s.name) is not None and s.name not in own:
                owners = [
                    r.name for r in regularizer_specs() if s.name in {t.name for t in r.settings}
                ]
                raise ConfigError(
                    s.name,
                    f"does not apply to regularizer {self.regularizer!r} "
                    f"(it is a setting of {' / '.join(owners) or 'none'}); "
                    "remove it or change `regularizer`",
                )
        for s in spec.settings:
            value = getattr(self, s.name)
            if value is None:
                setattr(self, s.name, s.default)
            elif s.check is not None:
                s.check(value)
        if spec.resolve is not None:
            spec.resolve(self)

    def check_tokens(self, num_tokens: int) -> None:
        """Raise ConfigError naming the field if the settings do not fit a model with
        ``num_tokens`` tokens (JaSMin: every attention row needs k+1 entries)."""
        spec = find_spec(self.regularizer)
        if spec is not None and spec.check_tokens is not None:
            spec.check_tokens(self, num_tokens)

    def to_flat(self) -> dict[str, Any]:
        """The set fields as a flat dict (None fields omitted): Tune sample / MLflow params."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> "RegularizerConfig":
        """Build from a merged flat trial config, reading only this dataclass's keys."""
        return from_mapping(cls, values, strict=False)

    @classmethod
    def __field_docs__(cls) -> dict[str, str]:
        """Field docs for ``--help-settings``, from the registered specs."""
        known = ", ".join(f"'{s.name}' ({s.doc})" for s in regularizer_specs())
        docs = {"regularizer": f"One of {known}."}
        docs.update({s.name: s.doc for s in all_settings()})
        return docs


_GENERATED = (
    "__init__",
    "__repr__",
    "__eq__",
    "__match_args__",
    "__dataclass_fields__",
    "__dataclass_params__",
)


def _sync_fields(cls: type = RegularizerConfig) -> None:
    """(Re)make ``cls`` a dataclass with ``regularizer`` plus every registered setting, in
    place, so that every importer's reference stays valid."""
    for name in getattr(cls, "__dataclass_fields__", {}):
        if name != "regularizer" and name in cls.__dict__:
            delattr(cls, name)
    for attr in _GENERATED:
        if attr in cls.__dict__:
            delattr(cls, attr)
    annotations: dict[str, Any] = {"regularizer": str}
    for s in all_settings():
        annotations[s.name] = Optional[s.type]
        setattr(cls, s.name, None)
    cls.__annotations__ = annotations
    dataclasses.dataclass(cls)


_sync_fields()
on_change(_sync_fields)


def create_regularizer_from_config(cfg: "RegularizerConfig") -> "Regularizer":
    """Build the regularizer a validated :class:`RegularizerConfig` describes."""
    return get_regularizer_class(cfg.regularizer).from_config(cfg)


def create_regularizer(
    name_or_cfg: Union[str, "RegularizerConfig"], **kwargs: Any
) -> "Regularizer":
    """Build a regularizer from its name and config fields, or from a ``RegularizerConfig``.

    ``kwargs`` are the regularizer's settings (its spec's ``settings``); they are validated
    exactly as a YAML/Tune config would be, and unset ones take the documented defaults.
    """
    if isinstance(name_or_cfg, RegularizerConfig):
        if kwargs:
            raise ValueError(
                "pass either a RegularizerConfig or a name with keyword "
                f"settings, not both (got {sorted(kwargs)})"
            )
        return create_regularizer_from_config(name_or_cfg)
    if not isinstance(name_or_cfg, str):
        raise TypeError(
            f"name_or_cfg must be a regularizer name or a RegularizerConfig, "
            f"got {type(name_or_cfg).__name__}"
        )
    regularizer_spec(name_or_cfg)  # unknown name -> ConfigError naming the field
    if "regularizer" in kwargs:
        raise ValueError("the regularizer is named by the first argument, not by a keyword")
    cfg = from_mapping(RegularizerConfig, {"regularizer": name_or_cfg, **kwargs})
    return create_regularizer_from_config(cfg)
