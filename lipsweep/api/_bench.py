"""``lipsweep bench-search``: the replay benchmark of search methods (lipsweep/search/replay/)."""

from __future__ import annotations

from pathlib import Path

from lipsweep.api.options import BenchSearchOptions
from lipsweep.api.results import BenchSearchResult


def run(opts: BenchSearchOptions) -> BenchSearchResult:
    """Check everything against the table first, then replay and write ``opts.out``."""
    from lipsweep.core.paths import check_folder
    from lipsweep.decide.pareto import parse_objective
    from lipsweep.search import replay

    for name in opts.method:
        replay.parse_method(name)
    check_folder("--out", opts.out, make_parents=True)
    table = replay.load_table(opts.table)

    def pairs(specs: tuple[str, ...]) -> list[tuple[str, str]]:
        return [(o.name, o.direction) for o in map(parse_objective, specs)]

    summary, runs = replay.bench_search(
        table,
        pairs(opts.objective),
        opts.budget,
        opts.replays,
        opts.workers,
        stop_on=pairs(opts.stop_on),
        only=opts.method,
        grace_period=opts.grace_period,
        reduction_factor=opts.reduction_factor,
        confidence=opts.confidence,
        seeds=opts.seeds,
    )
    summary["table"] = str(opts.table)
    path = replay.write(summary, runs, Path(opts.out))
    return BenchSearchResult(summary, path, path.with_name("hypervolume.png"))
