"""`make setup` from a clone on a stock Debian/Ubuntu python3: PEP 668 marker, no uv on PATH.

The python3 here is a copy of a host interpreter whose stdlib folder holds an
EXTERNALLY-MANAGED marker (a venv shares its base's stdlib, so the marker needs a copied
prefix: the binary plus links to every stdlib entry, to its shared libpython, and to the
site folders it finds relative to its prefix, which is where Debian keeps pip:
``lib/python3/dist-packages``). pip refuses `--user` installs with it, as on Debian, and the
Makefile must bootstrap uv anyway. Each test runs on the interpreter behind the test suite
and, where it is another one, on the system's ``/usr/bin/python3``: a python.org or pyenv
build, a uv-managed one and a Debian/Ubuntu one each keep pip and ensurepip somewhere else,
and a host that lacks what a case needs is skipped with the reason. Needs PyPI for the uv
wheel; the pinned stack comes from uv's warm cache (hard links on the same filesystem).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]
MARKER = "EXTERNALLY-MANAGED"
SYSTEM_PYTHON = Path("/usr/bin/python3")

# What the copy needs to know of a base interpreter, asked of the interpreter itself: a venv's
# python answers for its base (sys.base_prefix); Debian's site.getsitepackages([prefix]) lists
# lib/python3/dist-packages, a python.org or uv-managed build lib/python3.X/site-packages.
_PROBE = """
import importlib.util, json, os, site, sys, sysconfig
v = {"base": sys.base_prefix, "installed_base": sys.base_prefix}
print(json.dumps({
    "executable": os.path.realpath(sys.executable),
    "prefix": sys.base_prefix,
    "stdlib": sysconfig.get_paths(vars=v)["stdlib"],
    "site": site.getsitepackages([sys.base_prefix]),
    "libdir": sysconfig.get_config_var("LIBDIR") or "",
    "pip": importlib.util.find_spec("pip") is not None,
    "ensurepip": importlib.util.find_spec("ensurepip") is not None,
    "venv": sys.prefix != sys.base_prefix,
}))
"""


def _probe(python: Path) -> dict:
    """The base interpreter of ``python`` (a venv's is the one it links to), described."""
    out = subprocess.run(
        [python, "-I", "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    info = json.loads(out)
    return _probe(Path(info["executable"])) if info["venv"] else info


def _host_pythons() -> list:
    """The interpreter behind the suite, and the system's python3 when it is another one."""
    hosts = [pytest.param(Path(sys.executable), id="suite-python")]
    if SYSTEM_PYTHON.is_file():
        mine = os.path.realpath(_probe(Path(sys.executable))["executable"])
        if os.path.realpath(SYSTEM_PYTHON) != mine:
            hosts.append(pytest.param(SYSTEM_PYTHON, id="system-python"))
    return hosts


def _link(src: Path, dest: Path) -> None:
    if src.exists() and not os.path.lexists(dest):
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.symlink_to(src)


def _marked_python(base: Path, dest: Path, with_ensurepip: bool = True) -> Path:
    """A copy of ``base`` whose stdlib carries EXTERNALLY-MANAGED (optionally without
    ensurepip), with pip where ``base`` has it. Skips when ``base`` cannot model the case."""
    info = _probe(base)
    prefix, stdlib = Path(info["prefix"]), Path(info["stdlib"])
    if not info["pip"] and not (with_ensurepip and info["ensurepip"]):
        pytest.skip(
            f"{base} (prefix {prefix}) has neither pip nor ensurepip: it cannot model a "
            "python3 that bootstraps uv (Debian's python3-pip or python3-venv)"
        )
    lib = dest / stdlib.relative_to(prefix)
    lib.mkdir(parents=True)
    for entry in stdlib.iterdir():
        if entry.name == MARKER or (entry.name == "ensurepip" and not with_ensurepip):
            continue  # never write through a link into the host's own stdlib
        (lib / entry.name).symlink_to(entry)
    (lib / MARKER).write_text("[externally-managed]\nError=Use apt or a venv (test marker).\n")
    # site folders under the prefix (Debian's pip is in lib/python3/dist-packages); only pip's
    # own packages are meant to be found there, nothing is installed into them
    for site_dir in map(Path, info["site"]):
        if site_dir.is_relative_to(prefix) and not site_dir.is_relative_to(stdlib):
            _link(site_dir, dest / site_dir.relative_to(prefix))
    # a build linked against $ORIGIN/../lib/libpython3.X.so (uv-managed, python.org --enable-shared)
    libdir = Path(info["libdir"])
    if libdir.is_dir() and libdir.is_relative_to(prefix):
        for so in libdir.glob("libpython3*.so*"):
            _link(so, dest / libdir.relative_to(prefix) / so.name)
    real = Path(info["executable"])
    (dest / "bin").mkdir(exist_ok=True)
    py = dest / "bin" / real.name
    shutil.copy2(real, py)
    if py.name != "python3":
        (dest / "bin" / "python3").symlink_to(py.name)
    return dest / "bin" / "python3"


def test_marked_python_finds_its_pip_and_the_marker(tmp_path):
    """The fixture itself, on every host interpreter (seconds): the copy reads its own
    stdlib (with the marker), imports pip where the base has it, and leaves the host alone."""
    for param in _host_pythons():
        (base,) = param.values
        info = _probe(base)
        marker = Path(info["stdlib"]) / MARKER
        before = marker.read_bytes() if marker.is_file() else None
        try:
            py = _marked_python(base, tmp_path / param.id)
        except pytest.skip.Exception:
            continue
        copy = _probe(py)
        assert Path(copy["stdlib"]).is_relative_to(tmp_path / param.id), copy
        assert (Path(copy["stdlib"]) / MARKER).read_text().startswith("[externally-managed]")
        assert copy["pip"] == info["pip"], (param.id, info, copy)
        assert (marker.read_bytes() if marker.is_file() else None) == before, marker


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
    # a base without pip (a uv-managed one may have only ensurepip) cannot install at all
    no_pip = not _probe(py)["pip"] and "No module named pip" in refused.stderr
    assert refused.returncode != 0 and ("externally-managed" in refused.stderr or no_pip), (
        refused.stderr
    )


@pytest.mark.slow
@pytest.mark.parametrize("base", _host_pythons())
def test_make_setup_on_externally_managed_python_without_uv(tmp_path, base):
    py = _marked_python(base, tmp_path / "python")
    # an unrelated venv is active, as it often is: neither uv nor Ray may trip over it
    env = _env(py.parent, VIRTUAL_ENV=str(tmp_path / "someone-elses-venv"))
    _assert_marker_refuses_pip(py, env)
    clone = _clone(tmp_path / "clone")
    try:
        _setup_and_run(clone, env, tmp_path)
    finally:  # the clone's .venv is the whole locked stack (GBs): never left in the temp dir
        shutil.rmtree(clone / ".venv", ignore_errors=True)
        shutil.rmtree(clone / ".tools", ignore_errors=True)


def _setup_and_run(clone: Path, env: dict[str, str], tmp_path: Path) -> None:
    proc = subprocess.run(
        ["make", "setup"], cwd=clone, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # a few lines (the commands make echoes), not uv's list of every package it installed
    assert len((proc.stdout + proc.stderr).splitlines()) < 20, proc.stdout + proc.stderr
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
    # what the README runs after setup, with no uv on PATH
    script = subprocess.run(
        [clone / ".venv" / "bin" / "lipsweep", "--version"],
        cwd=clone,
        env={**env, "VIRTUAL_ENV": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert script.returncode == 0 and script.stdout == version.stdout, script.stderr


@pytest.mark.slow
@pytest.mark.parametrize("base", _host_pythons())
def test_uv_bootstrap_without_python3_venv(tmp_path, base):
    """Debian's python3 without python3-venv (no ensurepip): pip --target, still no --user."""
    py = _marked_python(base, tmp_path / "python", with_ensurepip=False)
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
    """ray[default] (dashboard, `ray job submit`); a locked boto3 and MLflow's auth extra (the
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
    # a range in pyproject (lipsweep joins other environments), the pin in the lock
    assert boto["marker"] == "extra == 'aws'" and boto["specifier"].startswith(">=")
    assert pkgs["boto3"]["version"] == "1.44.5"


@pytest.mark.slow
def test_sweep_dashboard_listens_on_loopback(tmp_path):
    """`lipsweep sweep --dashboard`: the local Ray instance serves its dashboard on 127.0.0.1."""
    from _sweep_helpers import ray_sandbox

    script = (
        "import logging, urllib.request, ray\n"
        "from lipsweep.sweep.driver import _init_ray\n"
        "from lipsweep.sweep.options import SweepOptions\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "_init_ray(SweepOptions(space='smoke', num_cpus=1, dashboard=True, ray_address=None))\n"
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
