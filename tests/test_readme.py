"""The README is the front door: its commands are the tested ones.

Every command the README gives (its bash and console blocks, and the complete commands in its
prose) is read out of it here. Every ``lipsweep`` command parses with the real parser, every
``make`` target exists, every tool it runs from ``.venv/bin`` is there and takes the flags it is
given. The cheap ones run as written, in a folder laid out as a fresh clone after ``make demo``
(``configs/`` and ``search_spaces/``, a tiny ``exports/smoke-best``, the README's own
``my100.npz``), and print what the README shows: listings, ``--dry-run``, ``--help``, the error
examples, the Python snippets, the API's error. What trains, sweeps, serves or needs a cluster
is parsed only (the sweep tests, tests/test_serve.py and tests/test_cluster_loopback.py run
those paths).
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lipsweep.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
HOME = "/home/me"
"""The README writes the folder its examples ran in as this."""


@dataclass
class Command:
    text: str
    """As written (continuation lines joined), without the ``$ `` prompt or a trailing comment."""
    output: list[str] = field(default_factory=list)
    """The lines the README shows after it (console blocks)."""
    line: int = 0

    @property
    def argv(self) -> list[str]:
        words = shlex.split(self.text)
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value before it
            words.pop(0)
        return words


def _blocks(text: str) -> list[tuple[str, str, int]]:
    """(language, body, line) of every fenced block."""
    return [
        (m.group(1), m.group(2), text[: m.start()].count("\n") + 1)
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
    ]


def _joined(lines: list[str]) -> list[tuple[int, str]]:
    """Lines with their ``\\`` continuations joined: (index of the first, text)."""
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        start, text = i, lines[i]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1].rstrip() + " " + lines[i].strip()
        out.append((start, text))
        i += 1
    return out


def _uncomment(text: str) -> str:
    """A shell line without its trailing ``# comment`` (not one inside quotes)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=False)
    lexer.commenters = "#"
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return text.strip()
    if not words:
        return ""
    return text[: text.index("#")].rstrip() if len(words) < len(shlex.split(text)) else text


def commands() -> list[Command]:
    """Every command of the README's bash and console blocks."""
    found = []
    for lang, body, line in _blocks(README):
        lines = body.splitlines()
        if lang == "bash":
            for i, text in _joined(lines):
                text = _uncomment(text)
                if text and not text.startswith("#"):
                    found.append(Command(text, line=line + 1 + i))
        elif lang == "console":
            joined = _joined(lines)
            for k, (i, text) in enumerate(joined):
                if text.startswith("$ "):
                    out = []
                    for _, later in joined[k + 1 :]:
                        if later.startswith("$ "):
                            break
                        out.append(later)
                    found.append(Command(_uncomment(text[2:]), out, line + 1 + i))
    return found


def prose_commands() -> list[Command]:
    """Complete commands written inline (`...`) in the prose: ``lipsweep`` with options, a
    listing, ``make`` and ``.venv/bin`` ones; not a usage line with placeholders."""
    prose = re.sub(r"^```.*?^```", "", README, flags=re.S | re.M).replace("\n", " ")
    found = []
    for span in re.findall(r"`([^`]+)`", prose):
        if re.search(
            r"\[|\.\.\.|\b[A-Z][A-Z_-]{2,}\b", span.split("=")[0] if "=" in span else span
        ):
            continue  # a usage line: NAME, DIR, [--flag]
        lipsweep = re.match(r"lipsweep (\S+)", span)
        if lipsweep and (" -" in span or lipsweep.group(1) in ("spaces", "models")):
            found.append(Command(span))
        elif span.startswith(("make ", ".venv/bin/")):
            found.append(Command(span))
    return found


def _unique(found: list[Command]) -> list[Command]:
    """One of each command (the one the README shows output for, if any)."""
    kept: dict[str, Command] = {}
    for cmd in found:
        if cmd.text not in kept or (cmd.output and not kept[cmd.text].output):
            kept[cmd.text] = cmd
    return list(kept.values())


ALL = _unique(commands() + prose_commands())


def _lipsweep(cmd: Command) -> bool:
    return bool(cmd.argv) and cmd.argv[0] in ("lipsweep", ".venv/bin/lipsweep")


def _cheap(cmd: Command) -> bool:
    """Runs in seconds and writes nothing: a listing, --help, --dry-run, or an error example
    (its options are refused before anything starts)."""
    argv = cmd.argv[1:]
    error = len(cmd.output) == 1 and cmd.output[0].startswith(f"lipsweep {argv[0]}: error: ")
    listing = {"--help", "--help-settings", "--dry-run", "--version"} & set(argv)
    return error or bool(listing) or argv[0] in ("spaces", "models")


