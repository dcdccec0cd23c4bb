"""The Python API: typed options per command, the same as the CLI's flags,
checked when made; a tiny sweep driven through ``lipsweep.api`` with no argparse."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _sweep_helpers import NONE, client, npz_space, sqlite_uri, sweep_in_process

from lipsweep import api
from lipsweep.api.options import OPTIONS
from lipsweep.cli import build_parser
from lipsweep.cli.parser import DATA_ACTIONS, SUBCOMMANDS
from lipsweep.core.config_base import ConfigError, UsageError
from lipsweep.core.field_docs import field_docs

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]
CLI_ONLY = ("help_settings", "command", "data_command")
"""Arguments that are the CLI's alone: a flag that prints and exits, the subcommand names."""


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _field_default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _flag_default(action: argparse.Action):
    if action.required or (not action.option_strings and action.nargs is None):
        return dataclasses.MISSING  # a required flag or positional: no default either side
    return tuple(action.default) if isinstance(action.default, list) else action.default


def _documented() -> list[tuple[type, argparse.ArgumentParser]]:
    """Each options dataclass with the (sub)command parser made from it."""
    parsers = _subparsers()
    data = next(a for a in parsers["data"]._actions if isinstance(a, argparse._SubParsersAction))
    made = [(c.options, parsers[n]) for n, c in SUBCOMMANDS.items() if c.options is not None]
    return made + [(c.options, data.choices[n]) for n, c in DATA_ACTIONS.items()]


