"""``lipsweep report`` (:func:`lipsweep.api.report`): a markdown report of a sweep's arms.

Reads the FINISHED trial runs of ``--experiment`` (as ``lipsweep pareto`` does), groups them
into arms (:mod:`lipsweep.decide.arms`) and writes to ``--out`` (default
``reports/EXPERIMENT``):

- ``report.md``: the arm table (mean ± std over seeds, n, the Pareto rank of the arm's means)
  and the paired differences of every arm to the baseline arm on the same seed, each with its
  95% t-interval and the two-sided paired t-test p-value; for the ‖J_f‖ scales also the
  relative ones (``arm / baseline - 1``, :func:`lipsweep.decide.arms.paired_relative`); under
  each table, which tests stay below 0.05 after Holm's correction over the table; and how
  many seeds per arm each observed difference would need for 80 % power;
- ``paired_differences.png``: those paired differences seed by seed, with the mean and its
  interval, one panel per metric (a forest plot);
- ``pareto_scatter.png``: clean vs robust accuracy (arm means when an arm has >= 2 seeds);
- ``jacobian_by_arm.png``: the per-image ||J_f(x)||_2 of every arm, pooled over seeds, overlaid
  (from each run's ``lipschitz/lipschitz.npz`` artifact, docs/science.md §1.5, paper Fig. 4);
- ``jacobian_per_margin_by_arm.png``: the same divided by each image's logit margin
  (:mod:`lipsweep.lipschitz.margin`), the scale-free view of the same quantity.

The files it wrote (and nothing else of ``--out``) are then logged to the sweep's parent run
under ``report/``. The default folder name is made from the experiment's name by
:func:`lipsweep.core.paths.safe_folder_name`, so it stays under ``reports/``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from lipsweep.core.metric_names import (
    ACC_CLEAN,
    ACC_PREFIX,
    LIP_JACOBIAN_MEDIAN,
    LIP_PER_MARGIN_MEDIAN,
    aa_std_metric,
    attack_metric,
)
from lipsweep.core.paths import write_atomic
from lipsweep.decide.arms import (
    MAX_PLANNED_SEEDS,
    POWER,
    Arm,
    Stats,
    arm_stats,
    baseline_arm,
    holm,
    max_seeds,
    paired_difference,
    paired_relative,
    paired_t,
    paired_values,
    seeds_for_power,
)
from lipsweep.decide.pareto import fmt_value

if TYPE_CHECKING:  # pragma: no cover
    from lipsweep.decide.front import Front

_log = logging.getLogger(__name__)

REPORT_NAME = "report.md"
FIGURES = {
    "pareto": "pareto_scatter.png",
    "jacobian": "jacobian_by_arm.png",
    "per_margin": "jacobian_per_margin_by_arm.png",
    "paired": "paired_differences.png",
}
ARM_METRICS: tuple[tuple[str, str], ...] = (
    (ACC_CLEAN, "clean"),
    (attack_metric("fgsm", 2), "FGSM 2"),
    (attack_metric("fgsm", 4), "FGSM 4"),
    (attack_metric("pgd", 2), "PGD 2"),
    (attack_metric("pgd", 4), "PGD 4"),
    (attack_metric("aa", 2), "AA 2"),
    (aa_std_metric(2), "AA std 2"),
    (LIP_JACOBIAN_MEDIAN, "median ‖J_f‖"),
    (LIP_PER_MARGIN_MEDIAN, "median ‖J_f‖/margin"),
)
"""Columns of the arm table (those no run logged are left out). "AA std 2" is standard
AutoAttack from ``lipsweep confirm``, on the runs it confirmed."""
PAIRED_METRICS: tuple[tuple[str, str], ...] = (
    (ACC_CLEAN, "Δ clean"),
    (attack_metric("pgd", 4), "Δ PGD 4"),
    (attack_metric("aa", 2), "Δ AA 2"),
    (aa_std_metric(2), "Δ AA std 2"),
    (LIP_JACOBIAN_MEDIAN, "Δ median ‖J_f‖"),
    (LIP_PER_MARGIN_MEDIAN, "Δ median ‖J_f‖/margin"),
)
RELATIVE_METRICS: tuple[tuple[str, str], ...] = (
    (LIP_JACOBIAN_MEDIAN, "Δ median ‖J_f‖ (relative)"),
    (LIP_PER_MARGIN_MEDIAN, "Δ median ‖J_f‖/margin (relative)"),
)
"""Scales whose baseline moves between seeds: also paired as ``arm / baseline - 1``."""
NPZ_PATH = "lipschitz/lipschitz.npz"


def _present(arms: Sequence[Arm], cols: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(m, h) for m, h in cols if any(a.values(m) for a in arms)]


def _digits(metric: str) -> int:
    return 2 if metric.startswith(ACC_PREFIX) else 3


def _mean_std(arm: Arm, metric: str) -> str:
    s = arm_stats(arm, metric)
    if s.n == 0:
        return "-"
    d = _digits(metric)
    cell = f"{s.mean:.{d}f}" if s.n < 2 else f"{s.mean:.{d}f} ± {s.std:.{d}f}"
    return cell if s.n == arm.n else f"{cell} (n={s.n})"  # e.g. confirmed runs only


def _fmt_p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _paired_cell(s: Stats, d: int, unit: str = "") -> str:
    """``mean [lo, hi]<unit> p=...`` of a paired statistic, bold where p < 0.05."""
    if s.n == 0:
        return "-"
    if s.n < 2:
        return f"{s.mean:+.{d}f}{unit} (1 pair)"
    if math.isnan(s.p):
        return f"{s.mean:+.{d}f}{unit} (same in every pair: no t-test)"
    cell = f"{s.mean:+.{d}f} [{s.lo:+.{d}f}, {s.hi:+.{d}f}]{unit} p={_fmt_p(s.p)}"
    return f"**{cell}**" if s.p < 0.05 else cell


def arm_markdown(arms: Sequence[Arm], arm_ranks: Sequence[int]) -> str:
    """The arm table: arm, n (the runs its statistics use: one per seed), seeds (a repeated
    one with its count of runs, of which the first is used), Pareto rank of its means, mean ±
    std per metric."""
    cols = _present(arms, ARM_METRICS)
    lines = [
        "| arm | n | seeds | rank | " + " | ".join(h for _, h in cols) + " |",
        "|---|---:|---|---:|" + "---:|" * len(cols),
    ]
    for a, r in zip(arms, arm_ranks):
        repeated = a.repeated_seeds
        seeds = ", ".join(
            f"{s} ({len(repeated[s])} runs, first used)" if s in repeated else str(s)
            for s in dict.fromkeys(a.seeds)
        )
        lines.append(
            f"| {a.name} | {a.n} | {seeds} | {r or '-'} | "
            + " | ".join(_mean_std(a, m) for m, _ in cols)
            + " |"
        )
    return "\n".join(lines)


def _at_most_seeds(n: int) -> str:
    return "one seed each" if n == 1 else f"at most {n} seeds"


def _pairs(arm: Arm, base: Arm) -> int:
    """Seeds both ``arm`` and ``base`` ran."""
    return len(set(arm.seeds) & set(base.seeds))


def _paired_stats(
    arms: Sequence[Arm], base: Arm, relative: bool
) -> tuple[list[tuple[str, str]], list[tuple[Arm, list[tuple[str, Stats]]]]]:
    """The table's columns (metric, header) and, per arm other than ``base``, (metric, its
    paired statistic) per column."""
    cols = _present(arms, RELATIVE_METRICS if relative else PAIRED_METRICS)
    pair = paired_relative if relative else paired_difference
    return cols, [(a, [(m, pair(a, base, m)) for m, _ in cols]) for a in arms if a is not base]


def paired_markdown(arms: Sequence[Arm], base: Arm, relative: bool = False) -> str:
    """Paired differences to ``base``: per arm and metric, mean [95% CI] and the p-value;
    ``relative``: of ``arm / base - 1`` in percent on :data:`RELATIVE_METRICS`."""
    cols, rows = _paired_stats(arms, base, relative)
    lines = [
        "| arm | pairs | " + " | ".join(h for _, h in cols) + " |",
        "|---|---:|" + "---:|" * len(cols),
    ]
    for a, cells in rows:
        shown = [
            _paired_cell(st, 1, " %") if relative else _paired_cell(st, _digits(m))
            for m, st in cells
        ]
        lines.append(f"| {a.name} | {_pairs(a, base)} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def holm_sentence(arms: Sequence[Arm], base: Arm, relative: bool = False) -> str:
    """Which of the table's tests stay below 0.05 after Holm's correction over all of them
    (:func:`lipsweep.decide.arms.holm`), or the smallest adjusted p when none does."""
    cols, rows = _paired_stats(arms, base, relative)
    header = dict(cols)
    tests = [(a, header[m], st) for a, cells in rows for m, st in cells]
    adj = holm([st.p for _, _, st in tests])
    found = [(q, a, h) for q, (a, h, _) in zip(adj, tests) if math.isfinite(q)]
    if not found:
        if all(st.n < 2 for _, _, st in tests):
            return (
                "One seed per pair: no interval, no test. To get them, run each arm on "
                "several seeds (`repeat: {seed: [0, 1, 2]}` in the search space)."
            )
        return "No cell of this table has a t-test (no spread), so there is nothing to correct."
    n = len(found)
    head = f"Holm's correction over the {n} test{'s' * (n != 1)} of this table (family-wise 5 %): "
    keep = sorted((q, a.name, h) for q, a, h in found if q < 0.05)
    if keep:
        return head + "; ".join(f"{a}, {h}: adjusted p={_fmt_p(q)}" for q, a, h in keep) + "."
    q, a, h = min(found, key=lambda t: t[0])
    return head + f"none stays below 0.05 (smallest adjusted p={_fmt_p(q)}: {a.name}, {h})."


def _forest_rows(arms: Sequence[Arm], base: Arm) -> tuple[list[Arm], list[tuple[str, str, bool]]]:
    """The arms sharing a seed with ``base`` and the panels (metric, axis label, relative) of
    the paired-differences figure and the planning table: the accuracies in points, the
    Lipschitz scales relative (percent), each only if some of those arms logged it."""
    rows = [a for a in arms if a is not base and _pairs(a, base)]
    rel = {m for m, _ in RELATIVE_METRICS}
    panels = [
        (m, f"{h} (relative, %)" if m in rel else f"{h} (points)", m in rel)
        for m, h in _present(rows, PAIRED_METRICS)
    ]
    return rows, panels


def planning_markdown(arms: Sequence[Arm], base: Arm) -> str:
    """Seeds per arm the paired test of each forest panel (accuracies in points, the ||J_f||
    scales relative) would need to detect the observed difference with :data:`POWER` at the
    Bonferroni level 0.05 / (number of those tests); "" when no cell has a test."""
    rows, panels = _forest_rows(arms, base)
    diffs = {(a.arm_id, m): paired_values(a, base, m, rel) for a in rows for m, _, rel in panels}
    m_tests = sum(1 for v in diffs.values() if math.isfinite(paired_t(v).p))
    if not m_tests:
        return ""
    alpha = 0.05 / m_tests

    def cell(v: list[float]) -> str:
        n = seeds_for_power(v, alpha)
        return "-" if n is None else f">{MAX_PLANNED_SEEDS}" if n > MAX_PLANNED_SEEDS else str(n)

    lines = [
        f"Seeds per arm for {POWER:.0%} power to detect each observed difference, taken as the "
        f"true one with the observed spread, at 0.05 / {m_tests} = {alpha:.4f} (Bonferroni "
        "over these tests; two-sided paired t-test, noncentral t). A planning guide only: "
        "from a few seeds the spread is itself uncertain, and the largest effects are the "
        "likeliest to be overestimated. '-': no test (fewer than 2 pairs, no spread or no "
        "difference).",
        "",
        "| arm | pairs | " + " | ".join(label for _, label, _ in panels) + " |",
        "|---|---:|" + "---:|" * len(panels),
    ]
    for a in rows:
        cells = [cell(diffs[(a.arm_id, m)]) for m, _, _ in panels]
        lines.append(f"| {a.name} | {_pairs(a, base)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _forest_figure(arms: Sequence[Arm], base: Arm, path: Path) -> bool:
    """One panel per paired metric, one row per arm: each seed's difference to the baseline
    (dots), their mean (filled where p < 0.05) and 95% t-interval (bar), a line at 0. False
    (no file) when no arm shares a seed with ``base``."""
    from lipsweep.decide.plots import _new_figure, _save

    rows, panels = _forest_rows(arms, base)
    if not rows or not panels:
        return False
    fig = _new_figure(2.9 * len(panels) + 1.6, 0.45 * len(rows) + 1.3)
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    ys = np.arange(len(rows))[::-1]
    for ax, (metric, label, relative) in zip(axes, panels):
        ax.axvline(0.0, color="0.55", linewidth=0.9)
        for y, a in zip(ys, rows):
            v = paired_values(a, base, metric, relative)
            if not v:
                continue
            s = paired_t(v)
            ax.plot(v, [y] * len(v), "o", color="0.2", markersize=3.5, alpha=0.8, zorder=5)
            if s.n >= 2 and math.isfinite(s.lo):
                ax.hlines(y, s.lo, s.hi, color="C0", linewidth=2.0, zorder=3)
            sig = math.isfinite(s.p) and s.p < 0.05
            ax.plot(
                [s.mean],
                [y],
                "D",
                color="C0",
                markerfacecolor="C0" if sig else "white",
                markersize=6,
                zorder=4,
            )
        ax.set_xlabel(label, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(axis="x", alpha=0.3)
    pairs = [_pairs(a, base) for a in rows]
    axes[0].set_yticks(ys, [f"{a.name} ({n} pair{'s' * (n != 1)})" for a, n in zip(rows, pairs)])
    fig.suptitle(
        f"Paired differences to {base.name} on the same seed: seeds (dots), mean (diamond, "
        "filled where p < 0.05), 95% t-interval",
        fontsize=9,
    )
    _save(fig, path)
    return True


def _hist_figure(
    data: dict[str, np.ndarray], path: Path, xlabel: str, title: str, log_x: bool
) -> bool:
    """Step histograms (density) of every arm's pooled per-image values, overlaid; False
    (nothing drawn) when no value can be placed on the axis (all zero on a log axis, none
    finite). Equal values get a bin around them."""
    from lipsweep.decide.plots import _new_figure, _save

    keep = {k: v[np.isfinite(v) & (v > 0)] if log_x else v[np.isfinite(v)] for k, v in data.items()}
    keep = {k: v for k, v in keep.items() if len(v)}
    if not keep:
        return False
    pooled = np.concatenate(list(keep.values()))
    lo, hi = np.percentile(pooled, 0.5), np.percentile(pooled, 99.5)
    if not hi > lo:  # one value (e.g. every ||J_f|| is 0): a bin around it
        lo, hi = (lo / 2, lo * 2) if log_x else (lo - 0.5, hi + 0.5)
    bins = np.geomspace(lo, hi, 50) if log_x else np.linspace(lo, hi, 50)
    fig = _new_figure(8, 4.5)
    ax = fig.subplots()
    for name, v in keep.items():
        ax.hist(
            v,
            bins=bins,
            histtype="step",
            density=True,
            linewidth=1.8 if name.startswith("baseline") else 1.1,
            label=f"{name} (median {fmt_value('x', float(np.median(v)))}, n={len(v)})",
        )
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density (images pooled over seeds)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    _save(fig, path)
    return True


def write_front_report(
    front: "Front", npz: dict[str, Path], out: Path, experiment: str, source: str
) -> Path:
    """Write ``report.md`` and its figures into ``out`` from a built front (its arms, their
    ranks and points); ``npz``: run_id -> its local ``lipschitz.npz`` (runs without one are
    left out of the distribution figures)."""
    from lipsweep.core.version import __version__
    from lipsweep.decide.plots import front_scatter

    arms, arm_ranks, objectives = front.arms, front.arm_ranks, front.objectives
    out.mkdir(parents=True, exist_ok=True)
    for name in FIGURES.values():  # a figure this report does not draw must not linger
        (out / name).unlink(missing_ok=True)
    base = baseline_arm(arms)
    n_runs = sum(len(a.runs) for a in arms)
    objs = ", ".join(str(o) for o in objectives)
    md = [
        f"# Sweep report: `{experiment}`",
        "",
        f"_{n_runs} FINISHED trial runs in {len(arms)} arms (configs that differ only in "
        f"seed; {_at_most_seeds(max_seeds(arms))}). Written by `lipsweep report` (lipsweep "
        f"{__version__}) from {source}._",
        "",
        "## Arms",
        "",
        f"Mean ± sample std over the arm's seeds; n = runs ((n=k) on a cell: only k of them "
        f"logged it). Rank: Pareto rank of the arm's means over {objs} (1 = front). "
        "Accuracies in percent"
        + (
            "; AA std 2: standard AutoAttack at 2/255 (`lipsweep confirm`), on the runs it "
            "confirmed."
            if any(a.values(aa_std_metric(2)) for a in arms)
            else "."
        ),
        "",
        arm_markdown(arms, arm_ranks),
        "",
    ]
    md += ["## Paired differences to the baseline", ""]
    if base is None:
        md += ["No baseline arm (`regularizer: none`) in this sweep: nothing to pair with.", ""]
    else:
        md += [
            f"Arm minus **{base.name}** on the same seed (same initialisation, batch order and "
            "augmentation): mean difference, its 95% t-interval and the two-sided paired "
            "t-test p-value (H0: no difference; bold where p < 0.05). With n pairs the test "
            "has n - 1 degrees of freedom, so a few seeds detect only large effects. The "
            "p-values in the table are each test's own; the line under it says which stay "
            "below 0.05 once corrected for the number of tests in the table.",
            "",
            paired_markdown(arms, base),
            "",
            holm_sentence(arms, base),
            "",
        ]
        if _present(arms, RELATIVE_METRICS):
            md += [
                "The Lipschitz scales relative to the baseline of the same seed, "
                "100 × (arm / baseline - 1) in percent, with the same test. Where the "
                "baseline's ‖J_f‖ varies between seeds and an arm scales it by a similar "
                "factor on each, this is the sharper test: absolute differences carry the "
                "baseline's spread, relative ones do not.",
                "",
                paired_markdown(arms, base, relative=True),
                "",
                holm_sentence(arms, base, relative=True),
                "",
            ]
        if _forest_figure(arms, base, out / FIGURES["paired"]):
            md += [
                "The same paired differences, seed by seed (accuracies in points, the "
                "Lipschitz scales relative):",
                "",
                f"![Paired differences]({FIGURES['paired']})",
                "",
            ]
        planning = planning_markdown(arms, base)
        if planning:
            md += ["### How many seeds", "", planning, ""]
    md += ["## Figures", ""]
    what = "arm means over seeds" if front.by_arms else "single runs"
    front_scatter(front, out / FIGURES["pareto"], title=f"{experiment}: {what}")
    md += [
        f"Clean vs robust accuracy ({what}; the front ringed):",
        "",
        f"![Pareto scatter]({FIGURES['pareto']})",
        "",
    ]
    jac, ratio = {}, {}
    for a in arms:
        arrays = [np.load(npz[t.run_id], allow_pickle=False) for t in a.runs if t.run_id in npz]
        if arrays:
            jac[a.name] = np.concatenate([z["jacobian_norm"] for z in arrays])
            if all("jacobian_per_margin" in z for z in arrays):
                ratio[a.name] = np.concatenate([z["jacobian_per_margin"] for z in arrays])
    if jac and _hist_figure(
        jac,
        out / FIGURES["jacobian"],
        "‖J_f(x)‖₂ per evaluation image (logits w.r.t. [0, 1] pixels)",
        "Local Lipschitz constants by arm",
        False,
    ):
        md += [
            "The per-image ‖J_f(x)‖₂ of every arm (pooled over seeds), from each run's "
            f"`{NPZ_PATH}`:",
            "",
            f"![J_f by arm]({FIGURES['jacobian']})",
            "",
        ]
    else:
        md += [f"No run logged finite values in `{NPZ_PATH}`: no ‖J_f‖ distributions.", ""]
    if ratio and _hist_figure(
        ratio,
        out / FIGURES["per_margin"],
        "‖J_f(x)‖₂ / logit margin (top logit - runner-up), per image",
        "Lipschitz constant at the logits' own scale",
        True,
    ):
        md += [
            "The same divided by each image's logit margin (top logit minus the runner-up; "
            "log scale). Shrinking the logits lowers ‖J_f‖ but not this ratio, so an arm "
            "that is lower here is smoother, not just smaller; 1/ratio is, to first order "
            "and up to √2, the L2 distance to a change of prediction:",
            "",
            f"![J_f per margin by arm]({FIGURES['per_margin']})",
            "",
        ]
    elif ratio:
        md += ["Every per-image ‖J_f‖ / margin is zero or not finite: no normalised figure.", ""]
    else:
        md += [
            "No run logged per-image logit margins (`jacobian_per_margin` in "
            f"`{NPZ_PATH}`, lipsweep >= this version): no normalised figure.",
            "",
        ]
    return write_atomic(out / REPORT_NAME, "\n".join(md))


def written_files(out: Path) -> list[Path]:
    """What :func:`write_front_report` wrote into ``out``: ``report.md`` and the figures it drew
    (it removes the others first). Only these are logged to MLflow, never the rest of ``out``."""
    return [out / REPORT_NAME] + [out / f for f in FIGURES.values() if (out / f).is_file()]


def download_npz(tracker: Any, run_ids: Sequence[str], dest: Path) -> dict[str, Path]:
    """run_id -> local lipschitz.npz, for the runs that logged one."""
    found = {}
    for rid in run_ids:
        listed = tracker.list_artifacts(rid, NPZ_PATH.rpartition("/")[0])
        if not any(a.path == NPZ_PATH for a in listed):
            _log.info("run %s has no %s", rid, NPZ_PATH)
            continue
        found[rid] = tracker.download_artifacts(rid, NPZ_PATH, dest / rid)
    return found