def test_the_readme_gives_commands_to_check():
    """The extraction finds what it should (a broken fence would make every test vacuous)."""
    texts = [c.text for c in ALL]
    assert "make demo" in texts and "lipsweep sweep paper_cifar10 --dry-run" in texts
    assert any(
        c.text.startswith("lipsweep train configs/tiny.yaml --set patch_size=5") for c in ALL
    )
    assert sum(_lipsweep(c) for c in ALL) >= 15 and sum(_cheap(c) for c in ALL if _lipsweep(c)) >= 5


@pytest.mark.parametrize("cmd", [c for c in ALL if _lipsweep(c)], ids=lambda c: c.text[:60])
def test_every_lipsweep_command_parses(cmd):
    parser = build_parser()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser.parse_args(cmd.argv[1:])
        except SystemExit as exc:
            assert exc.code == 0, f"README line {cmd.line}: {cmd.text}\n{err.getvalue()}"


def _targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))


def test_every_make_target_the_readme_names_exists():
    named = {c.argv[1] for c in ALL if c.argv[:1] == ["make"] and len(c.argv) > 1}
    named |= set(re.findall(r"`make ([a-z][\w-]*)", README))
    assert named and named <= _targets(), sorted(named - _targets())


def _tool(argv: list[str]) -> str | None:
    """The tool of ``.venv/bin/X ...`` or ``mlflow ...`` (run from the venv)."""
    if argv[0].startswith(".venv/bin/"):
        return argv[0].removeprefix(".venv/bin/")
    return argv[0] if argv[0] == "mlflow" else None


@pytest.mark.parametrize(
    "cmd", [c for c in ALL if c.argv and _tool(c.argv)], ids=lambda c: c.text[:60]
)
def test_tools_run_from_the_venv_exist_and_take_the_flags_given(cmd):
    """``.venv/bin/mlflow ui ...`` and the like: the environment the tests run in is the one
    ``make setup`` made; the tool is in it, and each flag is one it documents."""
    tool = _tool(cmd.argv)
    assert (Path(sys.executable).parent / tool).is_file(), tool
    flags = [a.split("=")[0] for a in cmd.argv[1:] if a.startswith("--")]
    if tool == "python":  # a script of the repository: its flags are in its source
        script = ROOT / cmd.argv[1]
        assert script.is_file(), script
        helped = script.read_text()
    elif tool == "mlflow" and flags:
        import click
        from mlflow.cli import cli  # its click commands: the options each takes

        words = [a for a in cmd.argv[1:] if not a.startswith("-")]
        command = cli
        while words and isinstance(command, click.Group):
            sub = command.get_command(click.Context(command), words.pop(0))
            if sub is None:
                break
            command = sub
        helped = " ".join(opt for p in command.params for opt in getattr(p, "opts", ()))
    else:
        return  # lipsweep: parsed above
    missing = [f for f in flags if f not in helped.split() and f not in helped]
    assert not missing, f"README line {cmd.line}: {tool} does not take {missing}"


# -- the cheap ones, run as written --------------------------------------------------------------


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A folder laid out as a fresh clone after ``make demo``: configs/ and search_spaces/,
    an export of the smoke space's first trial (random weights) in exports/smoke-best, and
    floats.npz for the README's float-pixels error."""
    import numpy as np

    from lipsweep.decide.export import write_export
    from lipsweep.search.space import load_space
    from lipsweep.settings.config import TrialConfig
    from lipsweep.vit.export_format import build_config_json
    from lipsweep.vit.models import create_model, model_normalization

    d = tmp_path_factory.mktemp("clone")
    for name in ("configs", "search_spaces"):
        (d / name).symlink_to(ROOT / "lipsweep" / name)
    cfg = TrialConfig.from_flat(load_space(ROOT / "search_spaces" / "smoke.yaml").trials[0])
    mean, std = model_normalization(cfg.model)
    config = build_config_json(cfg.to_flat(), mean, std, {"run_id": "r"})
    (d / "exports").mkdir()
    write_export(d / "exports" / "smoke-best", create_model(cfg.model).net.state_dict(), config, {})
    rng = np.random.default_rng(0)
    np.savez(
        d / "floats.npz",
        x_train=rng.random((20, 32, 32, 3), dtype=np.float32),
        y_train=np.arange(20) % 10,
        x_test=rng.random((10, 32, 32, 3), dtype=np.float32),
        y_test=np.arange(10),
    )
    return d


def _shown(output: list[str]) -> list[str]:
    """The lines the README shows, less the ones it abridged (``...``)."""
    return [ln.rstrip() for ln in output if ln.strip() and not ln.strip().startswith("...")]


