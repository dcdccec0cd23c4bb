"""The regularizer family's index (torch-free): each built-in's settings dataclass, labels and
plot style, declared with the import path of its class (none, JaSMin, Specformer).

Adding a built-in regularizer: its class in a new file of this folder, decorated with
``@register_regularizer("name")``, and here its settings dataclass, its spec and one
``declare_regularizer(SPEC, "lipsweep.regularizers.<file>:<Class>")`` line (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from lipsweep.core.config_base import (
    ConfigError,
    check_choice,
    check_int,
    check_max,
    check_positive,
)
from lipsweep.regularizers._registry import declare_regularizer
from lipsweep.regularizers.spec import NoSettings, RegularizerSpec

# ------------------------------------------------------------------------------ none

NONE = RegularizerSpec(
    name="none",
    doc="baseline",
    settings=NoSettings,
    title="baseline",
    table_label=lambda p: "baseline",
    colour="#4d4d4d",
    marker="s",
    line=":",
    legend="baseline (none)",
)

# ------------------------------------------------------------------------------ JaSMin

AGGREGATIONS = ("mean", "max")
DEFAULT_K = 0
DEFAULT_LAM = 1e-2
DEFAULT_AGGREGATION = "mean"


def check_jasmin_k(k: Any) -> int:
    """k = 0 (log g_1) or k >= 2 (log g_1/g_k); k = 1 makes the term identically 0."""
    check_int("k", k)
    if k < 0 or k == 1:
        raise ConfigError(
            "k",
            f"must be 0 (log g_1) or >= 2 (log g_1/g_k), got {k}; k=1 makes "
            "the JaSMin term identically 0",
        )
    return k


def check_k_tokens(k: int, num_tokens: int) -> None:
    """Every attention row (``num_tokens`` keys) needs the k+1 largest entries (Def. 5)."""
    if max(k, 1) + 1 > num_tokens:
        raise ConfigError(
            "k",
            f"k={k} needs at least {max(k, 1) + 1} tokens per attention "
            f"row but the model has {num_tokens}; use k <= {num_tokens - 1}",
        )


def check_jasmin_lam(lam: Any) -> float:
    """lam > 0, finite: lam = 0 is the baseline, which is ``regularizer: none`` (the settings
    and :class:`~lipsweep.regularizers.jasmin.JasminRegularizer` both read this rule)."""
    check_positive("lam", lam, allow_zero=True)
    if lam == 0:
        raise ConfigError("lam", "lam=0 turns JaSMin off; use regularizer: none for the baseline")
    return lam


def _jasmin_table_label(p: Mapping[str, str]) -> str:
    parts = [
        f"k={p['k']}" if "k" in p else "",
        f"λ={p['lam']}" if "lam" in p else "",
        p.get("aggregation", ""),
    ]
    return " ".join(["JaSMin"] + [s for s in parts if s])


@dataclass(frozen=True)
class JasminSettings:
    """JaSMin's settings (paper Sec. 4, eq. 8-9); defaults: the paper's first Table 3 row."""

    k: int = DEFAULT_K
    """JaSMin: 0 penalises log g_1, k >= 2 penalises log(g_1/g_k); k=1 is invalid. Default 0."""
    lam: float = DEFAULT_LAM
    """JaSMin: weight lambda of the term (> 0). Default 1e-2."""
    aggregation: str = DEFAULT_AGGREGATION
    """JaSMin: 'mean' or 'max' over the query rows of each attention map. Default 'mean'."""

    def __post_init__(self) -> None:
        check_jasmin_k(self.k)
        check_jasmin_lam(self.lam)
        check_choice("aggregation", self.aggregation, AGGREGATIONS)

    def check_tokens(self, num_tokens: int) -> None:
        """Every attention row needs the k+1 largest entries (Def. 5)."""
        check_k_tokens(self.k, num_tokens)


JASMIN = RegularizerSpec(
    name="jasmin",
    doc="paper Sec. 4",
    title="JaSMin",
    settings=JasminSettings,
    sweep_label=lambda f: f"jasmin k={f.get('k', 0)} lam={f.get('lam')} {f.get('aggregation', '')}",
    table_label=_jasmin_table_label,
    short="J",
    colour="#0072B2",
    marker="o",
    line="-",
)

# ------------------------------------------------------------------------------ Specformer

SPEC_LAMS = ("lam_q", "lam_k", "lam_v")
SPEC_DEFAULT_LAM = 1e-2
"""Each lambda when none of lam_q/lam_k/lam_v is given (the paper's joint 1e-2 setting)."""


def check_power_iters(n: Any) -> int:
    """Power iterations per training step: an integer in [1, 1000]."""
    check_int("spec_power_iters", n, 1)
    check_max("spec_power_iters", n, 1000, "it runs every training step; the authors use 1")
    return n


def check_spec_lams(lams: Mapping[str, Any]) -> None:
    """Each of lam_q/lam_k/lam_v >= 0 and finite, not all 0: that is the baseline, which is
    ``regularizer: none`` (the settings and the regularizer built directly read this rule)."""
    for n in SPEC_LAMS:
        check_positive(n, lams[n], allow_zero=True)
    if all(lams[n] == 0 for n in SPEC_LAMS):
        raise ConfigError(
            "lam_q",
            "lam_q, lam_k and lam_v are all 0, which turns "
            "Specformer off; use regularizer: none for the baseline",
        )


@dataclass(frozen=True)
class SpecformerSettings:
    """Specformer's settings (Hu et al. 2024): None of lam_q/lam_k/lam_v given: all three 1e-2
    (the paper's joint setting); some given: the others 0. Not all 0: that is the baseline in
    disguise (``regularizer: none``)."""

    lam_q: Optional[float] = None
    """Specformer: weight of sum_{l,h} sigma_1(W_Q)^2 (>= 0). Default: see SpecformerSettings."""
    lam_k: Optional[float] = None
    """Specformer: weight of sum_{l,h} sigma_1(W_K)^2 (>= 0). Default: see SpecformerSettings."""
    lam_v: Optional[float] = None
    """Specformer: weight of sum_{l,h} sigma_1(W_V)^2 (>= 0). Default: see SpecformerSettings."""
    spec_power_iters: int = 1
    """Specformer: power iterations per training step on persistent vectors (>= 1). Default 1."""

    def __post_init__(self) -> None:
        fill = SPEC_DEFAULT_LAM if all(getattr(self, n) is None for n in SPEC_LAMS) else 0.0
        for n in SPEC_LAMS:
            if getattr(self, n) is None:
                object.__setattr__(self, n, fill)
        check_spec_lams({n: getattr(self, n) for n in SPEC_LAMS})
        check_power_iters(self.spec_power_iters)


SPECFORMER = RegularizerSpec(
    name="specformer",
    doc="Hu et al. 2024",
    title="Specformer",
    settings=SpecformerSettings,
    hidden=("spec_power_iters",),
    sweep_label=lambda f: (
        f"specformer ({f.get('lam_q', 0)}, {f.get('lam_k', 0)}, {f.get('lam_v', 0)})"
    ),
    table_label=lambda p: f"Specformer ({', '.join(p.get(n, '?') for n in SPEC_LAMS)})",
    short="S",
    colour="#E69F00",
    marker="^",
    line="--",
)

declare_regularizer(NONE, "lipsweep.regularizers.base:NoRegularizer")
declare_regularizer(JASMIN, "lipsweep.regularizers.jasmin:JasminRegularizer")
declare_regularizer(SPECFORMER, "lipsweep.regularizers.specformer:SpecformerRegularizer")
