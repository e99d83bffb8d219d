"""The serving path without the models: what the code costs per query around them.

    python benchmarks/serving_path.py [--docs 1000] [--clients 16] [--duration 20] [--sweep]
        [--profile-s 10] [--real-models] [--out benchmarks/results/serving_path]

Builds tiny random encoders (one layer, hidden 32, the real MiniLM tokenizer: model time
~0), indexes the first ``--docs`` SciFact abstracts (sliding-window chunks, embedded store),
then measures the same search requests (three strategies, RRF, no rerank; SciFact test claims)

1. in process: ``SearchPipeline.search`` from ``--clients`` concurrent tasks;
2. through Ray Serve over HTTP (the app as ``serve-app serve`` runs it) from ``--clients``
   concurrent keep-alive connections,

each as a closed loop (throughput at that concurrency) and, with ``--sweep``, as open-loop
steps around it (maximum sustainable QPS: achieved >= 97 % of offered, no errors, P99 < 5 s).
CPU milliseconds per query come from the kernel's accounting of every process involved
(this process for the in-process path; every Ray process, by kind, for Serve; the load
generator reported apart). Each path reports the host probe timed just before and just after
its closed loop (``benchmarks.processes.host_probe_ms``: how fast the shared cores ran around
it, lower is faster), to tell a slow host from slow code between runs made hours apart.
The Serve path also reports how many queries shared each model call over its warm-up and
closed loop (``benchmarks.model_calls``: the ingress's batch sizes from Ray's metrics, read
after their export, about 11 s).
``--profile-s`` samples each busy process with py-spy during an extra closed-loop window and
lists the functions where it spends its own time.
``--real-models`` keeps the configuration's models (the small real ones) instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import psutil  # noqa: E402

from benchmarks.load import (  # noqa: E402
    LoadRunner,
    Send,
    http_sender,
    load_queries,
    summarise,
    sweep,
)
from benchmarks.model_calls import (  # noqa: E402
    Reading,
    export_wait_s,
    per_call,
    ray_metrics_text,
    read_totals,
)
from benchmarks.processes import (  # noqa: E402
    cpu_by_kind,
    cpu_seconds,
    host_probe_ms,
    ray_processes,
)
from benchmarks.rawhttp import RawHttpPool  # noqa: E402
from benchmarks.reports import write_report  # noqa: E402
from benchmarks.tiny_models import build_tiny_models  # noqa: E402
from serve_app.config import AppConfig, config_from_dict, load_config  # noqa: E402
from serve_app.ports import free_port  # noqa: E402

SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
RESULTS = ROOT / "benchmarks" / "results"
TENANT = "default"  # the anonymous tenant of the local configuration (auth mode none)


def bench_config_data(config_path: Path, real_models: bool, workdir: Path) -> dict:
    """The benchmark's configuration as data, for callers that change more of it."""
    data = load_config(config_path, environ={}).model_dump(mode="json")
    if not real_models:
        dense_dir, splade_dir = build_tiny_models(workdir / "models")
        data["dense"].update(model=str(dense_dir), pooling="mean")
        data["splade"].update(model=str(splade_dir))
    data["chunker"].update(name="sliding_window", tokenizer="")
    data["data_dir"] = str(workdir / "data")
    data["api"]["auth"] = {"mode": "none", "anonymous_tenant": TENANT}
    data["serve"].update(port=free_port(), host="127.0.0.1")
    return data


def bench_config(args: argparse.Namespace, workdir: Path) -> AppConfig:
    data = bench_config_data(args.config, args.real_models, workdir)
    return config_from_dict(data, "serving_path benchmark")


async def index_corpus(config: AppConfig, docs: int) -> dict:
    from serve_app.evaluation.beir import load_beir
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.ingest import IngestPipeline

    corpus = load_beir(SCIFACT, "test", TENANT, max_docs=docs).corpus[:docs]
    components = await build_components(config)
    started = time.perf_counter()
    try:
        pipeline = IngestPipeline(components)
        chunks = 0
        for start in range(0, len(corpus), 64):
            chunks += (await pipeline.ingest(corpus[start : start + 64])).chunks_written
        count = await components.index.count(TENANT)
    finally:
        await components.close()
    return {
        "documents": len(corpus),
        "chunks": count,
        "seconds": round(time.perf_counter() - started, 1),
    }


def request_body(args: argparse.Namespace) -> dict:
    return {
        "top_k": 10,
        "strategies": args.strategies.split(","),
        "fusion": {"method": args.fusion},
        "rerank": False,
    }