def _in_order(want: list[str], got: str) -> None:
    lines = [ln.rstrip() for ln in got.splitlines()]
    at = 0
    for w in want:
        while at < len(lines) and lines[at] != w:
            at += 1
        assert at < len(lines), f"not in the output (in order): {w!r}\n--- output:\n{got}"
        at += 1


@pytest.mark.parametrize(
    "cmd", [c for c in ALL if _lipsweep(c) and _cheap(c)], ids=lambda c: c.text[:60]
)
def test_the_cheap_lipsweep_commands_print_what_the_readme_shows(cmd, clone, monkeypatch):
    from lipsweep.__main__ import main

    monkeypatch.chdir(clone)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(cmd.argv[1:])
        except SystemExit as exc:  # --help
            rc = exc.code
    text = (out.getvalue() + err.getvalue()).replace(str(clone), HOME)
    error = bool(cmd.output) and cmd.output[0].startswith("lipsweep ")
    assert rc == (2 if error else 0), f"README line {cmd.line}: {cmd.text}\n{text}"
    _in_order(_shown(cmd.output), text)


def _python_blocks() -> list[tuple[str, list[str], int]]:
    """(code, the output block right after it, line) of every python block."""
    blocks = _blocks(README)
    found = []
    for k, (lang, body, line) in enumerate(blocks):
        if lang != "python":
            continue
        nxt = blocks[k + 1] if k + 1 < len(blocks) else None
        close = nxt and nxt[0] == "console" and README.count("\n", 0, README.index(nxt[1])) - (
            line + body.count("\n")
        ) <= 3  # fmt: skip
        output = nxt[1].splitlines() if close else []
        found.append((body, [] if output[:1] and output[0].startswith("$ ") else output, line))
    return found


def test_every_python_snippet_compiles():
    for code, _, line in _python_blocks():
        source = "\n".join(ln[4:] for ln in code.splitlines() if ln.startswith((">>> ", "... ")))
        compile(source or code, f"README.md:{line}", "exec")


def test_the_python_snippets_run_as_written(clone, monkeypatch):
    """The own-data npz and the timm snippet run in the clone and print what the README
    shows; a snippet that needs a model registry (``models:/``) is compiled only."""
    monkeypatch.chdir(clone)
    ran = 0
    for code, output, line in _python_blocks():
        if code.startswith(">>>") or "models:/" in code:
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "__main__"})
        _in_order(_shown(output), out.getvalue())
        ran += 1
    assert ran >= 2
    import numpy as np

    with np.load(clone / "my100.npz") as d:  # the own-data example's file, as it describes it
        assert d["x_train"].shape == (5000, 32, 32, 3) and int(d["y_train"].max()) == 99


def test_the_api_session_raises_the_error_it_shows():
    """The ``>>>`` session's error line, from the statement before it (checked before any
    work starts, so it is cheap)."""
    code = next(c for c, _, _ in _python_blocks() if c.startswith(">>>"))
    lines = code.splitlines()
    for i, text in enumerate(lines):
        shown = lines[i + 1] if i + 1 < len(lines) else ""
        if text.startswith(">>> ") and re.match(r"[\w.]+(Error|Exception): ", shown):
            scope: dict = {}
            exec("from lipsweep import api", scope)
            with pytest.raises(Exception) as err:
                exec(text[4:], scope)
            kind = type(err.value)
            assert f"{kind.__module__}.{kind.__qualname__}: {err.value}" == shown
            return
    pytest.fail("the README's API session shows no error line")


# -- the cluster sequence and CI -----------------------------------------------------------------


def _tested_block(text: str) -> str:
    m = re.search(r"## The tested sequence.*?```bash\n(.*?)```", text, re.S)
    assert m, "deploy/README.md lost its tested sequence"
    return m.group(1)


def test_readme_cluster_section_is_the_tested_sequence_word_for_word():
    tested = _tested_block((ROOT / "deploy" / "README.md").read_text())
    assert f"```bash\n{tested}```" in README


def test_readme_gives_exactly_the_two_make_commands_ci_runs():
    assert "make demo" in README and "make test" in README
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "PLACEHOLDER" not in README


def test_readme_commands_after_setup_need_no_uv_on_path():
    """``uv run ...`` exits 127 where uv is not on PATH (uv then lives in .tools/): the README
    runs the tools from .venv/bin, which ``make setup`` always creates."""
    assert not re.search(r"^\s*uv run ", README, re.M), "README runs `uv run` after setup"
    assert ".venv/bin/lipsweep --help" in README
