"""The ``lipsweep`` command line: train, sweep, pareto, export, confirm, demo, models, spaces.

Each subcommand maps to one ``cmd_*`` function in :data:`COMMANDS` (a test checks the map
against the parser). Usage and configuration errors exit with status 2 and one line naming the
offending field or flag; configuration is validated before anything is started or written.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from typing import Optional, Sequence

from lipsweep.cli.commands import COMMANDS, EXIT_FAILURE, EXIT_USAGE
from lipsweep.cli.parser import build_parser
from lipsweep.core.config_base import ConfigError, UsageError
from lipsweep.core.logs import DATE_FORMAT, LOG_FORMAT, redact_record
from lipsweep.core.redact import redact_uri

__all__ = [
    "COMMANDS",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "build_parser",
    "error_line",
    "flag_spellings",
    "main",
]

_log = logging.getLogger("lipsweep")


def error_line(command: str, message: object) -> str:
    """The one line a failed command prints: credentials of URIs redacted, and every
    character that is not printable (a newline in a file name, a tab, an escape) written as
    ``repr`` writes it, so the message stays on one line and nothing in it can pass for
    lipsweep's own output."""
    text = "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
        for c in redact_uri(message)
    )
    return f"lipsweep {command}: error: {text}\n"


def flag_spellings(parser: argparse.ArgumentParser, command: str) -> dict[str, str]:
    """Option field -> how ``command``'s line spells it (``num_cpus`` -> ``--num-cpus``,
    ``overrides`` -> ``--set``, a positional -> its metavar, ``SPACE``)."""
    names: dict[str, str] = {}
    parsers = [_subcommands(parser)[command]]
    while parsers:  # the command's flags, and its actions' (data prepare)
        for action in parsers.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
            elif action.help != argparse.SUPPRESS:  # not a deprecated alias
                longest = max(action.option_strings, key=len, default=None)
                names.setdefault(action.dest, longest or action.metavar or action.dest.upper())
    return names


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def cli_error(err: ConfigError, spellings: dict[str, str]) -> ConfigError:
    """``err`` naming the flag of the option field it names, and of each option field its
    message names (``run_id`` -> ``--run-id``); a setting of a file (or of an option that
    holds settings, ``--set``) stays as it is, its option shown by its flag."""
    if err.source is not None:
        return err.with_source(spellings.get(err.source, err.source))
    if err.field not in spellings:
        return err
    message = err.message
    for name, spelling in spellings.items():
        if "_" in name:  # an identifier, never a word of prose
            message = re.sub(rf"\b{name}\b", spelling, message)
    return ConfigError(spellings[err.field], message)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from lipsweep.core.stdio import reader_gone_safe

    with reader_gone_safe():  # `lipsweep ... | head -1`: a closed stdout never kills the work
        return _main(argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format=LOG_FORMAT,
        datefmt=DATE_FORMAT,
        stream=sys.stderr,
    )
    for handler in logging.getLogger().handlers:  # no credential of a URI in any log line
        handler.addFilter(redact_record)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as err:
        shown = cli_error(err, flag_spellings(parser, args.command))
        sys.stderr.write(error_line(args.command, shown.format()))
        return EXIT_USAGE
    except UsageError as err:
        sys.stderr.write(error_line(args.command, err.cli_text or err))
        return EXIT_USAGE
    except OSError as err:  # WriteError (a full disk, ulimit -f: its temporary is gone), EIO
        _log.debug("write failed", exc_info=True)
        sys.stderr.write(error_line(args.command, err))
        return EXIT_FAILURE
