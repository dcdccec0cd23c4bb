"""Prepared datasets: `lipsweep data prepare` -> a file:// URI -> the per-node
cache, through the same pyarrow.fs code as s3:// or gs://; missing sources refused with one line;
two processes fetching at once copy once."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lipsweep.__main__ import main
from lipsweep.core.config_base import ConfigError
from lipsweep.data.loading import DataConfig, load_splits
from lipsweep.data.remote import (
    MANIFEST_SUFFIX,
    cache_root,
    check_sweep_download,
    fetch_prepared,
)

SUBSET = Path("/work/shared/data/cifar10_subset.npz")
if not SUBSET.exists():  # the CI copy of the sample
    SUBSET = Path(__file__).resolve().parents[1] / "lipsweep" / "data" / "cifar10_sample.npz"


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("LIPSWEEP_DATA_CACHE", str(root))
    return root


@pytest.fixture()
def prepared(tmp_path) -> str:
    """The CIFAR-10 subset prepared into a file:// 'bucket'; returns the dataset's URI."""
    dest = f"file://{tmp_path}/bucket/prefix"
    assert (
        main(["data", "prepare", "--dataset", "cifar10", "--source", str(SUBSET), "--dest", dest])
        == 0
    )
    return f"{dest}/cifar10.npz"


def test_prepare_writes_npz_and_manifest_then_a_trial_reads_it_through_the_cache(
    prepared, cache, tmp_path
):
    local = tmp_path / "bucket" / "prefix" / "cifar10.npz"
    manifest = (local.parent / f"cifar10.npz{MANIFEST_SUFFIX}").read_text()
    sha = hashlib.sha256(local.read_bytes()).hexdigest()
    assert f'"sha256": "{sha}"' in manifest and '"dataset": "cifar10"' in manifest
    cfg = DataConfig(dataset="cifar10", data_dir=prepared, eval_size=0)
    assert cfg.data_dir == prepared  # a URI is kept as is, not made a local path
    splits = load_splits(cfg)
    with np.load(SUBSET) as src:
        assert np.array_equal(splits.x_train.numpy(), src["x_train"])
        assert np.array_equal(splits.y_eval.numpy(), src["y_test"].astype(np.int64))
    assert cache_root() == cache and (cache / sha / "cifar10.npz").is_file()
    assert list(cache.glob(f"{sha}/.*tmp*")) == []


def test_prepare_into_a_folder_gives_a_local_data_dir(tmp_path):
    assert (
        main(
            [
                "data",
                "prepare",
                "--dataset",
                "cifar10",
                "--source",
                str(SUBSET),
                "--dest",
                str(tmp_path / "shared"),
            ]
        )
        == 0
    )
    cfg = DataConfig(dataset="cifar10", data_dir=str(tmp_path / "shared" / "cifar10.npz"))
    with np.load(SUBSET) as src:
        assert len(load_splits(cfg).x_train) == len(src["x_train"])


