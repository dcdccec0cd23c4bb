"""The regularizer family's index (torch-free): the family object, and each built-in's settings
dataclass, labels and plot style, declared with the import path of its class (none, JaSMin,
Specformer).

Each member carries its :class:`~lipsweep.regularizers.spec.RegularizerSpec` (its frozen
settings dataclass, labels and plot style) as light facts; the class is imported on first use
and built from its settings dataclass alone (``JasminRegularizer(JasminSettings(k=10))``). The
class's file adds it with the :func:`register_regularizer` decorator, and so does a plugin or a
test with a spec of its own. The config, the CLI help, labels, tables, plots and the export
card read the family.

Adding a built-in regularizer: its class in a new file of this folder, decorated with
``@register_regularizer("name")``, and here its settings dataclass, its spec and one
``declare_regularizer(SPEC, "lipsweep.regularizers.<file>:<Class>")`` line (docs/architecture.md).

Example::

    >>> list_regularizers()
    ['jasmin', 'none', 'specformer']
    >>> reg = create_regularizer("jasmin", k=10, lam=1e-3, aggregation="max")
    >>> reg.weights
    {'jasmin': 0.001}
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
from lipsweep.core.registry import Family
from lipsweep.regularizers.spec import NoSettings, RegularizerSpec


def _check_spec(name: str, spec: RegularizerSpec) -> None:
    """A spec is registered under its own name, and a setting name belongs to one regularizer
    only (it is one flat config key)."""
    if spec.name != name:
        raise ValueError(f"spec {spec.name!r} registered under {name!r}")
    taken = {
        n: s.name
        for s in REGULARIZERS.specs()
        if s is not None and s.name != spec.name
        for n in s.setting_names
    }
    for n in spec.setting_names:
        if n in taken or n == "regularizer":
            raise ValueError(
                f"setting {n!r} of {spec.name!r} is already a setting of "
                f"{taken.get(n, 'the config')!r}"
            )


def _on_register(name: str, cls: type, spec: RegularizerSpec) -> None:
    cls.name = name  # type: ignore[attr-defined]


REGULARIZERS: Family[type] = Family(
    "regularizer",
    spec_type=RegularizerSpec,
    unknown=lambda name, known: ConfigError(
        "regularizer", f"unknown regularizer {name!r}; choose one of {known}"
    ),
    check=_check_spec,
    on_register=_on_register,
)

# The family's names (methods of the one family object). ``@register_regularizer("name")``
# adds a class; a member not declared below passes ``spec=`` (its
# :class:`RegularizerSpec`).
register_regularizer = REGULARIZERS.register
unregister_regularizer = REGULARIZERS.unregister
regularizer_specs = REGULARIZERS.specs
regularizer_spec = REGULARIZERS.spec
list_regularizers = REGULARIZERS.names
is_regularizer = REGULARIZERS.is_member
get_regularizer_class = REGULARIZERS.load


def declare_regularizer(spec: RegularizerSpec, impl: str) -> None:
    """Declare a member by the import path of its class (``"module:Class"``), loaded on first
    use: the built-ins below are declared so."""
    REGULARIZERS.declare(spec.name, impl, spec=spec)


def find_spec(name: object) -> Optional[RegularizerSpec]:
    """The spec of ``name``, or None (for presenters reading logged params)."""
    return regularizer_spec(name) if is_regularizer(name) else None  # type: ignore[arg-type]


def setting_names() -> tuple[str, ...]:
    """Every regularizer setting (flat config keys other than ``regularizer``), in order."""
    return tuple(n for spec in regularizer_specs() for n in spec.setting_names)


def shown_params() -> tuple[str, ...]:
    """Every shown setting of every regularizer, in registration order."""
    return tuple(n for spec in regularizer_specs() for n in spec.shown)


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

    k: int = 0
    """JaSMin: 0 penalises log g_1, k >= 2 penalises log(g_1/g_k); k=1 is invalid."""
    lam: float = 1e-2
    """JaSMin: weight lambda of the term (> 0)."""
    aggregation: str = "mean"
    """JaSMin: 'mean' or 'max' over the query rows of each attention map."""

    def __post_init__(self) -> None:
        check_jasmin_k(self.k)
        check_positive("lam", self.lam, allow_zero=True)
        if self.lam == 0:
            raise ConfigError(
                "lam", "lam=0 turns JaSMin off; use regularizer: none for the baseline"
            )
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


@dataclass(frozen=True)
class SpecformerSettings:
    """Specformer's settings (Hu et al. 2024): None of lam_q/lam_k/lam_v given: all three 1e-2
    (the paper's joint setting); some given: the others 0. Not all 0: that is the baseline in
    disguise (``regularizer: none``)."""

    lam_q: Optional[float] = None
    """Specformer: weight of sum_{l,h} sigma_1(W_Q)^2 (>= 0); None: 1e-2 if none of
    lam_q/lam_k/lam_v is given, else 0."""
    lam_k: Optional[float] = None
    """Specformer: weight of sum_{l,h} sigma_1(W_K)^2 (>= 0); None: 1e-2 if none of
    lam_q/lam_k/lam_v is given, else 0."""
    lam_v: Optional[float] = None
    """Specformer: weight of sum_{l,h} sigma_1(W_V)^2 (>= 0); None: 1e-2 if none of
    lam_q/lam_k/lam_v is given, else 0."""
    spec_power_iters: int = 1
    """Specformer: power iterations per training step on persistent vectors (>= 1)."""

    def __post_init__(self) -> None:
        fill = SPEC_DEFAULT_LAM if all(getattr(self, n) is None for n in SPEC_LAMS) else 0.0
        for n in SPEC_LAMS:
            if getattr(self, n) is None:
                object.__setattr__(self, n, fill)
        for n in SPEC_LAMS:
            check_positive(n, getattr(self, n), allow_zero=True)
        if all(getattr(self, n) == 0 for n in SPEC_LAMS):
            raise ConfigError(
                "lam_q",
                "lam_q, lam_k and lam_v are all 0, which turns "
                "Specformer off; use regularizer: none for the baseline",
            )
        check_int("spec_power_iters", self.spec_power_iters, 1)
        check_max(
            "spec_power_iters",
            self.spec_power_iters,
            1000,
            "it runs every training step; the authors use 1",
        )


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
