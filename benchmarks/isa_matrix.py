"""The numerics tests under every CPU kernel choice.

Runs the Makefile's ``NUMERICS_TESTS`` once per combination of ``ONEDNN_MAX_CPU_ISA`` (oneDNN's
widest instruction set) and ``ATEN_CPU_CAPABILITY`` (ATen's own vectorised kernels), several
combinations at a time, each in a fresh interpreter. Each row records what the process really
ran on: ``torch.backends.cpu.get_cpu_capability()`` and the ISA line oneDNN prints with
``ONEDNN_VERBOSE=1`` (a cap above what the CPU has falls back silently, so the requested value
alone proves nothing). No tolerance is touched: the tests run as CI runs them.

    python benchmarks/isa_matrix.py [--jobs 4] [--threads 2] [--out isa_matrix.json]
    python benchmarks/isa_matrix.py --isa unset --cap unset --emulate-amx-fault

``--emulate-amx-fault`` makes CPU flash attention raise on bf16 as it does on an Intel AMX host
with ATen below AVX-512 (tests/_amx_fault.py), on any CPU.

It needs pytest, hypothesis, mpmath, scipy, torchattacks and pyautoattack beside lipsweep's
own dependencies, and none of Ray, MLflow or Optuna (the GPU machine has none of those).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger("isa_matrix")
ROOT = Path(__file__).resolve().parents[1]
ISAS = ("unset", "AVX512_CORE", "AVX2", "SSE41")
CAPS = ("unset", "default", "avx2", "avx512")
AMX_FAULT_ENV = "LIPSWEEP_TEST_AMX_FAULT"  # tests/_amx_fault.py
FLASH_TEXT = {"True": "runs", "False": "fails: math kernel used"}

PROBE = """
import torch
x = torch.randn(8, 16, 32, 32)  # large enough that ATen hands the convolution to oneDNN
torch.nn.functional.conv2d(x, torch.randn(32, 16, 3, 3))
print("aten_capability=" + torch.backends.cpu.get_cpu_capability(), flush=True)
import sys
sys.path.insert(0, "tests")
import _amx_fault
_amx_fault.install_if_asked()  # --emulate-amx-fault: the probe sees the tests' fault
from lipsweep.vit.precision import cpu_flash_attention_runs_in_bf16
print(f"flash_bf16={cpu_flash_attention_runs_in_bf16()}", flush=True)
"""


def numerics_tests(makefile: Path = ROOT / "Makefile") -> list[str]:
    """The test files of ``NUMERICS_TESTS`` in the Makefile (its one home), continuations joined."""
    text = makefile.read_text().replace("\\\n", " ")
    match = re.search(r"^NUMERICS_TESTS\s*:=\s*(.+)$", text, flags=re.M)
    if match is None:
        raise SystemExit(f"isa_matrix: no NUMERICS_TESTS in {makefile}")
    return match.group(1).split()


def combo_env(isa: str, cap: str, threads: int, emulate_amx_fault: bool = False) -> dict[str, str]:
    """The environment of one combination: 'unset' removes the variable."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    env.pop(AMX_FAULT_ENV, None)
    if emulate_amx_fault:
        env[AMX_FAULT_ENV] = "1"
    for name, value in (("ONEDNN_MAX_CPU_ISA", isa), ("ATEN_CPU_CAPABILITY", cap)):
        env.pop(name, None)
        if value != "unset":
            env[name] = value
    return env


def effective_kernels(env: dict[str, str]) -> dict[str, str]:
    """What a process with ``env`` dispatches to: ATen's capability and oneDNN's ISA line."""
    probe_env = dict(env, ONEDNN_VERBOSE="1", DNNL_VERBOSE="1")
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT, env=probe_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    text = out.stdout + out.stderr
    cap = re.search(r"aten_capability=(\S+)", text)
    isa = re.search(r"verbose,(?:v\d+,)?info,cpu,isa:([^\n]+)", text)
    flash = re.search(r"flash_bf16=(\w+)", text)
    return {
        "aten": cap.group(1) if cap else f"probe failed (rc {out.returncode})",
        "onednn": isa.group(1).strip() if isa else "no oneDNN ISA line",
        "cpu_flash_attention_bf16": flash.group(1) if flash else "probe failed",
    }


