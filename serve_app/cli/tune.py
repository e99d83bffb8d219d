"""``serve-app tune``: retrieval parameters searched on a BEIR split, exact and in memory."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from serve_app.config import AppConfig


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tune = sub.add_parser(
        "tune",
        help="search retrieval parameters on a BEIR split (train), exact and in memory; "
        "writes a report and the chosen configuration",
    )
    tune.add_argument("--beir", required=True, help="BEIR-layout folder")
    tune.add_argument("--split", default="train", help="the split parameters are chosen on")
    tune.add_argument(
        "--chunkings",
        default="256/32/256,512/32/512",
        help="comma-separated max_tokens/overlap_tokens/model_length (model_length: the dense "
        "and SPLADE max_length)",
    )
    tune.add_argument(
        "--final-split", help="score the chosen configuration and each method once on this split"
    )
    tune.add_argument("--max-queries", type=int)
    tune.add_argument(
        "--cached-only",
        action="store_true",
        help="run no model for chunk vectors: settings needing vectors the cache lacks are "
        "listed as not run",
    )
    tune.add_argument(
        "--grid",
        choices=["coarse", "smoke"],
        default="coarse",
        help="coarse: the search; smoke: every method once or twice (checks the machinery)",
    )
    tune.add_argument(
        "--out", default="tuning", help="report stem: writes .md, .json and .yaml (the choice)"
    )


async def run(config: AppConfig, args: argparse.Namespace) -> int:
    import yaml  # type: ignore[import-untyped,unused-ignore]

    from serve_app.evaluation.beir import load_beir
    from serve_app.evaluation.tuning import (
        GRIDS,
        Chunking,
        Tuner,
        chosen_overrides,
        render_report,
        score_on,
        write_report,
    )

    dataset = load_beir(args.beir, args.split)
    if args.max_queries:
        keep = sorted(dataset.queries)[: args.max_queries]
        dataset.queries = {q: dataset.queries[q] for q in keep}
        dataset.qrels = {q: dataset.qrels[q] for q in keep}
    chunkings = [Chunking(*map(int, spec.split("/"))) for spec in args.chunkings.split(",")]
    cache = config.data_path / "tune" / "cache"
    tuner = Tuner(config, dataset, chunkings, cache, GRIDS[args.grid], not args.cached_only)
    chosen = await asyncio.to_thread(tuner.run)
    payload: dict[str, Any] = {
        "dataset": dataset.name,
        "split": args.split,
        "grid": args.grid,
        "chunkings": [c.name for c in chunkings],
        "queries": len(dataset.queries),
        "documents": len(dataset.corpus),
        "chosen": chosen.describe(),
        "overrides": chosen_overrides(chosen, config),
        "trials": [t.to_dict() for t in tuner.trials],
    }
    variants = tuner.method_variants(chosen)
    train = await asyncio.to_thread(score_on, tuner, dataset, variants)
    payload["methods"] = [
        {"method": name, args.split: metrics, "setting": setting.describe()}
        for (name, setting), metrics in zip(variants, train, strict=True)
    ]
    if args.final_split:
        # Scored once, after every choice was made on the tuning split.
        held_out = load_beir(args.beir, args.final_split)
        payload["final_split"] = args.final_split
        scores = await asyncio.to_thread(score_on, tuner, held_out, variants)
        for row, metrics in zip(payload["methods"], scores, strict=True):
            row[args.final_split] = metrics
    out = Path(args.out)
    write_report(out, payload, render_report)
    out.with_suffix(".yaml").write_text(yaml.safe_dump(payload["overrides"], sort_keys=False))
    print(render_report(payload))
    print(f"report: {out.with_suffix('.md')}; chosen configuration: {out.with_suffix('.yaml')}")
    return 0
