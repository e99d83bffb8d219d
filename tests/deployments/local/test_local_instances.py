"""Local runs side by side, and commands beside a run (real local Ray Serve apps on CPU).

- Two runs on one machine, each with its own corpus, searched continuously through the
  second one's start-up: neither ever answers with the other's documents; every listener of
  Serve (HTTP, the fallback proxy, HAProxy's stats and metrics, the replicas' direct
  ingress) binds 127.0.0.1, and no two runs share a port; Ray's own listeners are on loopback
  too.
- Every CLI command against the data dir a run holds: refused with the run's URL (or, for
  ``validate``, the store check not run), never opening the index; ``--url`` goes through the
  run; the run's writes work afterwards.
- An upload during which the dense replica is killed: once it is answered, nothing more of
  it is written, and the answer names what was.
"""

from __future__ import annotations

import contextlib
import ipaddress
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from serve_app.ports import free_port
from tests.support.local_run import LocalRun, write_config

pytestmark = pytest.mark.slow

CORPORA = {
    "alpha": "Zebrafish regenerate their fins from a blastema of dedifferentiated cells.",
    "beta": "Volcanic ash clouds force airlines to reroute flights over the Atlantic.",
}


def corpus(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True)
    for i in range(3):
        (folder / f"{name}-{i}.txt").write_text(f"{CORPORA[name]} Note {i} of the {name} set.")
    return folder


def ready(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError, ValueError):
        return httpx.get(f"{url}/readyz", timeout=2).json().get("ready") is True
    return False


def wait_ingested(run: LocalRun, files: int, timeout_s: float = 300) -> None:
    run.output.wait_for(f"ingested {files} files", timeout_s)


def run_tree(run: LocalRun) -> list[psutil.Process]:
    root = psutil.Process(run.process.pid)
    return [root, *root.children(recursive=True)]


def serve_ports(run: LocalRun) -> tuple[set[int], list[range]]:
    """The ports this run's Serve listens on (HTTP, fallback proxy, HAProxy's stats and
    metrics) and its replicas' direct-ingress ranges, read from its proxy's environment."""
    for process in run_tree(run):
        with contextlib.suppress(psutil.Error):
            if "ProxyActor" in " ".join(process.cmdline()):
                env = process.environ()
                break
    else:
        raise AssertionError("no Serve proxy process in the run")
    ports = {run.port} | {
        int(env[k])
        for k in (
            "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT",
            "RAY_SERVE_HAPROXY_STATS_PORT",
            "RAY_SERVE_HAPROXY_METRICS_PORT",
        )
    }
    ranges = [
        range(int(env[f"RAY_SERVE_DIRECT_INGRESS_MIN_{p}_PORT"]),
              int(env[f"RAY_SERVE_DIRECT_INGRESS_MAX_{p}_PORT"]) + 1)
        for p in ("HTTP", "GRPC")
    ]  # fmt: skip
    return ports, ranges


