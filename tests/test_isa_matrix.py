"""benchmarks/isa_matrix.py: the numerics tests under each CPU kernel choice."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import bench_module

ROOT = Path(__file__).resolve().parents[1]
isa_matrix = bench_module("isa_matrix")


def test_make_isa_matrix_runs_the_script():
    """One command: ``make isa-matrix`` (after ``make setup``), the JSON under reports/."""
    make = (ROOT / "Makefile").read_text()
    recipe = make.split("\nisa-matrix: setup\n", 1)[1].split("\n\n", 1)[0]
    assert "python benchmarks/isa_matrix.py --out reports/isa_matrix.json $(ISA_ARGS)" in recipe
    assert "isa-matrix" in make.split(".PHONY:", 1)[1].splitlines()[0]


def test_the_test_list_is_the_makefiles_and_every_file_exists():
    tests = isa_matrix.numerics_tests()
    assert "tests/test_regularizers.py" in tests and "tests/test_precision.py" in tests
    assert all((ROOT / t).is_file() for t in tests)


def test_unset_removes_the_variable_and_a_value_sets_it(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    env = isa_matrix.combo_env("unset", "avx2", threads=3)
    assert "ONEDNN_MAX_CPU_ISA" not in env
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["OMP_NUM_THREADS"] == "3"


def test_junit_counts_by_hand(tmp_path):
    xml = tmp_path / "r.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.a" name="ok"/>'
        '<testcase classname="tests.a" name="bad"><failure message="x"/></testcase>'
        '<testcase classname="tests.b" name="err"><error message="y"/></testcase>'
        '<testcase classname="tests.b" name="skip"><skipped message="z"/></testcase>'
        "</testsuite></testsuites>"
    )
    counts = isa_matrix.junit_counts(xml)
    assert counts == {
        "passed": 1,
        "failed": 2,
        "skipped": 1,
        "failures": ["tests.a::bad", "tests.b::err"],
    }


def test_one_combination_runs_on_the_kernels_it_names(tmp_path):
    """SSE4.1 and ATen's scalar kernels exist on every x86-64 CPU; the row must show them.
    Run as a user runs it: the script's command line, from another folder."""
    out = tmp_path / "m.json"
    argv = ["--isa", "SSE41", "--cap", "default", "--tests", "tests/test_precision.py"]
    argv += ["--jobs", "1", "--threads", "1", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "isa_matrix.py"), *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| SSE41 | default | DEFAULT | Intel SSE4.1 | runs | 3 | 0 | 0 |" in proc.stdout
    [row] = json.loads(out.read_text())["rows"]
    assert row["rc"] == 0 and row["passed"] == 3 and row["failed"] == 0, row.get("output_tail")
    assert row["aten"] == "DEFAULT"
    assert row["onednn"] == "Intel SSE4.1"
    assert row["cpu_flash_attention_bf16"] == "True"


def test_the_emulated_amx_fault_sends_bf16_attention_to_the_math_kernel(tmp_path):
    """--emulate-amx-fault on any CPU: the probe finds flash failing, the forced-flash case
    skips as on the AMX host, and the routing test passes on the math kernel."""
    row = isa_matrix.run_combo(
        "unset", "unset", ["tests/test_precision.py"], 1, tmp_path, emulate_amx_fault=True
    )
    assert row["rc"] == 0 and row["failed"] == 0, row.get("output_tail")
    assert (row["passed"], row["skipped"]) == (2, 1)
    assert row["cpu_flash_attention_bf16"] == "False"