def test_missing_datasets_are_refused_with_one_line(tmp_path, cache, capsys):
    with pytest.raises(ConfigError, match="no such file .*lipsweep data prepare"):
        DataConfig(dataset="cifar100", data_dir=str(tmp_path / "nope.npz"))  # the driver
    with pytest.raises(ConfigError) as info:  # the first trial, for a URI
        fetch_prepared(f"file://{tmp_path}/nope/cifar100.npz", "cifar100")
    assert info.value.field == "data_dir" and "\n" not in info.value.format()
    assert "no prepared dataset at" in str(info.value) and "lipsweep data prepare" in str(
        info.value
    )
    with pytest.raises(ConfigError, match="names a prepared .npz"):
        DataConfig(dataset="cifar10", data_dir="s3://bucket/prefix/")
    with pytest.raises(ConfigError, match="not a dataset URI"):
        DataConfig(dataset="cifar10", data_dir="ftp://host/cifar10.npz")
    t0 = time.perf_counter()  # checked offline: no call to AWS from the driver
    DataConfig(dataset="cifar100", data_dir="s3://no-such-bucket-xyz/p/cifar100.npz")
    assert time.perf_counter() - t0 < 1.0
    assert (
        main(
            [
                "data",
                "prepare",
                "--dataset",
                "cifar10",
                "--source",
                str(tmp_path / "absent"),
                "--dest",
                str(tmp_path / "d"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("lipsweep data: error: --source: no such file") and err.count("\n") == 1
    assert not (tmp_path / "d").exists()
    out = tmp_path / "train"
    assert (
        main(
            [
                "train",
                "--set",
                "dataset=cifar10",
                "--set",
                f"data_dir=file://{tmp_path}/nope/cifar10.npz",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("lipsweep train: error: data_dir: no prepared dataset at")
    assert err.count("\n") == 1 and not out.exists()


def test_wrong_or_damaged_data_is_refused(prepared, cache, tmp_path):
    with pytest.raises(ConfigError, match="holds cifar10, but dataset is cifar100"):
        fetch_prepared(prepared, "cifar100")
    local = tmp_path / "bucket" / "prefix" / "cifar10.npz"
    data = bytearray(local.read_bytes())
    data[-100] ^= 0xFF
    local.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match="does not match its manifest's sha256"):
        fetch_prepared(prepared, "cifar10")
    assert [p for p in cache.rglob("*") if p.is_file() and p.suffix != ".lock"] == []


_READER = """
import logging, sys, time
from pathlib import Path
from lipsweep.data.remote import fetch_prepared
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.005)
print(fetch_prepared(sys.argv[1], "cifar10"))
"""


def test_two_processes_fetching_at_once_copy_once(prepared, cache, tmp_path):
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _READER, prepared, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "LIPSWEEP_DATA_CACHE": str(cache)},
        )
        for _ in range(2)
    ]
    time.sleep(3.0)  # both are waiting for the go file (imports done)
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert outs[0][0] == outs[1][0]
    copies = sum(err.count("copied") for _, err in outs)
    assert copies == 1, [err for _, err in outs]


def test_download_in_a_sweep_of_several_trials_is_refused():
    check_sweep_download(1, [{"download": True}])
    check_sweep_download(2, [{"download": False}, {}])
    with pytest.raises(ConfigError, match="lipsweep data prepare"):
        check_sweep_download(31, [{"download": True}])


def test_data_prepare_with_a_bad_source_creates_no_dest(tmp_path, capsys):
    """Exit 2 for an unreadable --source, and --dest not created."""
    bad = tmp_path / "bad.npz"
    bad.write_text("not a zip")
    dest = tmp_path / "prefix"  # its parent exists: the folder-option rule lets it through
    argv = ["data", "prepare", "--dataset", "cifar10", "--source", str(bad), "--dest", str(dest)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--source:" in err, err
    assert not dest.exists()


def test_a_modified_cached_dataset_is_checked_and_copied_again(tmp_path, monkeypatch, caplog):
    """A prepared dataset's cached copy is used again only after its sha256 is checked, so a
    modified copy is not."""
    import logging

    from conftest import small_npz

    from lipsweep.data.remote import read_manifest

    monkeypatch.setenv("LIPSWEEP_DATA_CACHE", str(tmp_path / "cache"))
    src = small_npz(tmp_path / "src.npz")
    dest = f"file://{tmp_path}/bucket"
    assert (
        main(["data", "prepare", "--dataset", "cifar10", "--source", str(src), "--dest", dest]) == 0
    )
    uri = f"{dest}/cifar10.npz"
    sha = read_manifest(uri).sha256
    cached = fetch_prepared(uri, "cifar10")
    assert fetch_prepared(uri, "cifar10") == cached  # unchanged: used as it is
    data = bytearray(cached.read_bytes())
    data[-100] ^= 0xFF  # same size: only the sha256 can tell
    cached.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING)
    again = fetch_prepared(uri, "cifar10")
    assert hashlib.sha256(again.read_bytes()).hexdigest() == sha
    assert "does not match its sha256" in caplog.text
