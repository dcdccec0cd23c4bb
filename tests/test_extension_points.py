"""Extension points (issue 29 item 4): extra Ray Tune callbacks named in a space
(``callbacks:``), and family members from installed distributions (entry points). Both plug in
through configuration or installation alone, without editing lipsweep.

The sweep that proves Tune calls a space's callback is the family-members sweep
(tests/test_family_members.py), so that no sweep is added for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lipsweep.__main__ import main
from lipsweep.core.config_base import ConfigError
from lipsweep.sweep.space import load_space

ROOT = Path(__file__).resolve().parents[1]
PROBE = "_plugins.tune_probe"  # tests/_plugins/tune_probe.py

GRID = "fixed: {epochs: 1}\ngrid: [{regularizer: none}]\n"
README_CALLBACKS = """callbacks:
  - ray.air.integrations.wandb.WandbLoggerCallback: {project: vit-robustness}
  - ray.air.integrations.comet.CometLoggerCallback: {}
"""


def _space(tmp_path: Path, text: str, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


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
    space = _space(tmp_path, GRID + README_CALLBACKS + "  - never_imported.Notify\n")
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
    space = _space(tmp_path, GRID + "callbacks:\n" + body)
    assert main(["sweep", str(space), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{space}: {field}: " in err and words in err, err


def test_callbacks_must_be_a_list(tmp_path):
    space = _space(tmp_path, GRID + "callbacks: ray.air.integrations.wandb.WandbLoggerCallback\n")
    with pytest.raises(ConfigError) as err:
        load_space(space)
    assert err.value.field == "callbacks" and "must be a list" in err.value.message


def test_callbacks_are_built_when_the_sweep_starts_and_must_be_tune_callbacks(tmp_path):
    from ray.tune import Callback

    from lipsweep.sweep.driver import build_callbacks

    def built(entry: str):
        return build_callbacks(load_space(_space(tmp_path, GRID + f"callbacks:\n  - {entry}\n")))

    [cb] = built(f"{PROBE}.RecordingCallback: {{path: {tmp_path / 'log'}, tag: t}}")
    assert isinstance(cb, Callback) and (cb.path, cb.tag) == (str(tmp_path / "log"), "t")
    [cb] = built(f"{PROBE}:RecordingCallback: {{path: p}}")  # module:Class works too
    assert cb.tag == "probe"
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
    from lipsweep.sweep.space_record import check_resume_space, save_record, space_record

    storage = str(tmp_path / "runs")
    (tmp_path / "runs" / "exp").mkdir(parents=True)  # Tune's experiment folder
    entry = f"callbacks:\n  - {PROBE}.RecordingCallback: {{path: a}}\n"
    save_record(load_space(_space(tmp_path, GRID + entry)), storage, "exp")
    check_resume_space(load_space(_space(tmp_path, GRID + entry)), storage, "exp")
    changed = load_space(_space(tmp_path, GRID + entry.replace("path: a", "path: b")))
    with pytest.raises(ConfigError, match=r"callbacks changed: .*path.*a.* -> .*path.*b"):
        check_resume_space(changed, storage, "exp")
    # no callbacks: no key, so the records of sweeps started before still match
    assert "callbacks" not in space_record(load_space(_space(tmp_path, GRID)))["settings"]
