"""Figures of a sweep's Pareto front: clean-vs-robust scatter panels and parallel coordinates.

Records and ranks are those of :mod:`lipsweep.decide.pareto`; :func:`front_scatter` and
:func:`front_parallel` draw a built :class:`lipsweep.decide.front.Front` (its points, ranks and
selection, never ranked again here). Matplotlib is imported inside the
functions and used through ``matplotlib.figure.Figure`` (Agg canvas), never through pyplot, so
no global backend or figure state is touched. PNGs are written atomically (temp file + rename).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from lipsweep.attacks import metric_title
from lipsweep.core.dominance import non_dominated_ranks
from lipsweep.core.metric_names import ACC_CLEAN, ACC_PREFIX, ATTACK_METRICS
from lipsweep.decide.pareto import (
    DEFAULT_OBJECTIVES,
    Objective,
    Trial,
    as_trials,
    check_ranks,
    config_label,
    fmt_value,
    metric_value,
    resolve_objectives,
)
from lipsweep.regularizers import find_spec, regularizer_specs

if TYPE_CHECKING:  # pragma: no cover
    from lipsweep.decide.front import Front

ROBUST_METRICS = ATTACK_METRICS
METRIC_TITLES = {name: metric_title(name) for name in (ACC_CLEAN, *ATTACK_METRICS)}
# Okabe-Ito colours (colour-blind safe) and a marker per regularizer: (colour, marker, legend),
# from each regularizer's spec; one without a colour takes a spare one.
_EXTRA_COLOURS = ("#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442")
_MISSING_STYLE = ("#999999", "v", "regularizer not logged")
_LINE_NAMES = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}


def _style(reg: str, extra: dict[str, tuple[str, str, str]]) -> tuple[str, str, str]:
    spec = find_spec(reg)
    if spec is not None and spec.colour:
        return spec.colour, spec.marker, spec.legend or spec.display
    if not reg:
        return _MISSING_STYLE
    if reg not in extra:
        label = (spec.legend or spec.display) if spec is not None else reg
        marker = spec.marker if spec is not None else "D"
        extra[reg] = (_EXTRA_COLOURS[len(extra) % len(_EXTRA_COLOURS)], marker, label)
    return extra[reg]


def _line_legend() -> str:
    """Legend title naming each regularizer's line style in the parallel-coordinates plot."""
    parts = [
        f"{_LINE_NAMES.get(s.line, s.line)} {s.legend.split(' (')[0] or s.display}"
        for s in sorted(regularizer_specs(), key=lambda s: s.name == "none")
    ]
    return "line: " + ",\n".join(", ".join(parts[i : i + 2]) for i in range(0, len(parts), 2))


def _reg(t: Trial) -> str:
    return str(t.params.get("regularizer", "") or "")


def _label(t: Trial) -> str:
    name = t.run_name or t.run_id[:8]
    return f"{config_label(t.params)} [{name}]" if _reg(t) else name


def _short_label(t: Trial) -> str:
    """Compact config label for annotating points: ``J k10 1e-3 max``, ``S (0,1e-4,0)``."""
    if not _reg(t):
        return t.run_name or t.run_id[:8]
    lab = config_label(t.params)
    spec = find_spec(_reg(t))
    if spec is not None and spec.short:
        lab = lab.replace(f"{spec.display} ", f"{spec.short} ")
    lab = lab.replace("k=", "k")
    return lab.replace("λ=", "").replace(", ", ",")


def _metric_array(trials: Sequence[Trial], name: str) -> np.ndarray:
    """(n,) finite values of metric ``name``, NaN where missing or non-finite."""
    vals = [metric_value(t, name) for t in trials]
    return np.array([np.nan if v is None else v for v in vals], dtype=float)


