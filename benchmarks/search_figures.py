"""The search figures of docs/benchmarks.md: every ``bench-search`` method (4 workers, budget
40%) on the synthetic presets (benchmarks/synth_table.py) and both recorded grids, one
summary per table under ``docs/bench_search_figures/`` (``summary.json``'s format) and the
table of figures in ``docs/bench_search_figures/figures.md``. Every method and reference runs
``--replays`` (50) replays, but the Optuna ones on seeds-100x5x9 10 (:data:`OPTUNA_REPLAYS`;
``--optuna-replays`` sets them everywhere). All tables together take about 2 hours of one core.

    .venv/bin/python benchmarks/search_figures.py            # every table, 2 processes
    .venv/bin/python benchmarks/search_figures.py --only clean-60x3x12 --replays 10
    .venv/bin/python benchmarks/search_figures.py --method moasha   # one method's rows
    .venv/bin/python benchmarks/search_figures.py --settings        # moasha's settings
    .venv/bin/python benchmarks/search_figures.py --spread --replays 200   # how far 50 move
    .venv/bin/python benchmarks/search_figures.py --render          # figures.md only
    .venv/bin/python benchmarks/search_figures.py --outcomes --replays 20   # kept and paid
    .venv/bin/python benchmarks/search_figures.py --outcomes --grace-period 2   # a what-if
    .venv/bin/python benchmarks/search_figures.py --outcomes --generator-seed 7 --only seeds-100x5x9

The same code, tables and flags give the same files to the digit (each replay is seeded by its
index; the presets are generated from their fixed seeds).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

OUT = ROOT / "docs" / "bench_search_figures"
OBJECTIVES = (("acc_clean", "max"), ("acc_pgd_4", "max"), ("lip_jacobian_median", "min"))
PRESETS = ("clean-60x3x12", "clean-40x3x20", "seeds-100x5x9", "noisy-60x3x12")
RECORDED = {"tiny_grid": ROOT / "benchmarks/data/tiny_grid.csv",
            "wide_grid": ROOT / "benchmarks/data/wide_grid.csv"}  # fmt: skip
TABLES = PRESETS + tuple(RECORDED)


def table_path(name: str, folder: Path, generator_seed: Optional[int] = None) -> Path:
    """A recorded grid's CSV, or the preset generated into ``folder`` (with the generator's
    ``seed`` set to ``generator_seed``, where given: a table none of the figures has seen)."""
    if name in RECORDED:
        return RECORDED[name]
    import dataclasses

    import synth_table

    path = folder / f"{name}.csv"
    spec = synth_table.PRESETS[name]
    if generator_seed is not None:
        spec = dataclasses.replace(spec, seed=generator_seed)
    synth_table.write(synth_table.with_measurement_se(synth_table.generate(spec), spec), path)
    return path


def _bench(
    name: str,
    workers: int,
    seeds: Optional[int] = None,
    generator_seed: Optional[int] = None,
    **settings: float,
) -> Any:
    """The bench of table ``name`` (a preset with ``generator_seed``: :func:`table_path`), with
    its first ``seeds`` seeds (default all); ``settings``: ``confidence``, ``reduction_factor``,
    as ``make_bench`` takes them (default: its defaults)."""
    from lipsweep.search import replay

    with tempfile.TemporaryDirectory() as tmp:
        table = replay.load_table(table_path(name, Path(tmp), generator_seed))
    if seeds is not None:
        table = replay.first_seeds(table, seeds)
    replay._quiet_optuna()
    return replay.make_bench(table, OBJECTIVES, workers=workers, **settings)


def run_method(
    name: str,
    method: str,
    replays: int,
    workers: int,
    seeds: Optional[int] = None,
    generator_seed: Optional[int] = None,
    **settings: float,
) -> list[Any]:
    """``replays`` replays of ``method`` on table ``name`` (or of a reference), its first
    ``seeds`` seeds, the schedulers at ``settings`` (:func:`_bench`)."""
    from lipsweep.search import replay

    bench = _bench(name, workers, seeds, generator_seed, **settings)
    if method in replay.REFERENCES:
        return replay.references(bench, replays, workers)[method]
    return [bench.replay(replay.parse_method(method), seed) for seed in range(replays)]


OPTUNA = ("optuna-tpe", "optuna-nsga2", "optuna-moasha")
OPTUNA_REPLAYS = {"seeds-100x5x9": 10}
"""Replays of the Optuna methods where not ``--replays``: a study told every duplicate draw
of a finite table grows to thousands of trials, 38-60 s a replay on seeds-100x5x9 here."""


def main_jobs(names: Sequence[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (table, method) replayed in ``args.processes`` processes; one summary a table."""
    from lipsweep.search import replay

    methods = list(replay.DEFAULT_METHODS) + list(replay.REFERENCES)
    rerun = args.method or methods
    jobs = {}
    with ProcessPoolExecutor(args.processes) as pool:
        for name in names:
            for m in rerun:
                n = args.replays
                if m in OPTUNA:
                    n = args.optuna_replays or OPTUNA_REPLAYS.get(name, args.replays)
                jobs[(name, m)] = pool.submit(run_method, name, m, n, args.workers)
        runs = {key: job.result() for key, job in jobs.items()}
    out = []
    for name in names:
        bench = _bench(name, args.workers)
        if args.method:  # the other methods' entries as the table's summary has them
            kept = json.loads((OUT / f"{name}.json").read_text())
            for m in methods:
                if m not in rerun:
                    group = "methods" if m in replay.DEFAULT_METHODS else "references"
                    runs[(name, m)] = (kept["replays"][m], kept[group][m])
        summary = {
            "table": name,
            "objectives": [f"{n}:{d}" for n, d in OBJECTIVES],
            "stop_on": [f"{n}:{d}" for n, d in bench.stops],
            "budget": args.budget,
            "replays": {m: _count(runs[(name, m)]) for m in methods},
            "workers": args.workers,
            "grace_period": bench.grace_period,
            "reduction_factor": bench.reduction_factor,
            "confidence": bench.confidence,
            "grid": {"configurations": len(bench.table.configs), "compute_s": bench.table.compute},
            "methods": {m: _entry(runs[(name, m)], args.budget) for m in replay.DEFAULT_METHODS},
            "references": {m: _entry(runs[(name, m)], args.budget) for m in replay.REFERENCES},
        }
        OUT.mkdir(parents=True, exist_ok=True)
        text = json.dumps(summary, indent=2, sort_keys=True, allow_nan=False) + "\n"
        (OUT / f"{name}.json").write_text(text)
        out.append(summary)
    return out


