"""``serve-app search``: hybrid search, in process or through ``--url``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from serve_app.cli.common import connected, retrieval_service, service_arguments
from serve_app.config import AppConfig
from serve_app.schemas import FUSION_METHODS, STRATEGIES, FusionSpec, ScopeKey, SearchRequest

if TYPE_CHECKING:
    from serve_app.api.models import SearchResponseOut


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    search = sub.add_parser("search", help="hybrid search")
    search.add_argument("query")
    search.add_argument("--top-k", type=int, default=10)
    search.add_argument("--strategies", help=f"comma-separated subset of {','.join(STRATEGIES)}")
    search.add_argument("--fusion", choices=FUSION_METHODS)
    search.add_argument("--rerank", action="store_true")
    search.add_argument("--tenant", default="default")
    search.add_argument("--json", action="store_true", help="print the SearchResponse as JSON")
    search.add_argument("--collection", default="default", help="a named collection")
    service_arguments(search)


def format_results(response: SearchResponseOut) -> str:
    """A table of the results (``SearchResponseOut``: the HTTP API's shape)."""
    strategies = response.strategies
    header = (
        f"{'#':>2}  {'score':>7}  "
        + "  ".join(f"{s:>13}" for s in strategies)
        + "  document / section"
    )
    lines = [header, "-" * len(header)]
    for i, item in enumerate(response.results, 1):
        per = []
        for s in strategies:
            if s in item.scores:
                per.append(f"{item.scores[s]:>7.3f} (#{item.ranks[s]:<3})")
            else:
                per.append(f"{'-':>13}")
        where = " > ".join(item.heading_chain) or "-"
        lines.append(
            f"{i:>2}  {item.score:>7.4f}  " + "  ".join(per) + f"  {item.doc_id} / {where}"
        )
        snippet = " ".join(item.text.split())[:160]
        lines.append(f"{'':>13}{item.title[:80]!s}")
        lines.append(f"{'':>13}{snippet}...")
    timings = ", ".join(f"{k} {v:.1f}" for k, v in response.timings_ms.items())
    lines.append(
        f"fusion: {response.fusion}; reranked: {response.reranked}; timings (ms): {timings}"
    )
    return "\n".join(lines)


async def run(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.api.models import SearchResponseOut

    request = SearchRequest(
        query=args.query,
        top_k=args.top_k,
        strategies=args.strategies.split(",") if args.strategies else None,
        fusion=FusionSpec(method=args.fusion) if args.fusion else None,
        rerank=True if args.rerank else None,
        collection=args.collection,
    )
    if args.url:
        async with connected(args) as api:
            answer = await api.search(request)
        print(answer.model_dump_json(indent=2) if args.json else format_results(answer))
        return 0
    async with retrieval_service(config) as service:
        response = await service.search(request, ScopeKey(args.tenant, request.collection))
    answer = SearchResponseOut.from_response(response)  # the HTTP API's shape, as with --url
    print(answer.model_dump_json(indent=2) if args.json else format_results(answer))
    return 0
