"""How a regularizer shows itself (torch-free): its settings dataclass, labels and plot style.

A :class:`RegularizerSpec` is the light record of one member of the regularizer family
(:mod:`lipsweep.regularizers._registry`): ``--help-settings``, sweep labels and run names, the
Pareto table, plot legends and the export card read it, and the config builds its
``settings`` dataclass. The class that needs torch is loaded on first use.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional


@dataclass(frozen=True)
class NoSettings:
    """A regularizer without settings (the baseline)."""


@dataclass(frozen=True)
class RegularizerSpec:
    """A regularizer's vocabulary: name, settings dataclass, labels and plot style."""

    name: str
    """The registry key and the ``regularizer`` config value."""
    doc: str
    """A few words for the ``regularizer`` field's help, e.g. ``paper Sec. 4``."""
    settings: type = NoSettings
    """Frozen dataclass of the regularizer's flat config keys (MLflow params,
    docs/contract.md), validated once in its ``__post_init__``; a field's docstring is its
    ``--help-settings`` text. Optional ``check_tokens(self, num_tokens)``: the rule against
    the model."""
    hidden: tuple[str, ...] = ()
    """Settings left out of labels, the Pareto table and the export card."""
    title: str = ""
    """Name in the paper's notation for tables and legends (default: ``name``)."""
    sweep_label: Optional[Callable[[Mapping[str, Any]], str]] = None
    """Label from a flat trial config (``--dry-run``, run names); default ``name k=v ...``."""
    table_label: Optional[Callable[[Mapping[str, str]], str]] = None
    """Label from the formatted shown params (Pareto tables, legends); default
    ``title k=v ...``."""
    short: str = ""
    """Abbreviation of ``title`` in point annotations (default: ``title``)."""
    colour: str = ""
    """Plot colour (default: one of the spare Okabe-Ito colours)."""
    marker: str = "D"
    line: str = "-."
    """Matplotlib line style in the parallel-coordinates plot."""
    legend: str = ""
    """Legend entry (default: ``title``)."""

    def __post_init__(self) -> None:
        if not (
            dataclasses.is_dataclass(self.settings) and self.settings.__dataclass_params__.frozen
        ):  # type: ignore[attr-defined]
            raise TypeError(f"regularizer {self.name!r}: settings must be a frozen dataclass")
        unknown = set(self.hidden) - set(self.setting_names)
        if unknown:
            raise ValueError(
                f"regularizer {self.name!r}: hidden {sorted(unknown)} are not settings"
            )

    @property
    def setting_names(self) -> tuple[str, ...]:
        """The flat config keys this regularizer owns, in order."""
        return tuple(f.name for f in dataclasses.fields(self.settings))

    @property
    def shown(self) -> tuple[str, ...]:
        """The settings labels, the Pareto table and the export card show, in order."""
        return tuple(n for n in self.setting_names if n not in self.hidden)

    @property
    def display(self) -> str:
        return self.title or self.name

    def label(self, flat: Mapping[str, Any]) -> str:
        """Sweep label of a flat trial config (without the seed)."""
        if self.sweep_label is not None:
            return self.sweep_label(flat).strip()
        body = " ".join(f"{n}={flat[n]}" for n in self.shown if n in flat)
        return f"{self.name} {body}".strip()

    def paper_label(self, params: Mapping[str, str]) -> str:
        """Label of formatted params in the paper's notation (Tables 3, 4)."""
        if self.table_label is not None:
            return self.table_label(params)
        body = " ".join(f"{k}={v}" for k, v in params.items())
        return f"{self.display} {body}".strip()
