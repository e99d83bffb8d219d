"""The suites' one load runner: open and closed loops, the sweep, the summary.

Open loop: request i is due at ``start + i / rate`` and sent then, whatever earlier ones do;
its latency runs from that due time, so a slow server cannot hide its queue. Closed loop: N
clients, each sending its next request when its last returns. A sweep raises the offered rate
step by step; the maximum sustainable QPS is the highest rate with achieved >= 97 % of offered,
no errors and P99 < 5 s, every lower step too. The target is one ``send(payload) -> Sample``:
the HTTP API (``http_sender``) or the search pipeline in this process (``pipeline_sender``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.rawhttp import HttpError, RawHttpPool

MAX_REQUESTS = 200_000


@dataclass
class Sample:
    latency_ms: float
    status: int
    code: str
    timings: dict[str, float] = field(default_factory=dict)
    done_at: float = 0.0  # time.perf_counter() when the reply (or the timeout) came


Send = Callable[[dict], Awaitable[Sample]]


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strategies", default="bm25,splade,dense")
    parser.add_argument("--fusion", default="rrf")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--rerank", action="store_true")


def search_body(args: argparse.Namespace | None = None) -> dict:
    """A SearchRequest without its query (the runner adds one per request), as ``args`` say
    (``add_search_arguments``), else three strategies, RRF, top 10, no rerank."""
    return {
        "top_k": getattr(args, "top_k", 10),
        "strategies": getattr(args, "strategies", "bm25,splade,dense").split(","),
        "fusion": {"method": getattr(args, "fusion", "rrf")},
        "rerank": getattr(args, "rerank", False),
    }


def load_queries(path: Path) -> list[str]:
    """Queries from a BEIR folder (test-split claims), a .jsonl with "text", or plain lines."""
    if path.is_dir():
        qrels = (path / "qrels" / "test.tsv").read_text().splitlines()[1:]
        wanted = {line.split("\t")[0] for line in qrels if line.strip()}
        rows = [json.loads(line) for line in (path / "queries.jsonl").open() if line.strip()]
        return [r["text"] for r in rows if str(r["_id"]) in wanted]
    lines = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    return [json.loads(line)["text"] for line in lines] if path.suffix == ".jsonl" else lines


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = q / 100 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class LoadRunner:
    """Open- and closed-loop load over one ``send`` function, the queries taken in turn."""

    def __init__(self, send: Send, queries: list[str], body: dict, timeout_s: float) -> None:
        self.send = send
        self.queries = queries
        self.body = body
        self.timeout_s = timeout_s
        self._next = 0

    def _payload(self) -> dict:
        query = self.queries[self._next % len(self.queries)]
        self._next += 1
        return {**self.body, "query": query}

    async def _one(self, due: float) -> Sample:
        try:
            sample = await asyncio.wait_for(self.send(self._payload()), self.timeout_s)
        except TimeoutError:
            sample = Sample(0.0, 0, "CLIENT_TIMEOUT")
        sample.done_at = time.perf_counter()
        sample.latency_ms = (sample.done_at - due) * 1000
        return sample

    async def open_loop(
        self, rate: float, duration_s: float, warmup_s: float
    ) -> tuple[list[Sample], float]:
        """Fixed arrival rate; the counted samples and the seconds they took to complete
        (``completion_window``)."""
        total = min(int(rate * (duration_s + warmup_s)), MAX_REQUESTS)
        counted_from = int(rate * warmup_s)
        start = time.perf_counter() + 0.05
        tasks = []
        for i in range(total):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self._one(due)))
        counted = list((await asyncio.gather(*tasks))[counted_from:])
        return counted, completion_window(counted, duration_s)

    async def closed_loop(
        self, concurrency: int, duration_s: float, warmup_s: float
    ) -> tuple[list[Sample], float]:
        samples: list[Sample] = []
        counted_start = time.perf_counter() + warmup_s
        stop_at = counted_start + duration_s

        async def worker() -> None:
            while time.perf_counter() < stop_at and len(samples) < MAX_REQUESTS:
                sent = time.perf_counter()
                sample = await self._one(sent)
                if sent >= counted_start:
                    samples.append(sample)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return samples, completion_window(samples, duration_s)


def completion_window(samples: list[Sample], fallback_s: float) -> float:
    """The seconds in which ``samples`` completed at the pace they completed at: their count
    times the least-squares slope of their sorted completion times (seconds per reply).

    ``count / window`` is then the rate the server answered at. Timing from the first send
    to the last reply instead adds one tail latency to the window, so a server that keeps
    up with stable latency read as falling behind: 96 % of the offered rate at 250 ms over
    a 6 s step. Here a server that keeps up gives the offered rate whatever its latency, and
    one that falls behind gives the rate it manages (its replies then come at its pace)."""
    done = sorted(s.done_at for s in samples)
    n = len(done)
    if n < 3 or done[-1] <= done[0]:
        return fallback_s
    mean_i, mean_t = (n - 1) / 2, sum(done) / n
    covariance = sum((i - mean_i) * (t - mean_t) for i, t in enumerate(done))
    variance = sum((i - mean_i) ** 2 for i in range(n))
    slope = covariance / variance
    return n * slope if slope > 0 else fallback_s


def http_sender(pool: RawHttpPool, path: str = "/v1/search") -> Send:
    """POST each payload as JSON; a 200 carries the pipeline's stage timings."""

    async def send(payload: dict) -> Sample:
        try:
            reply = await pool.post_json(path, payload)
        except HttpError as error:
            return Sample(0.0, 0, str(error).split(":")[0])
        if reply.status == 200:
            return Sample(0.0, 200, "OK", reply.json().get("timings_ms", {}))
        try:
            code = reply.json()["error"]["code"]
        except Exception:
            code = f"HTTP_{reply.status}"
        return Sample(0.0, reply.status, code)

    return send


