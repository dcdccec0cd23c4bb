"""Bad input, fuzzed: random trial configs, search-space YAML documents and command lines are
each accepted or refused with one line naming the field (exit 2, no traceback), before any
resource is spent (Ray never imported for a bad space).

Run with the other fault tests by ``pytest -m faults``; nothing here starts Ray.
docs/reliability.md tabulates each fault, what happens and its test.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _sweep_helpers import TINY_FLAT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.faults

_FUZZ = settings(
    deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
_VOCAB = [
    "none",
    "jasmin",
    "specformer",
    "mean",
    "max",
    "fgsm",
    "pgd",
    "autoattack",
    "apgd-ce",
    "apgd-t",
    "fab",
    "square",
    "sgd",
    "adamw",
    "embedded",
    "npz",
    "cifar10",
    "cifar100",
    "auto",
    "cpu",
    "cuda",
    "cuda:0",
    "bf16",
    "fp32",
    "custom",
    "standard",
    "hub",
    "vit_tiny_patch16_224",
    "vit_base_patch16_224",
    "secular",
    "exact",
    "power",
    "random",
    "optuna",
    "asha",
    "min",
    "",
    " ",
    "é",
    "数据",
    "\x00",
    "a" * 300,
    "/" + "b" * 5000,
    "1e-2",
    "nan",
    "-inf",
    "1e400",
    "0x10",
    "true",
    "[1, 2]",
    "{}",
]
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=70),
    st.sampled_from([-1, 0, 1, 2, 4, 10, 30, 65, 2**31, 2**63, 10**30, -(10**30), 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1e-2, 0.5, 1.0, 1.5, 1e-300, 1e300, float("nan"), float("inf")]),
    st.sampled_from(_VOCAB),
    st.text(max_size=12),
)
_junk = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), inner, max_size=3),
    ),
    max_leaves=8,
)


def _field_names() -> list[str]:
    from lipsweep.settings.config import FIELD_SECTION

    return sorted(FIELD_SECTION)


@st.composite
def _flat_configs(draw):
    """A valid tiny config with a few keys set to junk, dropped, or unknown keys added."""
    from lipsweep.settings.config import TrialConfig

    base = TrialConfig.from_flat(TINY_FLAT).to_flat()
    keys = _field_names()
    for key in draw(st.lists(st.sampled_from(keys), max_size=4)):
        base[key] = draw(
            st.one_of(
                _junk,
                st.sampled_from(EDGE_VALUES),
                st.sampled_from([base.get(key), [base.get(key)]]),
            )
        )
    for key in draw(st.lists(st.sampled_from(keys), max_size=2)):
        base.pop(key, None)
    extra = draw(st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), _junk, max_size=1))
    base.update(extra if draw(st.integers(0, 4)) == 0 else {})
    return base


def _assert_names_field(err, keys) -> None:
    from lipsweep.core.config_base import key_name
    from lipsweep.settings.config import FIELD_SECTION

    msg = err.format()
    assert isinstance(err.field, str) and err.field and err.field in msg, msg
    assert "\n" not in msg, msg
    root = re.split(r"[.\[]", err.field)[0]
    named = {str(k) for k in keys} | {key_name(k) for k in keys}
    assert (
        root in FIELD_SECTION
        or root in named
        or err.field in named
        or err.field
        in (
            "config",
            "grid",
            "repeat",
            "search",
            "scheduler",
            "resources",
            "name",
            "fixed",
            "max_concurrent_trials",
            "max_failures",
            "description",
        )
    ), (err.field, msg)


EDGE_VALUES = [
    10**400,
    10**5000,
    -(10**400),
    2**63,
    2**62,
    float("nan"),
    float("inf"),
    -float("inf"),
    "a" * 300,
    "/" + "b" * 5000,
    "\x00",
    "x\x00y",
    "a\nb",
    [],
    [[]],
    {},
    {"a": 1},
    [float("nan")],
    [10**400],
    [float("inf")],
    "",
    "é",
    None,
    True,
    1e300,
    -1e300,
    1e-320,
    "1e400",
    "nan",
    "inf",
    [None],
    ["a" * 300],
    -1,
    0,
    0.5,
    1.5,
    "jasmin",
    ["apgd-ce", "apgd-ce"],
]


def _check_flat(flat) -> bool:
    """True if ``flat`` validates (then it round-trips as strict JSON); False if refused
    with a ConfigError naming the field on one line. Anything else fails the test."""
    from lipsweep.core.config_base import ConfigError
    from lipsweep.settings.config import TrialConfig

    try:
        cfg = TrialConfig.from_flat(flat)
    except ConfigError as err:
        _assert_names_field(err, flat)
        return False
    again = cfg.to_flat()
    json.dumps(again, allow_nan=False)  # a valid config is finite, strict JSON
    assert TrialConfig.from_flat(again) == cfg
    return True


def test_every_setting_refuses_edge_values_cleanly():
    """Each setting, alone, set to each edge value (huge, NaN/inf, NUL, long paths, ...)."""
    base = {"depth": 2, "embed_dim": 64, "num_heads": 4}
    results = [_check_flat({**base, key: value}) for key in _field_names() for value in EDGE_VALUES]
    print(f"edge table: {len(results)} inputs, {results.count(False)} refused")
    assert len(results) >= 2000 and results.count(False) >= 1500


def test_fuzz_trial_config_validates_or_names_the_field():
    seen = {"ok": 0, "refused": 0}

    @settings(_FUZZ, max_examples=1000)
    @given(_flat_configs())
    def check(flat):
        seen["ok" if _check_flat(flat) else "refused"] += 1

    check()
    print("trial-config fuzz:", seen)
    assert seen["ok"] >= 20 and seen["refused"] >= 200, seen


@st.composite
def _settings_map(draw, max_size=3):
    keys = st.one_of(
        st.sampled_from(_field_names()), st.sampled_from(["lam_q,lam_k,lam_v", "k,lam", "kk", ""])
    )
    good = st.sampled_from([0, 10, 1e-2, "jasmin", "none", "mean", 1, 2])
    value = st.one_of(_junk, good, st.lists(good, max_size=3))
    return draw(st.dictionaries(keys, value, max_size=max_size))


@st.composite
def _spaces(draw):
    """A search-space document: mostly the right shape, with junk anywhere."""
    dist = st.one_of(
        st.fixed_dictionaries(
            {
                draw(
                    st.sampled_from(
                        ["choice", "uniform", "loguniform", "randint", "quniform", "normal"]
                    )
                ): st.one_of(_junk, st.lists(_scalars, max_size=3))
            }
        ),
        _junk,
    )
    search = st.fixed_dictionaries(
        {},
        optional={
            "algorithm": st.one_of(st.sampled_from(["random", "optuna", "grid"]), _junk),
            "num_samples": st.one_of(st.integers(-1, 3), st.sampled_from([10**9, 10**12]), _junk),
            "seed": st.one_of(st.integers(0, 3), _junk),
            "metric": st.one_of(st.sampled_from(["acc_pgd_4", ["acc_clean", "acc_aa_2"]]), _junk),
            "mode": st.one_of(st.sampled_from(["max", "min", ["max", "min"]]), _junk),
            "space": st.one_of(
                st.dictionaries(
                    st.one_of(
                        st.sampled_from(_field_names() + ["jasmin", "specformer"]), st.integers()
                    ),
                    dist,
                    max_size=3,
                ),
                _junk,
            ),
        },
    )
    doc = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "name": st.one_of(st.sampled_from(["t", "my-sweep_1", "a b", "", "é"]), _junk),
                "description": _junk,
                "fixed": st.one_of(_settings_map(), _junk),
                "grid": st.one_of(st.lists(st.one_of(_settings_map(), _junk), max_size=3), _junk),
                "repeat": st.one_of(_settings_map(max_size=1), _junk),
                "search": st.one_of(search, _junk),
                "scheduler": st.one_of(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            k: st.one_of(
                                st.sampled_from([1, 2, 3.5, "max", "acc_clean", "asha"]), _junk
                            )
                            for k in (
                                "type",
                                "metric",
                                "mode",
                                "grace_period",
                                "reduction_factor",
                                "max_t",
                            )
                        },
                    ),
                    _junk,
                ),
                "resources": st.one_of(
                    st.fixed_dictionaries({}, optional={"cpu": _scalars, "gpu": _scalars}), _junk
                ),
                "max_concurrent_trials": _scalars,
                "max_failures": _scalars,
                "bogus": _junk,
            },
        )
    )
    if draw(st.booleans()):  # give it a chance to be valid
        doc.setdefault("fixed", {"epochs": 1})
        if "search" not in doc:
            doc.setdefault("grid", [{"regularizer": "none"}])
    return doc


_TEMPLATES = [
    {
        "name": "t",
        "fixed": {"epochs": 1, "depth": 2},
        "grid": [
            {"regularizer": "none"},
            {"regularizer": "jasmin", "k": [0, 10], "lam": [1e-2], "aggregation": "max"},
            {"regularizer": "specformer", "lam_q,lam_k,lam_v": [[1e-2, 0, 0], [0, 0, 1e-3]]},
        ],
        "repeat": {"seed": [0, 1]},
        "scheduler": {"type": "asha", "metric": "acc_clean"},
        "resources": {"cpu": 1, "gpu": 0},
        "max_concurrent_trials": 2,
        "max_failures": 1,
    },
    {
        "name": "r",
        "fixed": {"epochs": 2},
        "search": {
            "algorithm": "random",
            "num_samples": 3,
            "seed": 1,
            "space": {
                "lr": {"loguniform": [1e-4, 1e-2]},
                "regularizer": {"choice": ["jasmin", "specformer"]},
                "jasmin": {"k": {"choice": [0, 10]}, "lam": {"uniform": [1e-4, 1e-2]}},
                "specformer": {"lam_v": {"loguniform": [1e-4, 1e-2]}},
                "seed": {"randint": [0, 9]},
                "batch_size": {"quniform": [32, 64]},
            },
        },
    },
    {
        "name": "o",
        "search": {
            "algorithm": "optuna",
            "num_samples": 4,
            "metric": ["acc_clean", "acc_pgd_4"],
            "mode": ["max", "max"],
            "space": {"lam": {"loguniform": [1e-4, 1e-2]}, "regularizer": "jasmin"},
        },
    },
]


def _paths(node, prefix=()):
    """Every (path, value) inside a nested dict/list document."""
    yield prefix, node
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for k, v in items:
        yield from _paths(v, prefix + (k,))


@st.composite
def _near_valid_spaces(draw):
    """A shipped-like space with 0-2 nodes replaced by junk (reaches the deep checks)."""
    import copy

    doc = copy.deepcopy(draw(st.sampled_from(_TEMPLATES)))
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2]))):
        path = draw(st.sampled_from([p for p, _ in _paths(doc) if p]))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = copy.deepcopy(draw(st.one_of(_junk, st.sampled_from(EDGE_VALUES))))
    return doc


def _no_alias_dumper():
    import yaml

    class Dumper(yaml.SafeDumper):
        """Writes a value shared twice in a document out twice: aliases are refused on load."""

        def ignore_aliases(self, data) -> bool:
            return True

    return Dumper


_NoAliasDumper = _no_alias_dumper()


def _dump(doc, path: Path) -> None:
    import yaml

    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # so that 10**5000 can be written (reading it must fail)
    try:
        text = yaml.dump(doc, Dumper=_NoAliasDumper, allow_unicode=True, width=10**6)
    finally:
        sys.set_int_max_str_digits(limit)
    path.write_text(text, encoding="utf-8")


def _yaml_keys(text) -> dict:
    """The top-level mapping of raw YAML text (a user's own keys, e.g. ``0:``), else {}."""
    import yaml

    try:
        doc = yaml.safe_load(text) if isinstance(text, str) else None
    except yaml.YAMLError:
        return {}
    return doc if isinstance(doc, dict) else {}


def test_fuzz_search_space_validates_or_names_the_field(tmp_path):
    from lipsweep.core.config_base import ConfigError
    from lipsweep.search.space import load_space

    seen = {"ok": 0, "refused": 0}
    path = tmp_path / "space.yaml"

    @settings(_FUZZ, max_examples=600)
    @given(st.one_of(_spaces(), _near_valid_spaces(), _junk, st.text(max_size=200)))
    def check(doc):
        if isinstance(doc, str):
            path.write_text(doc, encoding="utf-8")
        else:
            _dump(doc, path)
        t0 = time.perf_counter()
        try:
            spec = load_space(path)
        except ConfigError as err:
            _assert_names_field(err, doc if isinstance(doc, dict) else _yaml_keys(doc))
            assert err.source == str(path) or err.field == "config", err.format()
            seen["refused"] += 1
        else:
            seen["ok"] += 1
            assert spec.num_trials >= 1
        assert time.perf_counter() - t0 < 10, "validation must not hang"

    check()
    print("search-space fuzz:", seen)
    # enough of both to mean something (19 valid of 600 derandomized)
    assert seen["ok"] >= 15 and seen["refused"] >= 200, seen


def _yaml_text(value) -> str:
    """How a user would type ``value`` after ``--set key=`` (YAML flow style)."""
    import yaml

    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return (
            yaml.dump(value, Dumper=_NoAliasDumper, default_flow_style=True, width=10**6)
            .strip()
            .removesuffix("...")
            .strip()
        )
    finally:
        sys.set_int_max_str_digits(limit)


def test_fuzz_cli_exits_0_or_2_with_one_line_naming_the_field(tmp_path, capsys):
    """``lipsweep sweep --dry-run`` and ``lipsweep train --set ...`` on junk, in-process."""
    from lipsweep.__main__ import main

    seen = {"sweep": 0, "train": 0}
    path = tmp_path / "space.yaml"
    out = tmp_path / "never"

    def one_error_line(err: str) -> str:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and "Traceback" not in err, err
        return lines[0]

    @settings(_FUZZ, max_examples=200)
    @given(st.one_of(_spaces(), _near_valid_spaces()), _flat_configs())
    def check(doc, flat):
        _dump(doc, path)
        rc = main(["sweep", str(path), "--dry-run"])
        cap = capsys.readouterr()
        assert rc in (0, 2), cap.err
        if rc == 2:
            line = one_error_line(cap.err)
            assert line.startswith("lipsweep sweep: error: ") and ": " in line[23:], line
        seen["sweep"] += 1
        # the last --set makes the config invalid, so nothing trains: the earlier junk is
        # what is parsed (YAML values on the command line)
        argv = ["train", "--out", str(out)]
        for k, v in flat.items():
            argv += ["--set", f"{k}={_yaml_text(v)}"]
        argv += ["--set", "epochs=0"]
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse: e.g. a value that looks like a flag
            rc = exc.code
            cap = capsys.readouterr()
            assert rc == 2 and "Traceback" not in cap.err, cap.err
            assert cap.err.startswith("usage: ") and "error: " in cap.err.splitlines()[-1]
        else:
            cap = capsys.readouterr()
            assert rc == 2, cap.err
            assert one_error_line(cap.err).startswith("lipsweep train: error: "), cap.err
        assert not out.exists()
        seen["train"] += 1

    check()
    print("CLI fuzz (main() calls):", seen)


def test_bad_spaces_exit_2_before_ray_is_imported(tmp_path):
    """One subprocess over a corpus of invalid spaces: exit 2 each, and Ray never imported."""
    from lipsweep.core.config_base import ConfigError
    from lipsweep.search.space import load_space

    corpus: list[str] = []

    @settings(_FUZZ, max_examples=150)
    @given(st.one_of(_spaces(), _near_valid_spaces()))
    def collect(doc):
        path = tmp_path / f"bad{len(corpus)}.yaml"
        _dump(doc, path)
        try:
            load_space(path)
        except ConfigError:
            corpus.append(str(path))
            return
        path.unlink()  # valid: it would start a sweep

    collect()
    assert len(corpus) >= 50
    code = (
        "import sys, io, contextlib\nfrom lipsweep.__main__ import main\n"
        "for p in sys.argv[1:]:\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err):\n"
        "        rc = main(['sweep', p, '--storage', 'rr',\n"
        "                   '--tracking-uri', 'sqlite:///m.db'])\n"
        "    assert rc == 2, (p, rc, err.getvalue())\n"
        "    assert 'Traceback' not in err.getvalue()\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
        "print('checked', len(sys.argv) - 1)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *corpus],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert f"checked {len(corpus)}" in proc.stdout
    assert not (tmp_path / "rr").exists() and not (tmp_path / "m.db").exists()
    print("invalid spaces checked in one subprocess without importing Ray:", len(corpus))
