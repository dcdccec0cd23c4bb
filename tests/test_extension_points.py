"""Extension points: extra Ray Tune callbacks named in a space
(``callbacks:``), and family members from installed distributions (entry points). Both plug in
through configuration or installation alone, without editing lipsweep.

The sweep that proves Tune calls a space's callback is the family-members sweep
(tests/test_family_members.py), so that no sweep is added for it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _sweep_helpers import space_file

from lipsweep.__main__ import main
from lipsweep.core.config_base import ConfigError
from lipsweep.search.space import load_space

ROOT = Path(__file__).resolve().parents[1]
PROBE = "_plugins.tune_probe"  # tests/_plugins/tune_probe.py

GRID = "fixed: {epochs: 1}\ngrid: [{regularizer: none}]\n"
README_CALLBACKS = """callbacks:
  - ray.air.integrations.wandb.WandbLoggerCallback: {project: vit-robustness}
  - ray.air.integrations.comet.CometLoggerCallback: {}
"""


# ------------------------------------------------------------------ callbacks: in a space

# Validation imports nothing: not Ray, not W&B or Comet, not the callback's own module (this
# one raises if imported), and the dry run shows them.
_DRY_RUN = """
import sys
from lipsweep.__main__ import main
sys.path.insert(0, sys.argv[2])
rc = main(["sweep", sys.argv[1], "--dry-run"])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("ray", "torch", "wandb", "comet_ml",
                                                             "never_imported"))
assert not heavy, heavy
sys.exit(rc)
"""


def test_callbacks_validate_at_load_without_importing_them(tmp_path):
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "never_imported.py").write_text(
        "raise ImportError('validation imported me')\nclass Notify:\n    pass\n"
    )
    space = space_file(tmp_path, GRID + README_CALLBACKS + "  - never_imported.Notify\n")
    proc = subprocess.run(
        [sys.executable, "-c", _DRY_RUN, str(space), str(mods)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "Tune callbacks: ray.air.integrations.wandb.WandbLoggerCallback, "
        "ray.air.integrations.comet.CometLoggerCallback, never_imported.Notify" in proc.stdout
    )


@pytest.mark.parametrize(
    "entries,field,words",
    [
        (["ray.air.integrations.wandbx.WandbLoggerCallback"], "callbacks[0]", "no module"),
        (["ray.air.integrations.wandb.WandbLogger: {project: p}"], "callbacks[0]", "defines no"),
        (["ray.air.integrations.wandb.WandbLoggerCallback: [project, p]"], "callbacks[0]", "map"),
        ([f"{PROBE}.RecordingCallback: {{path: x}}", "42"], "callbacks[1]", "import path"),
        (["not a path"], "callbacks[0]", "import path"),
        (["nosuchpackage_xyz.Callback"], "callbacks[0]", "no module"),
    ],
)
def test_a_bad_callback_exits_2_with_one_line_naming_it(tmp_path, capsys, entries, field, words):
    body = "".join(f"  - {e}\n" for e in entries)
    space = space_file(tmp_path, GRID + "callbacks:\n" + body)
    assert main(["sweep", str(space), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{space}: {field}: " in err and words in err, err


def test_callbacks_must_be_a_list(tmp_path):
    space = space_file(
        tmp_path, GRID + "callbacks: ray.air.integrations.wandb.WandbLoggerCallback\n"
    )
    with pytest.raises(ConfigError) as err:
        load_space(space)
    assert err.value.field == "callbacks" and "must be a list" in err.value.message


def test_callbacks_are_built_when_the_sweep_starts_and_must_be_tune_callbacks(tmp_path):
    from ray.tune import Callback

    from lipsweep.sweep.driver import build_callbacks

    def built(entry: str):
        return build_callbacks(
            load_space(space_file(tmp_path, GRID + f"callbacks:\n  - {entry}\n"))
        )

    [cb] = built(f"{PROBE}.RecordingCallback: {{path: {tmp_path / 'log'}, tag: t}}")
    assert isinstance(cb, Callback) and cb.label == f"callbacks[0] {PROBE}.RecordingCallback"
    assert (cb.callback.path, cb.callback.tag) == (str(tmp_path / "log"), "t")  # guarded
    [cb] = built(f"{PROBE}:RecordingCallback: {{path: p}}")  # module:Class works too
    assert cb.callback.tag == "probe"
    for entry, words in [
        (f"{PROBE}.NotACallback", "not a ray.tune.Callback"),
        (f"{PROBE}.RecordingCallback: {{colour: red}}", "failed: TypeError"),
    ]:
        with pytest.raises(ConfigError) as err:
            built(entry)
        assert err.value.field == "callbacks[0]" and words in err.value.message, err.value


def test_resume_refuses_a_changed_callback_list(tmp_path):
    """Tune keeps the callbacks of a sweep's first start (it pickles them with the
    experiment), so another list on --resume would be silently ignored: it exits 2."""
    from lipsweep.search.space_record import check_resume_space, save_record, space_record

    storage = str(tmp_path / "runs")
    (tmp_path / "runs" / "exp").mkdir(parents=True)  # Tune's experiment folder
    entry = f"callbacks:\n  - {PROBE}.RecordingCallback: {{path: a}}\n"
    save_record(load_space(space_file(tmp_path, GRID + entry)), storage, "exp")
    check_resume_space(load_space(space_file(tmp_path, GRID + entry)), storage, "exp")
    changed = load_space(space_file(tmp_path, GRID + entry.replace("path: a", "path: b")))
    with pytest.raises(ConfigError, match=r"callbacks changed: .*path.*a.* -> .*path.*b"):
        check_resume_space(changed, storage, "exp")
    # no callbacks: no key, so the records of sweeps started before still match
    assert "callbacks" not in space_record(load_space(space_file(tmp_path, GRID)))["settings"]


# ------------------------------------------------------------------ entry-point plugins

DIST = "lipsweep-demo-plugin"

# A plugin's light module: its settings and spec (torch-free), declared by the import path of
# its class, as lipsweep's own index declares the built-ins; the class loads on first use.
DECLARE = '''
from dataclasses import dataclass

from lipsweep.core.config_base import check_positive
from lipsweep.regularizers import RegularizerSpec, declare_regularizer


@dataclass(frozen=True)
class LogitL2Settings:
    logit_l2_lam: float = 0.5
    """Mean squared logit: weight (> 0)."""

    def __post_init__(self) -> None:
        check_positive("logit_l2_lam", self.logit_l2_lam)


declare_regularizer(
    RegularizerSpec(name="logit_l2", doc="plugin", settings=LogitL2Settings),
    "lipsweep_demo_plugin.impl:LogitL2",
)
'''

IMPL = """
import torch

