"""Synthetic tables for `lipsweep bench-search`, with known ground truth.

A recorded grid (benchmarks/data/) costs hours and fixes one answer; this writes tables of the
same CSV format (benchmarks/data/README.md: one row per configuration, seed and epoch, the
same columns as ``tiny_grid.csv``) whose noise-free final objectives, and so whose true
Pareto front, are known. What it models, per configuration of a regularizer grid:

- **Final objectives** on a trade-off curve of the regularizer's strength ``s`` in [0, 1]:
  clean accuracy falls (96% -> 84%), PGD-4/255 accuracy rises (6% -> 40%), the ||J_f|| median
  falls (12 -> 1.5). ``front`` configurations sit on the curve, spread over the strengths
  the grid has (mutually non-dominated, since clean and robust accuracy trade off); every
  other one sits a deficit ``d`` behind the curve at its own strength (``d`` accuracy points
  on both accuracies, ``LIP_REL * d`` relatively on ||J_f||; ``d`` = ``gap_min`` + ``gap`` x
  Exp(1), grown by 25% steps until some front configuration beats it by ``gap_min`` points in
  every objective), so the front of the noise-free objectives is exactly ``front``
  configurations, and a dominated one is at least ``gap_min`` behind its nearest dominator.
- **Learning curves** like fine-tuning: every per-epoch metric saturates from a shared start
  (``1 - exp(-e / tau)``, tau = epochs / 6) to the configuration's final value, and the
  spread between configurations grows along the same curve from 30% (before epoch 1) to 100%
  of the final spread. A configuration's
  standing (its standardised value) moves from an early standing to its final standing over
  the first ``fade`` of the epochs; the early standing correlates with the final one with
  exactly ``early_rho`` (Pearson over configurations) for clean accuracy and ``probe_rho``
  for the robustness probes: 1 = early ranking is the final one, 0 = unrelated,
  -1 = reversed (late bloomers: a per-configuration component, drawn once per configuration
  and shared by its metrics).
- **Seed noise**, in accuracy points (percentage points of accuracy): every seed has its own
  offset per metric family, standard deviation ``seed_noise`` (clean accuracy; PGD, FGSM and
  AutoAttack accuracy and their probes; ||J_f|| and its probe relatively, ``LIP_REL`` per
  point), carried by its per-epoch and final values alike; every per-epoch value has its own
  jitter, ``epoch_noise`` points. The last epoch's ``acc_clean`` is the final evaluation's
  (no jitter), as in a recorded grid. Both 0: every seed of a configuration has the same values.
- **Cost**: ``epoch_seconds`` per epoch times the configuration's regularizer cost factor
  (JaSMin k=0 x1.09-1.12, k=10 x1.22-1.25, Specformer x1.06-1.15, the baseline x1;
  ``cost_spread`` scales the overhead: 0 = all equal), ``eval_seconds`` more on the last epoch
  (the final evaluation), each time times exp(N(0, ``time_jitter``)).

The settings are those of the recorded grids (``regularizer``, ``k``, ``lam``, ``aggregation``,
``lam_q``, ``lam_k``, ``lam_v``): the baseline, then round-robin over eight families (JaSMin
k in {0, 10} x mean/max; Specformer on q, k, v together or one of them), each with its
lambdas log-spaced over 1e-3..10; ``s`` grows with lambda, as far as each family reaches.
Beside the CSV, ``<out stem>.truth.json`` holds the settings, every configuration's
noise-free final objectives, the true front and the front of the table's own seed means
(what ``bench-search`` scores against). The same settings and ``seed`` give the same files;
the structure (configurations, curve, front, late bloomers) is drawn from a stream apart from
the noise, so a preset and the same preset with more noise share their ground truth.

    .venv/bin/python benchmarks/synth_table.py --preset clean-60x3x12 --out /tmp/clean.csv
    .venv/bin/python benchmarks/synth_table.py --configs 100 --seeds 5 --epochs 9 --front 10 \\
        --early-rho -0.5 --seed-noise 2 --out /tmp/t.csv
    .venv/bin/lipsweep bench-search --table /tmp/clean.csv --objective acc_clean:max \\
        --objective acc_pgd_4:max --objective lip_jacobian_median:min
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lipsweep.core.dominance import non_dominated_ranks  # noqa: E402
from lipsweep.core.hypervolume import relative_hypervolume  # noqa: E402

_log = logging.getLogger(__name__)

OBJECTIVES = (("acc_clean", "max"), ("acc_pgd_4", "max"), ("lip_jacobian_median", "min"))
"""The objectives of the front (``bench-search --objective``), as for the recorded grids."""
PARAMS = ("regularizer", "k", "lam", "aggregation", "lam_q", "lam_k", "lam_v")
PER_EPOCH = (
    "acc_clean", "loss", "loss_ce", "loss_reg", "probe_acc_pgd_2", "probe_acc_pgd_4",
    "probe_lip_jacobian_median",
)  # fmt: skip
FINAL = (
    "acc_aa_2", "acc_fgsm_2", "acc_fgsm_4", "acc_pgd_2", "acc_pgd_4",
    "lip_jacobian_converged_frac", "lip_jacobian_max", "lip_jacobian_mean",
    "lip_jacobian_median", "lip_jacobian_p90", "lip_jacobian_p99",
    "lip_jacobian_per_margin_mean", "lip_jacobian_per_margin_median",
    "lip_jacobian_per_margin_p90",
)  # fmt: skip
COLUMNS = (
    ("config",) + tuple(f"param:{p}" for p in PARAMS) + ("seed", "epoch", "epoch_seconds")
    + PER_EPOCH + FINAL
)  # fmt: skip
"""The CSV's columns, in ``tiny_grid.csv``'s order."""

LIP_REL = 0.025
"""||J_f|| moves by this fraction per accuracy point of deficit or noise (log scale)."""
CURVE = {"clean": (96.0, 84.0), "robust": (6.0, 40.0), "lip": (12.0, 1.5)}
"""(at s = 0, at s = 1) of the final clean accuracy (%), PGD-4 accuracy (%), ||J_f|| median."""
START = {"clean": 60.0, "robust": 1.0, "lip": 6.0}
"""Where every learning curve starts (before epoch 1): the pretrained model's values."""
SPREAD0 = 0.3
"""The spread between configurations before epoch 1, a fraction of the final spread."""
LIP_STATS = {
    "lip_jacobian_mean": 1.25, "lip_jacobian_p90": 1.9, "lip_jacobian_p99": 3.2,
    "lip_jacobian_max": 4.5, "lip_jacobian_per_margin_median": 5.5,
    "lip_jacobian_per_margin_mean": 9.0, "lip_jacobian_per_margin_p90": 19.0,
}  # fmt: skip
"""The other ||J_f|| statistics, as multiples of the median (ratios seen in tiny_grid.csv)."""
LAM_RANGE = (1e-3, 10.0)


