"""Screenshot the MLflow UI the way a researcher sees it: a sweep's parent run, one artifact open.

Starts ``mlflow ui`` on loopback against the sweep's tracking store, opens the parent run of the
experiment (or one of its child runs) in headless Chromium (Debian's ``chromium`` package) with
the given artifact selected, writes a PNG, and stops the server.

    python docs/screenshot_mlflow.py --experiment smoke --tracking-uri sqlite:///mlflow.db \\
        --artifact pareto/pareto_scatter.png --out docs/mlflow_pareto.png
    python docs/screenshot_mlflow.py --experiment smoke --view runs --out docs/mlflow_runs.png
    python docs/screenshot_mlflow.py --experiment smoke --view model --out docs/mlflow_model.png

``--view runs`` shows the experiment's run table instead of one run: the parent's child runs
(the sweep's trials) with the columns of ``--columns`` (default: regularizer, k, lam,
aggregation, the Pareto tags and the objectives). The table's view is chosen the way the UI's
"share" button does it: an experiment tag ``mlflow.sharedViewState.<key>`` holding the view
state, opened with ``?viewStateShareKey=<key>`` (this is the one write to the store).
Needs ``chromium`` on the PATH (``apt-get install chromium``); nothing leaves the machine
(the server binds the loopback address 127.0.0.2). The page opens in MLflow 3's model-training
view (``workflowType=machine_learning``), the one the README describes, not the GenAI view.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--force-device-scale-factor=1",
]


RUNS_COLUMNS = (
    "params.regularizer,params.k,params.lam,params.aggregation,tags.pareto,"
    "tags.pareto_rank,metrics.acc_clean,metrics.acc_pgd_4,metrics.acc_aa_2,"
    "metrics.lip_jacobian_median"
)
SHARE_KEY = "lipsweep-docs-runs"
UI_HOST = "127.0.0.2"
"""Loopback, but not 127.0.0.1 or localhost: there MLflow 3.17 opens its Assistant panel over
a third of the page, which is not what a user of a shared tracking server sees."""


def share_runs_view(tracking_uri: str, exp_id: str, parent_id: str, columns: str) -> str:
    """Store a runs-table view (the parent's children, ``columns`` shown, best Pareto rank
    first) as MLflow's shared view state; returns the share key for the URL."""
    from mlflow.tracking import MlflowClient

    selected = []
    for col in (c.strip() for c in columns.split(",") if c.strip()):
        kind, _, name = col.partition(".")
        selected.append(f"{kind}.`{name}`")  # the UI's canonical column key
    state = {
        "searchFilter": f"tags.`mlflow.parentRunId` = '{parent_id}'",
        "orderByKey": "metrics.`acc_pgd_4`",
        "orderByAsc": False,
        "selectedColumns": selected,
    }
    MlflowClient(tracking_uri).set_experiment_tag(
        exp_id, f"mlflow.sharedViewState.{SHARE_KEY}", json.dumps(state)
    )
    return SHARE_KEY


def delayed_frame(url: str, wait_s: float):
    """A loopback HTTP server whose page shows ``url`` full-window in an iframe and holds
    its load event for ``wait_s`` (an image that answers late): headless Chromium shoots at
    the load event, and ``--virtual-time-budget`` never ends on the runs table's polling."""
    import http.server
    import threading

    page = (
        f'<html><body style="margin:0"><iframe src="{url}" style="position:fixed;'
        'top:0;left:0;width:100%;height:100%;border:0"></iframe>'
        '<img src="/late" style="display:none"></body></html>'
    ).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/late":
                time.sleep(wait_s)
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page if self.path != "/late" else b"")

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_runs(tracking_uri: str, experiment: str, child: str | None) -> tuple[str, str]:
    """(experiment id, run id) of the sweep's parent run, or of the child run named ``child``."""
    from lipsweep.tracking import TrackingReader

    reader = TrackingReader(tracking_uri, experiment)
    exp_id = reader.existing_experiment_id()
    if exp_id is None:
        sys.exit(f"error: no experiment {experiment!r} in {tracking_uri}")
    kind = "trial" if child else "sweep"
    runs = sorted(
        reader.search(f"tags.`lipsweep.kind` = '{kind}'", exp_id),
        key=lambda r: r.info.start_time or 0,
        reverse=True,
    )
    if child:
        runs = [r for r in runs if r.info.run_name == child or r.info.run_id == child]
    if not runs:
        sys.exit(f"error: no {kind} run {child or ''} in experiment {experiment!r}")
    return exp_id, runs[0].info.run_id


