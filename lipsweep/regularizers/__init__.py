"""Attention regularizers for ViTs: JaSMin (paper Sec. 4) and Specformer (Hu et al. 2024).

Public API (SPEC §3): :func:`g_k`, :func:`jasmin_penalty`; the registry
:func:`create_regularizer` / :func:`list_regularizers` / :func:`is_regularizer`;
:class:`RegularizerConfig` and :func:`create_regularizer_from_config`.
"""
from __future__ import annotations

from lipsweep.regularizers._registry import (
    create_regularizer,
    create_regularizer_from_config,
    get_regularizer_class,
    is_regularizer,
    list_regularizers,
    register_regularizer,
)
from lipsweep.regularizers.base import NoRegularizer, Regularizer
from lipsweep.regularizers.jasmin import (
    JASMIN_EPS,
    JasminRegularizer,
    g_k,
    jasmin_penalty,
    jasmin_penalty_from_qk,
)
from lipsweep.regularizers.specformer import SpecformerRegularizer
from lipsweep.regularizers.config import RegularizerConfig  # after the registrations

__all__ = [
    "JASMIN_EPS", "JasminRegularizer", "NoRegularizer", "Regularizer", "RegularizerConfig",
    "SpecformerRegularizer", "create_regularizer", "create_regularizer_from_config",
    "g_k", "get_regularizer_class", "is_regularizer", "jasmin_penalty",
    "jasmin_penalty_from_qk", "list_regularizers", "register_regularizer",
]