@dataclass(frozen=True)
class Family:
    """A regularizer variant: its fixed settings, its cost factor and how far along the
    trade-off its largest lambda reaches."""

    regularizer: str
    k: str
    aggregation: str
    heads: Optional[tuple[int, int, int]]  # Specformer: which of lam_q, lam_k, lam_v are lambda
    cost: float
    reach: float


FAMILIES = (
    Family("jasmin", "0", "mean", None, 1.09, 1.0),
    Family("jasmin", "0", "max", None, 1.12, 1.0),
    Family("jasmin", "10", "mean", None, 1.22, 0.9),
    Family("jasmin", "10", "max", None, 1.25, 0.9),
    Family("specformer", "", "", (1, 1, 1), 1.15, 0.85),
    Family("specformer", "", "", (1, 0, 0), 1.06, 0.6),
    Family("specformer", "", "", (0, 1, 0), 1.06, 0.6),
    Family("specformer", "", "", (0, 0, 1), 1.06, 0.6),
)


@dataclass(frozen=True)
class Spec:
    """A synthetic table's settings (the module docstring says what each models)."""

    configs: int = 60
    seeds: int = 3
    epochs: int = 12
    front: int = 6
    early_rho: float = 0.5  # clean accuracy's early standing vs final (Pearson, -1..1)
    probe_rho: float = 0.8  # the probes' early standing vs final (Pearson, -1..1)
    fade: float = 0.5  # fraction of the epochs over which the early standing fades out
    seed_noise: float = 0.4  # per-seed offset, accuracy points (std)
    epoch_noise: float = 0.4  # per-epoch jitter, accuracy points (std)
    gap_min: float = 1.0  # smallest deficit of a dominated configuration, accuracy points
    gap: float = 3.0  # mean extra deficit (exponential), accuracy points
    epoch_seconds: float = 20.0  # a baseline training epoch, seconds
    eval_seconds: float = 40.0  # the final evaluation, on the last epoch, seconds
    cost_spread: float = 1.0  # scales the regularizers' cost overhead (0: all cost the same)
    time_jitter: float = 0.02  # per-epoch seconds, relative (lognormal std)
    seed: int = 0

    def check(self) -> None:
        """ValueError naming the first bad setting."""
        bad = [
            ("configs", self.configs >= 2, "at least 2"),
            ("seeds", self.seeds >= 1, "at least 1"),
            ("epochs", self.epochs >= 2, "at least 2"),
            ("front", 1 <= self.front <= self.configs, f"in 1..configs ({self.configs})"),
            ("early_rho", -1 <= self.early_rho <= 1, "in [-1, 1]"),
            ("probe_rho", -1 <= self.probe_rho <= 1, "in [-1, 1]"),
            ("fade", 0 < self.fade <= 1, "in (0, 1]"),
            ("seed_noise", self.seed_noise >= 0, ">= 0"),
            ("epoch_noise", self.epoch_noise >= 0, ">= 0"),
            ("gap_min", self.gap_min > 0, "> 0"),
            ("gap", self.gap >= 0, ">= 0"),
            ("epoch_seconds", self.epoch_seconds > 0, "> 0"),
            ("eval_seconds", self.eval_seconds >= 0, ">= 0"),
            ("cost_spread", self.cost_spread >= 0, ">= 0"),
            ("time_jitter", self.time_jitter >= 0, ">= 0"),
        ]
        for name, ok, want in bad:
            if not ok:
                raise ValueError(f"{name} must be {want}, got {getattr(self, name)}")