def _save(fig: Any, path: str | os.PathLike) -> Path:
    """Write ``fig`` as PNG to ``path`` atomically; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, format="png", dpi=130, bbox_inches="tight")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _new_figure(w: float, h: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), layout="constrained")


def _name_front(
    ax: Any,
    trials: Sequence[Trial],
    x: np.ndarray,
    y: np.ndarray,
    idx: np.ndarray,
    f2: np.ndarray,
    selected: str | None,
) -> None:
    """Label the panel's 2-D front: both ends and the selected run first, then the others
    greedily, skipping any that would sit within 9% of the axes of a label already placed."""

    def frac(v: np.ndarray, i: int) -> float:
        lo, hi = v[idx].min(), v[idx].max()
        return 0.5 if hi == lo else float((v[i] - lo) / (hi - lo))

    first = [f2[-1], f2[0]] + [i for i in f2 if trials[i].run_id == selected]
    placed: list[tuple[float, float]] = []
    for i in dict.fromkeys(first + list(f2)):  # ordered, unique
        p = (frac(x, i), frac(y, i))
        if any(math.hypot(p[0] - q[0], p[1] - q[1]) < 0.09 for q in placed):
            continue
        placed.append(p)
        left = p[0] > 0.5  # text towards the middle of the panel
        ax.annotate(
            _short_label(trials[i]),
            (x[i], y[i]),
            fontsize=6.5,
            color="0.15",
            xytext=(-7 if left else 7, 5),
            textcoords="offset points",
            ha="right" if left else "left",
            va="bottom",
            zorder=2.5,
            bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.6),
        )


def _front_legend(objectives: Sequence[Objective] | None) -> str:
    if not objectives:
        return "Pareto front (rank 1)"
    arrows = [f"{o.name} {'↑' if o.direction == 'max' else '↓'}" for o in objectives]
    return "Pareto front (rank 1) of\n" + ",\n".join(arrows)


def scatter_front(
    records: Sequence[Mapping[str, Any] | Trial],
    ranks: Sequence[int] | np.ndarray,
    robust_metrics: Sequence[str] = ROBUST_METRICS,
    path: str | os.PathLike = "pareto_scatter.png",
    *,
    selected: str | None = None,
    title: str | None = None,
    objectives: Sequence[Objective] | None = None,
) -> Path:
    """One panel per robust metric: clean accuracy (x) vs that metric (y), every run coloured by
    regularizer; Pareto-front runs (rank 1 of ``ranks``) large with a black edge; the dashed
    staircase is the 2-D front of the panel itself; ``selected`` (a run_id) gets a star.
    Runs lacking either metric are left out of that panel (the panel says how many).
    ``objectives`` (those ``ranks`` came from) only names the front in the legend."""
    from matplotlib.lines import Line2D

    trials = as_trials(records)
    r = check_ranks(ranks, len(trials))
    metrics = list(robust_metrics)
    if not metrics:
        raise ValueError("robust_metrics must name at least one metric")
    ncols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / ncols)
    spare = nrows * ncols - len(metrics)
    fig = _new_figure(4.4 * ncols, 3.9 * nrows + (0 if spare else 0.9))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    extra: dict[str, tuple[str, str, str]] = {}
    regs_seen: dict[str, tuple[str, str, str]] = {}
    clean = _metric_array(trials, ACC_CLEAN)
    for ax, name in zip(axes, metrics):
        y = _metric_array(trials, name)
        ok = np.isfinite(clean) & np.isfinite(y)
        ax.set_title(METRIC_TITLES.get(name, metric_title(name)), fontsize=11)
        ax.set_xlabel("clean accuracy (%)")
        ax.set_ylabel(f"{name} (%)" if name.startswith(ACC_PREFIX) else name)
        ax.grid(True, alpha=0.3, linewidth=0.6)
        if not ok.any():
            ax.text(
                0.5,
                0.5,
                f"no run has both\nacc_clean and {name}",
                ha="center",
                va="center",
                transform=ax.transAxes,
                color="0.4",
            )
            continue
        for i in np.flatnonzero(ok):  # background first, front on top
            colour, marker, legend = _style(_reg(trials[i]), extra)
            regs_seen[legend] = (colour, marker, legend)
            front = r[i] == 1
            ax.scatter(
                clean[i],
                y[i],
                s=80 if front else 34,
                c=colour,
                marker=marker,
                alpha=1.0 if front else 0.45,
                edgecolors="black" if front else "none",
                linewidths=1.2,
                zorder=3 if front else 2,
            )
        idx = np.flatnonzero(ok)
        f2 = idx[non_dominated_ranks(np.c_[clean[idx], y[idx]], ["max", "max"]) == 1]
        f2 = f2[np.argsort(clean[f2], kind="stable")]
        ax.plot(clean[f2], y[f2], ls="--", c="0.35", lw=1.1, drawstyle="steps-pre", zorder=1)
        _name_front(ax, trials, clean, y, idx, f2, selected)
        if selected is not None:
            for i in idx:
                if trials[i].run_id == selected:
                    ax.scatter(
                        clean[i],
                        y[i],
                        s=260,
                        marker="*",
                        c="#D55E00",
                        edgecolors="black",
                        linewidths=0.8,
                        zorder=4,
                    )
        if (~ok).sum():
            ax.text(
                0.99,
                0.01,
                f"{int((~ok).sum())} run(s) lack a value",
                ha="right",
                va="bottom",
                fontsize=7,
                color="0.4",
                transform=ax.transAxes,
            )
        ax.margins(0.12)
    for ax in axes[len(metrics) :]:
        ax.axis("off")
    order = [s.legend or s.display for s in regularizer_specs()]  # registered first, in order
    seen = sorted(
        regs_seen.values(), key=lambda v: (order.index(v[2]) if v[2] in order else len(order), v[2])
    )
    handles = [
        Line2D([], [], ls="", marker=m, color=c, markersize=8, label=lab) for c, m, lab in seen
    ]
    handles += [
        Line2D(
            [],
            [],
            ls="",
            marker="o",
            mfc="white",
            mec="black",
            mew=1.2,
            markersize=9,
            label=_front_legend(objectives),
        ),
        Line2D([], [], ls="--", c="0.35", label="2-D front of the panel"),
    ]
    if selected is not None:
        handles.append(
            Line2D(
                [],
                [],
                ls="",
                marker="*",
                color="#D55E00",
                mec="black",
                markersize=14,
                label="selected for export",
            )
        )
    if spare:
        axes[-1].legend(handles=handles, loc="center", frameon=False, fontsize=10)
    else:
        fig.legend(
            handles=handles,
            loc="outside lower center",
            ncols=min(len(handles), 6),
            frameon=False,
            fontsize=9,
        )
    n_front = int((r == 1).sum())
    fig.suptitle(
        title or f"Clean vs robust accuracy: {len(trials)} runs, {n_front} on the Pareto front",
        fontsize=13,
    )
    return _save(fig, path)


def _axis_ticks(lo: float, hi: float) -> np.ndarray:
    """Round tick values inside [lo, hi] (MaxNLocator), or the single value when lo == hi."""
    from matplotlib.ticker import MaxNLocator

    if hi == lo:
        return np.array([lo])
    t = MaxNLocator(nbins=5).tick_values(lo, hi)
    return t[(t >= lo - 1e-9 * abs(hi - lo)) & (t <= hi + 1e-9 * abs(hi - lo))]


def _palette(n: int) -> list[Any]:
    """n distinct non-grey colours (tab10, then tab20 without its greys), cycling if needed."""
    from matplotlib import colormaps

    if n <= 10:
        base = [colormaps["tab10"](i) for i in (0, 1, 2, 3, 4, 5, 6, 8, 9, 7)]
    else:
        base = [colormaps["tab20"](i) for i in range(20) if i not in (14, 15)]
    return [base[i % len(base)] for i in range(n)]


def parallel_coordinates(
    records: Sequence[Mapping[str, Any] | Trial],
    ranks: Sequence[int] | np.ndarray,
    objectives: Sequence[Objective | str] = DEFAULT_OBJECTIVES,
    path: str | os.PathLike = "pareto_parallel.png",
    *,
    selected: str | None = None,
    max_rank: int = 1,
) -> Path:
    """Front runs (rank <= ``max_rank``) as coloured lines over the objectives, each axis scaled
    to the range of all ranked runs and oriented so that up is better (``min`` axes flipped),
    with real-value ticks; other ranked runs are grey context lines."""
    trials, objs = as_trials(records), resolve_objectives(objectives)
    r = check_ranks(ranks, len(trials))
    m = len(objs)
    vals = np.stack([_metric_array(trials, o.name) for o in objs], axis=1)  # (n, m)
    ranked = np.flatnonzero((r > 0) & np.isfinite(vals).all(axis=1))
    shown = [i for i in ranked if r[i] <= max_rank]
    s0 = 1.0 if objs[0].direction == "max" else -1.0  # legend in format_front_table order
    shown.sort(key=lambda i: (r[i], -s0 * vals[i, 0], trials[i].run_id))
    fig = _new_figure(max(6.0, 2.3 * m + 4.8), 5.2)
    ax = fig.subplots()
    ax.set_xlim(-0.35, m - 0.65)
    ax.set_ylim(-0.06, 1.06)
    ax.set_yticks([])
    for s in ("left", "right", "top"):
        ax.spines[s].set_visible(False)
    ax.set_xticks(
        range(m),
        [f"{o.name}\n({'higher' if o.direction == 'max' else 'lower'} is better)" for o in objs],
        fontsize=9,
    )
    if len(ranked) == 0:
        ax.text(
            0.5,
            0.5,
            "no ranked runs",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color="0.4",
        )
        return _save(fig, path)
    lo, hi = np.nanmin(vals[ranked], axis=0), np.nanmax(vals[ranked], axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    u = np.where(hi > lo, (vals - lo) / span, 0.5)  # (n, m) in [0, 1]
    flip = np.array([o.direction == "min" for o in objs])
    u = np.where(flip, 1.0 - u, u)  # up = better
    for j, o in enumerate(objs):
        ax.axvline(j, color="0.2", lw=1.0, zorder=1)
        for t in _axis_ticks(lo[j], hi[j]):
            y = 0.5 if hi[j] == lo[j] else (t - lo[j]) / span[j]
            y = 1.0 - y if flip[j] else y
            ax.plot([j - 0.02, j], [y, y], c="0.2", lw=1.0, zorder=1)
            ax.text(
                j - 0.035,
                y,
                fmt_value(o.name, float(t)),
                ha="right",
                va="center",
                fontsize=7.5,
                color="0.2",
                zorder=6,
                bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.75),
            )
    xs = np.arange(m)
    for i in ranked:
        if i not in shown:
            ax.plot(xs, u[i], c="0.75", lw=0.8, alpha=0.6, zorder=2)
    colours = _palette(len(shown))
    for c, i in enumerate(shown):
        t = trials[i]
        sel = selected is not None and t.run_id == selected
        lab = (
            _label(t) + (f" (rank {r[i]})" if max_rank > 1 else "") + (" ★ selected" if sel else "")
        )
        spec = find_spec(_reg(t))
        ax.plot(
            xs,
            u[i],
            ls=spec.line if spec is not None else "-.",
            marker="o",
            ms=5,
            lw=3.4 if sel else 1.8,
            c="black" if sel else colours[c],
            label=lab,
            zorder=4 if sel else 3,
        )
    if shown:
        fig.legend(
            loc="outside right upper",
            fontsize=8,
            frameon=False,
            title=_line_legend(),
            title_fontsize=8,
            alignment="left",
        )
    grey = f" (grey: {len(ranked) - len(shown)} other ranked)" if len(ranked) > len(shown) else ""
    what = "Pareto front" if max_rank == 1 else f"Fronts 1-{max_rank}"
    ax.set_title(
        f"{what} over {m} objective{'s' if m > 1 else ''}: {len(shown)} "
        f"run{'s' if len(shown) != 1 else ''}{grey}",
        fontsize=12,
    )
    return _save(fig, path)


def front_scatter(front: "Front", path: str | os.PathLike, *, title: str) -> Path:
    """:func:`scatter_front` of a built front: its runs or, over arms, its arms at their means,
    the front's selection starred."""
    recs, ranks, selected = front.points()
    return scatter_front(
        recs, ranks, path=path, selected=selected, objectives=front.objectives, title=title
    )


def front_parallel(front: "Front", path: str | os.PathLike) -> Path:
    """:func:`parallel_coordinates` of a built front (as :func:`front_scatter`)."""
    recs, ranks, selected = front.points()
    return parallel_coordinates(recs, ranks, front.objectives, path=path, selected=selected)
