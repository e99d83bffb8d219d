"""The suite's tiers, their time budgets, and the report of where a run's time went.

A test's tier follows from where it lives (``TIER_BY_PATH``, the longest matching prefix
wins) and from the ``vllm`` marker; ``tests/conftest.py`` applies it as a marker of the same
name, so ``-m "not ray"`` and the Makefile's targets select by tier:

- unit: no server, no Ray, seconds at most (the default);
- service: the in-process application (``create_app`` over real small models and stores);
- kube: the chart rendered and checked against KubeRay's, Ray's and Kubernetes' rules;
- ray: real Ray clusters (the local run as a process, Serve end to end, drains, signals);
- bench: the benchmark suites on their smallest inputs;
- image: the container's install path in a clean virtual environment;
- vllm: vLLM on the CPU (its own venv, ``make test-vllm``).

``TierReport`` sums each test's setup, call and teardown time by tier and by directory,
counts the Ray clusters started (each Ray head runs one ``gcs_server``) and the full model
builds in the test process, prints the table and writes it as JSON. With ``--tier-budget`` a
run whose tier took longer than its budget fails, so that the suite's growth is seen when
it happens, not when CI's limit is hit.

A budget is in the reference host's seconds: the run times a fixed CPU workload (``host_work``,
pure Python and one-thread torch; the best of three rounds before the tests and three after)
and scales ``BUDGET_S`` by how much slower this host is than ``REFERENCE_WORK_S`` (never below
1, at most ``MAX_SLOWDOWN``). A slower machine (CI's, or this one on a busy day) then does not fail a change
that added nothing, while a suite that grew still fails on any host.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

TIERS = ("unit", "service", "kube", "ray", "bench", "image", "vllm")
FAST_TIERS = ("unit", "service", "kube")

TIER_BY_PATH = {
    "tests/helm/": "kube",
    "tests/image/": "image",
    "tests/e2e/": "ray",
    "tests/e2e/test_benchmarks_smoke.py": "bench",
    "tests/benchmarks/test_smoke.py": "bench",
    "tests/benchmarks/test_injection.py": "bench",
    "tests/benchmarks/test_gpu.py": "bench",
    "tests/integration/": "service",
    "tests/serve_app/api/": "service",
    "tests/serve_app/test_mcp.py": "service",
    "tests/serve_app/test_client.py": "service",
    "tests/serve_app/test_cli.py": "service",
    "tests/serve_app/test_cli_answer.py": "service",
    "tests/serve_app/test_cli_inspect.py": "service",
    "tests/serve_app/test_validate.py": "service",
    "tests/serve_app/test_validate_llm.py": "service",
    "tests/serve_app/test_base_install.py": "service",
    "tests/serve_app/evaluation/test_tuning.py": "service",
    "tests/deployments/local/test_local_run.py": "ray",
    "tests/deployments/local/test_local_instances.py": "ray",
    "tests/deployments/local/test_make_run.py": "ray",
    "tests/deployments/local/test_hostile_upload.py": "ray",
    "tests/deployments/replicas/test_edge_local_run.py": "ray",
    "tests/deployments/replicas/test_ingress_drain.py": "ray",
    "tests/deployments/replicas/test_large_upload.py": "ray",
}

BUDGET_S = {
    # What each tier may take (setup, call and teardown of its tests), about 1.5 times what
    # it took on two quiet cores: a machine shared with other work stretches every test's
    # time, and a budget that fails then would stop a change that added nothing. The fast
    # tiers run on two pytest workers: theirs is the sum over both workers. unit 360, service
    # 520 and kube 110 until 2026-11-30, when two clean-clone runs of the same fast tests an
    # hour apart here took unit 255.3 s, service 440.1, kube 83.5 with the probe at 1.039x, then
    # 339.9, 536.8 and 103.4 at 1.1x (94 % of the stretched service budget): the probe reads
    # part of such a swing, not all of it, so these keep about a tenth more room.
    "unit": 400,
    "service": 580,
    "kube": 125,
    # The slow tiers' budgets are ceilings that keep CI inside its 90 minutes, not 1.5 times a
    # quiet run: the tests that start Ray swing 1.5 to 1.9 times between hours on this host
    # while the one-thread probe below moves 3 % (2026-11-30, clean-clone runs here:
    # tests/e2e/test_serve_app.py 38.5 s on 9e897d7, 73.7 s three hours later on 1e0f565, the
    # ray tier 791 s and 1168.7 s, the probe at 1.049x and 1.033x; the module alone in that
    # second hour on 3497ec6 and on 1e0f565, 115 s and 102 s: the host, not the code). Tight
    # budgets failed changes that added nothing (CI's run of 3497ec6: ray 1134.3 s of 1103).
    # At these the slow tiers may take 49 minutes, and everything before them (set-up, lint,
    # vllm, the fast tiers) took 17 to 25: a suite grown past them would not finish inside
    # CI's limit on a slow hour. ray 1080 and bench 1000 before; the slowest run of each so
    # far: ray 1168.7 s (x1.033), bench 984.0 s (x1.021), image 141.5 s.
    "ray": 1500,
    "bench": 1250,
    "image": 200,
    "vllm": 460,
}


# host_work's best time on the two-core host where BUDGET_S holds (2026-11-30: 0.471 s in the
# run that measured unit 263 s, service 516 s, kube 82 s, before that day's cuts; 0.53 s on the
# same host an hour before, busier).
REFERENCE_WORK_S = 0.47
MAX_SLOWDOWN = 1.5


def host_work() -> float:
    """Seconds this process takes for a fixed CPU workload like the tests' own: JSON, regular
    expressions and hashing in Python, and a small torch model's matrix products on one thread."""
    import hashlib
    import re

    import torch

    started = time.perf_counter()
    doc = {"text": "Sleep spindles replay the day's learning. " * 40, "n": list(range(50))}
    words = re.compile(r"\w+")
    for _ in range(6000):
        text = json.dumps(doc)
        words.findall(text)
        json.loads(text)
        hashlib.sha256(text.encode()).digest()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
        for _ in range(300):
            a = torch.tanh(a @ a.T / 16)
    finally:
        torch.set_num_threads(threads)
    return time.perf_counter() - started


