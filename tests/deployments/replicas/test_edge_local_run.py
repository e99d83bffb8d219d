"""The edge of a real local run, as a client meets it (raw sockets through HAProxy, Serve's
direct-ingress server and the app; API keys on): non-UTF-8 request ids get the 400
envelope, unsafe ids are replaced before they are echoed; clients that trickle their body
get 408 and are closed on time while searches keep their pace; every refused request leaves
one JSON access line in the ingress replica's log, found after the replica is killed and
after the run is stopped with SIGTERM.

One run for the module (start-up is most of its time); the tests run in file order, the
last one stops it. Run it under the heavy lock (``flock /tmp/heavy.lock``)."""

from __future__ import annotations

import contextlib
import glob
import json
import signal
import socket
import statistics
import threading
import time
import uuid
from pathlib import Path

import httpx
import psutil
import pytest

from serve_app.api.auth import hash_api_key
from serve_app.ports import free_port
from tests.support.local_run import LocalRun, write_config

pytestmark = pytest.mark.slow

WRITER, READER = "edge-writer-secret", "edge-reader-secret"
IDLE_S, RATE, GRACE_S, HEADERS_S = 1.0, 1_000, 1.0, 2.0  # api.connections here
TRICKLERS = 200
MAX_BYTES = 12_000_000


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("edge")
    config = write_config(
        tmp,
        llm={"enabled": False},
        answer={"understanding": {"enabled": False}},
        api={
            "auth": {
                "mode": "required",
                "api_keys": [
                    {"name": "writer", "sha256": hash_api_key(WRITER), "tenant_id": "tenant-w"},
                    {
                        "name": "reader",
                        "sha256": hash_api_key(READER),
                        "tenant_id": "tenant-r",
                        "scopes": ["read"],
                    },
                ],
            },
            "max_request_bytes": MAX_BYTES,
            "connections": {
                "header_timeout_s": HEADERS_S,
                "body_idle_timeout_s": IDLE_S,
                "body_min_rate_bytes_per_s": RATE,
                "body_rate_grace_s": GRACE_S,
            },
        },
    )
    local = LocalRun(config, free_port())
    try:
        local.output.wait_for("serving on", 240)
        yield local
    finally:
        local.stop()


