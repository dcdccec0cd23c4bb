"""What a regularizer declares once (torch-free): its settings, their rules, its labels.

A :class:`RegularizerSpec` is the whole vocabulary of one regularizer. Config parsing
(:class:`~lipsweep.regularizers.config.RegularizerConfig`), ``--help-settings``, sweep labels
and run names, the Pareto table, plot legends and the export card read it from the registry
(:func:`~lipsweep.regularizers.regularizer_spec`), so a new regularizer is one spec and one
class. The class (which needs torch) is named by ``impl`` and imported on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union


@dataclass(frozen=True)
class Setting:
    """One flat config key a regularizer owns (an MLflow param, docs/contract.md).

    ``check(value)`` raises ConfigError naming the key; it runs once, when the config is
    built, on a value already coerced to ``type``. ``default`` fills the key when left unset
    (None: the spec's ``resolve`` fills it). ``shown`` keys appear in labels, the Pareto table
    and the export card.
    """

    name: str
    type: type
    doc: str
    default: Any = None
    check: Optional[Callable[[Any], None]] = None
    shown: bool = True


@dataclass(frozen=True)
class RegularizerSpec:
    """A regularizer's vocabulary: name, settings, rules, labels and plot style."""

    name: str
    """The registry key and the ``regularizer`` config value."""
    impl: Union[str, type]
    """The class, or ``"module:Class"`` imported on first use (keeps this layer torch-free)."""
    doc: str
    """A few words for the ``regularizer`` field's help, e.g. ``paper Sec. 4``."""
    title: str = ""
    """Name in the paper's notation for tables and legends (default: ``name``)."""
    settings: tuple[Setting, ...] = ()
    resolve: Optional[Callable[[Any], None]] = None
    """Cross-setting defaults and rules, run after each setting's own check."""
    check_tokens: Optional[Callable[[Any, int], None]] = None
    """Rule against the model: ``check_tokens(cfg, num_tokens)`` raises ConfigError."""
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

    @property
    def shown(self) -> tuple[str, ...]:
        """The settings labels, the Pareto table and the export card show, in order."""
        return tuple(s.name for s in self.settings if s.shown)

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
