"""The emulated Intel AMX flash-attention fault (tests/_amx_fault.py) in every Python process of
a run: pytest, the CLI subprocesses the tests start, Ray's trial workers. Python imports this
file at start-up when its folder is on PYTHONPATH:

    LIPSWEEP_TEST_AMX_FAULT=1 PYTHONPATH=$PWD/benchmarks/amx_site make test

It imports torch in every process, so the tests that check a command imports no torch fail by
construction under it (7 of them); docs/reliability.md has the run.
"""

import os
import sys

if os.environ.get("LIPSWEEP_TEST_AMX_FAULT") == "1":
    _tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests")
    sys.path.insert(0, _tests)
    try:
        import _amx_fault

        _amx_fault.install()
    except ImportError:  # a Python without torch (the setup tests' bare interpreters)
        pass
    finally:
        sys.path.remove(_tests)