def exchange(port: int, request: bytes, timeout_s: float = 30) -> tuple[int, dict, bytes]:
    """One raw HTTP/1.1 request; the status, headers and body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(b":")
        headers[key.strip().lower().decode()] = value.strip().decode("latin-1")
    return int(lines[0].split()[1]), headers, body


def get(path: str, *headers: bytes) -> bytes:
    extra = b"".join(h + b"\r\n" for h in headers)
    return (
        b"GET "
        + path.encode()
        + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + extra
        + b"Connection: close\r\n\r\n"
    )


@pytest.mark.parametrize("value", [b"\xff\xfe", b"caf\xe9", b"\xc3("], ids=["fffe", "cafe9", "c3"])
@pytest.mark.parametrize("path", ["/healthz", "/v1/search?q=x"])
def test_a_non_utf8_request_id_is_the_400_envelope(run, path, value):
    status, headers, body = exchange(run.port, get(path, b"X-Request-ID: " + value))
    assert status == 400, body
    error = json.loads(body)["error"]
    assert error["code"] == "INVALID_HEADER" and "x-request-id" in error["message"].lower()
    assert headers["x-request-id"] == error["request_id"]
    assert len(error["request_id"]) == 32 and error["request_id"].isalnum()


@pytest.mark.parametrize("sent", [b'a"b', b"a\\r\\nb", b"x" * 8_000], ids=["quote", "crlf", "8k"])
def test_an_unsafe_request_id_is_replaced_before_it_is_echoed(run, sent):
    status, headers, _ = exchange(run.port, get("/healthz", b"X-Request-ID: " + sent))
    assert status == 200
    echoed = headers["x-request-id"]
    assert len(echoed) == 32 and echoed.isalnum()


def test_headers_that_never_end_get_408_and_are_closed(run):
    began = time.monotonic()
    with socket.create_connection(("127.0.0.1", run.port), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and nothing more
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer  # HAProxy's own answer and close
    assert time.monotonic() - began < HEADERS_S + 3


def search_latencies(port: int, count: int, source: str | None = None) -> list[float]:
    times = []
    transport = httpx.HTTPTransport(local_address=source) if source else None
    with httpx.Client(
        base_url=f"http://127.0.0.1:{port}", timeout=30, transport=transport
    ) as client:
        for _ in range(count):
            began = time.perf_counter()
            response = client.get("/v1/search?q=bacteria&top_k=3", headers={"X-API-Key": WRITER})
            times.append(time.perf_counter() - began)
            assert response.status_code == 200, response.text
    return times


def p95(times: list[float]) -> float:
    return statistics.quantiles(times, n=20)[-1]


def test_trickling_bodies_get_408_and_are_closed_while_searches_keep_their_pace(run):
    baseline = p95(search_latencies(run.port, 40))
    head = (
        b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"X-API-Key: " + WRITER.encode() + b"\r\nContent-Length: 100000\r\n\r\n"
    )
    sockets = []
    for _ in range(TRICKLERS):
        sock = socket.create_connection(("127.0.0.1", run.port), timeout=30)
        sock.sendall(head + b"{")
        sockets.append(sock)
    closed_after: list[float] = []
    answers: list[bytes] = []
    began = time.monotonic()
    stop = threading.Event()

    def trickle(sock: socket.socket) -> None:
        sock.settimeout(0.5)
        answer = b""
        while not stop.is_set():
            with contextlib.suppress(OSError):
                sock.sendall(b" ")  # 2 bytes/s: under the floor once the grace period ends
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
        closed_after.append(time.monotonic() - began)
        answers.append(answer)
        sock.close()

    threads = [threading.Thread(target=trickle, args=(s,), daemon=True) for s in sockets]
    for thread in threads:
        thread.start()
    during = p95(search_latencies(run.port, 40))
    deadline = time.monotonic() + 30
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    stop.set()
    assert len(closed_after) == TRICKLERS, f"{TRICKLERS - len(closed_after)} still open after 30 s"
    assert all(a.startswith(b"HTTP/1.1 408") and b"REQUEST_TIMEOUT" in a for a in answers), [
        a[:200] for a in answers if not a.startswith(b"HTTP/1.1 408")
    ][:3]
    assert max(closed_after) < GRACE_S + IDLE_S + 10, sorted(closed_after)[-5:]
    assert during < 3 * baseline + 0.2, f"search P95 {during:.3f} s vs {baseline:.3f} s alone"


def test_an_early_413_reaches_a_client_that_sends_the_whole_body_first(run):
    """httpx sends the whole body before it reads; the 413 leaves before the body is read,
    and the connection is closed after it. Closing on unread bytes resets the connection,
    and through HAProxy the reset destroyed the answer in 2 to 13 tries of 60 (the edge now
    reads and drops the rest first; a 401 before the body takes the same path)."""
    body = b"x" * (MAX_BYTES + 18_000_000)
    lost = []
    for _ in range(60):
        try:
            response = httpx.post(
                f"{run.url}/v1/documents",
                content=body,
                headers={"X-API-Key": WRITER, "content-type": "application/json"},
                timeout=30,
            )
        except httpx.TransportError as error:
            lost.append(repr(error))
            continue
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert not lost, f"{len(lost)} of 60 answers lost: {lost[:2]}"


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (what it sent before is read and dropped)."""
    sock.settimeout(0.01)
    try:
        while sock.recv(65536):
            pass
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


HOARDED = 4_200  # past HAProxy's maxconn (4096)
PER_CLIENT = 256  # api.connections.max_connections_per_client, the default


