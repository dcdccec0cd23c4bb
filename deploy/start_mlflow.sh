#!/usr/bin/env bash
# The MLflow tracking server of a lipsweep cluster, run on the Ray head; and ~/lipsweep.env.
#
#   bash ~/lipsweep/deploy/start_mlflow.sh start    # (re)start the server, write ~/lipsweep.env
#   bash ~/lipsweep/deploy/start_mlflow.sh stop     # stop it (the whole process group)
#   bash ~/lipsweep/deploy/start_mlflow.sh serve    # run it in the foreground (a container's
#                                                   # command; deploy/rayjob.yaml's sidecar)
#   bash ~/lipsweep/deploy/start_mlflow.sh status   # exit 0 if it answers /health
#   bash ~/lipsweep/deploy/start_mlflow.sh backup   # consistent copy of the SQLite store into
#                                                   # $LIPSWEEP_MLFLOW_HOME/backup/mlflow.db
#
# `ray up` runs `start` as the last head start command (ray_cluster.yaml). Only the sweep driver
# writes to MLflow, and it runs on the head, so the server binds to the head's loopback address by
# default: nothing on the VPC or the internet can reach it; people reach it through an SSH tunnel
# (`ray attach ray_cluster.yaml -p 5000`). The bind address is resolved the way the server will
# resolve it and must be loopback or private: every spelling of "all interfaces" (0.0.0.0, 0,
# ::, ::0, 0:0:0:0:0:0:0:0, ...) and public addresses are refused (exit 2).
#
# Trust boundary: without LIPSWEEP_MLFLOW_AUTH=basic the server has no authentication. Anyone who
# reaches its port (on 127.0.0.1: every user and process on the head; with `private`: everything
# in the VPC) can read and change every run and, through --serve-artifacts, read and write the
# artifact store with the head's S3 role. With LIPSWEEP_MLFLOW_AUTH=basic, MLflow's basic-auth
# app (`--app-name basic-auth`) requires a user and password for every request but /health.
#
# Settings, from the environment (default in brackets):
#   LIPSWEEP_STORAGE           Ray Tune storage path, written to ~/lipsweep.env. Multi-node Tune
#                              needs storage every node reaches: s3://bucket/prefix or an NFS path.
#                              [required]
#   LIPSWEEP_MLFLOW_HOST       address to bind: an IP, or `private` for this node's private IP as Ray
#                              sees it (reachable from the VPC; `ray attach -p` then cannot reach it,
#                              use `ssh -L 5000:<private ip>:5000`). [127.0.0.1]
#   LIPSWEEP_MLFLOW_AUTH       `none` or `basic`: MLflow's basic-auth app. Its user store is
#                              $LIPSWEEP_MLFLOW_HOME/basic_auth.db; the first start needs the admin
#                              password in MLFLOW_AUTH_ADMIN_PASSWORD (then rotate it with MLflow's
#                              update-password API). The driver then needs MLFLOW_TRACKING_USERNAME
#                              and MLFLOW_TRACKING_PASSWORD in its environment (never in the URI,
#                              never in ~/lipsweep.env). Needs mlflow[auth]: the aws extra. [none]
#   LIPSWEEP_MLFLOW_PORT       [5000]
#   LIPSWEEP_MLFLOW_HOME       folder of the SQLite store, the pid and the log [~/mlflow]
#   LIPSWEEP_MLFLOW_BACKEND    backend store URI. The supported store is SQLite on the head (the
#                              lock ships no Postgres/MySQL driver; another backend needs its
#                              driver added to the image first)
#                              [sqlite:///$LIPSWEEP_MLFLOW_HOME/mlflow.db]
#   LIPSWEEP_MLFLOW_ARTIFACTS  artifact store the server proxies (--serve-artifacts), e.g.
#                              s3://bucket/lipsweep/mlflow-artifacts; S3 credentials come from the
#                              instance role [$LIPSWEEP_MLFLOW_HOME/artifacts]
#   LIPSWEEP_MLFLOW_WORKERS    server worker processes [2]
#   LIPSWEEP_PROJECT_DIR       the project copy that `ray up` mounts, written to ~/lipsweep.env
#                              [~/lipsweep]
#   LIPSWEEP_ENV_FILE          [~/lipsweep.env]
#   MLFLOW_SERVER_ENABLE_JOB_EXECUTION  MLflow's GenAI job runner (7 extra processes, ~1 GB);
#                              lipsweep does not use it [false]
set -euo pipefail
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"

