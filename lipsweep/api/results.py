"""What each API function returns: small frozen dataclasses, torch-free.

The CLI prints them (:mod:`lipsweep.cli.commands`); a notebook reads their fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

if TYPE_CHECKING:  # pragma: no cover
    from lipsweep.decide.front import Front


@dataclass(frozen=True)
class TrainResult:
    """One trained and evaluated trial (``lipsweep train``)."""

    out: Path
    """The output folder: checkpoints/, artifacts/, config.json, metrics.json."""
    metrics: Mapping[str, float]
    """The final metrics (docs/contract.md names), as in ``out/metrics.json``."""
    resumed_from_epoch: int = 0
    """The epoch of the checkpoint it resumed from (0: trained from the start)."""

    @property
    def metrics_file(self) -> Path:
        return self.out / "metrics.json"


@dataclass(frozen=True)
class TrialRun:
    """One trial of a sweep, as the driver saw it end, and its MLflow child run."""

    trial_id: str
    run_id: str
    """The MLflow child run ("" if it never got one)."""
    label: str
    status: str
    """FINISHED, FAILED or KILLED (stopped early by the scheduler)."""
    reason: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)
    """Its final metrics, for a trial that finished in this call (read the child run in
    MLflow for the others)."""


@dataclass(frozen=True)
class OutcomeCounts:
    """How a sweep's trials ended."""

    finished: int
    stopped: int
    """Stopped early by the scheduler (ASHA)."""
    failed: int
    not_run: int
    """Without an end: not started, or interrupted before their end (``resume`` runs them)."""
    total: int


@dataclass(frozen=True)
class SweepResult:
    """A sweep (``lipsweep sweep``): its experiment, its runs and how they ended."""

    space: str
    """The search-space file (``space`` for a space given as a dict)."""
    experiment: str
    storage: str
    experiment_path: str
    """Ray Tune's state: ``storage/experiment`` (what ``resume=True`` continues)."""
    tracking_uri: str
    """As shown: credentials redacted."""
    counts: OutcomeCounts
    parent_run_id: Optional[str] = None
    """The MLflow parent run (None for a dry run, or an interruption before it opened)."""
    runs: tuple[TrialRun, ...] = ()
    ok: bool = False
    """Every trial finished or was stopped early by the scheduler, and MLflow holds them."""
    interrupted: bool = False
    """Stopped by a signal (or MLflow out of reach): resume it with ``resume=True``."""
    signal: Optional[int] = None
    """The signal that stopped it (or arrived while the runs were being closed)."""
    summary: str = ""
    """The outcome as the CLI prints it (failures with their reasons)."""
    planned: tuple[str, ...] = ()
    """A dry run: the lines that list its trials (nothing was started)."""
    ran: Optional[int] = None
    """Trials this call started or continued: 0 when a resume found every trial ended (None
    for a dry run, or an interruption before Tune started)."""


@dataclass(frozen=True)
class FrontMember:
    """One point of a Pareto front: an arm (configs that differ only in seed, at its means
    over seeds) or a single run."""

    name: str
    """The arm's name, or the run's name."""
    arm_id: str
    run_ids: tuple[str, ...]
    """The arm's runs, or the one run."""
    values: Mapping[str, float]
    """Objective -> value (over arms: the mean over seeds)."""


@dataclass(frozen=True)
class ExportPick:
    """The run the selection rule picks for export."""

    run_id: str
    rule: str
    explanation: str


