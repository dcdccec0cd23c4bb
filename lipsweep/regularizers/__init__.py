"""Attention regularizers for ViTs: JaSMin (paper Sec. 4) and Specformer (Hu et al. 2024).

Public API (docs/contract.md): :func:`g_k`, :func:`jasmin_penalty`; the registry
:func:`create_regularizer` / :func:`list_regularizers` / :func:`is_regularizer`;
:class:`RegularizerConfig` and :func:`create_regularizer_from_config`.

Importing this package, the family index and the config does not import torch: the index
(:mod:`._registry`) declares each built-in by the import path of its class, and the torch-side
names below load on first access (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import Any

from lipsweep.regularizers._registry import (
    REGULARIZERS,
    declare_regularizer,
    find_spec,
    get_regularizer_class,
    is_regularizer,
    list_regularizers,
    register_regularizer,
    regularizer_spec,
    regularizer_specs,
    setting_names,
    shown_params,
    unregister_regularizer,
)
from lipsweep.regularizers.config import (
    RegularizerConfig,
    create_regularizer,
    create_regularizer_from_config,
)
from lipsweep.regularizers.spec import NoSettings, RegularizerSpec

_LAZY = {
    "NoRegularizer": "base",
    "Regularizer": "base",
    "JASMIN_EPS": "jasmin",
    "JasminRegularizer": "jasmin",
    "g_k": "jasmin",
    "jasmin_penalty": "jasmin",
    "jasmin_penalty_from_qk": "jasmin",
    "SpecformerRegularizer": "specformer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "JASMIN_EPS",
    "REGULARIZERS",
    "NoSettings",
    "declare_regularizer",
    "JasminRegularizer",
    "NoRegularizer",
    "Regularizer",
    "RegularizerConfig",
    "RegularizerSpec",
    "SpecformerRegularizer",
    "create_regularizer",
    "create_regularizer_from_config",
    "find_spec",
    "g_k",
    "get_regularizer_class",
    "is_regularizer",
    "jasmin_penalty",
    "jasmin_penalty_from_qk",
    "list_regularizers",
    "register_regularizer",
    "regularizer_spec",
    "regularizer_specs",
    "setting_names",
    "shown_params",
    "unregister_regularizer",
]

# Installed plugins add regularizers too, read on the family's first use (core/registry.py).
REGULARIZERS.use_entry_points("lipsweep.regularizers")