cmd="${1:-start}"
mlflow_home="${LIPSWEEP_MLFLOW_HOME:-$HOME/mlflow}"
port="${LIPSWEEP_MLFLOW_PORT:-5000}"
workers="${LIPSWEEP_MLFLOW_WORKERS:-2}"
backend="${LIPSWEEP_MLFLOW_BACKEND:-sqlite:///$mlflow_home/mlflow.db}"
artifacts="${LIPSWEEP_MLFLOW_ARTIFACTS:-$mlflow_home/artifacts}"
env_file="${LIPSWEEP_ENV_FILE:-$HOME/lipsweep.env}"
project_dir="${LIPSWEEP_PROJECT_DIR:-$HOME/lipsweep}"
pid_file="$mlflow_home/mlflow.pid"
log_file="$mlflow_home/mlflow.log"

auth="${LIPSWEEP_MLFLOW_AUTH:-none}"
py="$(command -v python || command -v python3)"

say() { echo "start_mlflow.sh: $*" >&2; }

resolve_host() {
    local host="${LIPSWEEP_MLFLOW_HOST:-127.0.0.1}" why
    if [ "$host" = "private" ]; then
        host="$(python -c 'from ray.util import get_node_ip_address; print(get_node_ip_address())')"
    fi
    # Resolve it as the server's bind will (getaddrinfo): "0", "::0", "0x0" or a name all become
    # addresses; each one must be loopback or private, never unspecified (every interface).
    if ! why="$("$py" - "$host" 2>&1 <<'EOF'
import ipaddress, socket, sys
host = sys.argv[1].strip()
if host.startswith("[") and host.endswith("]"):
    host = host[1:-1]
try:
    infos = socket.getaddrinfo(host, None) if host else []
except OSError as exc:
    sys.exit(f"cannot resolve it ({exc})")
if not infos:
    sys.exit("empty")
for info in infos:
    ip = ipaddress.ip_address(info[4][0].split("%")[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified:
        sys.exit(f"{ip} is every interface")
    if ip.is_multicast or not (ip.is_loopback or ip.is_private):
        sys.exit(f"{ip} is not a loopback or private address")
EOF
)"; then
        say "refusing to bind MLflow to '$host': $why; use 127.0.0.1 or 'private'"
        exit 2
    fi
    echo "$host"
}

running_pid() {
    [ -f "$pid_file" ] || return 1
    local pid
    pid="$(cat "$pid_file")"
    kill -0 "$pid" 2>/dev/null && echo "$pid"
}

healthy() {
    python - "$1" <<'EOF'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1] + "/health", timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

stop_server() {
    local pid
    if pid="$(running_pid)"; then
        # setsid made the server its own process-group leader: stop it and its workers together.
        kill -TERM -- "-$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL -- "-$pid" 2>/dev/null || true
        say "stopped MLflow server (pid $pid)"
    fi
    rm -f "$pid_file"
}

write_env_file() {
    local uri="$1"
    local tmp="$env_file.tmp.$$"
    {
        echo "# Written by deploy/start_mlflow.sh on $(date -u +%FT%TZ); read by deploy/sweep_entry.py."
        echo "# No secrets here: the Ray token stays in ~/.ray/auth_token, S3 access comes from the"
        echo "# instance role."
        echo "MLFLOW_TRACKING_URI=$uri"
        echo "LIPSWEEP_STORAGE=$LIPSWEEP_STORAGE"
        echo "LIPSWEEP_PROJECT_DIR=$project_dir"
        echo "RAY_ADDRESS=auto"
        echo "RAY_AUTH_MODE=token"
    } > "$tmp"
    mv "$tmp" "$env_file"
    say "wrote $env_file"
}

prepare() {
    host="$(resolve_host)"
    case "$host" in *:*) uri="http://[$host]:$port" ;; *) uri="http://$host:$port" ;; esac
    mkdir -p "$mlflow_home"
    case "$artifacts" in *://*) ;; *) mkdir -p "$artifacts" ;; esac
    server_args=(--host "$host" --port "$port" --workers "$workers"
                 --backend-store-uri "$backend" --serve-artifacts --artifacts-destination "$artifacts")
    case "$auth" in
        none) ;;
        basic)
            if ! "$py" -c 'import flask_wtf' 2>/dev/null; then
                say "LIPSWEEP_MLFLOW_AUTH=basic needs MLflow's auth extra (Flask-WTF): install the"
                say "lock's aws extra (uv sync --frozen --extra aws; the cluster image has it)"
                exit 2
            fi
            # MLflow's basic-auth app, its user store beside the tracking store (not the cwd).
            export MLFLOW_AUTH_CONFIG_PATH="${MLFLOW_AUTH_CONFIG_PATH:-$mlflow_home/basic_auth.ini}"
            if [ ! -f "$MLFLOW_AUTH_CONFIG_PATH" ]; then
                printf '%s\n' "[mlflow]" "default_permission = READ" \
                    "database_uri = sqlite:///$mlflow_home/basic_auth.db" "admin_username = admin" \
                    "authorization_function = mlflow.server.auth:authenticate_request_basic_auth" \
                    > "$MLFLOW_AUTH_CONFIG_PATH"
            fi
            # CSRF key of the auth app: made once, kept (mode 600) beside the user store.
            if [ -z "${MLFLOW_FLASK_SERVER_SECRET_KEY:-}" ]; then
                local key_file="$mlflow_home/flask_secret_key"
                [ -s "$key_file" ] || (umask 077; "$py" -c 'import secrets; print(secrets.token_hex(32))' > "$key_file")
                MLFLOW_FLASK_SERVER_SECRET_KEY="$(cat "$key_file")"
                export MLFLOW_FLASK_SERVER_SECRET_KEY
            fi
            server_args+=(--app-name basic-auth) ;;
        *) say "LIPSWEEP_MLFLOW_AUTH must be none or basic, got '$auth'"; exit 2 ;;
    esac
}

