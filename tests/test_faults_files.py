"""Lost files, secrets, half-written state and path options.

Every folder option of every command is run against a file, a folder under a file, a missing
parent, symbolic links and read-only folders (EACCES as an unprivileged user, EROFS on a
read-only bind mount in a private mount namespace); write errors are real (``ulimit -f``).
Real MLflow (SQLite in the test folder), real files; nothing is mocked.
"""

from __future__ import annotations

import contextlib
import errno
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
from _sweep_helpers import NONE, ROOT, empty_store, mlflow_client, write_space
from conftest import small_npz

pytestmark = [pytest.mark.faults, pytest.mark.ray]

SUBSET = ROOT.parent / "shared" / "data" / "cifar10_subset.npz"
SECRET = "hunter2"


# -- the table: every folder option of every command -----------------------------------------------
def _options(w: Path, space: Path) -> list[tuple[str, list[str], dict[str, str], str]]:
    """(name, argv with {p} for the path, env with {p}, the flag the error must name).

    The store holds a finished sweep of experiment ``e`` and the bucket a prepared dataset
    (both made by :func:`_workspace`), so that each command would get as far as its folder
    option: a missing store or dataset would be refused first (naming ``--tracking-uri`` or
    ``data_dir``) and the path under test never reached."""
    uri = f"sqlite:///{w.parent / 'inputs' / 'store' / 'm.db'}"
    train = ["train", "--set", "epochs=1", "--set", "train_size=64", "--set", "eval_size=16"]
    cache_uri = f"file://{w.parent / 'inputs' / 'bucket'}/cifar10.npz"
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
        (
            "confirm $LIPSWEEP_CONFIRM_STATE",
            ["confirm", "--experiment", "e", "--tracking-uri", uri],
            {"LIPSWEEP_CONFIRM_STATE": "{p}"},
            "LIPSWEEP_CONFIRM_STATE",
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
    a dangling link, each a path the table aims at. Beside it, ``inputs/`` holds the space,
    an MLflow store with a finished sweep (``e``) and a prepared dataset bucket."""
    from lipsweep.__main__ import main

    w = base / "work"
    (w / "realdir").mkdir(parents=True)
    (w / "afile").write_text("mine\n")
    (w / "link").symlink_to(w / "realdir")
    (w / "dangling").symlink_to(w / "gone")
    (w / "ro" / "inside").mkdir(parents=True)
    (w / "home").mkdir()
    inputs = base / "inputs"
    inputs.mkdir()
    _sweep_store(inputs, "e")
    src = small_npz(inputs / "src.npz")
    argv = ["data", "prepare", "--dataset", "cifar10", "--source", str(src)]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*argv, "--dest", f"file://{inputs / 'bucket'}"]) == 0
    return w, write_space(inputs, [NONE], epochs=1)


CASES = {
    "a file": "{w}/afile",
    "a folder under a file": "{w}/afile/sub",
    "a missing parent": "{w}/nope/sub",
    "a symlink to a folder": "{w}/link",
    "a dangling symlink": "{w}/dangling",
}
RO_PATHS = ("{w}/ro/new", "{w}/ro/inside")  # a folder to make in it, a folder inside it


def _entries(
    w: Path, space: Path, template: str, skip: tuple[str, ...] = ()
) -> tuple[list[dict], list[tuple[str, str]]]:
    entries, labels = [], []
    p = template.format(w=w)
    for name, argv, env, flag in _options(w, space):
        if name in skip:
            continue
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


MAKES_PARENTS = ("report --out",)
"""Folder options whose missing parents are made (a report is rewritten at will)."""


def test_every_folder_option_refuses_a_file_a_link_a_missing_parent(tmp_path, monkeypatch):
    """Exit 2, one line naming the option, nothing written: 12 options x 5 paths, less the
    missing parent of ``report --out``, which is made."""
    w, space = _workspace(tmp_path)
    monkeypatch.chdir(w)
    monkeypatch.setenv("HOME", str(w / "home"))
    before = _tree(tmp_path)
    for case, template in CASES.items():
        skip = MAKES_PARENTS if case == "a missing parent" else ()
        entries, labels = _entries(w, space, template, skip)
        _check(run_entries(entries), labels, case)
        assert _tree(tmp_path) == before, case
    others = tuple(o[0] for o in _options(w, space) if o[0] not in MAKES_PARENTS)
    report, _ = _entries(w, space, CASES["a missing parent"], skip=others)
    [(rc, err)] = run_entries(report)
    assert rc == 0, err
    assert (w / "nope" / "sub" / "report.md").is_file()


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
    env.pop("LIPSWEEP_CONFIRM_STATE", None)
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


# -- train --overwrite -----------------------------------------------------------------------------
def _main(argv: list[str], capsys) -> tuple[int, list[str]]:
    from lipsweep.__main__ import main

    rc = main(argv)
    return rc, capsys.readouterr().err.strip().splitlines()


def test_train_overwrite_deletes_only_a_folder_train_made(tmp_path, monkeypatch, capsys):
    """``train --out . --overwrite`` deleted the working folder's files, then crashed."""
    from lipsweep.api._train import TRAIN_MARKER, prepare_out

    w = tmp_path / "work"
    (w / "sub").mkdir(parents=True)
    (w / "notes.txt").write_text("mine\n")
    (w / "sub" / "data.csv").write_text("1,2\n")
    (w / "mine").mkdir()
    (w / "mine" / "config.json").write_text("{}")  # looks like a run, made by someone else
    monkeypatch.chdir(w)
    before = _tree(tmp_path)
    for out, why in (
        (".", "working folder"),
        ("..", "working folder"),
        (str(w), "working folder"),
        ("mine", f"no {TRAIN_MARKER} file"),
    ):
        rc, err = _main(["train", "--set", "epochs=1", "--out", out, "--overwrite"], capsys)
        assert rc == 2 and len(err) == 1 and why in err[0], (out, err)
        assert _tree(tmp_path) == before, out
    # a folder train made (its marker) is replaced, and keeps being one
    ours = w / "runs" / "old"
    prepare_out(ours, '{"epochs": 1}', overwrite=False)
    (ours / "epoch_0001").mkdir()
    prepare_out(ours, '{"epochs": 2}', overwrite=True)
    assert sorted(p.name for p in ours.iterdir()) == [TRAIN_MARKER, "config.json"]
    # a folder of the user's own that train writes into never gets the marker
    prepare_out(w / "mine", '{"epochs": 1}', overwrite=False)
    assert not (w / "mine" / TRAIN_MARKER).exists()


# -- data prepare never rewrites its source --------------------------------------------------------


def test_data_prepare_never_rewrites_its_source(tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    src = small_npz(d / "cifar10.npz")
    other = tmp_path / "e"
    other.mkdir()
    os.link(src, other / "cifar10.npz")  # a hard link: the same file under --dest
    before = _tree(tmp_path)
    for source, dest in ((src, d), (src, other), (d / ".." / "d" / "cifar10.npz", d)):
        argv = ["data", "prepare", "--dataset", "cifar10", "--source", str(source)]
        rc, err = _main([*argv, "--dest", str(dest)], capsys)
        assert rc == 2 and len(err) == 1 and "would overwrite --source" in err[0], err
        assert "--dest" in err[0] and _tree(tmp_path) == before

    assert "label_names" in np.load(src, allow_pickle=False).files


# -- a manifest names a plain file inside the cache ------------------------------------------------
@pytest.mark.parametrize(
    "field, value",
    [
        ("file", "../../escaped.npz"),
        ("file", "/tmp/lipsweep-escaped.npz"),
        ("file", "a/b.npz"),
        ("file", ".."),
        ("file", ".hidden.npz"),
        ("sha256", "../../" + "0" * 58),
    ],
)
def test_a_manifest_cannot_name_a_path_outside_the_cache(tmp_path, monkeypatch, field, value):
    from lipsweep.__main__ import main
    from lipsweep.core.config_base import ConfigError
    from lipsweep.data.remote import MANIFEST_SUFFIX, fetch_prepared

    Path("/tmp/lipsweep-escaped.npz").unlink(missing_ok=True)  # left by a run of old code
    bucket = tmp_path / "bucket"
    src = small_npz(tmp_path / "src.npz")
    argv = ["data", "prepare", "--dataset", "cifar10", "--source", str(src)]
    assert main([*argv, "--dest", f"file://{bucket}"]) == 0
    manifest = bucket / f"cifar10.npz{MANIFEST_SUFFIX}"
    doc = json.loads(manifest.read_text())
    doc[field] = value
    manifest.write_text(json.dumps(doc))
    cache = tmp_path / "deep" / "er" / "cache"
    cache.mkdir(parents=True)
    monkeypatch.setenv("LIPSWEEP_DATA_CACHE", str(cache))
    before = _tree(tmp_path)
    with pytest.raises(ConfigError) as err:
        fetch_prepared(f"file://{bucket}/cifar10.npz", "cifar10")
    assert err.value.field == "data_dir" and field in err.value.message
    assert _tree(tmp_path) == before and not Path("/tmp/lipsweep-escaped.npz").exists()


# -- report: its files, an all-zero histogram, folder names ----------------------------------------
def _sweep_store(tmp_path: Path, experiment: str) -> tuple[str, str]:
    """A real MLflow store holding one finished sweep of 2 seeds whose per-image Jacobians
    are all zero (a constant model); returns (uri, parent run id)."""
    from _sweep_helpers import mlflow_client

    from lipsweep.tracking.schema import TAG_KIND, TAG_PARENT

    uri = empty_store(tmp_path / "store" / "m.db")
    c = mlflow_client(uri)
    exp = c.create_experiment(experiment, artifact_location=str(tmp_path / "store" / "art"))
    parent = c.create_run(exp, tags={TAG_KIND: "sweep"}).info.run_id
    npz = tmp_path / "store" / "lipschitz.npz"
    np.savez(npz, jacobian_norm=np.zeros(16), jacobian_per_margin=np.zeros(16))
    for seed in (0, 1):
        run = c.create_run(exp, tags={TAG_KIND: "trial", TAG_PARENT: parent}).info.run_id
        c.log_param(run, "regularizer", "none")
        c.log_param(run, "seed", str(seed))
        for key, value in (
            ("acc_clean", 10.0 + seed),
            ("acc_pgd_4", 5.0),
            ("acc_aa_2", 1.0),
            ("lip_jacobian_median", 0.0),
        ):
            c.log_metric(run, key, value)
        c.log_artifact(run, str(npz), "lipschitz")
        c.set_terminated(run)
    c.set_terminated(parent)
    return uri, parent


def test_report_logs_only_its_files_and_stays_under_reports(tmp_path, monkeypatch, capsys):
    """``report --out .`` in a home folder logged .env and .ssh/ to MLflow; an experiment named
    ``../x`` wrote its report outside reports/; all-zero Jacobians raised IndexError."""

    uri, parent = _sweep_store(tmp_path, "../escape")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".env").write_text(f"PASSWORD={SECRET}\n")
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    (home / "holiday.png").write_bytes(b"\x89PNG mine")
    monkeypatch.chdir(home)
    argv = ["report", "--experiment", "../escape", "--tracking-uri", uri]
    rc, err = _main([*argv, "--out", "."], capsys)
    assert rc == 0, err
    c = mlflow_client(uri)
    logged = sorted(a.path for a in c.list_artifacts(parent, "report"))
    drawn = ["report/jacobian_by_arm.png", "report/pareto_scatter.png", "report/report.md"]
    assert logged == drawn, logged  # not .env, .ssh/ nor holiday.png; no ratio figure at 0
    assert "‖J_f‖ / margin is zero" in (home / "report.md").read_text()
    before = _tree(tmp_path)
    rc, err = _main(argv, capsys)
    assert rc == 0, err
    new = sorted(set(_tree(tmp_path)) - set(before))
    (folder,) = (home / "reports").iterdir()
    assert folder.name.startswith("_escape-") and all(
        p.startswith("home/reports/" + folder.name) or p == "home/reports" for p in new
    ), new


def test_a_histogram_of_equal_values_is_drawn(tmp_path):

    from lipsweep.decide.report import _hist_figure

    assert not _hist_figure({"a": np.zeros(4)}, tmp_path / "z.png", "x", "t", True)
    assert _hist_figure({"a": np.zeros(4)}, tmp_path / "lin.png", "x", "t", False)
    assert _hist_figure({"a": np.full(4, 3.0)}, tmp_path / "log.png", "x", "t", True)
    assert not _hist_figure({"a": np.full(4, np.nan)}, tmp_path / "n.png", "x", "t", False)


def test_safe_folder_name_stays_inside():
    from lipsweep.core.paths import safe_folder_name

    for name in ("../x", "/abs/x", "a/b", "..", ".", "", "a\nb", "é", "x" * 300):
        safe = safe_folder_name(name)
        assert safe and "/" not in safe and not safe.startswith(".") and len(safe) < 120, name
        assert (Path("/r") / safe).resolve().parent == Path("/r"), name
    assert safe_folder_name("smoke-1_a.b") == "smoke-1_a.b"
    assert safe_folder_name("a/b") != safe_folder_name("a_b")


# -- credentials in a URI's query ------------------------------------------------------------------
def test_credentials_in_a_uri_query_are_never_shown_or_stored(tmp_path, capsys):

    from lipsweep.core.redact import redact_uri
    from lipsweep.tracking import Tracker

    for uri, shown in (
        (f"postgresql://u@h/db?password={SECRET}", "postgresql://***@h/db?password=***"),
        (f"postgresql://h/db?sslmode=require&password={SECRET}", "sslmode=require&password=***"),
        (f"s3://b/k.npz?access_key=AK&secret_key={SECRET}", "access_key=***&secret_key=***"),
        (f"https://h/x?X-Amz-Signature={SECRET}&X-Amz-Date=1", "X-Amz-Signature=***&X-Amz-Date=1"),
        (f"http://h/x?token={SECRET}#frag", "token=***#frag"),
        ("mysql://u:" + f"p@{SECRET}@h/db", "mysql://***@h/db"),
    ):
        assert SECRET not in redact_uri(uri) and shown in redact_uri(uri), redact_uri(uri)
    assert redact_uri("sqlite:////a@b?mode=ro") == "sqlite:////a@b?mode=ro"
    uri = f"postgresql://u@127.0.0.1:1/db?password={SECRET}"
    rc, err = _main(["pareto", "--experiment", "e", "--tracking-uri", uri], capsys)
    assert rc == 2 and len(err) == 1 and "--tracking-uri" in err[0], err
    assert SECRET not in err[0] and "password=***" in err[0], err
    # stored: a dataset URI with a key in it, as an MLflow param of a run
    store = empty_store(tmp_path / "m.db")
    tracker = Tracker(store, "e")
    run = mlflow_client(store).create_run(tracker.experiment_id).info.run_id
    tracker.log_params(run, {"data_dir": f"s3://b/c.npz?secret_key={SECRET}"})
    tracker.flush(30)
    assert (
        mlflow_client(store).get_run(run).data.params["data_dir"] == "s3://b/c.npz?secret_key=***"
    )


# -- a newline in a file name ----------------------------------------------------------------------
def test_a_newline_in_an_image_name_stays_on_one_line(tmp_path, capsys):
    root = tmp_path / "imgs"
    for split in ("train", "test"):
        (root / split / "c0").mkdir(parents=True)
    (root / "train" / "c0" / "x\nlipsweep train: done.png").write_bytes(b"not an image")
    (root / "test" / "c0" / "y.png").write_bytes(b"not an image")
    argv = ["train", "--set", "dataset=imagefolder", "--set", f"data_dir={root}"]
    rc, err = _main([*argv, "--out", str(tmp_path / "out")], capsys)
    assert rc == 2 and len(err) == 1, err
    assert "x\\nlipsweep train: done.png" in err[0], err


# -- half-written state under ulimit -f ------------------------------------------------------------
def _limited(
    cwd: Path, limit: int, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``lipsweep ARGV`` with ``ulimit -f`` at ``limit`` bytes (Python ignores SIGXFSZ, so a
    write past it fails with EFBIG, as a full disk fails with ENOSPC)."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "LIPSWEEP_TEST_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "lipsweep", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=cap,
    )


def _one_line_exit_1(proc: subprocess.CompletedProcess, needle: str) -> None:
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [ln for ln in err if ": error: " in ln]
    assert len(errors) == 1 and needle in errors[0], proc.stderr[-3000:]


def test_write_errors_leave_no_temporary_and_print_one_line(tmp_path):
    src = small_npz(tmp_path / "src.npz")
    dest = tmp_path / "dest"
    dest.mkdir()
    argv = ["data", "prepare", "--dataset", "cifar10", "--source", str(src), "--dest", str(dest)]
    _one_line_exit_1(_limited(tmp_path, 50_000, *argv), "File too large")
    assert list(dest.iterdir()) == []  # neither the npz nor its .tmp-PID
    out = tmp_path / "run"
    train = ["train", "--out", str(out), "--set", "epochs=1", "--set", "train_size=64"]
    train += [
        "--set",
        "eval_size=16",
        "--set",
        "depth=1",
        "--set",
        "embed_dim=64",
        "--set",
        "num_heads=4",
    ]
    _one_line_exit_1(_limited(tmp_path, 100_000, *train), "could not write checkpoint")
    assert not [p for p in out.rglob("*") if ".tmp" in p.name], list(out.rglob("*"))


def test_a_full_disk_during_export_names_the_file_not_the_tracking_uri(tmp_path):
    """``export`` under ``ulimit -f`` while it downloads the checkpoint: exit 1, one line
    naming the local file and EFBIG; never exit 2 blaming ``--tracking-uri`` (MLflow's own
    download hides the cause behind "please ensure that the path is correct")."""
    uri, _ = _sweep_store(tmp_path, "e")
    c = mlflow_client(uri)
    [run] = c.search_runs([c.get_experiment_by_name("e").experiment_id], "params.seed = '0'")
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text("{}")
    (ck / "model.safetensors").write_bytes(os.urandom(1_000_000))
    c.log_artifacts(run.info.run_id, str(ck), "checkpoint")
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "out"
    argv = ["export", "--experiment", "e", "--run-id", run.info.run_id, "--out", str(out)]
    argv += ["--tracking-uri", uri]
    proc = _limited(tmp_path, 300_000, *argv, env={"TMPDIR": str(tmp_path / "tmp")})
    _one_line_exit_1(proc, "model.safetensors: [Errno 27] File too large")
    assert str(tmp_path / "tmp") in proc.stderr and "--tracking-uri" not in proc.stderr
    assert not out.exists() and list((tmp_path / "tmp").iterdir()) == []
    # the rule, on the errors themselves: a local file's OSError names the file; one that
    # names a remote URI, or any other failure, is MLflow's
    from lipsweep.tracking.schema import LocalIOError, tracking_error

    full = OSError(errno.ENOSPC, "No space left on device")
    assert isinstance(tracking_error("x", "u", full, local="/d"), LocalIOError)
    assert "/d: [Errno 28] No space left" in str(tracking_error("x", "u", full, local="/d"))
    remote = OSError(errno.EACCES, "Access denied", "s3://bucket/key")
    for exc in (remote, ValueError("bad request")):
        err = tracking_error("x", "u", exc)
        assert not isinstance(err, LocalIOError) and str(err).startswith("MLflow x failed at u")


# -- the Ray token file of --dashboard -------------------------------------------------------------
def test_the_dashboard_token_file_is_readable_by_its_owner_only(tmp_path, monkeypatch):
    """Ray writes ~/.ray/auth_token with the umask (0644 under 022); lipsweep writes it first."""
    from lipsweep.sweep.ray_token import private_token_file

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    old = os.umask(0o022)
    try:
        path = private_token_file()
    finally:
        os.umask(old)
    assert path == tmp_path / ".ray" / "auth_token" and len(path.read_text()) >= 32
    assert stat_mode(path) == 0o600 and stat_mode(path.parent) == 0o700
    path.chmod(0o644)  # as Ray 2.60 leaves it
    token = path.read_text()
    assert private_token_file() == path and stat_mode(path) == 0o600
    assert path.read_text() == token  # the token is kept, only its mode tightened


def test_sweep_dashboard_makes_the_token_file_private_before_ray_starts(tmp_path, monkeypatch):
    """The driver's side of the test above: ``sweep --dashboard`` starting a local Ray calls
    it first. ``ray.init`` is stood in for (it raises, as a Ray that cannot start does), so no
    Ray runs; the file must already be 600 by then."""
    import ray

    from lipsweep.api.options import SweepOptions
    from lipsweep.sweep import local_ray
    from lipsweep.sweep.driver import _init_ray

    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(local_ray.MARKER, "restored-by-monkeypatch")  # start() sets it
    monkeypatch.setattr(ray, "is_initialized", lambda: False)

    def no_ray(**kwargs: object) -> None:
        raise RuntimeError("ray.init stood in for by the test")

    monkeypatch.setattr(ray, "init", no_ray)
    opts = SweepOptions(space="smoke", dashboard=True, ray_address=None)
    old = os.umask(0o022)
    try:
        with pytest.raises(OSError, match="could not start a local Ray"):
            _init_ray(opts)
    finally:
        os.umask(old)
    path = tmp_path / ".ray" / "auth_token"
    assert stat_mode(path) == 0o600 and stat_mode(path.parent) == 0o700


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777
