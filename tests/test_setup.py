"""`make setup` from a clone on a stock Debian/Ubuntu python3: PEP 668 marker, no uv on PATH.

The python3 here is a copy of the test interpreter whose stdlib folder holds an
EXTERNALLY-MANAGED marker (a venv shares its base's stdlib, so the marker needs a copied
prefix: the binary plus links to every stdlib entry). pip refuses `--user` installs with it,
as on Debian, and the Makefile must bootstrap uv anyway. Needs PyPI for the uv wheel; the
pinned stack comes from uv's warm cache (hard links on the same filesystem).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _marked_python(dest: Path, with_ensurepip: bool = True) -> Path:
    """A python3 whose stdlib carries EXTERNALLY-MANAGED (optionally without ensurepip)."""
    real = Path(os.path.realpath(sys.executable))
    stdlib = Path(
        sysconfig.get_paths(vars={"base": sys.base_prefix, "installed_base": sys.base_prefix})[
            "stdlib"
        ]
    )
    lib = dest / "lib" / stdlib.name
    lib.mkdir(parents=True)
    for entry in stdlib.iterdir():
        if entry.name == "ensurepip" and not with_ensurepip:
            continue
        (lib / entry.name).symlink_to(entry)
    (lib / "EXTERNALLY-MANAGED").write_text(
        "[externally-managed]\nError=Use apt or a venv (test marker).\n"
    )
    (dest / "bin").mkdir()
    py = dest / "bin" / real.name
    shutil.copy2(real, py)
    (dest / "bin" / "python3").symlink_to(py.name)
    return dest / "bin" / "python3"


def _clone(dest: Path) -> Path:
    """The working tree's tracked and unignored files, as a fresh clone would have them."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _env(bin_dir: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(bin_dir), "/usr/local/bin", "/usr/bin", "/bin"])
    if shutil.which("uv", path=path):
        pytest.skip("uv is installed system-wide; cannot test a PATH without uv")
    # `uv run` (CI's `make test`) sets UV to its own binary and make passes MAKEFLAGS down:
    # neither may tell the Makefile under test where a uv is.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("UV_", "VIRTUAL_ENV"))
        and k not in ("UV", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")
    }
    # a new user: no ~/.local/bin/uv from an earlier pip --user; uv's cache stays the warm one
    home = bin_dir.parent.parent / "home"
    home.mkdir(exist_ok=True)
    cache = os.environ.get("UV_CACHE_DIR") or str(Path.home() / ".cache" / "uv")
    env.update(
        PATH=path, HOME=str(home), UV_CACHE_DIR=cache, PIP_DISABLE_PIP_VERSION_CHECK="1", **extra
    )
    return env


def _assert_marker_refuses_pip(py: Path, env: dict[str, str]) -> None:
    stdlib = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert (Path(stdlib) / "EXTERNALLY-MANAGED").is_file(), stdlib
    refused = subprocess.run(
        [py, "-m", "pip", "install", "--user", "uv"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0 and "externally-managed" in refused.stderr, refused.stderr


@pytest.mark.slow
def test_make_setup_on_externally_managed_python_without_uv(tmp_path):
    py = _marked_python(tmp_path / "python")
    # an unrelated venv is active, as it often is: neither uv nor Ray may trip over it
    env = _env(py.parent, VIRTUAL_ENV=str(tmp_path / "someone-elses-venv"))
    _assert_marker_refuses_pip(py, env)
    clone = _clone(tmp_path / "clone")
    proc = subprocess.run(
        ["make", "setup"], cwd=clone, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (clone / ".tools" / "bin" / "uv").is_file()
    assert not (tmp_path / "home" / ".local").exists()
    assert "does not match the project environment" not in proc.stderr
    version = subprocess.run(
        [clone / ".tools" / "bin" / "uv", "run", "--frozen", "lipsweep", "--version"],
        cwd=clone,
        env={**env, "VIRTUAL_ENV": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("lipsweep "), version.stdout


@pytest.mark.slow
def test_uv_bootstrap_without_python3_venv(tmp_path):
    """Debian's python3 without python3-venv (no ensurepip): pip --target, still no --user."""
    py = _marked_python(tmp_path / "python", with_ensurepip=False)
    env = _env(py.parent)
    clone = _clone(tmp_path / "clone")
    uv = clone / ".tools" / "bin" / "uv"
    proc = subprocess.run(
        ["make", str(uv)], cwd=clone, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("uv ")


def test_lock_holds_the_dashboard_and_the_aws_extra():
    """ray[default] (dashboard, `ray job submit`); a pinned boto3 and MLflow's auth extra (the
    basic-auth app of deploy/start_mlflow.sh) in the `aws` extra."""
    import tomllib

    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    pkgs = {p["name"]: p for p in lock["package"]}
    me = pkgs["lipsweep"]
    ray_dep = next(d for d in me["dependencies"] if d["name"] == "ray")
    assert {"default", "tune"} <= set(ray_dep["extra"])
    assert pkgs["ray"]["version"] == "2.60.0"
    for name in ("aiohttp-cors", "opencensus", "py-spy"):  # what ray[default] adds
        assert name in pkgs, name
    assert sorted(d["name"] for d in me["optional-dependencies"]["aws"]) == ["boto3", "mlflow"]
    assert "flask-wtf" in pkgs  # what mlflow[auth] adds
    boto = next(d for d in me["metadata"]["requires-dist"] if d["name"] == "boto3")
    assert boto["marker"] == "extra == 'aws'" and boto["specifier"].startswith("==")


@pytest.mark.slow
def test_sweep_dashboard_listens_on_loopback(tmp_path):
    """`lipsweep sweep --dashboard`: the local Ray instance serves its dashboard on 127.0.0.1."""
    from _sweep_helpers import ray_sandbox

    script = (
        "import logging, urllib.request, ray\n"
        "from lipsweep.sweep.driver import SweepOptions, _init_ray\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "_init_ray(SweepOptions('x', 'x', '', num_cpus=1, dashboard=True))\n"
        "url = ray._private.worker.global_worker.node.address_info['webui_url']\n"
        "print('URL', url, urllib.request.urlopen('http://' + url + '/', timeout=60).status)\n"
        "ray.shutdown()\n"
    )
    with ray_sandbox() as box:
        proc = subprocess.run(
            [sys.executable, "-c", script],
            cwd=tmp_path,
            env=box.env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    url, status = proc.stdout.split("URL ", 1)[1].split()
    assert url.startswith("127.0.0.1:") and status == "200"
    assert f"Ray dashboard: http://{url}" in proc.stderr