from lipsweep.regularizers import Regularizer, register_regularizer


@register_regularizer("logit_l2")
class LogitL2(Regularizer):
    def __init__(self, settings):
        super().__init__(settings)
        self.lam, self._out, self._hook = settings.logit_l2_lam, None, None

    def attach(self, model):
        self._hook = model.register_forward_hook(lambda m, i, out: setattr(self, "_out", out))

    def detach(self):
        self._hook.remove()

    def terms(self):
        return {"logit_l2": self._out.float().pow(2).mean()}

    @property
    def weights(self):
        return {"logit_l2": self.lam}
"""


def install_plugin(site: Path, entry_points: str, modules: dict[str, str]) -> Path:
    """A distribution installed into the folder ``site`` as pip would leave it: its package and
    a ``*.dist-info`` with METADATA and entry_points.txt. ``site`` on sys.path installs it."""
    info = site / "lipsweep_demo_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    pkg = site / "lipsweep_demo_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in modules.items():
        (pkg / f"{name}.py").write_text(text)
    return site


PLUGIN = "[lipsweep.regularizers]\nlogit_l2 = lipsweep_demo_plugin.declare\n"
PLUGIN_SPACE = "fixed: {epochs: 1}\ngrid: [{regularizer: logit_l2, logit_l2_lam: [0.25, 1.0]}]\n"

# Blocks torch and Ray (as test_space's dry-run test), then runs the CLI's dry run.
_PLUGIN_DRY_RUN = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "timm", "ray", "mlflow"):
            raise ImportError("blocked import of " + name)
sys.meta_path.insert(0, _Block())
from lipsweep.__main__ import main
rc = main(["sweep", sys.argv[1], "--dry-run"])
assert "lipsweep_demo_plugin.impl" not in sys.modules, "the plugin's class was imported"
sys.exit(rc)
"""