@dataclass(frozen=True)
class ParetoResult:
    """A sweep ranked (``lipsweep pareto``): its front; every run is tagged in MLflow.

    The ranking is one :class:`lipsweep.decide.front.Front` (``ranking``), the value the tags,
    ``pareto/`` artifacts and table were all written from; the other fields read it."""

    experiment: str
    ranking: "Front"
    parent_run_id: Optional[str]
    """The sweep's parent run, which holds the pareto/ artifacts."""

    @property
    def ranked_by(self) -> str:
        """``"arms"`` (an arm has 2 or more seeds, ``per_run`` not set) or ``"runs"``."""
        return self.ranking.ranked_by

    @property
    def objectives(self) -> tuple[str, ...]:
        """``NAME:max|min``, in order."""
        return tuple(f"{o.name}:{o.direction}" for o in self.ranking.objectives)

    @property
    def front(self) -> tuple[FrontMember, ...]:
        return tuple(FrontMember(*m) for m in self.ranking.members())

    @property
    def ranks(self) -> Mapping[str, int]:
        """run_id -> its Pareto rank (its arm's, over arms); 0: not ranked (a missing or
        non-finite objective)."""
        return {t.run_id: int(r) for t, r in zip(self.ranking.trials, self.ranking.ranks)}

    @property
    def pick(self) -> Optional[ExportPick]:
        """What ``export`` picks by the default rule (None if the rule finds nothing)."""
        sel, rule = self.ranking.selection, self.ranking.rule
        return (
            None if sel is None or rule is None else ExportPick(sel.run_id, rule, sel.explanation)
        )

    @property
    def table(self) -> str:
        """The front as the CLI prints it."""
        return self.ranking.table


@dataclass(frozen=True)
class ExportResult:
    """An exported run (``lipsweep export``): ``lipsweep.load_exported(folder)`` loads it."""

    folder: Path
    run_id: str
    selected_by: str
    """``run_id``, or the rule and why it chose this run."""
    metrics: Mapping[str, float]
    registered: Optional[str] = None
    """``models:/NAME/VERSION`` when ``register`` was given."""
    logged_model: Optional[str] = None
    """``models:/<model_id>`` when ``register`` was given: the MLflow 3 LoggedModel on the
    run (its Models tab, with the run's metrics) that the version was registered from."""


@dataclass(frozen=True)
class ReportResult:
    """A sweep's report (``lipsweep report``)."""

    folder: Path
    report: Path
    """``folder/report.md``."""
    figures: tuple[Path, ...]
    arms: int
    runs: int
    parent_run_id: Optional[str]
    """The parent run it was logged to, under report/ (None: a sweep without one)."""


@dataclass(frozen=True)
class ConfirmedRun:
    """One run re-evaluated with standard AutoAttack."""

    run_id: str
    label: str
    metrics: Mapping[str, float]
    """``acc_aa_std_<eps>`` (percent), logged to the run."""
    images: int
    seconds: float


@dataclass(frozen=True)
class FailedRun:
    run_id: str
    label: str
    error: str


@dataclass(frozen=True)
class ConfirmResult:
    """A confirm (``lipsweep confirm``): each run confirmed, skipped or failed."""

    experiment: str
    request: str
    """Image count and budget; a run confirmed with the same request is skipped."""
    confirmed: tuple[ConfirmedRun, ...]
    skipped: tuple[str, ...]
    """Run ids already confirmed with this request."""
    failed: tuple[FailedRun, ...]
    table: str
    """The front re-ranked with ``acc_aa_std_<eps>``, as the CLI prints it."""

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass(frozen=True)
class DemoResult:
    """``lipsweep demo``: the sweep, then (if every trial finished) its front and export."""

    sweep: SweepResult
    pareto: Optional[ParetoResult] = None
    export: Optional[ExportResult] = None
    sweep_seconds: float = 0.0


@dataclass(frozen=True)
class BenchSearchResult:
    """What ``bench-search`` wrote: the summary (as in ``summary.json``) and its figure."""

    summary: dict[str, Any]
    summary_path: Path
    plot: Path


@dataclass(frozen=True)
class PreparedData:
    """A dataset packed once for a cluster (``lipsweep data prepare``)."""

    dataset: str
    file: str
    """``DEST/<dataset>.npz``: what a space's ``data_dir`` names."""
    manifest_file: str
    """The manifest beside it (sizes and the sha256 every copy is checked against)."""
    train: int
    test: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class ShippedSpace:
    """A search space shipped with lipsweep (``lipsweep spaces``); ``sweep(space=name)``."""

    name: str
    description: str
    """The first line of the space's ``description`` (empty if it has none)."""