def _count(runs: Any) -> int:
    """Replays of a method: its trajectories, or (replays, entry) kept from a summary."""
    return runs[0] if isinstance(runs, tuple) else len(runs)


def _entry(runs: Any, budget: float) -> dict[str, Any]:
    """A method's summary entry: scored from its trajectories, or as kept from a summary."""
    from lipsweep.search import replay

    return runs[1] if isinstance(runs, tuple) else replay._scores(runs, budget)


def _figures(entry: dict[str, Any]) -> list[str]:
    """A method's four figures as the tables print them: median HV at the budget, the share
    of replays >= 0.8, median compute to 90%, median compute on stopped configurations."""
    hv = entry["hv_fraction_at_budget"]
    return [
        _cell(hv["median"]),
        f"{hv['share_at_least_0.8']:.0%}",
        _cell(entry["compute_fraction_to_90"]["median"], True),
        _cell(entry["stopped_compute_share"]["median"], True),
    ]


def _cell(value: Optional[float], pct: bool = False) -> str:
    if value is None:
        return "never"
    return f"{value:.1%}" if pct else f"{value:.3f}"


def _method_order(name: str) -> tuple[int, str]:
    """The usual methods in ``bench-search``'s order, then any other by name."""
    from lipsweep.search import replay

    order = list(replay.DEFAULT_METHODS)
    return (order.index(name) if name in order else len(order), name)