_CLEAN_60 = Spec(configs=60, seeds=3, epochs=12, front=6)
PRESETS = {
    # configurations separate far beyond seed noise
    "clean-60x3x12": _CLEAN_60,
    "clean-40x3x20": Spec(configs=40, seeds=3, epochs=20, front=5),
    # more seeds than the benchmark's 4 workers
    "seeds-100x5x9": Spec(configs=100, seeds=5, epochs=9, front=10),
    # clean-60x3x12's ground truth, seed noise and jitter 5x: configurations overlap in noise
    "noisy-60x3x12": dataclasses.replace(_CLEAN_60, seed_noise=2.0, epoch_noise=2.0),
}


@dataclass(frozen=True)
class Synth:
    """A generated table: its rows (``COLUMNS``) and its ground truth (JSON-ready)."""

    rows: list[dict[str, Any]]
    truth: dict[str, Any]


def _lam_text(x: float) -> str:
    """A lambda as the recorded grids write it (``0.001``, ``0.0316``, ``10.0``)."""
    return repr(float(f"{x:.3g}"))


def _settings(n: int) -> tuple[list[dict[str, str]], np.ndarray, np.ndarray, list[Family | None]]:
    """``n`` configurations' settings, their lambda's position on the log range (0..1) and
    family reach, and their family (None for the baseline)."""
    settings = [
        dict(regularizer="none", k="", lam="", aggregation="", lam_q="", lam_k="", lam_v="")
    ]
    pos, reach, fams = [0.0], [0.0], [None]
    members = [list(range(f, n - 1, len(FAMILIES))) for f in range(len(FAMILIES))]
    lo, hi = (math.log10(v) for v in LAM_RANGE)
    for f, idx in zip(FAMILIES, members):
        if not idx:
            continue
        logs = np.linspace(lo, hi, len(idx)) if len(idx) > 1 else np.array([(lo + hi) / 2])
        for log in logs:
            lam = _lam_text(10**log)
            row = dict(regularizer=f.regularizer, k=f.k, lam="", aggregation=f.aggregation)
            if f.heads is None:
                row |= dict(lam=lam, lam_q="", lam_k="", lam_v="")
            else:
                row |= {
                    h: lam if on else "0.0" for h, on in zip(("lam_q", "lam_k", "lam_v"), f.heads)
                }
            settings.append(row)
            pos.append((log - lo) / (hi - lo))
            reach.append(f.reach)
            fams.append(f)
    keys = [key(s) for s in settings]
    if len(set(keys)) != len(keys):
        raise ValueError(f"configs={n} gives lambdas too close to tell apart at 3 digits")
    return settings, np.array(pos), np.array(reach), fams


