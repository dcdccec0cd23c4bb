"""What if the recorded grid had a longer horizon? A what-if table for `lipsweep bench-search`.

One reading of `moasha-told-finals` missing the target on the recorded tables as a horizon
problem: with 4-5 epochs, a stop at rung 1 still costs a fifth of a trial's training. This
script tests that reading without a new recording. It writes a copy of a table in which every
epoch becomes ``--factor`` epochs, each with 1/factor of the epoch's training seconds and the
epoch's per-epoch values (a step function: the signal at each rung is the recorded one). The
last recorded epoch's final evaluation (its seconds beyond a training epoch, estimated as the
trial's mean training epoch) and final values stay on the new last epoch, and so does the
last recorded ``acc_clean`` (the final evaluation's; the sub-epochs before it repeat the
epoch before). The grid's compute is unchanged; only where a rung falls, in compute, moves
earlier.

    .venv/bin/python benchmarks/stretch_table.py --table benchmarks/data/wide_grid.csv \\
        --factor 8 --out /tmp/wide_x8.csv
    .venv/bin/lipsweep bench-search --table /tmp/wide_x8.csv --objective acc_clean:max \\
        --objective acc_pgd_4:max --objective lip_jacobian_median:min --out /tmp/wide_x8

docs/benchmarks.md's appendix has what it showed.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from record_grid import write_table  # noqa: E402

from lipsweep.core.config_base import ConfigError  # noqa: E402
from lipsweep.core.metric_names import ACC_CLEAN  # noqa: E402
from lipsweep.search.replay.table import Table, iter_rows, load_table  # noqa: E402


def stretch(table: Table, factor: int) -> Table:
    """``table`` with each epoch split into ``factor`` (module docstring)."""
    configs = []
    for c in table.configs:
        seconds, metrics = {}, {}
        for s in c.seeds:
            sec = np.asarray(c.seconds[s], dtype=float)
            train = float(sec[:-1].mean()) if len(sec) > 1 else 0.0
            per = np.repeat(np.append(sec[:-1], train) / factor, factor)
            per[-1] += sec[-1] - train  # the final evaluation stays on the last epoch
            seconds[s] = per
            metrics[s] = {}
            for name, values in c.metrics[s].items():
                if name in table.per_epoch:
                    stretched = np.repeat(values, factor)
                    if name == ACC_CLEAN and len(values) > 1:  # its last value is the final
                        stretched[-factor:-1] = values[-2]  # evaluation's, not a probe
                else:
                    stretched = np.full(len(values) * factor, np.nan)
                    stretched[-1] = values[-1]
                metrics[s][name] = stretched
        configs.append(dataclasses.replace(c, seconds=seconds, metrics=metrics))
    return dataclasses.replace(table, configs=tuple(configs), epochs=table.epochs * factor)


def table_rows(table: Table) -> list[dict[str, object]]:
    """``table``'s rows without their absent values, for ``record_grid.write_table`` (which
    leaves those cells empty, as :func:`load_table` reads them)."""
    return [
        {k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}
        for row in iter_rows(table)
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", required=True, help="recorded grid (CSV)")
    ap.add_argument(
        "--factor", type=int, required=True, help="new epochs per recorded epoch (>= 2)"
    )
    ap.add_argument("--out", required=True, type=Path, help="CSV to write")
    args = ap.parse_args()
    if args.factor < 2:
        print(f"stretch_table: --factor must be >= 2, got {args.factor}", file=sys.stderr)
        return 2
    try:
        table = load_table(args.table)
    except ConfigError as exc:
        print(f"stretch_table: {exc}", file=sys.stderr)
        return 2
    long = stretch(table, args.factor)
    write_table(table_rows(long), args.out)
    back = load_table(args.out)  # what bench-search will read: same columns, same compute
    assert back.per_epoch == table.per_epoch and back.final == table.final, (back, table)
    assert abs(back.compute - table.compute) < 1e-6 * table.compute
    print(f"wrote {args.out}: {len(long.configs)} configurations, {long.epochs} epochs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
