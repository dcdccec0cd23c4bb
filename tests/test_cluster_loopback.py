"""The cluster path for real, on loopback: `ray up`, `ray submit` of the smoke sweep, MLflow,
`ray down`.

The test runs, word for word, the command block under "## The tested sequence" in
``deploy/README.md`` (the cloud config name ``ray_cluster.yaml`` replaced by the loopback config
rendered from ``deploy/local_cluster.yaml``, whose ``search_spaces`` mount gives the head a
smoke.yaml of 1 short epoch: LIGHT_SMOKE), each line in ``bash -c`` as a user would type it. The
one interactive line, ``ray attach ... -p 5000``, is replaced by what a user does through that
tunnel: read the sweep from the head's MLflow server over HTTP.

The "cluster" is this machine, and nothing outside a temporary folder T changes:
- an sshd started by the test on 127.0.0.1 (a free high port, its own host key and authorized
  key), inside its own PID namespace (``unshare --pid``): `ray up` and `ray down` run ``ray stop``
  on the head, which kills every Ray process it can see, so the head must not see other people's
  Ray processes on a shared machine; killing the namespace's init at the end takes the Ray head and
  the MLflow server with it;
- the SSH login's HOME is T/head (sshd ``SetEnv HOME``), whose ``.bashrc`` puts the project's
  Python on PATH, as an image would; Ray's temp files go to T/rt;
- the "laptop" side runs with HOME=T/laptop and TMPDIR=T/ct; its SSH config (a ``Host 127.0.0.1``
  entry carrying the port) is passed by an ``ssh`` wrapper on PATH (ssh reads ~/.ssh/config from
  the passwd entry, not $HOME).
Outside T it creates /run/sshd (sshd's privilege-separation folder) if missing and Ray's SSH
control sockets under /tmp/ray_ssh_*/<cluster hash>, and removes both (sshd also logs the logins
to wtmp, as any SSH login does). While the sequence runs, a watcher checks that every process in
the head's namespace has its HOME and temp dirs under T; teardown checks that no process of the
test is left.

Needs root (the PID namespace), ``unshare``, ``sshd`` and ``rsync``:
``apt-get install -y openssh-server rsync``. Set LIPSWEEP_LOOPBACK_TRANSCRIPT=PATH to keep the
transcript (docs/deploy_loopback_output.txt is one).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "deploy" / "README.md"
TEMPLATE = ROOT / "deploy" / "local_cluster.yaml"
SECTION = "## The tested sequence"
CLOUD_CONFIG = "ray_cluster.yaml"
SMOKE_TRIALS = 4  # search_spaces/smoke.yaml: baseline, 2 x JaSMin, Specformer
LIGHT_SMOKE = {
    "epochs": 1,
    "warmup_epochs": 0,
    "train_size": 512,
    "eval_size": 64,
    "aa_attacks": ["apgd-ce"],
    "lip_tokens": False,
    "lip_softmax": False,
    "lip_head_bounds": False,
}
"""What the head's smoke.yaml changes here (Loopback._light_spaces); its grid stays. The lean
evaluation (one AutoAttack stage, only ||J_f||) took one light trial from 30 s to 16 s alone."""
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


# --- the documented sequence -------------------------------------------------------------------


def documented_sequence(readme: Path = README) -> list[str]:
    """The commands of the first ```bash block under SECTION (comments dropped, ``\\`` joined)."""
    text = readme.read_text()
    start = text.find(SECTION + "\n")
    if start < 0:
        raise AssertionError(f"{readme}: no '{SECTION}' heading")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    if block is None:
        raise AssertionError(f"{readme}: no ```bash block under '{SECTION}'")
    commands, pending = [], ""
    for line in block.group(1).splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        commands.append(pending + stripped)
        pending = ""
    assert not pending, "dangling line continuation in the tested sequence"
    return commands


