"""Bad input: random trial configs, search-space YAML documents and command lines are each
accepted or refused with one line naming the field (exit 2, no traceback), before any resource
is spent (Ray never imported for a bad space); nothing a file holds is ever unpickled; YAML
bombs, duplicate keys, damaged checkpoints and exports are refused before they are walked.

Run with the other fault tests by ``pytest -m faults``; nothing here starts Ray.
docs/reliability.md tabulates each fault, what happens and its test.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _sweep_helpers import ROOT, TINY_FLAT, sha256_of
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


# ---------------------------------------------------------------------------------------------
# Security: nothing is ever unpickled
# ---------------------------------------------------------------------------------------------
class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _tiny_model():
    from lipsweep.vit.models import ModelConfig, create_model

    return create_model(ModelConfig(depth=2, embed_dim=64, num_heads=4))


def test_payloads_are_live(tmp_path):
    """Control: the payloads below do run code when unpickled the unsafe way."""
    marker = tmp_path / "pwned"
    pickle.loads(pickle.dumps(_Evil(marker)))
    assert marker.exists()
    marker.unlink()
    torch.save({"x": _Evil(marker)}, tmp_path / "evil.pth")
    torch.load(tmp_path / "evil.pth", weights_only=False)
    assert marker.exists()


def test_load_exported_rejects_a_pickle_payload(tmp_path):
    import lipsweep
    from lipsweep.decide.export import write_export
    from lipsweep.settings.config import TrialConfig
    from lipsweep.vit.export_format import build_config_json

    model = _tiny_model()
    flat = TrialConfig.from_flat({"depth": 2, "embed_dim": 64, "num_heads": 4}).to_flat()
    folder = write_export(
        tmp_path / "export",
        model.net.state_dict(),
        build_config_json(flat, (0.5,) * 3, (0.5,) * 3, {}),
        {},
    )
    x = torch.rand(2, 3, 32, 32)
    assert torch.allclose(lipsweep.load_exported(folder)(x), model.eval()(x))  # control
    marker = tmp_path / "pwned"
    for payload in (pickle.dumps(_Evil(marker)), _torch_pickle(_Evil(marker), tmp_path)):
        (folder / "model.safetensors").write_bytes(payload)
        with pytest.raises(Exception) as exc:
            lipsweep.load_exported(folder)
        assert (
            "header" in str(exc.value).lower() or "safetensor" in type(exc.value).__name__.lower()
        ), exc.value
        assert not marker.exists()


def _torch_pickle(obj, tmp_path: Path) -> bytes:
    path = tmp_path / "obj.pt"
    torch.save(obj, path)
    return path.read_bytes()


def test_pretrained_pth_is_loaded_weights_only(tmp_path):
    """A .pth passed as ``pretrained`` goes through timm's torch.load(weights_only=True)."""
    import timm

    from lipsweep.vit.models import ModelConfig, create_model

    src = timm.create_model(
        "vit_tiny_patch16_224", depth=2, embed_dim=64, num_heads=4, num_classes=10
    )
    good = tmp_path / "good.pth"
    torch.save(src.state_dict(), good)
    model = create_model(ModelConfig(depth=2, embed_dim=64, num_heads=4, pretrained=str(good)))
    key = "blocks.1.attn.qkv.weight"  # loaded (patch/pos-embed resampled to 32px, patch 4)
    assert torch.equal(model.net.state_dict()[key], src.state_dict()[key])
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pth"
    torch.save({"state_dict": _Evil(marker)}, evil)
    with pytest.raises(Exception, match="weights_only"):
        create_model(ModelConfig(depth=2, embed_dim=64, num_heads=4, pretrained=str(evil)))
    assert not marker.exists()


_UNSAFE = (
    "pickle.load",
    "pickle.loads",
    "pickle.Unpickler",
    "cPickle.load",
    "dill.load",
    "joblib.load",
    "marshal.load",
    "marshal.loads",
    "yaml.load",
    "yaml.unsafe_load",
    "yaml.full_load",
    "shelve.open",
)


