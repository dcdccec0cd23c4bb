"""The ``lipsweep`` command line's parser, made from the options dataclasses
(:mod:`lipsweep.api.options`): each field is one flag, with the field's name (argparse's
``dest``), default and docstring (the help); its metadata says what the field alone does not
(another spelling, a positional, a metavar, choices). What is the CLI's own is here: each
subcommand's one-line help and one example, ``train --help-settings`` and a deprecated alias.
The commands themselves are in :mod:`lipsweep.cli.commands`."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from typing import Any, Callable, NamedTuple, Optional

from lipsweep.api import options as api_options
from lipsweep.core.config_base import UsageError
from lipsweep.core.field_docs import field_docs
from lipsweep.core.options import flag_of
from lipsweep.core.version import __version__


class Command(NamedTuple):
    """A subcommand: its options (None: it takes none), its one-line help, one example."""

    options: Optional[type]
    help: str
    example: str


SUBCOMMANDS = {
    "train": Command(
        api_options.TrainOptions,
        "train and evaluate one trial, without Ray or MLflow",
        "lipsweep train tiny --out runs/tiny --set epochs=3",
    ),
    "sweep": Command(
        api_options.SweepOptions,
        "run a sweep on Ray Tune, logging to MLflow",
        "lipsweep sweep smoke --status-every 60",
    ),
    "pareto": Command(
        api_options.ParetoOptions,
        "mark the Pareto-optimal trials of a sweep",
        "lipsweep pareto --experiment smoke --tracking-uri sqlite:///mlflow.db",
    ),
    "export": Command(
        api_options.ExportOptions,
        "export a trial's checkpoint as a self-describing folder",
        "lipsweep export --experiment smoke --out exports/smoke-best",
    ),
    "report": Command(
        api_options.ReportOptions,
        "write a markdown report of a sweep's arms (mean ± std, paired differences to the "
        "baseline with Holm-corrected tests, the seeds each effect needs, figures) and log "
        "it to the parent run",
        "lipsweep report --experiment smoke --out reports/smoke",
    ),
    "confirm": Command(
        api_options.ConfirmOptions,
        "re-evaluate the front's runs with standard AutoAttack (logs acc_aa_std_<eps>)",
        "lipsweep confirm --experiment smoke --top 3 --images 1000",
    ),
    "demo": Command(
        api_options.DemoOptions,
        "the embedded default end to end: smoke sweep, pareto, export",
        "lipsweep demo --num-cpus 2",
    ),
    # models and spaces take no --tracking-uri: they never touch MLflow (docs/contract.md)
    "models": Command(
        None, "list the timm ViT architectures lipsweep can build", "lipsweep models"
    ),
    "spaces": Command(
        None,
        "list the search spaces shipped with lipsweep (sweep NAME runs one)",
        "lipsweep spaces",
    ),
    "data": Command(
        None,
        "prepare a dataset once for a cluster (data prepare)",
        "lipsweep data prepare --dataset cifar100 --source ~/cifar --dest s3://bucket/data",
    ),
    "bench-search": Command(
        api_options.BenchSearchOptions,
        "replay search methods on a recorded grid: hypervolume per compute",
        "lipsweep bench-search --table benchmarks/data/tiny_grid.csv "
        "--objective acc_clean:max --objective acc_pgd_4:max --objective lip_jacobian_median:min",
    ),
}
"""Every subcommand, in the order ``lipsweep --help`` lists them."""

DATA_ACTIONS = {
    "prepare": Command(
        api_options.DataPrepareOptions,
        "pack CIFAR into DEST/<dataset>.npz + manifest (sha256); trials then use "
        "data_dir: DEST/<dataset>.npz",
        "",
    )
}
"""``lipsweep data ACTION``."""

EXAMPLES = {name: c.example for name, c in SUBCOMMANDS.items()}
"""One example per subcommand, shown at the end of its --help."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lipsweep",
        description="Sweeps of attention regularizers for robust ViTs (Ray Tune + MLflow).",
        epilog="example:\n  lipsweep demo",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"lipsweep {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    # the same flag after the subcommand; SUPPRESS keeps a flag given before it
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, command in SUBCOMMANDS.items():
        p = sub.add_parser(
            name,
            help=command.help,
            description=command.help[:1].upper() + command.help[1:] + ".",
            epilog=f"example:\n  {command.example}",
            parents=[common],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if command.options is not None:
            add_options(p, command.options)
    _add_cli_only(sub.choices)
    return parser


def _add_cli_only(parsers: dict[str, argparse.ArgumentParser]) -> None:
    """What only the command line has: flags that print and exit, aliases, nested actions."""
    parsers["train"].add_argument(
        "--help-settings", action="store_true", help="list every setting and exit"
    )
    parsers["confirm"].add_argument(
        "--address", dest="ray_address", action=_DeprecatedAlias, new="--ray-address",
        help=argparse.SUPPRESS,
    )  # fmt: skip
    actions = parsers["data"].add_subparsers(dest="data_command", metavar="ACTION")
    actions.required = True
    for name, command in DATA_ACTIONS.items():
        add_options(actions.add_parser(name, help=command.help), command.options)


def add_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """One argument per field of the options dataclass ``cls``."""
    fields = dataclasses.fields(cls)
    spellings = {f.name: flag_of(f) for f in fields}
    docs = field_docs(cls)
    for f in fields:
        spec: dict[str, Any] = dict(f.metadata.get("cli", {}))
        spec.pop("flag", None)
        kwargs: dict[str, Any] = {"help": cli_help(docs.get(f.name, ""), spellings)}
        default = _default(f)
        kind = str(f.type)
        if kind == "bool":
            kwargs["action"] = "store_true"
        elif "tuple[" in kind:
            kwargs["action"] = "append"
        elif kind in ("int", "Optional[int]"):
            kwargs["type"] = int
        elif kind == "float":
            kwargs["type"] = float
        if spec.pop("positional", False):
            names = [f.name]
            if default is not dataclasses.MISSING:
                kwargs.update(nargs="?", default=default)
        else:
            names = [spellings[f.name]]
            kwargs["dest"] = f.name
            if default is dataclasses.MISSING:
                kwargs["required"] = True
            else:
                kwargs["default"] = list(default) if isinstance(default, tuple) else default
        if callable(spec.get("choices")):  # a family's members: listed in the help when shown
            kwargs.update(action=_Listed, listing=spec.pop("choices"))
        kwargs.update(spec)
        kwargs["help"] += _help_tail(kwargs, default)
        parser.add_argument(*names, **kwargs)


def _help_tail(kwargs: dict[str, Any], default: Any) -> str:
    """What a flag's help adds to its field's doc: repeatable, and a default worth showing."""
    tail = " (repeatable)" if kwargs.get("action") in ("append", "extend") else ""
    shown = default not in (None, False, (), dataclasses.MISSING)
    if shown and "default" not in kwargs["help"]:
        tail += f" (default: {default})"
    return tail


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()  # read now: $MLFLOW_TRACKING_URI, $RAY_ADDRESS
    return f.default


def cli_help(doc: str, spellings: dict[str, str]) -> str:
    """A field's docstring as its flag's help: ````name```` becomes the flag of that field
    (or plain ``name``), "None:" reads "default:" (a flag not given), a closing sentence
    "From Python: ..." (what only the API takes) is left out, and it starts in lower case
    and ends without a full stop, as argparse's own help does."""

    def code(m: re.Match) -> str:
        return spellings.get(m.group(1), m.group(1))

    doc = doc.split(" From Python: ")[0].removesuffix(".")
    if doc[1:2].islower():  # argparse's own style: "show this help message and exit"
        doc = doc[:1].lower() + doc[1:]
    text = re.sub(r"``([^`]+)``", code, doc).replace("(None: ", "(default: ")
    return text.replace("%", "%%")  # argparse formats help with %


class _Listed(argparse._StoreAction):
    """A flag whose values are a family's members: read when its help is shown, not when
    the parser is built, so a broken plugin fails only a command that needs the family (its
    options check the value, exit 2)."""

    def __init__(self, option_strings, dest, listing: Callable[[], list[str]], **kwargs) -> None:
        self.listing = listing
        super().__init__(option_strings, dest, **kwargs)

    @property
    def help(self) -> str:
        try:
            names = "one of " + ", ".join(self.listing())
        except UsageError as err:  # a broken plugin: shown here, refused when run
            names = f"values unavailable: {err}"
        return f"{self._help} ({names.replace('%', '%%')})"

    @help.setter
    def help(self, text: str) -> None:
        self._help = text


class _DeprecatedAlias(argparse.Action):
    """An old flag spelling: stores into the new flag's ``dest`` and says so on stderr."""

    def __init__(self, option_strings, dest, new: str, **kwargs) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        sys.stderr.write(f"lipsweep: {option_string} is deprecated; use {self.new}\n")
        setattr(namespace, self.dest, values)
