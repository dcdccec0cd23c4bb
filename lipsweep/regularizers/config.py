"""Regularizer settings: one flat dataclass, part of each trial's flat config (SPEC §3 params).

None means "does not apply to this regularizer". Setting a field that belongs to another
regularizer is an error (ConfigError naming the field). Defaults filled for the applicable
fields when left None:

- ``jasmin``: k=0, lam=1e-2, aggregation='mean' (the paper's first Table 3 row).
- ``specformer``: if none of lam_q/lam_k/lam_v is given, all three are 1e-2 (the paper's joint
  setting); if some are given, the others are 0.0. At least one must be > 0: a Specformer
  with all lambdas 0 is the baseline in disguise (use ``regularizer: none``), and likewise
  JaSMin with lam=0. spec_power_iters=1 (the authors' one iteration per step).
- ``none``: nothing may be set.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from lipsweep.config_base import ConfigError, from_mapping
from lipsweep.regularizers._registry import get_regularizer_class, list_regularizers


@dataclass
class RegularizerConfig:
    """Which attention regularizer a trial trains with, and its settings (paper Sec. 4-5)."""

    regularizer: str = "none"
    """'none' (baseline), 'jasmin' (paper Sec. 4) or 'specformer' (Hu et al. 2024)."""
    k: Optional[int] = None
    """JaSMin: 0 penalises log g_1, k >= 2 penalises log(g_1/g_k); k=1 is invalid. Default 0."""
    lam: Optional[float] = None
    """JaSMin: weight lambda of the term (> 0). Default 1e-2."""
    aggregation: Optional[str] = None
    """JaSMin: 'mean' or 'max' over the query rows of each attention map. Default 'mean'."""
    lam_q: Optional[float] = None
    """Specformer: weight of sum_{l,h} sigma_1(W_Q)^2 (>= 0). Default: see module docstring."""
    lam_k: Optional[float] = None
    """Specformer: weight of sum_{l,h} sigma_1(W_K)^2 (>= 0). Default: see module docstring."""
    lam_v: Optional[float] = None
    """Specformer: weight of sum_{l,h} sigma_1(W_V)^2 (>= 0). Default: see module docstring."""
    spec_power_iters: Optional[int] = None
    """Specformer: power iterations per training step on persistent vectors (>= 1). Default 1."""

    def __post_init__(self) -> None:
        if not isinstance(self.regularizer, str) or self.regularizer not in list_regularizers():
            raise ConfigError("regularizer", f"must be one of {list_regularizers()}, got "
                              f"{self.regularizer!r}")
        cls = get_regularizer_class(self.regularizer)
        for name in _setting_names():
            if getattr(self, name) is not None and name not in cls.config_fields:
                owners = [r for r in list_regularizers()
                          if name in get_regularizer_class(r).config_fields]
                raise ConfigError(name, f"does not apply to regularizer {self.regularizer!r} "
                                  f"(it is a setting of {' / '.join(owners) or 'none'}); "
                                  "remove it or change `regularizer`")
        cls.resolve_config(self)

    def check_tokens(self, num_tokens: int) -> None:
        """Raise ConfigError('k') unless every attention row (num_tokens keys) has k+1 entries."""
        if self.k is not None and max(self.k, 1) + 1 > num_tokens:
            raise ConfigError("k", f"k={self.k} needs at least {max(self.k, 1) + 1} tokens per "
                              f"attention row but the model has {num_tokens}; use k <= "
                              f"{num_tokens - 1}")

    def to_flat(self) -> dict[str, Any]:
        """The set fields as a flat dict (None fields omitted): Tune sample / MLflow params."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) is not None}

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> "RegularizerConfig":
        """Build from a merged flat trial config, reading only this dataclass's keys."""
        return from_mapping(cls, values, strict=False)


def _setting_names() -> list[str]:
    return [f.name for f in dataclasses.fields(RegularizerConfig) if f.name != "regularizer"]