def test_the_parser_exposes_exactly_the_documented_fields(monkeypatch):
    """Every field of every options dataclass has a docstring, and is one flag: its name
    (argparse's dest), its default (the env-read ones read the same way), its doc the help."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///from-env.db")
    monkeypatch.setenv("RAY_ADDRESS", "10.1.2.3:6379")
    made = _documented()
    assert {cls for cls, _ in made} == set(OPTIONS.values()) | {api.DataPrepareOptions}
    for cls, parser in made:
        docs = field_docs(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert [n for n in fields if not docs.get(n)] == [], cls.__name__
        actions = {
            a.dest: a
            for a in parser._actions
            if a.dest not in ("help", "verbose", *CLI_ONLY) and a.help != argparse.SUPPRESS
        }
        assert set(actions) == set(fields), cls.__name__
        for name, action in actions.items():
            assert _flag_default(action) == _field_default(fields[name]), (cls.__name__, name)
            words = re.sub(r"``([^`]+)``|\(None:", "", docs[name]).lower().split()[1:4]
            assert all(w.strip(".,;") in action.help.lower() for w in words), (cls.__name__, name)
    assert api.SweepOptions(space="s.yaml").tracking_uri == "sqlite:///from-env.db"
    assert api.SweepOptions(space="s.yaml").ray_address == "10.1.2.3:6379"


def test_an_undocumented_field_is_seen():
    """The check above can fail: a field without a docstring has no doc."""
    bare = dataclasses.make_dataclass("ParetoOptions", [("experiment", str)])
    assert field_docs(bare) == {}


_BENCH = {"table": "t.csv", "objective": ["acc_clean:max"]}


def test_bench_search_reads_its_scheduler_fields_from_moasha_settings():
    """Declared once: bench-search's --grace-period, --reduction-factor and --confidence have
    ``moasha``'s defaults and docs (the flags' help)."""
    from lipsweep.search.schedulers.moasha_settings import MoashaSettings

    docs, own = field_docs(api.BenchSearchOptions), field_docs(MoashaSettings)
    options = api.BenchSearchOptions(**_BENCH)
    for name in ("grace_period", "reduction_factor", "confidence"):
        assert docs[name] == own[name] != ""
        assert getattr(options, name) == getattr(MoashaSettings, name)


@pytest.mark.parametrize(
    "cls,kwargs,name",
    [
        (api.SweepOptions, {"space": "s.yaml", "num_cpus": 0}, "num_cpus"),
        (api.SweepOptions, {"space": "s.yaml", "num_cpus": True}, "num_cpus"),
        (api.SweepOptions, {"space": "s.yaml", "max_concurrent_trials": 0}, "max_concurrent"),
        (api.SweepOptions, {"space": "s.yaml", "status_every": -1}, "status_every"),
        (api.SweepOptions, {"space": "s.yaml", "experiment": "../x"}, "experiment"),
        (api.SweepOptions, {"space": "s.yaml", "resume": "yes"}, "resume"),
        (api.SweepOptions, {"space": "s.yaml", "ray_address": "nowhere"}, "ray_address"),
        (api.SweepOptions, {"space": ""}, "space"),
        (api.TrainOptions, {"overrides": ["epochs"]}, "overrides"),
        (api.ParetoOptions, {"experiment": "e", "objective": ["acc_clean"]}, "objective"),
        (api.ExportOptions, {"experiment": "e", "out": "o", "select": "max:"}, "select"),
        (api.ExportOptions, {"experiment": "e", "out": "o", "register": "a/b"}, "register"),
        (api.ConfirmOptions, {"experiment": "e", "top": 0}, "top"),
        (api.ConfirmOptions, {"experiment": "e", "top": 1, "run_id": ["r"]}, "top"),
        (api.ConfirmOptions, {"experiment": "e", "images": -1}, "images"),
        (api.DemoOptions, {"num_cpus": 0}, "num_cpus"),
        (api.BenchSearchOptions, _BENCH | {"reduction_factor": 1}, "reduction_factor"),
        (api.BenchSearchOptions, _BENCH | {"reduction_factor": 1.5}, "reduction_factor"),
        (api.BenchSearchOptions, _BENCH | {"grace_period": 0}, "grace_period"),
        (api.BenchSearchOptions, _BENCH | {"grace_period": 2.5}, "grace_period"),
        (api.BenchSearchOptions, _BENCH | {"confidence": 1.0}, "confidence"),
    ],
)
def test_options_are_checked_when_made_naming_the_field(cls, kwargs, name):
    """From Python a bad value names the field (``num_cpus``); the CLI names the flag."""
    with pytest.raises(ConfigError) as exc:
        cls(**kwargs)
    assert exc.value.format().startswith(name), exc.value.format()
    assert "--" not in exc.value.format(), exc.value.format()


def test_options_are_frozen_and_normalised():
    opts = api.ConfirmOptions(experiment="e", run_id=["a", "b"])
    assert opts.run_id == ("a", "b")  # a list becomes a tuple: hashable, comparable
    assert api.TrainOptions(out=Path("runs/x")).out == "runs/x"
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.top = 3  # type: ignore[misc]


def test_api_functions_take_options_or_keywords(tmp_path, monkeypatch):
    """A misspelt keyword or a missing required one is a ConfigError naming it; a bad value
    is refused before anything is read or written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="num_cpu: not an option of SweepOptions; known: "):
        api.sweep(space="s.yaml", num_cpu=2)
    with pytest.raises(ConfigError, match="experiment: required by ParetoOptions"):
        api.pareto()
    with pytest.raises(TypeError, match="not both"):
        api.pareto(api.ParetoOptions(experiment="e"), per_run=True)
    with pytest.raises(ConfigError, match="^num_cpus: must be >= 1, got 0$"):
        api.sweep(space="s.yaml", num_cpus=0)
    with pytest.raises(UsageError, match="^tracking_uri sqlite:"):  # the world: no such store
        api.pareto(experiment="e", tracking_uri=f"sqlite:///{tmp_path}/none.db")
    assert list(tmp_path.iterdir()) == []


