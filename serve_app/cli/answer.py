"""``serve-app answer``: a cited answer, streamed as it is written; in process or through
``--url``. Exits 1 when the answer ends in an ``error`` event (or its JSON has an ``error``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from serve_app.cli.common import connected, retrieval_service, service_arguments
from serve_app.config import AppConfig
from serve_app.pipelines.answer_events import (
    AnswerDelta,
    AnswerError,
    AnswerEvent,
    AnswerMetadata,
)
from serve_app.schemas import ScopeKey

if TYPE_CHECKING:
    from serve_app.schemas import AnswerRequest


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    answer = sub.add_parser("answer", help="a cited answer from the documents (needs llm:)")
    answer.add_argument("question")
    answer.add_argument("--collection", default="default", help="a named collection")
    answer.add_argument("--top-k", type=int, help="passages given to the model")
    answer.add_argument("--multi-query", action="store_true", help="retrieve reformulations too")
    answer.add_argument("--no-understand", action="store_true", help="skip query understanding")
    answer.add_argument("--max-tokens", type=int, help="cap on the answer's tokens")
    answer.add_argument("--tenant", default="default")
    answer.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    service_arguments(answer)


def answer_request(args: argparse.Namespace, stream: bool) -> AnswerRequest:
    from serve_app.schemas import AnswerRequest

    return AnswerRequest(
        question=args.question,
        collection=args.collection,
        top_k=args.top_k,
        understand=False if args.no_understand else None,
        multi_query=True if args.multi_query else None,
        max_tokens=args.max_tokens,
        stream=stream,
    )


def print_event(event: AnswerEvent) -> None:
    """An answer's events for a terminal: the text as it is written, then its sources."""
    if isinstance(event, AnswerMetadata):
        queries = " | ".join(event.sub_queries)
        filters = f"; filters {json.dumps(event.filters)}" if event.filters else ""
        print(f"[{len(event.results)} passages for: {queries}{filters}]", file=sys.stderr)
        return
    if isinstance(event, AnswerDelta):
        print(event.text, end="", flush=True)
        return
    if isinstance(event, AnswerError):
        print(f"\nerror [{event.code}]: {event.message}", file=sys.stderr)
        return
    print()
    cited: dict[int, dict[str, Any]] = {}
    for citation in event.citations:
        cited.setdefault(citation["number"], citation)
    for number, citation in sorted(cited.items()):
        where = f" / {citation['section']}" if citation["section"] else ""
        print(f"  [{number}] {citation['doc_id']}{where}: {citation['title'][:80]}")
    for invalid in event.invalid_citations:
        print(f"  {invalid['mark']} cites no passage: {invalid['reason']}", file=sys.stderr)
    timings = event.timings_ms
    first = (
        f"first token {timings['first_token'] / 1000:.1f} s, " if "first_token" in timings else ""
    )
    print(
        f"({first}total {timings['total'] / 1000:.1f} s; "
        f"{len(event.uncited_sentences)} sentences without a citation)",
        file=sys.stderr,
    )


async def run(config: AppConfig, args: argparse.Namespace) -> int:
    if args.url:
        return await through_url(args)
    async with retrieval_service(config, with_llm=True) as service:
        request = answer_request(args, stream=not args.json)
        checked = await service.check_answer(request, ScopeKey(args.tenant, request.collection))
        if args.json:
            answer = await service.answer(checked)
            print(json.dumps(answer, indent=2))
            return 1 if answer["error"] is not None else 0
        failed = False
        async for event in service.answer_stream(checked):
            print_event(event)
            failed = failed or isinstance(event, AnswerError)
    return 1 if failed else 0


async def through_url(args: argparse.Namespace) -> int:
    async with connected(args) as api:
        if args.json:
            answer = await api.answer_json(answer_request(args, stream=False))
            print(json.dumps(answer, indent=2))
            return 1 if answer.get("error") is not None else 0  # as in process
        failed = False
        async for event in api.answer_events(answer_request(args, stream=True)):
            print_event(event)
            failed = failed or isinstance(event, AnswerError)
    return 1 if failed else 0