def test_one_client_hoarding_idle_connections_leaves_another_its_pace(run):
    """One address opens more connections than HAProxy's maxconn, one request each, then
    idles: with Serve's 90 s keep-alive and no per-client cap, every other client's fresh
    connection waited behind them and its searches timed out. Now HAProxy takes at most
    PER_CLIENT from one address and the idle ones are closed after keep_alive_s (5 s)."""
    baseline = p95(search_latencies(run.port, 30, source="127.0.0.2"))
    hoard = []
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    try:
        for _ in range(HOARDED):
            with contextlib.suppress(OSError):
                sock = socket.create_connection(("127.0.0.1", run.port), timeout=5)
                hoard.append(sock)
                with contextlib.suppress(OSError):
                    sock.sendall(request)
        began = time.monotonic()
        during = p95(search_latencies(run.port, 30, source="127.0.0.3"))
        answered = 0
        for sock in hoard:
            sock.settimeout(0.01)
            with contextlib.suppress(OSError):
                answered += sock.recv(64).startswith(b"HTTP/1.1 200")
        time.sleep(max(0.0, began + 5 + 2 - time.monotonic()))  # past the keep-alive
        still_open = sum(not closed_by_server(sock) for sock in hoard)
    finally:
        for sock in hoard:
            sock.close()
    print(f"\nhoarder answered {answered} of {HOARDED}; search P95 {during:.3f} s "
          f"vs {baseline:.3f} s alone; {still_open} still open after the keep-alive")  # fmt: skip
    assert answered <= PER_CLIENT, answered
    assert during < 3 * baseline + 0.2, f"search P95 {during:.3f} s vs {baseline:.3f} s alone"
    assert still_open == 0, still_open


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_1gb_chunked_body_to_search_is_cut_at_the_routes_budget(run, method):
    """Serve reads a body ahead into a queue whether the route reads it or not; the edge
    in front counts its bytes against the route's budget (none for GET, api.max_json_bytes
    for POST /v1/search) and stops reading there, so the ingress replica's memory stays flat
    while a client tries to send 1 GB."""
    replica = ingress_replica(run)
    before = replica.memory_info().rss
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            with contextlib.suppress(psutil.Error):
                peak[0] = max(peak[0], replica.memory_info().rss)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    chunk = b"x" * (1 << 20)
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", run.port), timeout=30) as sock:
        sock.sendall(
            f"{method} /v1/search?q=x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {WRITER}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        with contextlib.suppress(OSError):
            while sent < 1 << 30:
                sock.sendall(framed)
                sent += len(chunk)
        answer = b""
        with contextlib.suppress(OSError):
            while part := sock.recv(65536):
                answer += part
    done.set()
    sampler.join(5)
    grown = (peak[0] - before) / (1 << 20)
    print(f"\n{method}: {sent >> 20} MiB sent of 1024, ingress RSS +{grown:.0f} MiB at peak")
    assert answer.startswith(b"HTTP/1.1 413") and b"PAYLOAD_TOO_LARGE" in answer, answer[:300]
    assert sent < 1 << 30, "the whole 1 GB went in"
    assert grown < 100, f"the ingress grew {grown:.0f} MiB"


def test_haproxys_admin_socket_is_the_runs_own(run):
    """Ray's HAProxy template opens the admin socket (level admin) to every local user."""
    for process in psutil.Process(run.process.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            command = process.cmdline()
            if Path(command[0]).name == "haproxy" and "-f" in command:
                config = Path(command[command.index("-f") + 1])
                socket_path = config.parent / "admin.sock"
                text = config.read_text()
                assert "mode 600 level admin" in text
                # No unauthenticated stats page; HAProxy names the client to Serve itself.
                assert "listen stats" not in text and "X-Serve-App-Client %[src]" in text
                assert socket_path.stat().st_mode & 0o777 == 0o600, oct(socket_path.stat().st_mode)
                return
    raise AssertionError("no HAProxy process in the run")


def direct_ingress_port(run: LocalRun) -> int:
    """The ingress replica's own HTTP port (Serve's direct-ingress server, HAProxy's backend)."""
    replica = ingress_replica(run)
    for connection in replica.net_connections(kind="tcp"):
        if connection.status != psutil.CONN_LISTEN:
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            if exchange(connection.laddr.port, get("/healthz"), timeout_s=5)[0] == 200:
                return connection.laddr.port
    raise AssertionError("the ingress replica answers HTTP on none of its ports")


def test_a_pipelined_request_on_the_direct_ingress_port_meets_the_edge(run):
    """Reachable without HAProxy (a direct-ingress port): uvicorn starts the second request
    on a connection from inside the first one's send(), and the edge used to pass it on
    unchecked, so Serve decoded the raw id into a plain-text 500."""
    port = direct_ingress_port(run)
    first = get("/healthz", b"X-Request-ID: first-one").replace(b"Connection: close\r\n", b"")
    second = get("/healthz", b"X-Request-ID: caf\xe9")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(first + second)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    answers = data.split(b"HTTP/1.1 ")[1:]
    assert len(answers) == 2, data[:500]
    assert answers[0].startswith(b"200"), answers[0][:200]
    assert answers[1].startswith(b"400") and b"INVALID_HEADER" in answers[1], answers[1][:300]


REFUSALS = {
    "no-key": ("GET", "/v1/search?q=x", {}, 401, None),
    "bad-key": ("GET", "/v1/search?q=x", {"X-API-Key": "wrong-secret"}, 401, None),
    "reader-writes": ("DELETE", "/v1/documents/x", {"X-API-Key": READER}, 403, "key:reader"),
}


def test_headers_past_haproxys_buffer_are_refused_before_any_python_reads_them(run):
    """HAProxy's 16 KiB buffer (``tune.bufsize``) bounds a request's headers: 400, its own
    page, and nothing reaches Serve; headers of a usual size pass."""
    usual = exchange(run.port, get("/healthz", b"X-Pad: " + b"a" * 8_000))
    huge = exchange(run.port, get("/healthz", b"X-Pad: " + b"a" * 40_000))
    assert usual[0] == 200
    assert huge[0] == 400


def test_a_forged_x_forwarded_for_is_not_the_logged_client(run):
    """HAProxy is the 127.0.0.1 whose ``X-Forwarded-For`` Serve's uvicorn believes: it now
    names the client itself (the connection's own address; no trusted proxy here), and the
    edge logs that name, so a client cannot name itself."""
    logs = session_logs(run)
    request_id = f"forged-{uuid.uuid4().hex[:12]}"
    forged = (b"X-Forwarded-For: 203.0.113.9", b"X-Request-ID: " + request_id.encode())
    status, _, _ = exchange(run.port, get("/v1/collections", *forged))
    assert status == 401
    deadline = time.monotonic() + 20
    while request_id not in (lines := access_lines(logs)) and time.monotonic() < deadline:
        time.sleep(0.5)
    (entry,) = lines[request_id]
    assert entry["client"] == "127.0.0.1", entry  # as HAProxy named it


def test_the_playground_through_the_edge_says_401_for_a_wrong_key_and_works_with_the_right_one(
    run,
):
    """The page on Ray Serve behind HAProxy with keys required (issue 58): it loads under
    the edge's headers and its own policy, says 401 before a key is given and for a wrong
    one (with the request id), and with the reader's key searches and names the principal,
    its tenant and its read scope; the key stays in the tab and in a header, never in a URL,
    and no request leaves the origin."""
    from tests.support.browser import playground

    settled = (
        "() => ['ok', 'error'].some(c => document.querySelector('#search-message')"
        ".className.includes(c))"
    )
    with playground(run.url) as opened:
        page = opened.page
        assert "script-src 'self'" in opened.response.headers["content-security-policy"]
        page.wait_for_function("() => document.querySelector('#collection-message').textContent")
        assert "401" in page.locator("#collection-message").inner_text()
        for key, expected in (("wrong-secret", "401 UNAUTHENTICATED"), (READER, "fused")):
            page.fill("#credential", key)
            page.click("#credentials button[type=submit]")
            page.fill("#query", "dense vectors")
            page.click("#search-form button[type=submit]")
            page.wait_for_function(settled)
            message = page.locator("#search-message").inner_text()
            assert expected in message, message
            if key != READER:
                assert "request" in message, message
        page.wait_for_function("() => document.querySelector('#principal').textContent")
        who = page.locator("#principal").inner_text()
        assert who.startswith("key:reader") and "tenant-r" in who and "read" in who, who
        assert page.evaluate("sessionStorage.getItem('serve-app.credential')") == READER
        assert page.evaluate("localStorage.length") == 0
    assert not [u for u in opened.requests if READER in u or "wrong-secret" in u]
    assert all(u.startswith(run.url + "/") for u in opened.requests), opened.requests
    assert not opened.errors, opened.errors


def refuse(port: int, batch: str) -> dict[str, tuple[int, str | None]]:
    """Each refusal 10 times, each with a request id of its own; id -> (status, principal)."""
    sent = {}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for name, (method, path, headers, status, principal) in REFUSALS.items():
            for i in range(10):
                request_id = f"{batch}-{name}-{i}"
                answer = client.request(
                    method, path, headers={**headers, "X-Request-ID": request_id}
                )
                assert answer.status_code == status, answer.text
                sent[request_id] = (status, principal)
    return sent


def session_logs(run: LocalRun) -> Path:
    for process in psutil.Process(run.process.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            for arg in process.cmdline():
                if arg.startswith("--session_dir=") or arg.startswith("--session-dir="):
                    return Path(arg.split("=", 1)[1]) / "logs"
    raise AssertionError("no Ray process of the run names its session directory")


def access_lines(logs: Path) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for name in glob.glob(str(logs / "worker-*.err")):
        for line in Path(name).read_text(errors="replace").splitlines():
            if '"serve_app.access"' not in line:
                continue
            entry = json.loads(line[line.index("{") :])
            found.setdefault(entry["request_id"], []).append(entry)
    return found


def assert_every_line(sent: dict[str, tuple[int, str | None]], logs: Path) -> None:
    lines = access_lines(logs)
    missing = sorted(set(sent) - set(lines))
    assert not missing, f"{len(missing)} of {len(sent)} refusals left no access line: {missing[:5]}"
    for request_id, (status, principal) in sent.items():
        (entry,) = lines[request_id]  # one line per request
        assert entry["status"] == status and entry["principal"] == principal, entry
        assert entry["level"] == "WARNING" and "route" in entry and "tenant" in entry, entry
        text = json.dumps(entry)
        assert WRITER not in text and READER not in text and "wrong-secret" not in text


def ingress_replica(run: LocalRun) -> psutil.Process:
    for process in psutil.Process(run.process.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "ServeReplica:" in process.name() + " ".join(process.cmdline()) and (
                "ingress" in " ".join(process.cmdline())
            ):
                return process
    raise AssertionError("no ingress replica process found")


def test_refusals_are_in_the_log_after_the_ingress_replica_is_killed(run):
    logs = session_logs(run)
    sent = refuse(run.port, "killed")
    ingress_replica(run).kill()
    time.sleep(1)
    assert_every_line(sent, logs)


def test_refusals_are_in_the_log_after_sigterm(run):
    logs = session_logs(run)
    deadline = time.monotonic() + 120  # Serve restarts the killed replica
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{run.url}/readyz", timeout=5).status_code == 200:
                break
        time.sleep(0.5)
    sent = refuse(run.port, "stopped")
    run.process.send_signal(signal.SIGTERM)
    run.process.wait(timeout=60)
    assert_every_line(sent, logs)
