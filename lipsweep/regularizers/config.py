"""The regularizer section of a trial's flat config (docs/contract.md params).

:class:`RegularizerConfig` is the ``regularizer`` key plus the chosen member's own frozen
settings dataclass (:mod:`._registry`: ``JasminSettings`` k/lam/aggregation,
``SpecformerSettings`` lam_q/lam_k/lam_v/spec_power_iters), validated once in that
dataclass's ``__post_init__``. Its flat keys are ``regularizer`` plus every registered
member's settings. Setting a key that belongs to another regularizer is an error
(ConfigError naming the key); None means "not set".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Union

from lipsweep.core.config_base import ConfigError, from_mapping, show
from lipsweep.core.field_docs import field_docs
from lipsweep.regularizers._registry import (
    REGULARIZERS,
    list_regularizers,
    regularizer_spec,
    regularizer_specs,
    setting_names,
)

if TYPE_CHECKING:  # pragma: no cover
    from lipsweep.regularizers.base import Regularizer


@dataclass(frozen=True, init=False)
class RegularizerConfig:
    """Which attention regularizer a trial trains with, and its settings (paper Sec. 4-5).

    ``RegularizerConfig(regularizer="jasmin", k=10)``: the keywords are the member's flat
    settings; ``cfg.k`` reads ``cfg.settings.k``.
    """

    regularizer: str
    settings: Any
    """The member's frozen settings dataclass, validated."""

    def __init__(self, regularizer: str = "none", **values: Any) -> None:
        self._build(regularizer, values, coerce=False)

    def _build(self, regularizer: Any, values: Mapping[str, Any], coerce: bool) -> None:
        if not isinstance(regularizer, str) or regularizer not in REGULARIZERS:
            raise ConfigError(
                "regularizer", f"must be one of {list_regularizers()}, got {show(regularizer)}"
            )
        spec = regularizer_spec(regularizer)
        own = set(spec.setting_names)
        known = set(setting_names())
        for name, value in values.items():
            if name in own or value is None:
                continue
            if name not in known:
                raise ConfigError(
                    name, f"unknown setting; known settings are {sorted(known | {'regularizer'})}"
                )
            owners = [s.name for s in regularizer_specs() if name in s.setting_names]
            raise ConfigError(
                name,
                f"does not apply to regularizer {regularizer!r} "
                f"(it is a setting of {' / '.join(owners) or 'none'}); "
                "remove it or change `regularizer`",
            )
        given = {k: v for k, v in values.items() if k in own and v is not None}
        object.__setattr__(self, "regularizer", regularizer)
        settings = from_mapping(spec.settings, given) if coerce else spec.settings(**given)
        object.__setattr__(self, "settings", settings)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "settings":
            raise AttributeError(name)
        try:
            return getattr(self.settings, name)
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__} of {self.regularizer!r} has no setting {name!r}"
            ) from None

    def check_tokens(self, num_tokens: int) -> None:
        """Raise ConfigError naming the field if the settings do not fit a model with
        ``num_tokens`` tokens (JaSMin: every attention row needs k+1 entries)."""
        check = getattr(self.settings, "check_tokens", None)
        if check is not None:
            check(num_tokens)

    def to_flat(self) -> dict[str, Any]:
        """The set fields as a flat dict (None fields omitted): Tune sample / MLflow params."""
        flat = {"regularizer": self.regularizer}
        flat.update((k, v) for k, v in dataclasses.asdict(self.settings).items() if v is not None)
        return flat

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> "RegularizerConfig":
        """Build from a merged flat trial config, reading only this section's keys, with the
        member's settings coerced to their types (YAML strings such as ``1e-3``)."""
        keys = set(cls.flat_keys())
        values = {k: v for k, v in values.items() if k in keys}
        cfg = cls.__new__(cls)
        cfg._build(values.pop("regularizer", "none"), values, coerce=True)
        return cfg

    @staticmethod
    def flat_keys() -> tuple[str, ...]:
        """``regularizer`` and every registered member's settings: this section's flat keys."""
        return ("regularizer", *setting_names())

    @staticmethod
    def flat_defaults() -> dict[str, Any]:
        """Each flat key's value when left out (``--help-settings``)."""
        out: dict[str, Any] = {"regularizer": "none"}
        for spec in regularizer_specs():
            for f in dataclasses.fields(spec.settings):
                out[f.name] = f.default if f.default is not dataclasses.MISSING else None
        return out

    @classmethod
    def __field_docs__(cls) -> dict[str, str]:
        """Field docs for ``--help-settings``, from the members' settings dataclasses."""
        known = ", ".join(f"'{s.name}' ({s.doc})" for s in regularizer_specs())
        docs = {"regularizer": f"One of {known}."}
        for spec in regularizer_specs():
            docs.update(field_docs(spec.settings))
        return docs


def create_regularizer_from_config(cfg: RegularizerConfig) -> "Regularizer":
    """Build the regularizer a validated :class:`RegularizerConfig` describes: its class,
    given the member's settings dataclass."""
    return REGULARIZERS.load(cfg.regularizer)(cfg.settings)  # type: ignore[operator]


def create_regularizer(name_or_cfg: Union[str, RegularizerConfig], **kwargs: Any) -> "Regularizer":
    """Build a regularizer from its name and settings, or from a ``RegularizerConfig``.

    ``kwargs`` are the regularizer's settings; they are validated exactly as a YAML/Tune
    config would be, and unset ones take the documented defaults.
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
    unknown = sorted(k for k in kwargs if k not in setting_names())
    if unknown:
        raise ConfigError(
            unknown[0], f"unknown setting; known settings are {sorted(setting_names())}"
        )
    return create_regularizer_from_config(
        RegularizerConfig.from_flat({"regularizer": name_or_cfg, **kwargs})
    )