def _dry_run_with(site: Path, space: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _PLUGIN_DRY_RUN, str(space)],
        cwd=space.parent,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{site}:{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_installed_plugin_regularizer_validates_in_a_space(tmp_path):
    site = install_plugin(tmp_path / "site", PLUGIN, {"declare": DECLARE, "impl": IMPL})
    space = space_file(tmp_path, PLUGIN_SPACE)
    proc = _dry_run_with(site, space)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 trials" in proc.stdout and "logit_l2 logit_l2_lam=0.25" in proc.stdout
    bad = space_file(tmp_path, PLUGIN_SPACE.replace("0.25", "-1"), "bad.yaml")
    proc = _dry_run_with(site, bad)  # its own settings class checks its field
    assert proc.returncode == 2 and "logit_l2_lam" in proc.stderr, proc.stderr


def test_a_broken_plugin_exits_2_naming_its_entry_point_and_distribution(tmp_path):
    broken = "raise RuntimeError('missing dependency foo')\n"
    site = install_plugin(tmp_path / "site", PLUGIN, {"declare": broken})
    proc = _dry_run_with(site, space_file(tmp_path, PLUGIN_SPACE))
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert "plugin 'logit_l2'" in line and f"distribution {DIST} 0.1" in line
    assert "lipsweep_demo_plugin.declare" in line and "missing dependency foo" in line


# Each command line in one process; its exit status on the last line of stderr.
_COMMANDS = """
import json, sys
from lipsweep.__main__ import main
codes = []
for argv in json.loads(sys.argv[1]):
    try:
        codes.append(main(argv))
    except SystemExit as exc:
        codes.append(exc.code)
sys.stderr.write(json.dumps(codes) + "\\n")
"""


def test_a_broken_dataset_plugin_fails_only_the_commands_that_read_datasets(tmp_path):
    broken = "raise RuntimeError('missing dependency foo')\n"
    entry = "[lipsweep.datasets]\nstripes = lipsweep_demo_plugin.declare\n"
    site = install_plugin(tmp_path / "site", entry, {"declare": broken})
    prepare = ["data", "prepare", "--dataset", "cifar10", "--source", ".", "--dest", "d"]
    argvs = [["--version"], ["--help"], ["spaces"], ["data", "prepare", "--help"], prepare]
    proc = subprocess.run(
        [sys.executable, "-c", _COMMANDS, json.dumps(argvs)],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{site}:{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    *lines, codes = proc.stderr.strip().splitlines()
    assert json.loads(codes) == [0, 0, 0, 0, 2], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "usage: lipsweep data prepare" in proc.stdout
    assert "values unavailable: plugin 'stripes'" in " ".join(proc.stdout.split())
    (line,) = [s for s in lines if s.startswith("lipsweep data: error:")]
    assert "plugin 'stripes'" in line and "missing dependency foo" in line, line
    assert not (tmp_path / "d").exists()


@pytest.fixture()
def plugin_on_path(tmp_path, monkeypatch):
    """The plugin installed into a folder put on this process's sys.path; removed after."""
    from lipsweep.regularizers import REGULARIZERS, is_regularizer, unregister_regularizer

    site = install_plugin(tmp_path / "site", PLUGIN, {"declare": DECLARE, "impl": IMPL})
    monkeypatch.syspath_prepend(str(site))
    yield REGULARIZERS
    if is_regularizer("logit_l2"):
        unregister_regularizer("logit_l2")
    for name in [m for m in sys.modules if m.startswith("lipsweep_demo_plugin")]:
        del sys.modules[name]


def test_an_installed_plugin_regularizer_computes_its_term(plugin_on_path):
    import torch

    from lipsweep.regularizers import create_regularizer, list_regularizers
    from lipsweep.settings.config import TrialConfig

    plugin_on_path.load_entry_points()  # a running process: the plugin came after the first read
    assert "logit_l2" in list_regularizers()
    cfg = TrialConfig.from_flat({"regularizer": "logit_l2", "logit_l2_lam": 0.25})
    assert cfg.to_flat()["logit_l2_lam"] == 0.25
    model = torch.nn.Linear(4, 3)
    reg = create_regularizer("logit_l2", logit_l2_lam=0.25)
    reg.attach(model)
    out = model(torch.ones(2, 4))
    term = reg.terms()["logit_l2"]
    reg.detach()
    assert torch.allclose(term, out.pow(2).mean()) and reg.weights == {"logit_l2": 0.25}
    term.backward()
    assert model.weight.grad is not None and model.weight.grad.abs().sum() > 0


WIDGETS = """
[lipsweep.test_widgets]
widget_a = lipsweep_demo_plugin.widgets
[lipsweep.test_widgets_misnamed]
widget_c = lipsweep_demo_plugin.widgets
"""


def test_entry_points_load_on_first_read_and_must_add_their_member(tmp_path, monkeypatch):
    """The mechanism on families of the test's own (no global state): nothing is imported
    until the first read; a module that does not add its entry point's name is refused,
    naming the entry point and its distribution."""
    from lipsweep.core.registry import PluginError, Registry

    widgets = "from widget_family import FAMILY\nFAMILY.declare('widget_a', 'json:dumps')\n"
    site = install_plugin(tmp_path / "site", WIDGETS, {"widgets": widgets})
    (site / "widget_family.py").write_text(
        "from lipsweep.core.registry import Registry\nFAMILY = Registry('widget')\n"
    )
    monkeypatch.syspath_prepend(str(site))
    import widget_family

    try:
        family = widget_family.FAMILY
        family.declare("builtin", "json:loads")
        family.use_entry_points("lipsweep.test_widgets")
        assert "lipsweep_demo_plugin.widgets" not in sys.modules  # not before the first read
        assert family.names() == ["builtin", "widget_a"]
        assert family.create("widget_a", [1]) == "[1]"
        misnamed = Registry("widget")
        misnamed.use_entry_points("lipsweep.test_widgets_misnamed")
        for _ in range(2):  # not marked read: every later read says it again
            with pytest.raises(PluginError) as err:
                "anything" in misnamed  # noqa: B015
            msg = str(err.value)
            assert "plugin 'widget_c' (lipsweep.test_widgets_misnamed = " in msg, msg
            assert f"distribution {DIST} 0.1" in msg and "added no widget named 'widget_c'" in msg
    finally:
        for name in [m for m in sys.modules if m.startswith(("lipsweep_demo_", "widget_fam"))]:
            del sys.modules[name]