def test_tested_sequence_is_complete():
    """The block brings a cluster up, runs the smoke sweep, keeps the MLflow store, brings it
    down."""
    cmds = documented_sequence()
    verbs = [c.split()[1] if c.startswith("ray ") else c.split()[0] for c in cmds]
    for verb in ("get-auth-token", "up", "submit", "attach", "exec", "rsync-down", "down"):
        assert verb in verbs, f"the tested sequence lacks `ray {verb}`: {cmds}"
    assert verbs.index("up") < verbs.index("submit") < verbs.index("down") == len(verbs) - 1
    submit = next(c for c in cmds if c.startswith("ray submit"))
    assert f"ray submit {CLOUD_CONFIG} deploy/sweep_entry.py -- search_spaces/smoke.yaml" in submit
    assert all(CLOUD_CONFIG in c for c in cmds if c.startswith("ray ") and "auth-token" not in c)
    token_cmd = next(c for c in cmds if "get-auth-token" in c)
    assert "> /dev/null" in token_cmd, "the token must not be printed to the terminal"


# --- the loopback machine ----------------------------------------------------------------------


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _processes() -> dict[int, tuple[str, str]]:
    """pid -> (command line, cwd) of every process this user can see (Linux /proc)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        out[int(entry.name)] = (cmd.strip(), cwd)
    return out


def _listeners() -> dict[int, set[str]]:
    """TCP port -> addresses listening on it (/proc/net/tcp and tcp6 of this network namespace)."""
    out: dict[int, set[str]] = {}
    for name, width in (("tcp", 8), ("tcp6", 32)):
        path = Path("/proc/net") / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            addr_hex, port_hex = fields[1].split(":")
            raw = bytes.fromhex(addr_hex)
            if width == 8:
                addr = socket.inet_ntop(socket.AF_INET, raw[::-1])
            else:
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                addr = socket.inet_ntop(socket.AF_INET6, words)
            out.setdefault(int(port_hex, 16), set()).add(addr)
    return out


def _http(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


class Loopback:
    """A throwaway SSH-reachable "head" on 127.0.0.1 and a "laptop" environment to drive it."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="lsw", dir="/tmp"))  # short: Ray's socket paths
        self.cluster_name = f"lipsweep-{self.root.name}"
        self.head, self.laptop = self.root / "head", self.root / "laptop"
        (
            self.sshd_port,
            self.gcs_port,
            self.dashboard_port,
            self.agent_port,
            self.metrics_port,
            self.mlflow_port,
        ) = _free_ports(6)
        self.venv_bin = Path(sys.executable).parent
        self.sshd: subprocess.Popen | None = None
        self.made_run_sshd = False
        self.transcript: list[str] = []
        self.n_runs = 0
        self.pid_ns = ""
        self.seen: set[str] = set()  # process names seen in the head's namespace
        self.escapes: set[str] = set()  # processes there whose HOME / temp dir is outside T
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.config = self.root / "local_cluster.yaml"
        user_hash = hashlib.sha256(_username().encode()).hexdigest()[:10]
        cluster_hash = hashlib.sha256(self.cluster_name.encode()).hexdigest()[:10]
        self.control_dir = Path(f"/tmp/ray_ssh_{user_hash}") / cluster_hash
        self.control_parent_existed = self.control_dir.parent.exists()

    # setup
    def start(self) -> None:
        r = self.root
        for d in ("head", "laptop/.ssh", "sshd", "bin", "ct", "rt"):
            (r / d).mkdir(parents=True, exist_ok=True)
        for d in (self.head, self.laptop, r / "sshd", self.laptop / ".ssh"):
            d.chmod(0o700)
        key = self.laptop / ".ssh" / "id_ed25519"
        for path in (r / "sshd" / "host_key", key):
            subprocess.run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    "lipsweep-loopback",
                    "-f",
                    str(path),
                ],
                check=True,
            )
        shutil.copy(f"{key}.pub", r / "sshd" / "authorized_keys")
        (r / "sshd" / "sshd_config").write_text(f"""\
Port {self.sshd_port}
ListenAddress 127.0.0.1
HostKey {r}/sshd/host_key
PidFile none
AuthorizedKeysFile {r}/sshd/authorized_keys
StrictModes no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers {_username()}
UsePAM no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding local
SetEnv HOME={self.head}
""")
        # The head's "image": the project's Python on PATH, Ray's temp files in T, code from the
        # copy `ray up` mounts at ~/lipsweep (what an editable install there gives).
        (self.head / ".bashrc").write_text(f"""\
export PATH={self.venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export RAY_TMPDIR={r}/rt TMPDIR={r}/rt RAY_USAGE_STATS_ENABLED=0
export PYTHONPATH=$HOME/lipsweep
cd "$HOME"
""")
        (self.head / ".bash_profile").write_text(". ~/.bashrc\n")
        (self.laptop / ".ssh" / "config").write_text(f"""\
Host 127.0.0.1
    Port {self.sshd_port}
    IdentityFile {key}
    UserKnownHostsFile /dev/null
    StrictHostKeyChecking no
    LogLevel ERROR
""")
        wrapper = r / "bin" / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {self.laptop}/.ssh/config "$@"\n')
        wrapper.chmod(0o755)
        self.render_config(key)
        if not Path("/run/sshd").exists():
            Path("/run/sshd").mkdir(mode=0o755)
            self.made_run_sshd = True
        log = open(r / "sshd" / "log", "wb")
        self.sshd = subprocess.Popen(
            [
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                "--kill-child",
                "/usr/sbin/sshd",
                "-D",
                "-e",
                "-f",
                str(r / "sshd" / "sshd_config"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.time() + 20
        while self.sshd_port not in _listeners():
            if self.sshd.poll() is not None or time.time() > deadline:
                raise RuntimeError("sshd did not start: " + (r / "sshd" / "log").read_text())
            time.sleep(0.1)
        init = self._ns_init()
        self.pid_ns = os.readlink(f"/proc/{init}/ns/pid")
        assert self.pid_ns != os.readlink("/proc/self/ns/pid"), "sshd is not in its own namespace"
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _ns_init(self) -> int:
        children = Path(f"/proc/{self.sshd.pid}/task/{self.sshd.pid}/children").read_text().split()
        assert len(children) == 1, children
        return int(children[0])

    def _watch(self) -> None:
        """Every second, every process of the head's namespace: its HOME and temp dirs must be
        under T (sshd itself, which keeps the test's environment, excepted)."""
        # /proc/<pid>/environ is the environment a process was started with.
        while not self._stop.is_set():
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    if os.readlink(f"/proc/{pid}/ns/pid") != self.pid_ns:
                        continue
                    comm = Path(f"/proc/{pid}/comm").read_text().strip()
                    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                if not cmd.strip():  # exiting or a zombie: its memory (environ, argv) is gone
                    continue
                env = dict(e.decode(errors="replace").split("=", 1) for e in raw if b"=" in e)
                self.seen.add(comm)
                if comm == "sshd":
                    continue
                # HOME for all; TMPDIR too, except for shells, whose /proc environ is what sshd
                # gave them (they export the rest later); RAY_TMPDIR, where set (Ray passes its
                # session folder to the processes it starts as an argument).
                # Ray's own processes retitle themselves (setproctitle): a long title such as
                # "ray::DashboardAgent" or "ray-dashboard-DataHead-0 (...)" (the dashboard's
                # modules, which run since the lock pins ray[default]) is written over the start
                # of their environ block, so any variable may be gone there; whatever is left
                # is still checked.
                if comm.startswith(("ray::", "ray-dashboard")):
                    required: tuple[str, ...] = ()
                elif comm in ("bash", "sh", "rsync"):
                    required = ("HOME",)
                else:
                    required = ("HOME", "TMPDIR")
                for key in ("HOME", "TMPDIR", "RAY_TMPDIR"):
                    value = env.get(key)
                    if (key in required or value is not None) and not (value or "").startswith(
                        str(self.root)
                    ):
                        self.escapes.add(
                            f"{comm} ({cmd.decode(errors='replace')[:120]}): {key}={value}"
                        )
            self._stop.wait(1.0)

    def render_config(self, key: Path) -> None:
        values = {
            "cluster_name": self.cluster_name,
            "head_ip": "127.0.0.1",
            "ssh_user": _username(),
            "ssh_private_key": str(key),
            "gcs_port": self.gcs_port,
            "dashboard_port": self.dashboard_port,
            "agent_port": self.agent_port,
            "metrics_port": self.metrics_port,
            "mlflow_port": self.mlflow_port,
            "num_cpus": 2,
        }
        text = TEMPLATE.read_text()
        body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        assert set(re.findall(r"\{\{(\w+)\}\}", body)) == set(values), "template fields changed"
        for name, value in values.items():
            text = text.replace("{{" + name + "}}", str(value))
        mount = '"~/lipsweep/search_spaces": "./search_spaces"'
        assert mount in text, "the search_spaces file mount changed"
        text = text.replace(mount, f'"~/lipsweep/search_spaces": "{self._light_spaces()}"')
        self.config.write_text(text)

    def _light_spaces(self) -> Path:
        """A copy of search_spaces/ whose smoke.yaml trains 1 epoch and evaluates 64 images
        leanly:
        the same 4 trials through the same commands, minutes less of CI (the whole smoke sweep
        took 7 of this test's minutes on the 2-core CI box)."""
        import yaml

        dst = self.root / "search_spaces"
        shutil.copytree(ROOT / "search_spaces", dst)
        space = yaml.safe_load((dst / "smoke.yaml").read_text())
        space["fixed"].update(LIGHT_SMOKE)
        (dst / "smoke.yaml").write_text(yaml.safe_dump(space, sort_keys=False))
        return dst

    # driving it
    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.root}/bin:{self.venv_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.laptop),
            "TMPDIR": str(self.root / "ct"),
            "RAY_USAGE_STATS_ENABLED": "0",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "USER": _username(),
        }

    def run(self, command: str, timeout: float, check: bool = False) -> subprocess.CompletedProcess:
        """One documented command (or, with ``check``, one of the test's own), on the laptop side,
        with the cloud config name swapped for the loopback config."""
        local = command.replace(CLOUD_CONFIG, str(self.config))
        self.n_runs += 1
        log_path = self.root / "logs" / f"{self.n_runs:02d}.log"  # readable while it runs
        log_path.parent.mkdir(exist_ok=True)
        t0 = time.time()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                ["bash", "-c", local],
                cwd=ROOT,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
                rc = None
        raw = log_path.read_text(errors="replace")
        out = ANSI.sub("", raw).replace("\r\n", "\n").replace("\r", "\n")
        prompt = "# test's own check: $" if check else "$"
        status = (
            f"exit {rc}" if rc is not None else f"killed after the test's {timeout:.0f} s limit"
        )
        self.transcript.append(
            f"{prompt} {command}\n{out.rstrip()}\n[{status}, {time.time() - t0:.0f} s]\n"
        )
        return subprocess.CompletedProcess(local, -1 if rc is None else rc, out)

    def note(self, text: str) -> None:
        self.transcript.append(text.rstrip() + "\n")

    def token(self) -> str:
        return (self.laptop / ".ray" / "auth_token").read_text().strip()

    def our_processes(self) -> dict[int, tuple[str, str]]:
        """Processes that belong to this test: anything naming T, or Ray's SSH mux for it."""
        mine = {}
        for pid, (cmd, cwd) in _processes().items():
            if pid == os.getpid():
                continue
            if (
                str(self.root) in cmd
                or cwd.startswith(str(self.root))
                or str(self.control_dir) in cmd
            ):
                mine[pid] = (cmd, cwd)
        return mine

    # teardown
    def close(self) -> list[str]:
        """Stop everything the test started; returns what was still running (should be [])."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        if self.sshd is not None and self.sshd.poll() is None:
            # The namespace's init is unshare's only child: when it dies, the kernel kills every
            # process in the namespace (Ray head, MLflow server, SSH sessions).
            children = Path(f"/proc/{self.sshd.pid}/task/{self.sshd.pid}/children")
            for pid in children.read_text().split() if children.exists() else []:
                _kill(int(pid), signal.SIGTERM)
            try:
                self.sshd.wait(timeout=20)
            except subprocess.TimeoutExpired:
                for pid in children.read_text().split() if children.exists() else []:
                    _kill(int(pid), signal.SIGKILL)
                self.sshd.wait(timeout=20)
        deadline = time.time() + 30  # Ray's SSH mux (ControlPersist 10 s) exits with the server
        while self.our_processes() and time.time() < deadline:
            time.sleep(0.5)
        left = [f"{pid}: {cmd}" for pid, (cmd, _) in self.our_processes().items()]
        for pid in self.our_processes():
            _kill(pid, signal.SIGKILL)
        shutil.rmtree(self.control_dir, ignore_errors=True)
        if not self.control_parent_existed:
            shutil.rmtree(self.control_dir.parent, ignore_errors=True)
        if self.made_run_sshd:
            shutil.rmtree("/run/sshd", ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)
        return left


def _username() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _missing_requirements() -> str | None:
    if not sys.platform.startswith("linux"):
        return "Linux only (PID namespaces, /proc)"
    if os.geteuid() != 0:
        return (
            "needs root: the head runs in its own PID namespace so that `ray stop` (run by "
            "`ray up` and `ray down`) cannot touch other Ray processes on this machine"
        )
    missing = [
        p
        for p in ("/usr/sbin/sshd", "unshare", "rsync", "ssh", "ssh-keygen")
        if shutil.which(p) is None
    ]
    if missing:
        return (
            f"missing {', '.join(missing)}: apt-get install -y openssh-server rsync "
            "(util-linux provides unshare)"
        )
    return None


# --- the test ----------------------------------------------------------------------------------


@pytest.fixture
def loopback():
    reason = _missing_requirements()
    if reason:
        pytest.skip(reason)
    box = Loopback()
    try:
        box.start()
        yield box
    finally:
        transcript = "".join(box.transcript)
        left = box.close()
        keep = os.environ.get("LIPSWEEP_LOOPBACK_TRANSCRIPT")
        if keep:
            Path(keep).write_text(_transcript_header(box) + transcript)
        assert not left, f"processes left behind: {left}"


def _transcript_header(box: Loopback) -> str:
    import platform

    import ray

    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"# Real output of tests/test_cluster_loopback.py ({time.strftime('%Y-%m-%d %H:%M')}):"
        f" the commands of\n# deploy/README.md '{SECTION[3:]}', run against the loopback "
        f"cluster of deploy/local_cluster.yaml\n# on one shared machine ({os.cpu_count()} CPUs,"
        f" load average {load} at the end; {platform.platform()}),\n# ray {ray.__version__}. "
        f"{box.root} was the test's temporary folder; 'ray_cluster.yaml' in each\n# command "
        "was replaced by the rendered loopback config. Lines starting with '#' are the "
        "test's.\n\n"
    )


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(3000)
def test_ray_up_submit_down_on_loopback(loopback: Loopback):
    box = loopback
    commands = documented_sequence()
    timeouts = {"up": 600, "submit": 1800, "down": 180}
    token = None
    for command in commands:
        verb = command.split()[1] if command.startswith("ray ") else ""
        if verb == "attach":
            _check_mlflow_server(box)
            continue
        proc = box.run(command, timeout=timeouts.get(verb, 120))
        assert proc.returncode == 0, f"`{command}` failed:\n{proc.stdout[-6000:]}"
        if verb == "get-auth-token":
            token = box.token()
            assert len(token) >= 32
        elif verb == "up":
            _check_head(box, token)
            # rsync -v lists each file it sends on a line of its own: no laptop bytecode
            sent_pyc = re.findall(r"^\S*__pycache__/\S*", proc.stdout, flags=re.M)
            assert not sent_pyc, f"ray up shipped bytecode to the head: {sent_pyc[:3]}"
        elif verb == "submit":
            assert "sweep_entry.py: lipsweep sweep search_spaces/smoke.yaml" in proc.stdout
            assert f"MLFLOW_TRACKING_URI=http://127.0.0.1:{box.mlflow_port}" in proc.stdout
        elif verb == "rsync-down":
            _check_backup(box)
        elif verb == "down":
            _check_ray_stopped(box)
    assert token and token not in "".join(box.transcript), "the Ray token leaked into the output"
    # Nothing on the head wrote outside T: every process had HOME and its temp dirs there.
    assert not box.escapes, sorted(box.escapes)
    assert {"raylet", "gcs_server"} <= box.seen and any(n.startswith("ray::") for n in box.seen), (
        sorted(box.seen)
    )


def _check_head(box: Loopback, token: str | None) -> None:
    """After `ray up`: env file, MLflow up, both servers on loopback only, token auth enforced."""
    env = dict(
        line.split("=", 1)
        for line in (box.head / "lipsweep.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert env["MLFLOW_TRACKING_URI"] == f"http://127.0.0.1:{box.mlflow_port}"
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_ADDRESS"] == "auto"
    assert env["LIPSWEEP_STORAGE"] == str(box.head / "ray_results")
    assert token not in (box.head / "lipsweep.env").read_text()
    assert (box.head / ".ray" / "auth_token").read_text().strip() == token
    assert oct((box.head / ".ray" / "auth_token").stat().st_mode & 0o777) == "0o600"
    listening = _listeners()
    assert listening.get(box.mlflow_port) == {"127.0.0.1"}, listening.get(box.mlflow_port)
    # uv.lock pins ray[default], so the head runs its dashboard: on 127.0.0.1 only.
    assert listening.get(box.dashboard_port, {"127.0.0.1"}) == {"127.0.0.1"}
    assert listening.get(box.gcs_port), "the head's GCS is not listening"
    assert _http(f"http://127.0.0.1:{box.mlflow_port}/health")[0] == 200
    _check_token_auth(box, token)


def _check_token_auth(box: Loopback, token: str) -> None:
    """The head's GCS refuses a client without the cluster's token (and accepts it with it)."""
    status = f"timeout 60 ray status --address 127.0.0.1:{box.gcs_port}"
    good = box.run(f"RAY_AUTH_MODE=token {status}", timeout=90, check=True)
    assert good.returncode == 0 and "Autoscaler status" in good.stdout, good.stdout[-3000:]
    for env in (f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN={'0' * 64}", "RAY_AUTH_MODE=disabled"):
        bad = box.run(f"{env} {status}", timeout=90, check=True)
        assert bad.returncode != 0 and "AuthenticationError" in bad.stdout, bad.stdout[-3000:]


def _check_mlflow_server(box: Loopback) -> None:
    """What `ray attach -p 5000` is for: the sweep in the head's MLflow server, over HTTP."""
    from lipsweep.tracking import TrackingReader

    uri = f"http://127.0.0.1:{box.mlflow_port}"
    runs = _sweep_runs(uri, "smoke")
    parent, children = runs
    box.note(
        f"# MLflow at {uri} (what `ray attach -p 5000` shows): experiment 'smoke', parent "
        f"run {parent.info.run_id} {parent.info.status}, {len(children)} child runs:\n"
        + "\n".join(
            f"#   {c.info.run_name:<40} {c.info.status:<9} acc_clean="
            f"{c.data.metrics['acc_clean']:.1f} acc_pgd_4="
            f"{c.data.metrics.get('acc_pgd_4', float('nan')):.1f}"
            for c in children
        )
    )
    child = children[0]
    names = {
        a.path for a in TrackingReader(uri, "smoke").list_artifacts(child.info.run_id, "checkpoint")
    }
    assert "checkpoint/model.safetensors" in names, names
    stored = list((box.head / "mlflow" / "artifacts").rglob("model.safetensors"))
    assert len(stored) == SMOKE_TRIALS, "artifacts are not on the head's artifact store"
    assert (box.head / "ray_results" / "smoke").is_dir(), "Tune storage is not LIPSWEEP_STORAGE"


def _sweep_runs(uri: str, experiment: str):
    """The sweep's parent and its child runs, read through lipsweep's tracking reader."""
    from lipsweep.tracking import TrackingReader

    reader = TrackingReader(uri, experiment)
    assert reader.existing_experiment_id() is not None, f"no experiment {experiment!r}"
    runs = reader.search("")
    parents = [r for r in runs if r.data.tags.get("lipsweep.kind") == "sweep"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED", [
        (r.info.run_name, r.info.status) for r in parents
    ]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(children) == SMOKE_TRIALS, [(r.info.run_name, r.info.status) for r in runs]
    assert {c.info.status for c in children} == {"FINISHED"}
    assert len({c.data.tags["lipsweep.trial_id"] for c in children}) == SMOKE_TRIALS
    for c in children:
        assert 0.0 <= c.data.metrics["acc_clean"] <= 100.0
    return parents[0], sorted(children, key=lambda r: r.info.run_name)


def _check_backup(box: Loopback) -> None:
    """The store copied to the laptop holds the same sweep (it outlives `ray down`)."""
    db = box.laptop / "lipsweep-mlflow.db"
    assert db.is_file(), "rsync-down did not bring the backup"
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    _sweep_runs(f"sqlite:///{db}", "smoke")


def _check_ray_stopped(box: Loopback) -> None:
    """`ray down` stopped the head's Ray processes (the MLflow server dies with the namespace)."""
    deadline = time.time() + 30
    while True:
        ray_procs = [
            cmd
            for cmd, _ in box.our_processes().values()
            if any(n in cmd for n in ("gcs_server", "raylet", "dashboard.py"))
        ]
        if not ray_procs or time.time() > deadline:
            break
        time.sleep(0.5)
    assert not ray_procs, ray_procs
    box.note("# after `ray down`: no gcs_server / raylet / dashboard process of the cluster left")
