"""The built-in regularizers' vocabularies (torch-free): none, JaSMin, Specformer.

Each spec declares its settings (type, default, doc, rule), labels and plot style once; the
classes live in ``base.py``, ``jasmin.py`` and ``specformer.py`` and are imported on first use.
"""

from __future__ import annotations

from typing import Any, Mapping

from lipsweep.core.config_base import (
    ConfigError,
    check_choice,
    check_int,
    check_max,
    check_positive,
)
from lipsweep.regularizers._registry import register_regularizer
from lipsweep.regularizers.spec import RegularizerSpec, Setting

# ------------------------------------------------------------------------------ none

NONE = RegularizerSpec(
    name="none",
    impl="lipsweep.regularizers.base:NoRegularizer",
    doc="baseline",
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


def _jasmin_lam(lam: Any) -> None:
    check_positive("lam", lam, allow_zero=True)
    if lam == 0:
        raise ConfigError("lam", "lam=0 turns JaSMin off; use regularizer: none for the baseline")


def _jasmin_table_label(p: Mapping[str, str]) -> str:
    parts = [
        f"k={p['k']}" if "k" in p else "",
        f"λ={p['lam']}" if "lam" in p else "",
        p.get("aggregation", ""),
    ]
    return " ".join(["JaSMin"] + [s for s in parts if s])


JASMIN = RegularizerSpec(
    name="jasmin",
    impl="lipsweep.regularizers.jasmin:JasminRegularizer",
    doc="paper Sec. 4",
    title="JaSMin",
    settings=(
        Setting(
            "k",
            int,
            "JaSMin: 0 penalises log g_1, k >= 2 penalises log(g_1/g_k); k=1 is "
            "invalid. Default 0.",
            DEFAULT_K,
            check_jasmin_k,
        ),
        Setting(
            "lam",
            float,
            "JaSMin: weight lambda of the term (> 0). Default 1e-2.",
            DEFAULT_LAM,
            _jasmin_lam,
        ),
        Setting(
            "aggregation",
            str,
            "JaSMin: 'mean' or 'max' over the query rows of each attention map. Default 'mean'.",
            DEFAULT_AGGREGATION,
            lambda v: check_choice("aggregation", v, AGGREGATIONS),
        ),
    ),
    check_tokens=lambda cfg, n: check_k_tokens(cfg.k, n) if cfg.k is not None else None,
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


def _specformer_resolve(cfg: Any) -> None:
    """None of the lambdas given: all 1e-2; some given: the others 0; not all 0."""
    fill = SPEC_DEFAULT_LAM if all(getattr(cfg, n) is None for n in SPEC_LAMS) else 0.0
    for n in SPEC_LAMS:
        if getattr(cfg, n) is None:
            setattr(cfg, n, fill)
    if all(getattr(cfg, n) == 0 for n in SPEC_LAMS):
        raise ConfigError(
            "lam_q",
            "lam_q, lam_k and lam_v are all 0, which turns "
            "Specformer off; use regularizer: none for the baseline",
        )


def _lam_setting(name: str, which: str) -> Setting:
    return Setting(
        name,
        float,
        f"Specformer: weight of sum_{{l,h}} sigma_1(W_{which})^2 (>= 0). "
        "Default: see module docstring.",
        None,
        lambda v: check_positive(name, v, allow_zero=True),
    )


SPECFORMER = RegularizerSpec(
    name="specformer",
    impl="lipsweep.regularizers.specformer:SpecformerRegularizer",
    doc="Hu et al. 2024",
    title="Specformer",
    settings=(
        _lam_setting("lam_q", "Q"),
        _lam_setting("lam_k", "K"),
        _lam_setting("lam_v", "V"),
        Setting(
            "spec_power_iters",
            int,
            "Specformer: power iterations per training step on "
            "persistent vectors (>= 1). Default 1.",
            1,
            check_power_iters,
            shown=False,
        ),
    ),
    resolve=_specformer_resolve,
    sweep_label=lambda f: (
        f"specformer ({f.get('lam_q', 0)}, {f.get('lam_k', 0)}, {f.get('lam_v', 0)})"
    ),
    table_label=lambda p: f"Specformer ({', '.join(p.get(n, '?') for n in SPEC_LAMS)})",
    short="S",
    colour="#E69F00",
    marker="^",
    line="--",
)

for _spec in (NONE, JASMIN, SPECFORMER):
    register_regularizer(_spec)