def newest_logged_model(tracking_uri: str, exp_id: str) -> str:
    """The id of the experiment's newest MLflow 3 LoggedModel (``export --register`` logs one
    on the exported trial's run)."""
    from mlflow.tracking import MlflowClient

    models = MlflowClient(tracking_uri).search_logged_models(
        experiment_ids=[exp_id], order_by=[{"field_name": "creation_time", "ascending": False}]
    )
    if not models:
        sys.exit("error: no logged model in the experiment; run `lipsweep export --register`")
    return models[0].model_id


def wait_http(url: str, timeout: float) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(1.0)
    sys.exit(f"error: the MLflow UI did not answer at {url} within {timeout:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--experiment", required=True)
    ap.add_argument(
        "--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    )
    ap.add_argument("--view", choices=["run", "runs", "model"], default="run")
    ap.add_argument("--run", default=None, help="a child run's name or id (default: the parent)")
    ap.add_argument(
        "--artifact",
        default="pareto/pareto_scatter.png",
        help="artifact path to open in the run view",
    )
    ap.add_argument(
        "--columns",
        default=RUNS_COLUMNS,
        help="--view runs: comma-separated params.X / metrics.X / tags.X columns",
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--size", default="1600,1000", help="window width,height in pixels")
    ap.add_argument(
        "--wait-ms",
        type=int,
        default=20000,
        help="virtual time for the page to load before the shot",
    )
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("error: chromium not found; install it with `apt-get install chromium`")
    exp_id, run_id = find_runs(args.tracking_uri, args.experiment, args.run)
    port = free_port()
    base = f"http://{UI_HOST}:{port}"
    # MLflow 3 opens its GenAI view unless told (the experiment tag is not enough on a first
    # visit): the model-training view is the one the docs describe
    view = "workflowType=machine_learning"
    if args.view == "runs":
        key = share_runs_view(args.tracking_uri, exp_id, run_id, args.columns)
        url = f"{base}/#/experiments/{exp_id}/runs?viewStateShareKey={key}&{view}"
    elif args.view == "model":  # the newest LoggedModel's page: its metrics and source run
        model_id = newest_logged_model(args.tracking_uri, exp_id)
        url = f"{base}/#/experiments/{exp_id}/models/{model_id}?{view}"
    else:
        url = f"{base}/#/experiments/{exp_id}/runs/{run_id}/artifacts/{args.artifact}?{view}"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "ui",
            "--backend-store-uri",
            args.tracking_uri,
            "--host",
            UI_HOST,
            "--port",
            str(port),
            "--allowed-hosts",
            f"{UI_HOST}:{port}",
            "--cors-allowed-origins",  # the UI's own POSTs (runs search) carry its origin
            base,
            "--workers",
            "1",
            "--x-frame-options",
            "NONE",
        ],  # iframe
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_http(f"{base}/health", 300)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        frame = delayed_frame(url, args.wait_ms / 1000) if args.view == "runs" else None
        shot = f"http://127.0.0.1:{frame.server_address[1]}/" if frame else url
        wait = [] if frame else [f"--virtual-time-budget={args.wait_ms}"]
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run(
                [
                    chromium,
                    *CHROMIUM_FLAGS,
                    f"--user-data-dir={profile}",
                    f"--window-size={args.size}",
                    *wait,
                    f"--screenshot={args.out.resolve()}",
                    shot,
                ],
                check=True,
                timeout=300,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        if frame:
            frame.shutdown()
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    print(f"{args.out}  ({url})")


if __name__ == "__main__":
    main()