start_server() {
    : "${LIPSWEEP_STORAGE:?set LIPSWEEP_STORAGE (s3://bucket/prefix or a shared NFS path)}"
    local pid
    prepare
    stop_server
    # setsid: the server outlives the SSH session of `ray up` and leads its own process group.
    setsid mlflow server "${server_args[@]}" >> "$log_file" 2>&1 < /dev/null &
    pid=$!
    echo "$pid" > "$pid_file"
    for _ in $(seq 1 150); do
        if healthy "$uri"; then
            say "MLflow server up at $uri (pid $pid; backend $backend; artifacts $artifacts)"
            write_env_file "$uri"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            break
        fi
        sleep 0.4
    done
    say "MLflow server did not come up; last lines of $log_file:"
    tail -n 30 "$log_file" >&2 || true
    stop_server
    exit 1
}

backup_store() {
    case "$backend" in
        sqlite:///*) ;;
        *) say "backup copies the SQLite store only; back up $backend with its own tools"; exit 2 ;;
    esac
    local db="${backend#sqlite:///}"
    mkdir -p "$mlflow_home/backup"
    # sqlite3's online backup: a consistent copy even while the server writes.
    python - "$db" "$mlflow_home/backup/mlflow.db" <<'EOF'
import sqlite3, sys
src, dst = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
with dst:
    src.backup(dst)
src.close(); dst.close()
EOF
    say "backed up $db to $mlflow_home/backup/mlflow.db"
}

case "$cmd" in
    start) start_server ;;
    serve) prepare; exec mlflow server "${server_args[@]}" ;;
    stop) stop_server ;;
    status)
        host="$(resolve_host)"
        if healthy "http://$host:$port"; then echo "running"; else echo "not running"; exit 1; fi ;;
    backup) backup_store ;;
    *) say "usage: start_mlflow.sh start|serve|stop|status|backup"; exit 2 ;;
esac