def _unsafe_loads(source: str, name: str) -> list[str]:
    """Deserialisation calls that can run code: torch.load without weights_only=True,
    np.load with allow_pickle=True, and the pickle family."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func)
        kw = {k.arg: k.value for k in node.keywords}
        where = f"{name}:{node.lineno} {func}"
        if func.endswith("torch.load"):
            ok = (
                isinstance(kw.get("weights_only"), ast.Constant)
                and kw["weights_only"].value is True
            )
            if not ok:
                found.append(where)
        elif func in ("np.load", "numpy.load"):
            v = kw.get("allow_pickle")
            if v is not None and not (isinstance(v, ast.Constant) and v.value is False):
                found.append(where)
        elif func in _UNSAFE:
            found.append(where)
    return found


def test_no_unsafe_deserialisation_in_the_package():
    bad = [
        "torch.load(f)",
        "torch.load(f, weights_only=False)",
        "pickle.loads(b)",
        "np.load(p, allow_pickle=True)",
        "yaml.load(t)",
    ]
    for snippet in bad:  # control: the scanner flags each of these
        assert _unsafe_loads(snippet, "x.py"), snippet
    assert not _unsafe_loads("torch.load(f, map_location='cpu', weights_only=True)", "x.py")
    files = sorted((ROOT / "lipsweep").rglob("*.py"))
    assert len(files) > 20
    found = [hit for f in files for hit in _unsafe_loads(f.read_text(), str(f.relative_to(ROOT)))]
    assert found == []


# ---------------------------------------------------------------------------------------------
# What an adversarial pass broke (export --force, YAML bombs, loader trust, bounds)
# ---------------------------------------------------------------------------------------------
def _tiny_export(folder: Path):
    from lipsweep.decide.export import write_export
    from lipsweep.settings.config import TrialConfig
    from lipsweep.vit.export_format import build_config_json

    model = _tiny_model()
    flat = TrialConfig.from_flat({"depth": 2, "embed_dim": 64, "num_heads": 4}).to_flat()
    config = build_config_json(flat, (0.5,) * 3, (0.5,) * 3, {})
    return (
        model,
        config,
        write_export(folder, model.net.state_dict(), config, {"acc": 1.0}, force=True),
    )


def _tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): sha256_of(p) for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_export_force_replaces_only_a_previous_export(tmp_path, monkeypatch, capsys):
    """--force never removes a folder that is not a previous export."""
    import lipsweep.decide.export as ex
    from lipsweep.__main__ import main
    from lipsweep.core.config_base import UsageError

    work = tmp_path / "work"
    pkg = work / "pkg"  # e.g. --out <clone>/lipsweep
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    monkeypatch.chdir(work)
    model, config, _ = _tiny_export(tmp_path / "scratch")
    state = model.net.state_dict()
    before = _tree(tmp_path)
    unmarked = work / "unmarked"  # only export file names, but no marker: not ours
    unmarked.mkdir()
    (unmarked / "config.json").write_text("{}")
    for out, why in (
        (pkg, "not a lipsweep export"),
        (unmarked, "not a lipsweep export"),
        (Path(".."), "working folder"),
        (Path("."), "working folder"),
        (tmp_path, "working folder"),
    ):
        with pytest.raises(UsageError, match=why):
            ex.write_export(out, state, config, {}, force=True)
    assert _tree(tmp_path) == {
        **before,
        "work/unmarked/config.json": sha256_of(unmarked / "config.json"),
    }
    # the CLI refuses before anything is written (no MLflow store is created)
    rc = main(
        [
            "export",
            "--experiment",
            "x",
            "--out",
            "..",
            "--force",
            "--tracking-uri",
            f"sqlite:///{tmp_path / 'm.db'}",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "working folder" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "m.db").exists()
    # a previous export holding anything else is not replaced either
    _, _, prev = _tiny_export(work / "exp")
    (prev / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="notes.txt"):
        ex.write_export(prev, state, config, {}, force=True)
    (prev / "notes.txt").unlink()
    # a failure while writing the new export leaves the existing one whole (write beside, swap)
    old = _tree(prev)
    monkeypatch.setattr(ex, "_model_card", lambda *a: (_ for _ in ()).throw(OSError(28, "full")))
    with pytest.raises(OSError):
        ex.write_export(prev, state, config, {"acc": 2.0}, force=True)
    assert _tree(prev) == old and sorted(p.name for p in work.iterdir()) == [
        "exp",
        "pkg",
        "unmarked",
    ]
    monkeypatch.undo()
    monkeypatch.chdir(work)
    ex.write_export(prev, state, config, {"acc": 2.0}, force=True)  # a real re-export
    assert json.loads((prev / "metrics.json").read_text()) == {"acc": 2.0}
    assert (prev / ex.MARKER).is_file() and sorted(p.name for p in work.iterdir()) == [
        "exp",
        "pkg",
        "unmarked",
    ]


def _laughs(levels: int) -> str:
    """A "billion laughs" YAML value: 9**levels strings from a few hundred bytes."""
    lines = ['&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "[" + ", ".join(lines) + "]"


@pytest.mark.parametrize("where", ["space name", "grid value", "trial config", "train --set"])
def test_yaml_alias_bomb_is_refused_before_it_is_walked(tmp_path, capsys, where):
    """A billion-laughs document is refused in every YAML entry point."""
    from lipsweep.__main__ import main

    bomb = _laughs(9)
    assert len(bomb) < 1000
    path = tmp_path / "doc.yaml"
    argv = {
        "space name": ["sweep", str(path), "--dry-run"],
        "grid value": ["sweep", str(path), "--dry-run"],
        "trial config": ["train", str(path), "--out", str(tmp_path / "o")],
        "train --set": ["train", "--set", f"aggregation={bomb}", "--out", str(tmp_path / "o")],
    }[where]
    path.write_text(
        {
            "space name": f"name: {bomb}\ngrid:\n  - regularizer: none\n",
            "grid value": f"name: b\ngrid:\n  - regularizer: jasmin\n    k: {bomb}\n",
            "trial config": f"epochs: 1\naggregation: {bomb}\n",
            "train --set": "{}",
        }[where]
    )
    t0 = time.perf_counter()
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and len(err) < 400, err[:400]
    assert "aliases are not allowed" in err, err[:400]
    assert time.perf_counter() - t0 < 10 and not (tmp_path / "o").exists()


def test_show_never_walks_a_huge_shared_value():
    """An error message reprs a bounded part of the value, whatever it is."""
    from lipsweep.core.config_base import ConfigError, check_positive, show

    value = ["lol"] * 9
    for _ in range(12):  # 9**13 (2.5e12) leaves, shared: a full repr would never end
        value = [value] * 9
    t0 = time.perf_counter()
    assert len(show(value)) <= 80
    with pytest.raises(ConfigError) as exc:
        check_positive("epochs", value)
    assert len(exc.value.format()) < 200 and time.perf_counter() - t0 < 1


def test_duplicate_yaml_keys_are_refused(tmp_path, capsys):
    """Two equal keys are refused: the last one does not win silently."""
    from lipsweep.__main__ import main

    space, trial = tmp_path / "s.yaml", tmp_path / "t.yaml"
    space.write_text("name: d\nfixed:\n  epochs: 1\n  epochs: 40\ngrid:\n  - regularizer: none\n")
    trial.write_text("epochs: 1\nlr: 0.1\nepochs: 3\n")
    for argv in (
        ["sweep", str(space), "--dry-run"],
        ["train", str(trial), "--out", str(tmp_path / "o")],
        ["train", "--set", "fgsm_eps={a: 1, a: 2}", "--out", str(tmp_path / "o")],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "duplicate key" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "setting,value",
    [
        ("embed_dim", 10**9),
        ("depth", 10**6),
        ("batch_size", 10**12),
        ("epochs", 10**9),
        ("img_size", 2**20),
        ("num_classes", 10**9),
        ("aa_iters", 10**9),
        ("aa_restarts", 10**6),
        ("pgd_steps", 10**9),
        ("pgd_restarts", 10**6),
        ("attack_images", 10**12),
        ("attack_batch_size", 10**9),
        ("lip_iters", 10**9),
        ("lip_head_iters", 10**9),
        ("lip_images", 10**12),
        ("lip_batch_size", 10**9),
    ],
)
def test_sizes_and_iteration_counts_have_upper_bounds_that_say_why(setting, value):
    """No unbounded size or iteration count; the message gives the reason."""
    from lipsweep.core.config_base import ConfigError
    from lipsweep.settings.config import TrialConfig

    with pytest.raises(ConfigError) as exc:
        TrialConfig.from_flat({**TINY_FLAT, setting: value})
    assert exc.value.field == setting and re.search(r"must be <= [\d,]+ \(.+\)", exc.value.message)


def test_pretrained_must_be_a_weights_file_checked_before_config_json(tmp_path, capsys):
    """``pretrained: /etc/passwd`` exits 2 before config.json is written."""
    import timm

    from lipsweep.__main__ import main
    from lipsweep.vit.models import ModelConfig

    fake = tmp_path / "w.safetensors"
    fake.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    text = tmp_path / "w.pth"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n")
    for bad in ("/etc/passwd", str(fake), str(text)):
        out = tmp_path / "o"
        rc = main(["train", "--set", f"pretrained={bad}", "--set", "depth=2", "--out", str(out)])
        err = capsys.readouterr().err
        assert rc == 2 and "pretrained" in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()
    good = tmp_path / "good.pth"  # control: a real torch.save state dict is accepted
    torch.save(timm.create_model("vit_tiny_patch16_224", depth=2).state_dict(), good)
    assert ModelConfig(depth=2, pretrained=str(good)).pretrained == str(good)


def _save_ck(root: Path, epoch: int):
    from lipsweep.trial.checkpoint import save_checkpoint

    opt = {
        "state": {0: {"momentum_buffer": torch.full((3,), 2.0 * epoch), "step": 4}},
        "param_groups": [{"lr": 0.1, "params": [0]}],
    }
    return save_checkpoint(
        root,
        epoch,
        {"w": torch.full((3,), float(epoch))},
        opt,
        {"u": torch.arange(3.0)},
        {"history": []},
        keep=5,
    )


def _sabotage(case: str, ck: Path, outside: Path) -> None:
    state = json.loads((ck / "state.json").read_text())
    digests = state["sha256"]
    if case == "dotdot":  # tampered weights moved out, the record points at them
        evil = outside / "evil.safetensors"
        from safetensors.torch import save_file

        save_file({"w": torch.full((3,), 666.0)}, str(evil))
        digests.pop("model.safetensors")
        digests["../../../outside/evil.safetensors"] = sha256_of(evil)
    elif case == "absolute":
        evil = outside / "abs.safetensors"
        evil.write_bytes((ck / "model.safetensors").read_bytes())
        digests[str(evil)] = sha256_of(evil)
    elif case == "fifo":  # on main, hashing a FIFO blocks forever
        os.mkfifo(ck / "pipe")
        digests["pipe"] = "0" * 64
    elif case == "symlink":
        target = outside / "link.safetensors"
        target.write_bytes((ck / "model.safetensors").read_bytes())
        (ck / "model.safetensors").unlink()
        (ck / "model.safetensors").symlink_to(target)
    elif case == "empty sha256":  # tampered weights with no checksums left to compare
        from safetensors.torch import save_file

        save_file({"w": torch.full((3,), 666.0)}, str(ck / "model.safetensors"))
        state["sha256"] = {}
    elif case == "unlisted weights":
        from safetensors.torch import save_file

        save_file({"w": torch.full((3,), 666.0)}, str(ck / "model.safetensors"))
        digests.pop("model.safetensors")
    else:  # malformed records: [], null, wrong types
        state = {
            "list": [],
            "null": None,
            "epoch str": {**state, "epoch": "2"},
            "sha256 list": {**state, "sha256": list(digests)},
            "meta str": {**state, "optimizer_meta": "x"},
        }[case]
    (ck / "state.json").write_text(json.dumps(state))


@pytest.mark.parametrize(
    "case",
    [
        "dotdot",
        "absolute",
        "fifo",
        "symlink",
        "empty sha256",
        "unlisted weights",
        "list",
        "null",
        "epoch str",
        "sha256 list",
        "meta str",
    ],
)
def test_checkpoint_loader_trusts_nothing_in_state_json(tmp_path, caplog, case):
    """Escapes, special files, missing checksums and malformed records mean
    "damaged": the loader falls back to the previous checkpoint and says so."""
    import threading

    from lipsweep.trial.checkpoint import load_latest

    root, outside = tmp_path / "run" / "checkpoints", tmp_path / "outside"
    outside.mkdir()
    _save_ck(root, 1)
    _sabotage(case, _save_ck(root, 2), outside)
    got = []
    worker = threading.Thread(target=lambda: got.append(load_latest(root)), daemon=True)
    worker.start()
    worker.join(30)
    assert got, "the loader hung (a FIFO or device was opened)"
    assert got[0].epoch == 1 and torch.equal(got[0].model["w"], torch.full((3,), 1.0))
    assert "epoch_0002 is damaged" in caplog.text and "falling back" in caplog.text


@pytest.mark.parametrize(
    "case,file,field",
    [
        ("resnet", "config.json", "timm.model_name"),
        ("hub name", "config.json", "timm.model_name"),
        ("checkpoint_path kwarg", "config.json", "timm.kwargs.checkpoint_path"),
        ("std 0", "config.json", "normalization.std"),
        ("embed_dim 1e9", "config.json", "timm.kwargs.embed_dim"),
        ("wider than the weights", "model.safetensors", "tensor"),
        ("symlink out", "model.safetensors", "file"),
        ("not json", "config.json", "json"),
        ("missing key", "config.json", "timm"),
        ("bad header", "model.safetensors", "header"),
        ("trailing bytes", "model.safetensors", "header"),
        ("F8_E8M0 weights", "model.safetensors", "tensor"),
    ],
)
def test_load_exported_trusts_nothing_in_the_folder(tmp_path, case, file, field):
    """Only lipsweep's ViTs, built locally, sizes checked against the weights
    file before allocation, no links out; each refusal one ExportError naming file and field."""
    import lipsweep

    model, _, folder = _tiny_export(tmp_path / "export")
    x = torch.rand(2, 3, 32, 32)
    assert torch.allclose(lipsweep.load_exported(folder)(x), model.eval()(x))  # control
    cfg = json.loads((folder / "config.json").read_text())
    if case == "resnet":
        cfg["timm"] = {"model_name": "resnet18", "kwargs": {"num_classes": 10}}
    elif case == "hub name":
        cfg["timm"]["model_name"] = "hf-hub:timm/vit_tiny_patch16_224.augreg_in21k"
    elif case == "checkpoint_path kwarg":
        cfg["timm"]["kwargs"]["checkpoint_path"] = str(tmp_path / "x.pth")
    elif case == "std 0":
        cfg["normalization"]["std"] = [0, 0, 0]
    elif case == "embed_dim 1e9":
        cfg["timm"]["kwargs"]["embed_dim"] = 1e9
    elif case == "wider than the weights":  # 230 MB model if allocated; 300 kB file
        cfg["timm"]["kwargs"].update(embed_dim=1536, num_heads=4)
        cfg["model_args"].update(embed_dim=1536, num_heads=4)  # timm agrees, the weights not
    elif case == "symlink out":
        target = tmp_path / "elsewhere.safetensors"
        (folder / "model.safetensors").rename(target)
        (folder / "model.safetensors").symlink_to(target)
    elif case == "not json":
        cfg = "{"
    elif case == "missing key":
        del cfg["timm"]
    elif case == "bad header":
        (folder / "model.safetensors").write_bytes(b"\xff" * 64)
    elif case == "trailing bytes":  # offsets no longer tile the data section
        with (folder / "model.safetensors").open("ab") as fh:
            fh.write(b"\0" * 8)
    elif case == "F8_E8M0 weights":  # a dtype the hand-written parser did not know
        from safetensors.torch import load_file, save_file

        state = load_file(folder / "model.safetensors")
        state["head.bias"] = state["head.bias"].to(torch.float8_e8m0fnu)
        save_file(state, folder / "model.safetensors")
    (folder / "config.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    with pytest.raises(Exception) as exc:
        lipsweep.load_exported(folder)
    assert type(exc.value).__name__ == "ExportError", repr(exc.value)[:300]
    assert exc.value.file == str(folder / file) and exc.value.field.startswith(field), exc.value
    assert str(exc.value).startswith(f"{folder / file}: {field}") and "\n" not in str(exc.value)
    if case == "F8_E8M0 weights":
        assert "dtype F8_E8M0 is not a float" in str(exc.value), exc.value