def pipeline_sender(pipeline: Any, scope: Any) -> Send:
    """Each payload searched by a ``SearchPipeline`` in this process, in ``scope`` (a
    ``ScopeKey``)."""
    from serve_app.errors import ServeAppError
    from serve_app.schemas import SearchRequest

    async def send(payload: dict) -> Sample:
        try:
            response = await pipeline.search(SearchRequest.model_validate(payload), scope)
        except ServeAppError as error:
            return Sample(0.0, error.status, error.code)
        return Sample(0.0, 200, "OK", response.timings_ms)

    return send


def summarise(samples: list[Sample], window_s: float, offered_qps: float | None) -> dict:
    ok = [s.latency_ms for s in samples if s.status == 200]
    latencies = [s.latency_ms for s in samples]
    stages: dict[str, list[float]] = {}
    for sample in samples:
        for stage, ms in sample.timings.items():
            stages.setdefault(stage, []).append(ms)
    result: dict[str, Any] = {
        "requests": len(samples),
        "ok": len(ok),
        "errors": dict(Counter(s.code for s in samples if s.status != 200)),
        "window_s": round(window_s, 2),
        "achieved_qps": round(len(ok) / window_s, 2) if window_s > 0 else 0.0,
        **{f"p{q}_ms": round(percentile(latencies, q), 1) for q in (50, 90, 95, 99)},
        "max_ms": round(max(latencies), 1) if latencies else float("nan"),
        "stage_ms_median": {k: round(statistics.median(v), 2) for k, v in sorted(stages.items())},
    }
    if "total" in result["stage_ms_median"]:
        # What the client sees beyond the ingress' own pipeline: HTTP, Serve proxy, routing.
        result["outside_pipeline_ms_median"] = round(
            result["p50_ms"] - result["stage_ms_median"]["total"], 2
        )
    if offered_qps is not None:
        result["offered_qps"] = offered_qps
    return result


def sustainable(point: dict) -> bool:
    return (
        point["achieved_qps"] >= 0.97 * point["offered_qps"]
        and not point["errors"]
        and point["p99_ms"] < 5000
    )


def sweep_rates(start: float, step: float, maximum: float) -> list[float]:
    return [round(start + i * step, 2) for i in range(int((maximum - start) / step) + 1)][:1000]


async def sweep(
    runner: LoadRunner, rates: list[float], duration_s: float, warmup_s: float, cooldown_s: float
) -> dict:
    """Open loop at each rate in turn, up to the first unsustainable step: a step above it
    cannot move the maximum (``max_sustainable``) and would start behind that step's queue."""
    points = []
    for rate in rates:
        samples, window = await runner.open_loop(rate, duration_s, warmup_s)
        point = summarise(samples, window, rate)
        point["sustainable"] = sustainable(point)
        points.append(point)
        figures = ", ".join(
            f"{k} {point[k]}" for k in ("achieved_qps", "p50_ms", "p95_ms", "p99_ms")
        )
        flag = "" if point["sustainable"] else "  <- not sustainable"
        print(
            f"offered {rate:6.2f} qps: {figures}, errors {point['errors'] or 0}{flag}", flush=True
        )
        await asyncio.sleep(cooldown_s)  # let the step's queue drain
        if not point["sustainable"]:
            break
    best = max_sustainable(points)
    summary = dict(next(p for p in points if p["offered_qps"] == best)) if best else {}
    return {**summary, "mode": "sweep", "max_sustainable_qps": best, "points": points}


def max_sustainable(points: list[dict]) -> float:
    """The highest rate of the unbroken run of sustainable steps from the first: a step that
    passes above one that failed does not count (on the H100 of 2026-11-27, 350 QPS failed at
    337 achieved, then 400 passed at 403 with its p50 at 735 ms against 234: a queue the
    window did not outlast, not a rate the server holds)."""
    best = 0.0
    for point in points:
        if not point["sustainable"]:
            break
        best = point["offered_qps"]
    return best