class CpuMeter:
    """CPU seconds of a fixed set of processes across a window."""

    def __init__(self, pids: dict[int, str]) -> None:
        self.pids = pids
        self.before = cpu_seconds(pids)

    def stop(self, queries: int) -> dict:
        spent = cpu_by_kind(self.pids, self.before, cpu_seconds(self.pids))
        load_generator = spent.pop("driver (this script)", 0.0)
        total = sum(spent.values())
        per_query = 1000 / max(queries, 1)
        return {
            "cpu_ms_per_query": round(total * per_query, 2),
            "cpu_ms_per_query_by_process": {
                k: round(v * per_query, 2) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
            },
            "load_generator_cpu_ms_per_query": round(load_generator * per_query, 2),
        }


async def measure(
    send: Send,
    args: argparse.Namespace,
    queries: list[str],
    pids: dict[int, str],
    read_batches: Callable[[], Reading] | None = None,
) -> dict:
    """A closed loop at ``--clients`` with CPU accounting, bracketed by the host probe, then
    the optional sweep around it. With ``read_batches`` (the model calls' sizes so far, read
    from the metrics), how many queries shared each model call over the warm-up and the
    closed loop (the same load), read once the metrics have been exported."""
    runner = LoadRunner(send, queries, request_body(args), args.timeout)
    calls_before = read_batches() if read_batches else {}
    await runner.closed_loop(args.clients, 2.0, 0.0)  # warm every path once
    probe = host_probe_ms()
    meter = CpuMeter(pids)
    samples, window = await runner.closed_loop(args.clients, args.duration, 0.0)
    result = {"closed_loop": {**summarise(samples, window, None), "concurrency": args.clients}}
    result["closed_loop"].update(meter.stop(len(samples)))
    result["host_probe_ms"] = [probe, host_probe_ms()]
    if read_batches:
        await asyncio.sleep(export_wait_s())
        result["model_calls"] = per_call(calls_before, read_batches())
    if args.sweep:
        capacity = result["closed_loop"]["achieved_qps"]
        rates = [round(capacity * f, 1) for f in (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2)]
        swept = await sweep(runner, rates, args.sweep_duration, args.warmup, 2.0)
        result["sweep"] = {
            "max_sustainable_qps": swept["max_sustainable_qps"],
            "points": [
                {
                    k: p[k]
                    for k in (
                        "offered_qps",
                        "achieved_qps",
                        "p50_ms",
                        "p95_ms",
                        "p99_ms",
                        "errors",
                        "sustainable",
                    )
                }
                for p in swept["points"]
            ],
        }
    return result


