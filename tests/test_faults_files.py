"""Lost files, secrets, half-written state and path options (issue 32 sections 3, 7, 8).

Every folder option of every command is run against a file, a folder under a file, a missing
parent, symbolic links and read-only folders (EACCES as an unprivileged user, EROFS on a
read-only bind mount in a private mount namespace); write errors are real (``ulimit -f``).
Real MLflow (SQLite in the test folder), real files; nothing is mocked.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _sweep_helpers import ROOT, TINY_FLAT, mlflow_client, write_space

pytestmark = pytest.mark.faults

SUBSET = ROOT.parent / "shared" / "data" / "cifar10_subset.npz"
SECRET = "hunter2"


# -- the table: every folder option of every command -------------------------------------------
def _options(w: Path, space: Path) -> list[tuple[str, list[str], dict[str, str], str]]:
    """(name, argv with {p} for the path, env with {p}, the flag the error must name)."""
    uri = f"sqlite:///{w}/m.db"
    train = ["train", "--set", "epochs=1", "--set", "train_size=64", "--set", "eval_size=16"]
    cache_uri = f"file://{w}/nowhere/cifar10.npz"
    return [
        ("train --out", [*train, "--out", "{p}"], {}, "--out"),
        ("train --out --overwrite", [*train, "--out", "{p}", "--overwrite"], {}, "--out"),
        (
            "data prepare --dest",
            ["data", "prepare", "--dataset", "cifar10", "--source", str(SUBSET), "--dest", "{p}"],
            {},
            "--dest",
        ),
        (
            "export --out",
            ["export", "--experiment", "e", "--out", "{p}", "--tracking-uri", uri],
            {},
            "--out",
        ),
        (
            "export --out --force",
            ["export", "--experiment", "e", "--out", "{p}", "--force", "--tracking-uri", uri],
            {},
            "--out",
        ),
        (
            "report --out",
            ["report", "--experiment", "e", "--out", "{p}", "--tracking-uri", uri],
            {},
            "--out",
        ),
        (
            "sweep --storage",
            ["sweep", str(space), "--storage", "{p}", "--tracking-uri", uri],
            {},
            "--storage",
        ),
        (
            "sweep $LIPSWEEP_STORAGE",
            ["sweep", str(space), "--tracking-uri", uri],
            {"LIPSWEEP_STORAGE": "{p}"},
            "LIPSWEEP_STORAGE",
        ),
        ("demo --out", ["demo", "--out", "{p}", "--tracking-uri", uri], {}, "--out"),
        ("demo --storage", ["demo", "--storage", "{p}", "--tracking-uri", uri], {}, "--storage"),
        (
            "train $LIPSWEEP_DATA_CACHE",
            [
                "train",
                "--set",
                "dataset=cifar10",
                "--set",
                f"data_dir={cache_uri}",
                "--out",
                str(w / "fresh"),
            ],
            {"LIPSWEEP_DATA_CACHE": "{p}"},
            "LIPSWEEP_DATA_CACHE",
        ),
    ]


def run_entries(entries: list[dict]) -> list[tuple[int, str]]:
    """Run ``lipsweep`` in this process for each {argv, env}: (exit status, stderr). Also the
    body of the subprocesses that run the table as another user or in another mount namespace."""
    from lipsweep.__main__ import main

    results = []
    for entry in entries:
        saved = {k: os.environ.get(k) for k in entry["env"]}
        os.environ.update(entry["env"])
        logging.getLogger().handlers.clear()  # main's basicConfig binds the stream below
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    rc = main(entry["argv"])
                except SystemExit as exc:
                    rc = exc.code
                except Exception as exc:  # noqa: BLE001 - a traceback is what the test catches
                    rc, err = -1, io.StringIO(f"Traceback: {type(exc).__name__}: {exc}\n")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        results.append((rc, err.getvalue()))
    return results


def _tree(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` (links not followed): its kind and, for a file, bytes."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = p.read_bytes().hex()[:64] + f"/{p.stat().st_size}"
    return out


def _workspace(base: Path) -> tuple[Path, Path]:
    """(work folder, search space): the work folder holds a file, a folder, a link to it and
    a dangling link, each a path the table aims at."""
    w = base / "work"
    (w / "realdir").mkdir(parents=True)
    (w / "afile").write_text("mine\n")
    (w / "link").symlink_to(w / "realdir")
    (w / "dangling").symlink_to(w / "gone")
    (w / "ro" / "inside").mkdir(parents=True)
    (w / "home").mkdir()
    inputs = base / "inputs"
    inputs.mkdir()
    return w, write_space(inputs, "  - regularizer: none\n", epochs=1)


CASES = {
    "a file": "{w}/afile",
    "a folder under a file": "{w}/afile/sub",
    "a missing parent": "{w}/nope/sub",
    "a symlink to a folder": "{w}/link",
    "a dangling symlink": "{w}/dangling",
}
RO_PATHS = ("{w}/ro/new", "{w}/ro/inside")  # a folder to make in it, a folder inside it


def _entries(w: Path, space: Path, template: str) -> tuple[list[dict], list[tuple[str, str]]]:
    entries, labels = [], []
    p = template.format(w=w)
    for name, argv, env, flag in _options(w, space):
        entries.append(
            {
                "argv": [a.replace("{p}", p) for a in argv],
                "env": {k: v.replace("{p}", p) for k, v in env.items()},
            }
        )
        labels.append((name, flag))
    return entries, labels


def _check(results, labels, case: str, why: str = "") -> None:
    for (rc, err), (name, flag) in zip(results, labels):
        lines = err.splitlines()
        where = f"{name} at {case}: rc={rc} stderr={err[-1500:]!r}"
        assert rc == 2, where
        assert len(lines) == 1 and ": error: " in lines[0], where
        assert lines[0].startswith("lipsweep "), where
        assert f"error: {flag}" in lines[0] or f" {flag} " in lines[0], where
        assert why in lines[0], where


def test_every_folder_option_refuses_a_file_a_link_a_missing_parent(tmp_path, monkeypatch):
    """Exit 2, one line naming the option, nothing written: 11 options x 5 paths."""
    w, space = _workspace(tmp_path)
    monkeypatch.chdir(w)
    monkeypatch.setenv("HOME", str(w / "home"))
    before = _tree(tmp_path)
    for case, template in CASES.items():
        entries, labels = _entries(w, space, template)
        _check(run_entries(entries), labels, case)
        assert _tree(tmp_path) == before, case


def _subprocess_table(w: Path, space: Path, wrap: list[str]) -> list:
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from test_faults_files import run_entries; "
        "print(json.dumps(run_entries(json.loads(sys.stdin.read()))))"
    )
    all_entries, all_labels = [], []
    for template in RO_PATHS:
        entries, labels = _entries(w, space, template)
        all_entries += entries
        all_labels += [(n, f, template) for n, f in labels]
    env = {
        **os.environ,
        "HOME": str(w / "home"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
        "LIPSWEEP_TEST_THREADS": "1",
    }
    env.pop("LIPSWEEP_STORAGE", None)
    env.pop("LIPSWEEP_DATA_CACHE", None)
    proc = subprocess.run(
        [*wrap, sys.executable, "-c", code, str(ROOT / "tests")],
        input=json.dumps(all_entries),
        capture_output=True,
        text=True,
        cwd=w,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return list(zip(json.loads(proc.stdout.strip().splitlines()[-1]), all_labels))


NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
NO_DAC += ["--inh-caps=-dac_override,-dac_read_search"]
"""Root without the capabilities that let it write where permissions say no."""


def test_every_folder_option_refuses_a_folder_without_write_permission(tmp_path):
    """EACCES: ro/ has mode 555. Root passes permission checks, so as root the table runs
    without CAP_DAC_OVERRIDE (``setpriv``), which makes the mode bind it too."""
    wrap = NO_DAC if os.geteuid() == 0 else []
    if wrap and shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: permission checks cannot bind root here")
    w, space = _workspace(tmp_path)
    try:
        (w / "ro" / "inside").chmod(0o555)
        (w / "ro").chmod(0o555)
        before = _tree(tmp_path)
        for res, (name, flag, template) in _subprocess_table(w, space, wrap):
            _check([res], [(name, flag)], template, "Permission denied")
        assert _tree(tmp_path) == before
    finally:
        (w / "ro").chmod(0o755)
        (w / "ro" / "inside").chmod(0o755)


def test_every_folder_option_refuses_a_read_only_filesystem(tmp_path):
    """EROFS: ro/ is bind-mounted read-only in a private mount namespace (``unshare -m``)."""
    w, space = _workspace(tmp_path)
    ro = w / "ro"
    mount = f"mount --bind -o ro '{ro}' '{ro}'"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"{mount} && touch '{ro}/x'"], capture_output=True, text=True
    )
    if "Read-only file system" not in probe.stderr:
        pytest.skip(f"no read-only bind mount here (unshare -m): {probe.stderr.strip()[:200]}")
    before = _tree(tmp_path)
    wrap = ["unshare", "-m", "sh", "-c", f'{mount} && exec "$@"', "sh"]
    for res, (name, flag, template) in _subprocess_table(w, space, wrap):
        _check([res], [(name, flag)], template, "Read-only file system")
    assert _tree(tmp_path) == before
