"""``demo``: the embedded default end to end (smoke sweep, pareto, export), through the API.

It is exactly what a researcher runs on a cluster, at laptop size: the same ``sweep``,
``pareto`` and ``export`` as :mod:`lipsweep.api`, their options built as the CLI builds
them, on a local Ray instance, a SQLite MLflow store in the working folder, a tiny ViT and
the CIFAR-10 sample shipped in the package. A rerun resumes the same sweep instead of
starting a second one.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from lipsweep.api.options import DemoOptions, ExportOptions, ParetoOptions, SweepOptions
from lipsweep.api.results import DemoResult

DEMO_SPACE = "smoke"
"""The demo's space unless ``space`` names one: the shipped ``smoke`` (a wheel works too)."""
DEMO_OUT = "exports/smoke-best"
"""The demo's export folder unless ``out`` names one (its parent is created)."""


def demo_options(
    opts: DemoOptions, resume: bool
) -> tuple[SweepOptions, ParetoOptions, ExportOptions]:
    """The options of ``lipsweep sweep SPACE --experiment E --storage S --tracking-uri U
    [--resume] [--num-cpus N]``, ``lipsweep pareto --experiment E --tracking-uri U`` and
    ``lipsweep export --experiment E --tracking-uri U --out O --force``: every other option
    at its default (a test compares them with the parser's)."""
    from lipsweep.core.storage import resolve_storage

    common = {"experiment": opts.experiment, "tracking_uri": opts.tracking_uri}
    sweep = SweepOptions(
        space=opts.space or DEMO_SPACE,
        storage=resolve_storage(opts.storage),
        resume=resume,
        num_cpus=opts.num_cpus,
        **common,
    )
    return (
        sweep,
        ParetoOptions(**common),
        ExportOptions(out=opts.out or DEMO_OUT, force=True, **common),
    )


def demo(opts: DemoOptions) -> DemoResult:
    from lipsweep.api import _decide, _sweep
    from lipsweep.core.storage import experiment_path, resolve_storage, storage_exists
    from lipsweep.decide.export import check_out

    out = opts.out or DEMO_OUT
    check_out(out, force=True, make_parents=opts.out is None)  # before the sweep, not after
    storage = resolve_storage(opts.storage)
    resume = storage_exists(experiment_path(storage, opts.experiment))
    sweep_opts, pareto_opts, export_opts = demo_options(opts, resume)
    t0 = time.perf_counter()
    swept = _sweep.run(sweep_opts)
    seconds = time.perf_counter() - t0
    if not swept.ok or swept.signal is not None:
        return DemoResult(swept, sweep_seconds=seconds)
    front = _decide.pareto(pareto_opts)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    return DemoResult(swept, front, _decide.export(export_opts), seconds)


def installed_tool(name: str) -> str:
    """The command that runs ``name`` from this interpreter's environment in a new shell:
    ``.venv/bin/mlflow`` after ``make setup`` (whose bin folder is not on the PATH)."""
    tool = Path(sys.executable).parent / name
    if not tool.is_file():
        return name
    try:
        return str(tool.relative_to(Path.cwd()))
    except ValueError:
        return str(tool)