def profile(pids: dict[int, str], seconds: float, folder: Path) -> list[subprocess.Popen]:
    """Start py-spy on each process (non-blocking sampling, raw folded stacks)."""
    spy = Path(sys.executable).with_name("py-spy")
    jobs = []
    for pid, kind in pids.items():
        out = folder / f"{kind.replace(' ', '_').replace(':', '_')}-{pid}.txt"
        jobs.append(
            subprocess.Popen(
                [
                    str(spy),
                    "record",
                    "--pid",
                    str(pid),
                    "--duration",
                    str(int(seconds)),
                    "--rate",
                    "200",
                    "--format",
                    "raw",
                    "--nonblocking",
                    "--gil",
                    "--output",
                    str(out),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    return jobs


def top_functions(folder: Path, limit: int = 12) -> dict[str, list[dict]]:
    """Per profiled process: the functions with the most own samples (share of all samples)."""
    report: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("*.txt")):
        own: Counter[str] = Counter()
        total = 0
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            leaf = stack.split(";")[-1]
            name, _, where = leaf.partition(" (")
            where = where.rstrip(")").rsplit(":", 1)[0].split("site-packages/")[-1]
            own[f"{name} ({where})"] += int(count)
            total += int(count)
        if total:
            report[path.stem] = [
                {"function": f, "share": round(c / total, 3)} for f, c in own.most_common(limit)
            ]
    return report


async def in_process_path(config: AppConfig, args: argparse.Namespace, queries: list[str]) -> dict:
    from benchmarks.inprocess import pipeline_sender
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.search import SearchPipeline

    components = await build_components(config)
    try:
        send = pipeline_sender(SearchPipeline(components), TENANT)
        me = {os.getpid(): "in-process pipeline"}
        result = await measure(send, args, queries, me)
        if args.profile_s:
            folder = Path(tempfile.mkdtemp(prefix="spy-inprocess-"))
            jobs = profile(me, args.profile_s, folder)
            runner = LoadRunner(send, queries, request_body(args), args.timeout)
            await runner.closed_loop(args.clients, args.profile_s + 1, 0.0)
            for job in jobs:
                job.wait(timeout=60)
            result["profile"] = top_functions(folder)
    finally:
        await components.close()
    return result


def serve_path(config: AppConfig, args: argparse.Namespace, queries: list[str]) -> dict:
    from deployments.local import start, stop

    url = start(config, num_cpus=args.ray_cpus)
    try:
        wait_ready(url)
        pids = ray_processes(psutil.Process())
        pids[os.getpid()] = "driver (this script)"

        async def run() -> dict:
            pool = RawHttpPool(url)
            try:
                result = await measure(
                    http_sender(pool), args, queries, pids, lambda: read_totals(ray_metrics_text())
                )
                if args.profile_s:
                    busy = {
                        p: k for p, k in pids.items() if k.startswith(("replica", "ray::Proxy"))
                    }
                    folder = Path(tempfile.mkdtemp(prefix="spy-serve-"))
                    jobs = profile(busy, args.profile_s, folder)
                    runner = LoadRunner(
                        http_sender(pool), queries, request_body(args), args.timeout
                    )
                    await runner.closed_loop(args.clients, args.profile_s + 1, 0.0)
                    for job in jobs:
                        job.wait(timeout=60)
                    result["profile"] = top_functions(folder)
                return result
            finally:
                await pool.close()

        return asyncio.run(run())
    finally:
        stop()


def wait_ready(url: str, timeout_s: float = 180, process: subprocess.Popen | None = None) -> None:
    """Until ``url``'s /readyz answers 200; ``process`` (a ``subprocess.Popen`` serving it,
    if any) exiting first ends the wait at once."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise SystemExit(f"the Serve process exited ({process.returncode}) before ready")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the Serve app at {url} was not ready within {timeout_s:g} s")


def markdown(report: dict) -> str:
    lines = [
        f"# Serving path ({report['models']} encoders, {report['index']['documents']} SciFact "
        f"abstracts, {report['index']['chunks']} chunks, {report['clients']} clients)",
        "",
        "| path | QPS (closed loop) | p50 ms | p95 ms | CPU ms/query | max sustainable QPS "
        "| host probe ms, before / after |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("in_process", "serve"):
        if name not in report:
            continue
        closed = report[name]["closed_loop"]
        best = report[name].get("sweep", {}).get("max_sustainable_qps", "-")
        lines.append(
            f"| {name.replace('_', '-')} | {closed['achieved_qps']} | {closed['p50_ms']} | "
            f"{closed['p95_ms']} | {closed['cpu_ms_per_query']} | {best} | "
            f"{' / '.join(str(ms) for ms in report[name]['host_probe_ms'])} |"
        )
    for name in ("in_process", "serve"):
        if name not in report:
            continue
        closed = report[name]["closed_loop"]
        lines += [
            "",
            f"## {name}",
            "",
            "CPU ms per query by process: " + json.dumps(closed["cpu_ms_per_query_by_process"]),
            f"Load generator: {closed['load_generator_cpu_ms_per_query']} CPU ms per query",
            "Stage medians (ms): " + json.dumps(closed["stage_ms_median"]),
        ]
        if "model_calls" in report[name]:
            lines.append(
                "Model calls (warm-up + closed loop): " + json.dumps(report[name]["model_calls"])
            )
        for process, functions in report[name].get("profile", {}).items():
            lines += ["", f"Own time, {process}:", ""]
            lines += [f"- {f['share']:.1%} {f['function']}" for f in functions]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=str(ROOT / "config" / "local.yaml"))
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=float, default=20)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--sweep-duration", type=float, default=10)
    parser.add_argument("--profile-s", type=float, default=0)
    parser.add_argument("--paths", default="in_process,serve")
    parser.add_argument("--real-models", action="store_true")
    parser.add_argument("--ray-cpus", type=int, default=None)
    parser.add_argument("--fusion", default="rrf")
    parser.add_argument("--strategies", default="bm25,splade,dense")
    parser.add_argument("--queries", type=Path, default=SCIFACT)
    parser.add_argument("--out", type=Path, default=RESULTS / "serving_path")
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="bench-serving-path-"))
    config = bench_config(args, workdir)
    queries = load_queries(args.queries)
    report: dict = {
        "models": "real small" if args.real_models else "tiny random",
        "clients": args.clients,
        "duration_s": args.duration,
        "cpus": psutil.cpu_count(),
        "request": request_body(args),
    }
    report["index"] = asyncio.run(index_corpus(config, args.docs))
    print("indexed:", json.dumps(report["index"]), flush=True)
    paths = args.paths.split(",")
    if "in_process" in paths:
        report["in_process"] = asyncio.run(in_process_path(config, args, queries))
        print("in-process:", json.dumps(report["in_process"]["closed_loop"]), flush=True)
    if "serve" in paths:
        report["serve"] = serve_path(config, args, queries)
        print("serve:", json.dumps(report["serve"]["closed_loop"]), flush=True)
    if "in_process" in report and "serve" in report:
        report["serve_over_in_process"] = round(
            report["serve"]["closed_loop"]["achieved_qps"]
            / max(report["in_process"]["closed_loop"]["achieved_qps"], 1e-9),
            3,
        )
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
