"""The serving path around the models: what the code costs per query, in process and on Serve.

    python -m benchmarks serving-path [--docs 1000] [--clients 16] [--duration 20] [--sweep]
        [--paths in_process,serve] [--profile-s 10] [--real-models] [--config config/local.yaml]

Builds tiny random encoders (one layer, hidden 32, the real MiniLM tokenizer: model time ~0;
``--real-models`` keeps the configuration's), indexes the first ``--docs`` SciFact abstracts
(sliding-window chunks, the embedded store), then sends the same searches (three strategies,
RRF, no rerank; SciFact test claims)

1. in process: ``SearchPipeline.search`` from ``--clients`` concurrent tasks;
2. through Ray Serve over HTTP (the app as ``serve-app serve`` runs it) from ``--clients``
   keep-alive connections,

each as a closed loop (throughput at that concurrency) and, with ``--sweep``, as open-loop
steps around it (maximum sustainable QPS). CPU ms per query come from the kernel's accounting
of every process involved, by kind, the load generator apart; the host probe timed just
before and after each closed loop tells a slow host from slow code between runs hours apart.
The Serve path also reports how many queries shared each model call (``model_calls``, read
after Ray's metrics export, about 11 s). ``--profile-s`` samples each busy process with
py-spy during one more closed loop and lists where each spends its own time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from benchmarks.ingest import load_corpus
from benchmarks.model_calls import Reading, current_reading, export_wait_s, per_call
from benchmarks.processes import (
    CpuMeter,
    host_probe_ms,
    own_processes,
    py_spy,
    py_spy_binary,
    top_functions,
)
from benchmarks.rawhttp import RawHttpPool
from benchmarks.report import default_stem, table, write_report
from benchmarks.runner import (
    LoadRunner,
    Send,
    add_search_arguments,
    http_sender,
    load_queries,
    pipeline_sender,
    search_body,
    summarise,
    sweep,
)
from benchmarks.service import (
    SCIFACT,
    TENANT,
    add_run_arguments,
    app_config,
    bench_config_data,
    fresh_workdir,
    serving,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, "--queries")
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
    add_search_arguments(parser)


async def index_corpus(config: Any, docs: int) -> dict:
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.ingest import IngestPipeline
    from serve_app.schemas import ScopeKey

    corpus = load_corpus(SCIFACT, docs)
    components = await build_components(config)
    started = time.perf_counter()
    try:
        pipeline = IngestPipeline(components)
        for start in range(0, len(corpus), 64):
            await pipeline.ingest(ScopeKey(TENANT), corpus[start : start + 64])
        count = await components.index.count(ScopeKey(TENANT))
    finally:
        await components.close()
    seconds = round(time.perf_counter() - started, 1)
    return {"documents": len(corpus), "chunks": count, "seconds": seconds}


async def measure(
    send: Send,
    args: argparse.Namespace,
    queries: list[str],
    pids: dict[int, str],
    read_calls: Callable[[], Reading] | None = None,
) -> dict:
    """A closed loop at ``--clients`` with CPU accounting, bracketed by the host probe, then
    the optional sweep around it, then the optional py-spy window. With ``read_calls`` (the
    model calls so far, from the metrics): how many queries shared each model call over the
    warm-up and the closed loop, read once the metrics have been exported."""
    body = search_body(args)
    runner = LoadRunner(send, queries, body, args.timeout)
    calls_before = read_calls() if read_calls else None
    await runner.closed_loop(args.clients, args.warmup, 0.0)  # warm every path once
    probe = host_probe_ms()
    meter = CpuMeter(pids)
    samples, window = await runner.closed_loop(args.clients, args.duration, 0.0)
    closed = {**summarise(samples, window, None), "concurrency": args.clients}
    result: dict[str, Any] = {"closed_loop": {**closed, **meter.per_query(len(samples))}}
    result["host_probe_ms"] = [probe, host_probe_ms()]
    if read_calls and calls_before is not None:
        await asyncio.sleep(export_wait_s())
        result["model_calls"] = per_call(calls_before, read_calls())
    if args.sweep:
        capacity = closed["achieved_qps"]
        rates = [round(capacity * f, 1) for f in (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2)]
        # Two seconds between steps let queues drain; a short sweep (a smoke run) waits less.
        cooldown_s = min(2.0, args.sweep_duration)
        swept = await sweep(runner, rates, args.sweep_duration, args.warmup, cooldown_s)
        result["sweep"] = {k: swept[k] for k in ("max_sustainable_qps", "points")}
    if args.profile_s and (spy := py_spy_binary()) is None:
        # The figures above stand without the profile; losing them to a missing tool did.
        result["profile"] = {"skipped": "py-spy is neither beside the interpreter nor on PATH"}
    elif args.profile_s:
        busy = {p: k for p, k in pids.items() if k.startswith(("replica", "ray::Proxy", "in-"))}
        folder = Path(tempfile.mkdtemp(prefix="bench-py-spy-"))
        jobs = py_spy(spy, busy, args.profile_s, folder)
        await runner.closed_loop(args.clients, args.profile_s + 1, 0.0)
        for job in jobs:
            job.wait(timeout=60)
        result["profile"] = top_functions(folder)
    return result


async def in_process_path(config: Any, args: argparse.Namespace, queries: list[str]) -> dict:
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.search import SearchPipeline
    from serve_app.schemas import ScopeKey

    components = await build_components(config)
    try:
        send = pipeline_sender(SearchPipeline(components), ScopeKey(TENANT))
        return await measure(send, args, queries, {os.getpid(): "in-process pipeline"})
    finally:
        await components.close()


def measure_served(url: str, args: argparse.Namespace, queries: list[str]) -> dict:
    """``measure`` over HTTP against the app this process serves at ``url``."""
    pids = own_processes()

    async def run() -> dict:
        pool = RawHttpPool(url)
        try:
            return await measure(http_sender(pool), args, queries, pids, current_reading)
        finally:
            await pool.close()

    return asyncio.run(run())


def markdown(report: dict) -> list[str]:
    paths = [name for name in ("in_process", "serve") if name in report]
    lines = [
        f"# Serving path ({report['models']} encoders, {report['index']['documents']} SciFact "
        f"abstracts, {report['index']['chunks']} chunks, {report['clients']} clients)",
        "",
        *table(
            ["path", "QPS (closed loop)", "p50 ms", "p95 ms", "CPU ms/query",
             "max sustainable QPS", "host probe ms, before / after"],
            [[name.replace("_", "-"), c["achieved_qps"], c["p50_ms"], c["p95_ms"],
              c["cpu_ms_per_query"], report[name].get("sweep", {}).get("max_sustainable_qps", "-"),
              " / ".join(str(ms) for ms in report[name]["host_probe_ms"])]
             for name in paths for c in [report[name]["closed_loop"]]],
        ),
    ]  # fmt: skip
    for name in paths:
        closed = report[name]["closed_loop"]
        lines += [
            "", f"## {name}", "",
            "CPU ms per query by process: " + json.dumps(closed["cpu_ms_per_query_by_process"]),
            f"Load generator: {closed['load_generator_cpu_ms_per_query']} CPU ms per query",
            "Stage medians (ms): " + json.dumps(closed["stage_ms_median"]),
        ]  # fmt: skip
        if "model_calls" in report[name]:
            calls = json.dumps(report[name]["model_calls"])
            lines.append(f"Model calls (warm-up + closed loop): {calls}")
        for process, functions in report[name].get("profile", {}).items():
            lines += ["", f"Own time, {process}:", ""]
            lines += [f"- {f['share']:.1%} {f['function']}" for f in functions]
    return lines


def run(args: argparse.Namespace) -> int:
    data = bench_config_data(args.config, args.real_models, fresh_workdir("serving-path"))
    queries = load_queries(args.queries)
    report: dict = {
        "models": "real small" if args.real_models else "tiny random",
        "clients": args.clients,
        "duration_s": args.duration,
        "cpus": psutil.cpu_count(),
        "request": search_body(args),
    }
    report["index"] = asyncio.run(index_corpus(app_config(data), args.docs))
    print("indexed:", json.dumps(report["index"]), flush=True)
    paths = args.paths.split(",")
    if "in_process" in paths:
        report["in_process"] = asyncio.run(in_process_path(app_config(data), args, queries))
        print("in process:", json.dumps(report["in_process"]["closed_loop"]), flush=True)
    if "serve" in paths:
        with serving(data) as url:
            report["serve"] = measure_served(url, args, queries)
        print("serve:", json.dumps(report["serve"]["closed_loop"]), flush=True)
    if "in_process" in report and "serve" in report:
        qps = [report[p]["closed_loop"]["achieved_qps"] for p in ("serve", "in_process")]
        report["serve_over_in_process"] = round(qps[0] / max(qps[1], 1e-9), 3)
    name = f"serving-path-{'real' if args.real_models else 'tiny'}"
    write_report(args.out or default_stem(name), report, markdown(report))
    return 0