def key(settings: dict[str, str]) -> str:
    """The ``config`` column: ``regularizer=jasmin|k=10|lam=0.01|...`` as in the recorded grids."""
    return "|".join(f"{p}={settings[p]}" for p in PARAMS)


def curve(s: np.ndarray) -> np.ndarray:
    """The trade-off curve: (len(s), 3) final clean accuracy, PGD-4 accuracy, ||J_f|| median,
    strictly monotone in ``s`` (clean falls, robust rises, ||J_f|| falls)."""
    (c0, c1), (r0, r1), (l0, l1) = CURVE["clean"], CURVE["robust"], CURVE["lip"]
    return np.stack([c0 - (c0 - c1) * s**1.5, r0 + (r1 - r0) * s**0.7, l0 * (l1 / l0) ** s], axis=1)


def _dominated_by(point: np.ndarray, front: np.ndarray, margin: float) -> bool:
    """Whether some row of ``front`` (clean max, robust max, lip min) beats ``point`` by at
    least ``margin`` accuracy points in every objective (||J_f||: ``LIP_REL`` per point)."""
    return bool(
        np.any(
            (front[:, 0] >= point[0] + margin)
            & (front[:, 1] >= point[1] + margin)
            & (np.log(point[2]) - np.log(front[:, 2]) >= LIP_REL * margin)
        )
    )


def _standing_early(final_z: np.ndarray, latent: np.ndarray, rho: float) -> np.ndarray:
    """Early standing with Pearson correlation exactly ``rho`` to ``final_z`` (standardised):
    ``rho * final_z`` plus the part of ``latent`` orthogonal to it, standardised."""
    resid = (
        latent - latent.mean() - np.dot(latent - latent.mean(), final_z) / len(final_z) * final_z
    )
    sd = resid.std()
    resid = resid / sd if sd > 1e-12 else np.zeros_like(resid)
    return rho * final_z + math.sqrt(max(0.0, 1 - rho**2)) * resid