def junit_counts(path: Path) -> dict[str, object]:
    """Passed/failed/skipped counts and the failing test ids from a pytest JUnit XML file."""
    counts: dict[str, object] = {"passed": 0, "failed": 0, "skipped": 0, "failures": []}
    if not path.exists():
        return counts
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped" and outcome == "passed":
                outcome = "skipped"
        counts[outcome] = int(counts[outcome]) + 1  # type: ignore[call-overload]
        if outcome == "failed":
            counts["failures"].append(f"{case.get('classname')}::{case.get('name')}")  # type: ignore[union-attr]
    return counts


def run_combo(
    isa: str, cap: str, tests: list[str], threads: int, work: Path, emulate_amx_fault: bool = False
) -> dict:
    """The numerics tests in one fresh pytest process under one combination."""
    env = combo_env(isa, cap, threads, emulate_amx_fault)
    name = f"{isa}-{cap}"
    junit = work / f"{name}.xml"
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--basetemp={work / name}", f"--junitxml={junit}", *tests],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    seconds = round(time.perf_counter() - start, 1)  # the tests alone, not the probe below
    row = {
        "ONEDNN_MAX_CPU_ISA": isa,
        "ATEN_CPU_CAPABILITY": cap,
        **effective_kernels(env),
        "rc": proc.returncode,
        "seconds": seconds,
        **junit_counts(junit),
    }
    if proc.returncode != 0:
        row["output_tail"] = (proc.stdout + proc.stderr)[-3000:]
    log.info(
        "%-11s %-7s rc %d  %s passed, %s failed, %s skipped  %.0f s  (aten %s)",
        isa, cap, proc.returncode, row["passed"], row["failed"], row["skipped"], row["seconds"],
        row["aten"],
    )  # fmt: skip
    return row


def cpu_meta() -> dict[str, object]:
    """The processor: model name and its AVX-512 flags (Linux /proc/cpuinfo)."""
    model, flags = platform.processor(), []
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        text = cpuinfo.read_text()
        if m := re.search(r"^model name\s*:\s*(.+)$", text, flags=re.M):
            model = m.group(1).strip()
        if m := re.search(r"^flags\s*:\s*(.+)$", text, flags=re.M):
            flags = sorted(
                f for f in m.group(1).split() if f.startswith("avx512") or f == "amx_tile"
            )
    return {"cpu": model, "avx512_flags": flags, "cores": os.cpu_count()}


def markdown(rows: list[dict]) -> str:
    """The matrix as a Markdown table."""
    head = (
        "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "ATen ran", "oneDNN ran",
        "CPU flash attention in bf16", "passed", "failed", "skipped", "s",
    )  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        flash = FLASH_TEXT.get(r["cpu_flash_attention_bf16"], r["cpu_flash_attention_bf16"])
        cells = (
            r["ONEDNN_MAX_CPU_ISA"], r["ATEN_CPU_CAPABILITY"], r["aten"], r["onednn"], flash,
            r["passed"], r["failed"], r["skipped"], r["seconds"],
        )  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--isa", default=",".join(ISAS), help="ONEDNN_MAX_CPU_ISA values ('unset')")
    ap.add_argument("--cap", default=",".join(CAPS), help="ATEN_CPU_CAPABILITY values ('unset')")
    ap.add_argument(
        "--tests", nargs="*", help="test paths (default: the Makefile's NUMERICS_TESTS)"
    )
    ap.add_argument("--jobs", type=int, default=4, help="combinations run at once")
    ap.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each")
    ap.add_argument("--out", type=Path, help="JSON file of the matrix")
    ap.add_argument(
        "--emulate-amx-fault",
        action="store_true",
        help="CPU flash attention raises on bf16, as on an Intel AMX host (tests/_amx_fault.py)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    tests = args.tests or numerics_tests()
    combos = list(itertools.product(args.isa.split(","), args.cap.split(",")))
    meta = {**cpu_meta(), "python": platform.python_version(), "tests": tests}
    meta["emulated_amx_fault"] = args.emulate_amx_fault
    import torch  # only for its version: the combinations run in their own processes

    meta["torch"] = torch.__version__
    flags = " ".join(meta["avx512_flags"]) or "no AVX-512"
    log.info("%s (%s), torch %s: %d combinations", meta["cpu"], flags, meta["torch"], len(combos))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="isa_matrix_") as tmp:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            rows = list(
                pool.map(
                    lambda c: run_combo(*c, tests, args.threads, Path(tmp), args.emulate_amx_fault),
                    combos,
                )
            )
    meta["seconds"] = round(time.perf_counter() - start, 1)
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(markdown(rows))
    failed = [r for r in rows if r["rc"] != 0]
    log.info("%d of %d combinations failed; %.0f s", len(failed), len(rows), meta["seconds"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
