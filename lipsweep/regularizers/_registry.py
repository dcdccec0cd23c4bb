"""Registry of attention regularizers: ``create_regularizer`` / ``list_regularizers``.

A regularizer class joins the family with ``@register_regularizer`` and its ``name``; the
config (:class:`~lipsweep.regularizers.config.RegularizerConfig`) and the tests read the
registry, so a registered class is validated and tested without further wiring.

Example::

    >>> list_regularizers()
    ['jasmin', 'none', 'specformer']
    >>> reg = create_regularizer("jasmin", k=10, lam=1e-3, aggregation="max")
    >>> reg.weights
    {'jasmin': 0.001}
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

from lipsweep.config_base import ConfigError
from lipsweep.registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    from lipsweep.regularizers.base import Regularizer
    from lipsweep.regularizers.config import RegularizerConfig

_REGISTRY: Registry[type["Regularizer"]] = Registry(
    "regularizer", lambda name, known: ConfigError(
        "regularizer", f"unknown regularizer {name!r}; choose one of {known}"))


def register_regularizer(cls: type["Regularizer"]) -> type["Regularizer"]:
    """Class decorator: add ``cls`` to the registry under ``cls.name``."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__name__} needs a class attribute `name` to be registered")
    return _REGISTRY.add(name, cls)


def list_regularizers(filter: str = "") -> list[str]:
    """Sorted names of the registered regularizers, optionally matching a glob ``filter``."""
    return _REGISTRY.names(filter)


def is_regularizer(name: str) -> bool:
    """True if ``name`` is a registered regularizer."""
    return name in _REGISTRY


def get_regularizer_class(name: str) -> type["Regularizer"]:
    """The registered class for ``name``; ConfigError('regularizer') if unknown."""
    return _REGISTRY.get(name)


def create_regularizer_from_config(cfg: "RegularizerConfig") -> "Regularizer":
    """Build the regularizer a validated :class:`RegularizerConfig` describes."""
    return get_regularizer_class(cfg.regularizer).from_config(cfg)


def create_regularizer(name_or_cfg: Union[str, "RegularizerConfig"],
                       **kwargs: Any) -> "Regularizer":
    """Build a regularizer from its name and config fields, or from a ``RegularizerConfig``.

    ``kwargs`` are :class:`RegularizerConfig` fields (``k``, ``lam``, ``aggregation``,
    ``lam_q``, ``lam_k``, ``lam_v``, ``spec_power_iters``); they are validated exactly as a
    YAML/Tune config would be, and unset ones take the documented defaults.
    """
    from lipsweep.config_base import from_mapping
    from lipsweep.regularizers.config import RegularizerConfig

    if isinstance(name_or_cfg, RegularizerConfig):
        if kwargs:
            raise ValueError("pass either a RegularizerConfig or a name with keyword "
                             f"settings, not both (got {sorted(kwargs)})")
        return create_regularizer_from_config(name_or_cfg)
    if not isinstance(name_or_cfg, str):
        raise TypeError(f"name_or_cfg must be a regularizer name or a RegularizerConfig, "
                        f"got {type(name_or_cfg).__name__}")
    get_regularizer_class(name_or_cfg)  # unknown name -> ConfigError naming the field
    if "regularizer" in kwargs:
        raise ValueError("the regularizer is named by the first argument, not by a keyword")
    cfg = from_mapping(RegularizerConfig, {"regularizer": name_or_cfg, **kwargs})
    return create_regularizer_from_config(cfg)