def slowdown(best_work_s: float) -> float:
    """How much a tier's budget stretches on a host whose best ``host_work`` took this long."""
    return min(max(best_work_s / REFERENCE_WORK_S, 1.0), MAX_SLOWDOWN)


def tier_of(nodeid: str, keywords: Any = ()) -> str:
    if "vllm" in keywords:
        return "vllm"
    path = nodeid.split("::", 1)[0]
    matches = [prefix for prefix in TIER_BY_PATH if path.startswith(prefix)]
    return TIER_BY_PATH[max(matches, key=len)] if matches else "unit"


def directory_of(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")[:-1]
    return "/".join(parts[:3])


class RayClusters:
    """Counts Ray clusters started on this machine while the run lasts: a cluster's head runs
    one ``gcs_server`` for its whole life (13 s or more here), so polling every half second
    sees each one."""

    def __init__(self) -> None:
        self.seen: set[tuple[int, float]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True, name="ray-clusters")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=5)
        return len(self.seen)

    def _poll(self) -> None:
        import psutil

        while not self._stop.is_set():
            for process in psutil.process_iter(["name", "create_time"]):
                name = process.info["name"] or ""
                if name.startswith("gcs_server"):
                    self.seen.add((process.pid, process.info["create_time"]))
            self._stop.wait(0.5)


class ModelBuilds:
    """Counts ``build_components`` calls in this process that load the dense model (those
    given a dense encoder reuse one: the session's)."""

    def __init__(self) -> None:
        self.count = 0

    def install(self) -> None:
        from serve_app.pipelines import components

        original = components.build_components
        if getattr(original, "counted", False):
            return

        async def counted(config: Any, **parts: Any) -> Any:
            if parts.get("dense") is None:
                self.count += 1
            return await original(config, **parts)

        counted.counted = True  # type: ignore[attr-defined]
        components.build_components = counted  # type: ignore[assignment]