def argparse_importers(package: Path) -> list[str]:
    """The modules under ``package`` that import argparse, relative to its parent."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if "argparse" in names:
                found.append(path.relative_to(package.parent).as_posix())
    return found


def test_only_the_cli_package_sees_argparse(tmp_path):
    """No ``argparse.Namespace`` outside ``lipsweep/cli/``: no other module imports argparse
    (``lipsweep/__main__.py`` only calls :func:`lipsweep.cli.main`)."""
    found = argparse_importers(ROOT / "lipsweep")
    assert "lipsweep/cli/parser.py" in found  # the check sees the parser's import
    assert [m for m in found if not m.startswith("lipsweep/cli/")] == []
    # the check sees an import anywhere in a module, in a function too
    probe = tmp_path / "lipsweep" / "api"
    probe.mkdir(parents=True)
    (probe / "x.py").write_text("def f():\n    from argparse import Namespace\n")
    assert argparse_importers(tmp_path / "lipsweep") == ["lipsweep/api/x.py"]


# The API's dry run validates without torch, timm, Ray or MLflow, as the CLI's does.
_NO_TORCH = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "timm", "torchvision", "ray", "mlflow"):
            raise ImportError("blocked import of " + name)
sys.meta_path.insert(0, _Block())
from lipsweep import api
result = api.sweep(space=sys.argv[1], storage=sys.argv[2], dry_run=True)
assert result.planned and result.counts.not_run == result.counts.total == 31, result
"""


def test_the_api_dry_run_imports_no_torch_ray_or_mlflow(tmp_path):
    space = ROOT / "search_spaces" / "paper_cifar100.yaml"
    proc = subprocess.run(
        [sys.executable, "-c", _NO_TORCH, str(space), str(tmp_path / "st")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def _space(tmp_path: Path) -> Path:
    """One tiny trial on the 20/10-image npz of conftest: the smallest sweep there is."""
    resources = {"cpu": 1, "gpu": 0}
    return npz_space(tmp_path, "api", grid=[NONE], resources=resources, max_concurrent_trials=1)


@pytest.mark.slow
def test_a_tiny_sweep_end_to_end_through_the_api(tmp_path, monkeypatch):
    """sweep -> its runs, read back from MLflow -> pareto -> export, with no argparse: a
    local Ray in this process (its own RAY_TMPDIR), SQLite MLflow in tmp_path."""
    uri = sqlite_uri(tmp_path)
    swept = sweep_in_process(monkeypatch, tmp_path, space=_space(tmp_path), tracking_uri=uri)
    assert swept.ok and not swept.interrupted, swept.summary
    assert swept.experiment == "api" and swept.experiment_path.endswith("/ray_results/api")
    assert swept.counts == api.OutcomeCounts(finished=1, stopped=0, failed=0, not_run=0, total=1)
    assert swept.ran == 1 and not swept.summary.startswith("nothing left to run")
    (run,) = swept.runs
    assert run.status == "FINISHED" and run.metrics["acc_clean"] >= 0
    # the runs it returns are the ones MLflow holds, under its parent run
    kids = [r for r in client(uri, "api").runs() if r.data.tags.get("lipsweep.kind") == "trial"]
    assert [r.info.run_id for r in kids] == [run.run_id]
    assert kids[0].data.tags["mlflow.parentRunId"] == swept.parent_run_id
    assert kids[0].data.metrics["acc_clean"] == run.metrics["acc_clean"]

    front = api.pareto(api.ParetoOptions(experiment="api", tracking_uri=uri))
    assert front.ranked_by == "runs" and front.ranks == {run.run_id: 1}
    assert [m.run_ids for m in front.front] == [(run.run_id,)]
    assert front.pick is not None and front.pick.run_id == run.run_id
    exported = api.export(experiment="api", out=str(tmp_path / "export"), tracking_uri=uri)
    assert exported.run_id == run.run_id and exported.folder == tmp_path / "export"
    assert (exported.folder / "model.safetensors").is_file()
    assert exported.metrics["acc_clean"] == run.metrics["acc_clean"]
    # a resume of the finished sweep runs nothing, and says so
    again = sweep_in_process(
        monkeypatch, tmp_path, space=_space(tmp_path), tracking_uri=uri, resume=True
    )
    assert again.ok and again.ran == 0 and again.counts == swept.counts
    assert again.summary.startswith("nothing left to run: every trial had ended before this")
