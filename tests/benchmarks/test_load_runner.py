"""The load generator's achieved rate: the server's pace, not its latency."""

import asyncio

from benchmarks.runner import (
    LoadRunner,
    Sample,
    completion_window,
    max_sustainable,
    summarise,
    sustainable,
    sweep,
)


def constant_latency(seconds: float):
    async def send(_payload: dict) -> Sample:
        await asyncio.sleep(seconds)
        return Sample(0.0, 200, "OK")

    return send


def capacity(per_second: float):
    """A server that answers one request at a time, each taking 1 / per_second."""
    lock = asyncio.Lock()

    async def send(_payload: dict) -> Sample:
        async with lock:
            await asyncio.sleep(1 / per_second)
        return Sample(0.0, 200, "OK")

    return send


def test_the_window_of_evenly_spaced_replies_is_their_count_times_the_spacing():
    samples = [Sample(0.0, 200, "OK", done_at=10 + 0.02 * i) for i in range(50)]
    assert abs(completion_window(samples, 99.0) - 50 * 0.02) < 1e-9
    assert completion_window(samples[:2], 99.0) == 99.0  # too few to tell a pace


async def test_a_server_that_keeps_up_with_a_slow_reply_achieves_the_offered_rate():
    runner = LoadRunner(constant_latency(0.4), ["q"], {}, timeout_s=5)
    samples, window = await runner.open_loop(40, 2.0, 0.25)
    point = summarise(samples, window, 40)
    # Timing from the first send to the last reply read 40 * 2 / 2.4 = 33 QPS here.
    assert point["errors"] == {} and point["p50_ms"] >= 400
    assert 0.97 * 40 <= point["achieved_qps"] <= 1.05 * 40
    assert sustainable(point)


async def test_a_server_that_falls_behind_achieves_its_own_pace():
    runner = LoadRunner(capacity(40), ["q"], {}, timeout_s=10)
    samples, window = await runner.open_loop(80, 2.0, 0.25)
    point = summarise(samples, window, 80)
    assert 0.8 * 40 <= point["achieved_qps"] <= 1.05 * 40
    assert not sustainable(point)


async def test_a_closed_loop_achieves_clients_over_latency():
    runner = LoadRunner(constant_latency(0.1), ["q"], {}, timeout_s=5)
    samples, window = await runner.closed_loop(4, 2.0, 0.2)
    assert 0.9 * 40 <= summarise(samples, window, None)["achieved_qps"] <= 1.05 * 40


def test_a_step_that_passes_above_a_failed_one_does_not_raise_the_maximum():
    steps = [(150, True), (200, True), (250, True), (300, False), (350, True), (400, False)]
    points = [{"offered_qps": rate, "sustainable": ok} for rate, ok in steps]
    assert max_sustainable(points) == 250
    assert max_sustainable(points[:3]) == 250
    assert max_sustainable([{"offered_qps": 150, "sustainable": False}, *points]) == 0.0


async def test_the_sweep_stops_at_the_first_step_the_server_cannot_hold(capsys):
    runner = LoadRunner(capacity(40), ["q"], {}, timeout_s=10)
    report = await sweep(runner, [10, 20, 80, 20], 1.0, 0.2, 0.0)
    assert [p["offered_qps"] for p in report["points"]] == [10, 20, 80]
    assert report["max_sustainable_qps"] == 20
    assert "80.00 qps" in capsys.readouterr().out