class TierReport:
    """Where the run's time went, by tier and directory; ``--tier-budget`` enforces BUDGET_S."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.enforce = bool(config.getoption("tier_budget"))
        self.out = Path(config.getoption("tier_report") or "test-reports/tiers.json")
        self.by_tier: dict[str, float] = defaultdict(float)
        self.tests_by_tier: dict[str, int] = defaultdict(int)
        self.by_dir: dict[str, float] = defaultdict(float)
        self.started = time.monotonic()
        self.worker = hasattr(config, "workerinput")
        self.clusters = RayClusters()
        self.builds = ModelBuilds()
        self.worker_builds = 0
        self.work_s: list[float] = []

    @pytest.hookimpl(tryfirst=True)  # before pytest-xdist starts its workers
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not self.worker:
            self.measure_host()
            self.clusters.start()
        self.builds.install()

    def measure_host(self) -> None:
        """Three timed rounds of ``host_work`` when the budgets are enforced (3 s or so: not
        for a developer's run of one file)."""
        if self.enforce:
            self.work_s += [host_work() for _ in range(3)]

    def budget(self, tier: str) -> float:
        return BUDGET_S[tier] * self.slowdown

    @property
    def slowdown(self) -> float:
        return slowdown(min(self.work_s)) if self.work_s else 1.0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.worker:
            return  # the controller gets every report
        tier = tier_of(report.nodeid, report.keywords)
        self.by_tier[tier] += report.duration
        self.by_dir[directory_of(report.nodeid)] += report.duration
        if report.when == "call" or (report.when == "setup" and report.skipped):
            self.tests_by_tier[tier] += 1

    @pytest.hookimpl(optionalhook=True)  # pytest-xdist's: a worker's counts at its end
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.worker_builds += getattr(node, "workeroutput", {}).get("model_builds", 0)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.worker:
            self.config.workeroutput["model_builds"] = self.builds.count  # type: ignore[attr-defined]
            return
        clusters = self.clusters.stop()
        self.measure_host()
        summary = {
            "wall_s": round(time.monotonic() - self.started, 1),
            "by_tier_s": {t: round(s, 1) for t, s in sorted(self.by_tier.items())},
            "tests_by_tier": dict(sorted(self.tests_by_tier.items())),
            "by_directory_s": {
                d: round(s, 1) for d, s in sorted(self.by_dir.items(), key=lambda x: -x[1])
            },
            "ray_clusters_started": clusters,
            "model_builds": self.builds.count + self.worker_builds,
            "budget_s": {t: round(self.budget(t), 1) for t in self.by_tier},
            "host_work_s": [round(s, 3) for s in self.work_s],
            "reference_work_s": REFERENCE_WORK_S,
            "budget_scale": round(self.slowdown, 3),
        }
        self.summary = summary
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(summary, indent=1) + "\n")
        over = [t for t, s in self.by_tier.items() if s > self.budget(t)]
        if self.enforce and over and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self.over = over

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.worker or not hasattr(self, "summary"):
            return
        write = terminalreporter.write_line
        terminalreporter.section("time by tier (tests/support/tiers.py)")
        for tier, seconds in self.summary["by_tier_s"].items():
            flag = "  OVER BUDGET" if tier in self.over else ""
            count = self.summary["tests_by_tier"].get(tier, 0)
            budget = self.summary["budget_s"][tier]
            write(f"{tier:8} {seconds:8.1f} s of {budget:6.0f} s  {count:5d} tests{flag}")
        if self.work_s:
            write(
                f"budgets: tests/support/tiers.py BUDGET_S x {self.summary['budget_scale']} "
                f"(this host's best fixed workload {min(self.work_s):.3f} s against the "
                f"reference host's {REFERENCE_WORK_S} s)"
            )
        write(
            f"Ray clusters started: {self.summary['ray_clusters_started']}; "
            f"full model builds in the test processes: {self.summary['model_builds']}; "
            f"report: {self.out}"
        )
        if self.over and self.enforce:
            write(
                f"FAILED: over the time budget: {', '.join(self.over)} (a tier's budget is in "
                "tests/support/tiers.py; make the new tests cheaper or move them to a slower "
                "tier before raising it)",
                red=True,
            )


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("tiers")
    group.addoption(
        "--tier-budget", action="store_true", help="fail the run when a tier is over its budget"
    )
    group.addoption("--tier-report", default=None, help="where to write the tier report (JSON)")


def apply(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(item.nodeid, item.keywords)))


def register(config: pytest.Config) -> None:
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: the {tier} tier (tests/support/tiers.py)")
    if os.environ.get("SERVE_APP_TIER_REPORT", "1") != "0":
        config.pluginmanager.register(TierReport(config), "tier-report")
