"""Entry script for ``ray submit``: run ``lipsweep`` on the Ray head with the cluster's settings.

    ray submit ray_cluster.yaml deploy/sweep_entry.py -- search_spaces/paper_cifar100.yaml [flags]
    ray submit ray_cluster.yaml deploy/sweep_entry.py -- pareto --experiment paper_cifar100

``ray submit`` copies this file to the head and runs ``python ~/sweep_entry.py ARGS`` in the SSH
user's login shell. The head's start commands (``deploy/start_mlflow.sh start``) wrote
``~/lipsweep.env`` with the tracking URI of the head's MLflow server, the shared Tune storage path,
``RAY_ADDRESS=auto`` and ``RAY_AUTH_MODE=token``; this script loads that file (variables already
set in the environment win, so ``ray job submit --runtime-env-json`` can override them), changes
to the project copy that ``ray up`` mounted (so ``search_spaces/...`` resolves there) and replaces
itself with ``python -m lipsweep ARGS``. A first argument that is a lipsweep subcommand is passed
through (every one the ``lipsweep`` parser has: :data:`SUBCOMMANDS`, which
``tests/test_cluster_config.py`` checks against the parser so that the two cannot drift);
anything else is a ``sweep``. Flags given after ``--`` win over the file.

It is self-contained (standard library only) because ``ray submit`` copies this one file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV_FILE = "~/lipsweep.env"
# Every subcommand of `lipsweep` (lipsweep/cli/parser.py); a test compares this with its parser.
SUBCOMMANDS = (
    "train", "sweep", "pareto", "export", "report", "confirm", "demo", "models", "data",
    "bench-search", "spaces",
)  # fmt: skip
REQUIRED = ("MLFLOW_TRACKING_URI", "LIPSWEEP_STORAGE")


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (``#`` comments, blank lines and an ``export`` prefix allowed)."""
    out: dict[str, str] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        key, sep, value = line.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ValueError(f"{path}:{n}: expected KEY=VALUE, got {raw!r}")
        out[key.strip()] = value.strip().strip("'\"")
    return out


def lipsweep_argv(args: list[str]) -> list[str]:
    """``ARGS`` -> the argument list of ``python -m lipsweep``."""
    if not args or args[0] in ("-h", "--help"):
        raise SystemExit(__doc__)
    return args if args[0] in SUBCOMMANDS else ["sweep", *args]


def main(argv: list[str]) -> int:
    env_path = Path(os.environ.get("LIPSWEEP_ENV_FILE", ENV_FILE)).expanduser()
    if env_path.is_file():
        try:
            settings = read_env_file(env_path)
        except ValueError as err:
            sys.stderr.write(f"sweep_entry.py: {err}\n")
            return 2
        for key, value in settings.items():
            os.environ.setdefault(key, value)
    missing = [k for k in REQUIRED if not os.environ.get(k)]
    if missing:
        sys.stderr.write(
            f"sweep_entry.py: {', '.join(missing)} not set and {env_path} "
            f"{'lacks them' if env_path.is_file() else 'does not exist'}; run this "
            "on the head of a cluster started with `ray up ray_cluster.yaml` (its "
            "start commands write the file), or export them.\n"
        )
        return 2
    project = Path(os.environ.get("LIPSWEEP_PROJECT_DIR", "~/lipsweep")).expanduser()
    if project.is_dir():
        os.chdir(project)
    args = lipsweep_argv(argv)
    sys.stderr.write(
        f"sweep_entry.py: lipsweep {' '.join(args)}\n"
        f"  MLFLOW_TRACKING_URI={os.environ['MLFLOW_TRACKING_URI']}\n"
        f"  LIPSWEEP_STORAGE={os.environ['LIPSWEEP_STORAGE']}\n"
        f"  RAY_ADDRESS={os.environ.get('RAY_ADDRESS', '')}"
        f"  RAY_AUTH_MODE={os.environ.get('RAY_AUTH_MODE', '')}  cwd={os.getcwd()}\n"
    )
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "lipsweep", *args])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