def markdown(summaries: Sequence[dict[str, Any]]) -> str:
    """One table per recorded or generated table: every method's four figures."""
    lines = []
    for s in summaries:
        lines += [
            f"**{s['table']}** ({s['grid']['configurations']} configurations, "
            f"{s['workers']} workers, budget {s['budget']:.0%})",
            "",
            "| method | replays | HV at 40% (median) | replays >= 0.8 | compute to 90% (median) "
            "| compute on stopped configs (median) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, m in sorted(s["methods"].items(), key=lambda kv: _method_order(kv[0])):
            cells = [name, str(s["replays"][name]), *_figures(m)]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


SETTINGS = ((0.8, 2.0), (0.9, 2.0), (0.95, 2.0), (0.8, 3.0), (0.8, 4.0))
"""moasha's (confidence, reduction_factor) pairs ``--settings`` compares; (0.9, 2) the default."""


def settings_runs(names: Sequence[str], args: argparse.Namespace) -> dict[tuple, list[Any]]:
    """``moasha``'s replays at each :data:`SETTINGS` pair on each table: ``(confidence,
    reduction_factor, table) -> replays`` (``args.replays`` each, ``args.processes`` at once)."""
    with ProcessPoolExecutor(args.processes) as pool:
        jobs = {
            (c, f, n): pool.submit(
                run_method,
                n,
                "moasha",
                args.replays,
                args.workers,
                confidence=c,
                reduction_factor=f,
            )  # fmt: skip
            for c, f in SETTINGS
            for n in names
        }
        return {key: job.result() for key, job in jobs.items()}


def settings_table(names: Sequence[str], cells: dict[tuple, str]) -> str:
    """A markdown table: one row per :data:`SETTINGS` pair, one column per table."""
    lines = [
        "| confidence | reduction factor | " + " | ".join(names) + " |",
        "|---:|---:|" + "---|" * len(names),
    ]
    for c, f in SETTINGS:
        lines.append(f"| {c:g} | {f:g} | " + " | ".join(cells[(c, f, n)] for n in names) + " |")
    return "\n".join(lines) + "\n"


def settings_markdown(names: Sequence[str], args: argparse.Namespace) -> str:
    """``moasha``'s four figures (:func:`_figures`) at ``args.budget`` per setting and table."""
    runs = settings_runs(names, args)
    return settings_table(
        names, {key: ", ".join(_figures(_entry(rs, args.budget))) for key, rs in runs.items()}
    )


def spread(hv: Sequence[float], block: int = 50) -> dict[str, Any]:
    """How the hypervolume fractions of many replays spread: their median and quartiles
    (numpy's linear percentiles), the shares >= 0.95 and >= 0.8, and the median of each
    block of ``block`` consecutive replays (what a ``block``-replay figure would have said)."""
    x = np.asarray(hv, dtype=float)
    return {
        "median": float(np.median(x)),
        "quartiles": (float(np.percentile(x, 25)), float(np.percentile(x, 75))),
        "share_at_least_0.95": float(np.mean(x >= 0.95 - 1e-12)),
        "share_at_least_0.8": float(np.mean(x >= 0.8 - 1e-12)),
        "blocks": [float(np.median(x[i : i + block])) for i in range(0, len(x), block)],
    }


def _spread_cell(sp: dict[str, Any]) -> str:
    q1, q3 = sp["quartiles"]
    return (
        f"{sp['median']:.3f} ({q1:.3f}-{q3:.3f}), {sp['share_at_least_0.95']:.0%} / "
        f"{sp['share_at_least_0.8']:.0%}; " + " / ".join(f"{b:.3f}" for b in sp["blocks"])
    )


def spread_markdown(names: Sequence[str], args: argparse.Namespace, block: int = 50) -> str:
    """:func:`spread` of ``moasha``'s hypervolume fraction at ``args.budget`` over
    ``args.replays`` replays, per setting and table."""
    runs = settings_runs(names, args)
    return settings_table(
        names,
        {
            key: _spread_cell(spread([r.hv_at(args.budget) for r in rs], block))
            for key, rs in runs.items()
        },
    )


OUTCOME_METHODS = ("moasha", "grid", "random", "asha-clean")
"""What ``--outcomes`` replays by default: ``moasha`` and the methods that are cheap to replay."""


def outcome_row(runs: Sequence[Any], oracle: float, budget: float) -> dict[str, Any]:
    """What a researcher keeps and pays over ``runs`` (one method's replays on one table):
    the median hypervolume at ``budget`` and at the end, the share of replays keeping the
    front (final hypervolume >= 0.99) and of replays that stopped a front configuration, the
    median total compute and its ratio to the ``oracle``'s, and the mean number of front
    configurations stopped."""
    from lipsweep.search import replay

    entry = replay._scores(runs, budget)
    total = entry["total_compute_fraction"]["median"]
    stopped = entry["front_configurations_stopped"]["per_replay"]
    return {
        "replays": len(runs),
        "hv_at_budget": entry["hv_fraction_at_budget"]["median"],
        "final_hv": entry["final_hv_fraction"]["median"],
        "front_kept": replay.front_kept(entry),
        "lost_a_front_configuration": float(np.mean([n > 0 for n in stopped])),
        "front_stopped_mean": float(np.mean(stopped)),
        "total_compute": total,
        "x_oracle": total / oracle,
    }


def outcomes(names: Sequence[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each (table, seeds: all or 1, method of ``args.method`` or :data:`OUTCOME_METHODS`):
    :func:`outcome_row`, ``args.replays`` replays, ``args.processes`` at once."""
    from lipsweep.search import replay

    methods = args.method or list(OUTCOME_METHODS)
    keys = [(n, sd, m) for n in names for sd in (None, 1) for m in methods]
    settings = {} if args.grace_period is None else {"grace_period": args.grace_period}
    gen = args.generator_seed
    with ProcessPoolExecutor(args.processes) as pool:
        jobs = {
            k: pool.submit(
                run_method, k[0], k[2], args.replays, args.workers, k[1], gen, **settings
            )
            for k in keys
        }
        runs = {k: job.result() for k, job in jobs.items()}
    rows = []
    for n, sd, m in keys:
        bench = _bench(n, args.workers, sd, gen)
        oracle = replay.oracle_stopping(bench.table, OBJECTIVES, bench.grace_period)
        row = outcome_row(runs[(n, sd, m)], oracle["seeds together"][1], args.budget)
        rows.append({"table": n, "seeds": len(bench.seeds), "method": m, **row})
    return rows


def kept_outcomes(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with the committed ``outcomes.json``'s other rows (tables, seed settings or
    methods not replayed now) kept, in the committed order, new ones after."""
    path = OUT / "outcomes.json"
    old = json.loads(path.read_text()) if path.exists() else []
    new = {(r["table"], r["seeds"], r["method"]): r for r in rows}
    out = [new.pop((r["table"], r["seeds"], r["method"]), r) for r in old]
    return out + list(new.values())


def outcomes_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """:func:`outcomes`' rows as one markdown table."""
    lines = [
        "| table | seeds | method | replays | HV at 40% | final HV | front kept | replays "
        "losing a front config | front configs stopped (mean) | total compute | x oracle |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['table']} | {r['seeds']} | {r['method']} | {r['replays']} | "
            f"{r['hv_at_budget']:.3f} | {r['final_hv']:.3f} | {r['front_kept']:.0%} | "
            f"{r['lost_a_front_configuration']:.0%} | {r['front_stopped_mean']:.2f} | "
            f"{r['total_compute']:.1%} | {r['x_oracle']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=TABLES, help="tables (default all)")
    ap.add_argument(
        "--method",
        action="append",
        help="rerun only these methods or references (default all); the others' entries "
        "are kept from the tables' summaries under docs/bench_search_figures/",
    )
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument(
        "--optuna-replays",
        type=int,
        default=None,
        help="replays of the Optuna methods (default: --replays, 10 on seeds-100x5x9)",
    )
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--budget", type=float, default=0.4)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument(
        "--settings",
        action="store_true",
        help="print moasha at each (confidence, reduction factor) of SETTINGS on the tables "
        "(default: the synthetic presets) as one markdown table; writes no summary",
    )
    ap.add_argument(
        "--spread",
        action="store_true",
        help="print how moasha's hypervolume fraction spreads over --replays replays at each "
        "(confidence, reduction factor) of SETTINGS: median (quartiles), shares >= 0.95 / "
        ">= 0.8, and the median of each block of 50 replays; writes no summary",
    )
    ap.add_argument(
        "--outcomes",
        action="store_true",
        help="what moasha and the cheap methods (or --method) keep and pay on the tables, with "
        "every seed and with one: docs/bench_search_figures/outcomes.{md,json} (the other "
        "rows kept from the committed file)",
    )
    ap.add_argument(
        "--render",
        action="store_true",
        help="rewrite figures.md from the tables' committed summaries; replays nothing",
    )
    ap.add_argument(
        "--grace-period",
        type=int,
        default=None,
        help="with --outcomes: replay the schedulers with this first rung (epochs), print the "
        "rows and write no file; the oracle still stops at the first epoch",
    )
    ap.add_argument(
        "--generator-seed",
        type=int,
        default=None,
        help="with --outcomes: generate the presets with this generator seed (tables none of "
        "the figures has seen: a held-out check), print the rows and write no file",
    )
    args = ap.parse_args(argv)
    if args.generator_seed is not None and not set(args.only or PRESETS) <= set(PRESETS):
        ap.error("--generator-seed applies to the synthetic presets only (--only PRESET)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.settings:
        print(settings_markdown(args.only or list(PRESETS), args))
        return 0
    if args.spread:
        print(spread_markdown(args.only or list(PRESETS), args))
        return 0
    if args.outcomes:
        every = PRESETS if args.generator_seed is not None else TABLES
        rows = outcomes(args.only or list(every), args)
        text = outcomes_markdown(rows)
        if args.grace_period is not None or args.generator_seed is not None:  # a what-if
            print(text)
            return 0
        rows = kept_outcomes(rows)
        text = outcomes_markdown(rows)
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "outcomes.md").write_text(text)
        (OUT / "outcomes.json").write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")
        print(text)
        return 0
    if args.render:
        names = list(TABLES)
        summaries = [json.loads((OUT / f"{name}.json").read_text()) for name in names]
    else:
        names = args.only or list(TABLES)
        summaries = main_jobs(names, args)
    if set(names) == set(TABLES):
        (OUT / "figures.md").write_text(markdown(summaries))
    print(markdown(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