def _z(x: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Mean, standard deviation and standardised ``x`` (zeros where it does not vary)."""
    mu, sd = float(x.mean()), float(x.std())
    return mu, sd, (x - mu) / sd if sd > 1e-12 else np.zeros_like(x)


def generate(spec: Spec) -> Synth:
    """The table and its ground truth for ``spec`` (module docstring)."""
    spec.check()
    structure = np.random.default_rng([spec.seed, 0])
    noise = np.random.default_rng([spec.seed, 1])
    clock = np.random.default_rng([spec.seed, 2])
    n, seeds, epochs = spec.configs, spec.seeds, spec.epochs

    settings, pos, reach, fams = _settings(n)
    strength = 0.99 * reach * pos + structure.uniform(0, 0.01, n)  # distinct, in [0, 1]
    strength[0] = 0.0
    # the front: the configuration nearest each of ``front`` strengths spread evenly over
    # the strengths the grid has (each stratum's centre, jittered within its middle half)
    width = strength.max() / spec.front
    targets = width * (np.arange(spec.front) + 0.5 + structure.uniform(-0.25, 0.25, spec.front))
    on_front = np.zeros(n, dtype=bool)
    for t in targets:
        free = np.flatnonzero(~on_front)
        on_front[free[np.argmin(np.abs(strength[free] - t))]] = True
    base = curve(strength)
    finals = base.copy()
    deficit = np.zeros(n)
    draws = spec.gap_min + spec.gap * structure.exponential(1.0, n)
    front_pts = base[on_front]
    for i in np.flatnonzero(~on_front):
        d = draws[i]
        while True:
            point = base[i] - np.array([d, d, 0.0])
            point[2] = base[i, 2] * math.exp(LIP_REL * d)
            if _dominated_by(point, front_pts, spec.gap_min):
                break
            d *= 1.25
        finals[i], deficit[i] = point, d
    finals[:, :2] = np.clip(finals[:, :2], 0.0, 100.0)
    ranks = non_dominated_ranks(finals, [m for _, m in OBJECTIVES])
    assert int((ranks == 1).sum()) == spec.front and (ranks[on_front] == 1).all(), ranks

    # learning curves: mean level and spread per epoch, standing from early to final
    latent = structure.standard_normal(n)
    e = np.arange(1, epochs + 1, dtype=float)
    tau = epochs / 6
    sat = (1 - np.exp(-e / tau)) / (1 - math.exp(-epochs / tau))
    spread = SPREAD0 + (1 - SPREAD0) * sat
    w = np.clip(1 - (e - 1) / (spec.fade * (epochs - 1)), 0.0, 1.0)
    metric_final = {"clean": finals[:, 0], "robust": finals[:, 1], "lip": np.log(finals[:, 2])}
    start = {"clean": START["clean"], "robust": START["robust"], "lip": math.log(START["lip"])}
    rho = {"clean": spec.early_rho, "robust": spec.probe_rho, "lip": spec.probe_rho}
    clean_curves: dict[str, np.ndarray] = {}  # (n, epochs), noise-free
    early: dict[str, np.ndarray] = {}
    for name, values in metric_final.items():
        mu, sd, zf = _z(values)
        early[name] = _standing_early(zf, latent, rho[name])
        standing = w[None, :] * early[name][:, None] + (1 - w[None, :]) * zf[:, None]
        level = start[name] + (mu - start[name]) * sat
        clean_curves[name] = level[None, :] + sd * spread[None, :] * standing
        clean_curves[name][:, -1] = values  # exact, whatever the rounding above

    # noise: one offset per seed and metric family, one jitter per epoch and metric
    offset = noise.standard_normal((n, seeds, 3)) * spec.seed_noise
    offset[..., 2] *= LIP_REL
    jitter = noise.standard_normal((n, seeds, epochs, 4)) * spec.epoch_noise
    jitter[..., 2] *= LIP_REL
    cost = np.array([1.0 if f is None else 1 + spec.cost_spread * (f.cost - 1) for f in fams])
    ticks = np.exp(clock.standard_normal((n, seeds, epochs + 1)) * spec.time_jitter)

    rows: list[dict[str, Any]] = []
    for i in range(n):
        lam_sum = sum(float(settings[i][p] or 0) for p in ("lam", "lam_q", "lam_k", "lam_v"))
        for s in range(seeds):
            o = offset[i, s]
            clean = np.clip(clean_curves["clean"][i] + o[0] + jitter[i, s, :, 0], 0, 100)
            clean[-1] = min(100.0, max(0.0, finals[i, 0] + o[0]))  # the final evaluation's
            p4 = np.clip(clean_curves["robust"][i] + o[1] + jitter[i, s, :, 1], 0, clean)
            lip_probe = np.exp(clean_curves["lip"][i] + o[2] + jitter[i, s, :, 2])
            p2 = np.clip(p4 + 0.4 * (clean - p4) + jitter[i, s, :, 3], p4, clean)
            loss_ce = 2.3 * (1 - clean / 100) ** 1.2 + 0.05
            loss_reg = 0.1 * lam_sum * lip_probe
            seconds = spec.epoch_seconds * cost[i] * ticks[i, s, :epochs]
            seconds[-1] += spec.eval_seconds * ticks[i, s, epochs]
            final = _final_metrics(
                clean[-1],
                max(0.0, min(clean[-1], finals[i, 1] + o[1])),
                finals[i, 2] * math.exp(o[2]),
            )
            for t in range(epochs):
                row: dict[str, Any] = {"config": key(settings[i])}
                row |= {f"param:{p}": settings[i][p] for p in PARAMS}
                row |= {"seed": s, "epoch": t + 1, "epoch_seconds": float(seconds[t])}
                row |= {
                    "acc_clean": float(clean[t]), "loss": float(loss_ce[t] + loss_reg[t]),
                    "loss_ce": float(loss_ce[t]), "loss_reg": float(loss_reg[t]),
                    "probe_acc_pgd_2": float(p2[t]), "probe_acc_pgd_4": float(p4[t]),
                    "probe_lip_jacobian_median": float(lip_probe[t]),
                }  # fmt: skip
                row |= final if t == epochs - 1 else {c: "" for c in FINAL}
                rows.append(row)

    noise_free = [
        _final_metrics(float(finals[i, 0]), float(finals[i, 1]), float(finals[i, 2]))
        | {"acc_clean": float(finals[i, 0])}
        for i in range(n)
    ]
    truth = {
        "generator": "benchmarks/synth_table.py",
        "spec": dataclasses.asdict(spec),
        "objectives": [f"{name}:{mode}" for name, mode in OBJECTIVES],
        "units": {
            "acc_*": "percent",
            "seed_noise, epoch_noise, gap, gap_min, deficit": "accuracy "
            f"points; ||J_f|| moves by {LIP_REL} (log) per point",
            "epoch_seconds": "seconds",
        },
        "front": [key(settings[i]) for i in np.flatnonzero(on_front)],
        "front_size": int(on_front.sum()),
        "configs": [
            {
                "key": key(settings[i]),
                "params": settings[i],
                "strength": float(strength[i]),
                "on_front": bool(on_front[i]),
                "deficit": float(deficit[i]),
                "cost_factor": float(cost[i]),
                "early_standing": {m: float(early[m][i]) for m in early},
                "final": noise_free[i],
            }
            for i in range(n)
        ],
    }
    truth["table_front"] = table_front(rows)
    return Synth(rows, truth)


def _final_metrics(clean: float, pgd4: float, lip: float) -> dict[str, float]:
    """Every final column from clean accuracy, PGD-4 accuracy and the ||J_f|| median."""
    pgd2 = pgd4 + 0.4 * (clean - pgd4)
    out = {
        "acc_aa_2": pgd2 - 0.03 * (clean - pgd2),
        "acc_fgsm_2": pgd2 + 0.05 * (clean - pgd2),
        "acc_fgsm_4": pgd4 + 0.08 * (clean - pgd4),
        "acc_pgd_2": pgd2,
        "acc_pgd_4": pgd4,
        "lip_jacobian_converged_frac": 1.0,
        "lip_jacobian_median": lip,
    }
    out |= {name: lip * ratio for name, ratio in LIP_STATS.items()}
    return {c: float(out[c]) for c in FINAL}


def table_front(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The keys of the configurations on the front of the table's seed-mean final objectives
    (what ``bench-search`` scores against), in the table's order."""
    sums: dict[str, list[np.ndarray]] = {}
    for row in rows:
        if row["acc_pgd_4"] != "":
            sums.setdefault(row["config"], []).append(
                np.array([float(row[name]) for name, _ in OBJECTIVES])
            )
    keys = list(sums)
    means = np.array([np.mean(sums[k], axis=0) for k in keys])
    ranks = non_dominated_ranks(means, [m for _, m in OBJECTIVES])
    return [k for k, r in zip(keys, ranks) if r == 1]


def true_hypervolume_fraction(truth: dict[str, Any], keys: Sequence[str]) -> float:
    """The hypervolume of ``keys``' noise-free objectives, a fraction of the true front's
    (reference point of the true front, as ``bench-search`` sets it for the table's)."""
    finals = {c["key"]: c["final"] for c in truth["configs"]}
    names = [o.split(":")[0] for o in truth["objectives"]]
    dirs = [o.split(":")[1] for o in truth["objectives"]]
    every = np.array([[finals[k][n] for n in names] for k in finals])
    if not keys:
        return 0.0
    chosen = np.array([[finals[k][n] for n in names] for k in keys])
    return relative_hypervolume(chosen, every, dirs)


MEASURED = ("acc_clean", "probe_acc_pgd_2", "probe_acc_pgd_4", "probe_lip_jacobian_median")
"""The per-epoch metrics :func:`with_measurement_se` gives a ``<metric>_se`` column."""


def with_measurement_se(synth: Synth, spec: Spec) -> Synth:
    """``synth`` with a ``<metric>_se`` column beside each of :data:`MEASURED`: the
    generator's own per-epoch jitter, the noise one epoch's value carries around its curve
    (``epoch_noise`` points for the accuracies; ``LIP_REL * epoch_noise`` of the value, the
    log-scale jitter's, for ||J_f||), as a probe logs its measurement's standard error. The
    seed offset is not in it: it stays for a seed's whole run, final value included."""
    from lipsweep.core.metric_names import se_metric

    rows = []
    for row in synth.rows:
        extra = {
            se_metric(m): spec.epoch_noise * (LIP_REL * float(row[m]) if "lip" in m else 1.0)
            for m in MEASURED
        }
        rows.append(row | extra)
    return Synth(rows, synth.truth)


def write(synth: Synth, out: Path, truth: Optional[Path] = None) -> tuple[Path, Path]:
    """The CSV at ``out`` and the ground truth at ``truth`` (default ``<out stem>.truth.json``)."""
    out = Path(out)
    truth = Path(truth) if truth else out.with_suffix(".truth.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        extra = [c for c in synth.rows[0] if c not in COLUMNS] if synth.rows else []
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS) + extra)
        writer.writeheader()
        writer.writerows(synth.rows)
    truth.write_text(json.dumps(synth.truth, indent=1) + "\n")
    return out, truth