def listeners(run: LocalRun) -> list[tuple[str, int, str]]:
    """(address, port, process name) of every listening TCP socket of the run's processes."""
    found = []
    for process in run_tree(run):
        with contextlib.suppress(psutil.Error):
            name = process.name()
            for conn in process.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((conn.laddr.ip, conn.laddr.port, name))
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run ``alpha`` up and indexed; ``beta`` started next to it while both are searched."""
    base = tmp_path_factory.mktemp("instances")
    alpha = LocalRun(write_config(base / "a"), free_port(), [corpus(base / "corpus-a", "alpha")])
    started: list[LocalRun] = [alpha]
    try:
        wait_ingested(alpha, 3)
        yield alpha, started
    finally:
        for run in started:
            run.stop()


def test_two_runs_never_answer_for_each_other(runs, tmp_path):
    alpha, started = runs
    beta = LocalRun(write_config(tmp_path / "b"), free_port(), [corpus(tmp_path / "c", "beta")])
    started.append(beta)
    crossed: list[str] = []
    answers = {"alpha": 0, "beta": 0}
    stop = threading.Event()

    def search_both() -> None:
        with httpx.Client(timeout=5) as client:
            while not stop.is_set():
                for name, run, other in (("alpha", alpha, "beta"), ("beta", beta, "alpha")):
                    for query in CORPORA.values():
                        with contextlib.suppress(httpx.HTTPError):
                            response = client.get(f"{run.url}/v1/search", params={"q": query})
                            if response.status_code != 200:
                                continue
                            answers[name] += 1
                            docs = [r["doc_id"] for r in response.json()["results"]]
                            crossed.extend(f"{name} answered {d}" for d in docs if other in d)
                time.sleep(0.05)

    searcher = threading.Thread(target=search_both, daemon=True)
    searcher.start()
    try:
        wait_ingested(beta, 3)
        time.sleep(5)
    finally:
        stop.set()
        searcher.join(30)
    assert not crossed, crossed[:5]
    assert answers["alpha"] > 20 and answers["beta"] > 5, answers

    ports_a, ranges_a = serve_ports(alpha)
    ports_b, ranges_b = serve_ports(beta)
    assert not ports_a & ports_b
    for run, ports, ranges in ((alpha, ports_a, ranges_a), (beta, ports_b, ranges_b)):
        serve_listeners = [
            (address, port, name)
            for address, port, name in listeners(run)
            if port in ports or any(port in r for r in ranges) or name == "haproxy"
        ]
        assert {port for _, port, _ in serve_listeners} >= {run.port}
        exposed = [s for s in serve_listeners if s[0] != "127.0.0.1"]
        assert not exposed, exposed


def test_commands_beside_a_run_never_open_its_index(runs, tmp_path):
    alpha, _ = runs
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "gamma.txt").write_text("Gamma rays from magnetars were observed by satellites.")
    for command in (
        ["inspect"],
        ["search", "zebrafish"],
        ["ingest", str(extra)],
    ):
        result = alpha.cli(*command)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert "INDEX_IN_USE" in result.stderr and alpha.url in result.stderr, result.stderr
    validate = alpha.cli("validate", "--no-load", "--json")
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert '"ok": null' in validate.stdout and alpha.url in validate.stdout

    through = alpha.cli("search", "zebrafish fins", "--url", alpha.url, "--json")
    assert through.returncode == 0 and "alpha-" in through.stdout, through.stderr
    inspected = alpha.cli("inspect", "--url", alpha.url, "--json")
    assert inspected.returncode == 0 and '"topology": "embedded"' in inspected.stdout
    uploaded = alpha.cli("ingest", str(extra), "--url", alpha.url)
    assert uploaded.returncode == 0 and "1 written" in uploaded.stdout, uploaded.stderr

    body = {"documents": [{"id": "after-the-commands", "text": "Written after every command."}]}
    written = httpx.post(f"{alpha.url}/v1/documents", json=body, timeout=120)
    assert written.status_code == 200, written.text
    assert httpx.get(f"{alpha.url}/v1/documents/gamma", timeout=30).status_code == 200
    assert ready(alpha.url)


def test_a_local_run_serves_its_metrics_and_names_its_instance(runs):
    alpha, _ = runs
    metrics = httpx.get(f"{alpha.url}/metrics", timeout=30)
    assert metrics.status_code == 200 and "serve_" in metrics.text
    answer = httpx.get(f"{alpha.url}/readyz", timeout=10).json()
    assert answer["ready"] and len(answer["instance"]) == 16


def on_loopback(address: str) -> bool:
    """Loopback, IPv4-mapped IPv6 (``::ffff:127.0.0.1``: gRPC's dual-stack sockets) included."""
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


RAY_PROCESSES = ("gcs_server", "raylet", "ray::DashboardA", "ray::RuntimeEnv", "ray::ServeRepli")


def test_every_listener_of_a_run_is_on_loopback(runs):
    """Ray's own listeners included (GCS, raylet, every worker's gRPC server, the dashboard
    and runtime-env agents, the metrics exporters, Serve's gRPC servers between replicas):
    docs/operations.md, "Ray's listeners in a local run", names none left outside."""
    alpha, _ = runs
    found = listeners(alpha)
    names = {name for _, _, name in found}
    assert all(any(n.startswith(p) for n in names) for p in RAY_PROCESSES), sorted(names)
    exposed = [s for s in found if not on_loopback(s[0])]
    assert not exposed, f"{len(exposed)} of {len(found)} listeners off loopback: {exposed}"


def dense_replica(run: LocalRun) -> psutil.Process:
    for process in run_tree(run):
        with contextlib.suppress(psutil.Error):
            line = " ".join(process.cmdline())
            if "ServeReplica" in line and "dense" in line.lower():
                return process
    raise AssertionError("no dense replica in the run")


def test_nothing_is_written_after_an_upload_fails(runs):
    alpha, _ = runs
    text = " ".join(f"Plasmid {i} carries genes for resistance to antibiotics." for i in range(60))
    documents = [{"id": f"bulk-{i}", "text": f"{i} {text}"} for i in range(60)]
    outcome: dict = {}

    def upload() -> None:
        response = httpx.post(
            f"{alpha.url}/v1/documents", json={"documents": documents}, timeout=300
        )
        outcome["status"] = response.status_code
        outcome["body"] = response.json()
        outcome["at"] = time.monotonic()

    uploader = threading.Thread(target=upload)
    uploader.start()
    time.sleep(4)  # the first sub-batches are being encoded
    dense_replica(alpha).kill()
    uploader.join(300)
    assert outcome["status"] >= 500, outcome
    error = outcome["body"]["error"]
    written = set(error.get("details", {}).get("written", []))

    def present() -> set[str]:
        found = set()
        with httpx.Client(timeout=30) as client:
            for document in documents:
                if client.get(f"{alpha.url}/v1/documents/{document['id']}").status_code == 200:
                    found.add(document["id"])
        return found

    assert present() == written
    time.sleep(20)  # sub-batches left running would write meanwhile (the replica is back)
    assert present() == written