def preset_text(name: str) -> str:
    """``name``'s settings that differ from :class:`Spec`'s defaults, ``k=v`` comma-separated."""
    default = dataclasses.asdict(Spec())
    changed = {k: v for k, v in dataclasses.asdict(PRESETS[name]).items() if v != default[k]}
    return ", ".join(f"{k}={v}" for k, v in changed.items()) or "the defaults"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="presets (what they change from the defaults): "
        + "; ".join(f"{name}: {preset_text(name)}" for name in PRESETS),
    )
    ap.add_argument("--preset", choices=sorted(PRESETS), help="start from these settings")
    ap.add_argument("--out", type=Path, required=True, help="CSV to write")
    ap.add_argument("--truth", type=Path, help="ground truth JSON (default: <out stem>.truth.json)")
    ap.add_argument(
        "--measurement-se",
        action="store_true",
        help="add a <metric>_se column beside each probe and acc_clean: the per-epoch jitter, "
        "as a probe logs its standard error (what moasha reads with one seed)",
    )
    helps = {
        "configs": "number of configurations (>= 2; the first is the unregularized baseline)",
        "seeds": "seeds per configuration",
        "epochs": "epochs per trial (>= 2)",
        "front": "configurations on the true front of the noise-free final objectives",
        "early_rho": "correlation of early clean-accuracy standing with the final (-1..1)",
        "probe_rho": "the same for the robustness probes (-1..1)",
        "fade": "fraction of the epochs over which the early standing fades into the final",
        "seed_noise": "per-seed offset std, accuracy points (||J_f||: relative, x0.025)",
        "epoch_noise": "per-epoch jitter std, accuracy points (||J_f||: relative, x0.025)",
        "gap_min": "smallest deficit of a dominated configuration, accuracy points",
        "gap": "mean extra deficit of a dominated configuration (exponential), accuracy points",
        "epoch_seconds": "seconds of a baseline training epoch",
        "eval_seconds": "seconds of the final evaluation (on the last epoch)",
        "cost_spread": "scales the regularizers' per-epoch cost overhead (0: equal costs)",
        "time_jitter": "relative (lognormal) jitter of each epoch's seconds",
        "seed": "random seed",
    }
    for f in dataclasses.fields(Spec):
        ap.add_argument(
            "--" + f.name.replace("_", "-"), type=type(getattr(Spec(), f.name)), default=None,
            help=f"{helps[f.name]} (default {getattr(Spec(), f.name)}, or the preset's)",
        )  # fmt: skip
    args = ap.parse_args(argv)
    spec = PRESETS[args.preset] if args.preset else Spec()
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Spec)}
    spec = dataclasses.replace(spec, **{k: v for k, v in given.items() if v is not None})
    try:
        synth = generate(spec)
        if args.measurement_se:
            synth = with_measurement_se(synth, spec)
    except ValueError as exc:
        print(f"synth_table: {exc}", file=sys.stderr)
        return 2
    csv_path, truth_path = write(synth, args.out, args.truth)
    compute = sum(float(r["epoch_seconds"]) for r in synth.rows)
    shared = len(set(synth.truth["table_front"]) & set(synth.truth["front"]))
    print(
        f"wrote {csv_path}: {spec.configs} configurations x {spec.seeds} seeds x {spec.epochs} "
        f"epochs, {len(synth.rows)} rows, {compute:,.0f} worker-seconds; true front "
        f"{synth.truth['front_size']} configurations; the table's seed-mean front "
        f"{len(synth.truth['table_front'])}, {shared} of them true; ground truth {truth_path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
