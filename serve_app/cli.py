"""``serve-app``: ingest files, search, and evaluate on BEIR, all in-process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from pathlib import Path

from pydantic import ValidationError

from serve_app.config import AppConfig, load_config
from serve_app.errors import (
    ConfigError,
    InvalidInputError,
    ServeAppError,
    collection_not_found,
    describe_validation_errors,
)
from serve_app.extras import require_extras
from serve_app.schemas import FUSION_METHODS, STRATEGIES, FusionSpec, SearchRequest

log = logging.getLogger("serve_app")


def _quiet_libraries() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    # opensearch-py logs every non-2xx answer, including the expected 404 of an alias lookup.
    logging.getLogger("opensearch").setLevel(logging.ERROR)


def _progress(total: int, desc: str, unit: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=None)


# -- ingest ----------------------------------------------------------------------------------
async def _ingest(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.loaders import iter_files, load_file
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.ingest import IngestPipeline

    files = list(iter_files(args.paths))
    if not files:
        raise ServeAppError("no supported files found in the given paths")
    if args.url:
        return await _ingest_through(args, files)
    documents, errors = [], []
    for path in files:
        try:
            loaded = load_file(
                path,
                tenant_id=args.tenant,
                max_chars=config.limits.max_document_chars,
                max_bytes=config.limits.max_file_bytes,
            )
            documents.append(loaded.model_copy(update={"collection": args.collection}))
        except ServeAppError as error:
            errors.append(f"{error.code}: {error.message}")
    if errors and not args.skip_invalid:
        print("nothing was ingested; these files are invalid:", file=sys.stderr)
        for line in errors:
            print(f"  {line}", file=sys.stderr)
        print("(use --skip-invalid to ingest the valid files anyway)", file=sys.stderr)
        return 2
    for line in errors:
        print(f"skipped: {line}", file=sys.stderr)

    components = await build_components(config)
    try:
        named = args.collection != "default"
        if named and not await components.index.has_collection(args.tenant, args.collection):
            raise collection_not_found(args.collection)
        pipeline = IngestPipeline(components)
        totals = {"written": 0, "unchanged": 0, "chunks": 0, "stale": 0}
        with _progress(len(documents), "ingest", "doc") as bar:
            for start in range(0, len(documents), args.batch_size):
                batch = documents[start : start + args.batch_size]
                result = await pipeline.ingest(batch)
                totals["written"] += len(result.written)
                totals["unchanged"] += len(result.unchanged)
                totals["chunks"] += result.chunks_written
                totals["stale"] += result.stale_chunks_removed
                bar.update(len(batch))
        count = await components.index.count(args.tenant)
    finally:
        await components.close()
    print(
        f"documents: {len(documents)} ({totals['written']} written, {totals['unchanged']} unchanged)"
        f"; chunks written: {totals['chunks']}; stale chunks removed: {totals['stale']}"
        f"; chunks in index for tenant {args.tenant!r}: {count}"
    )
    return 0


async def _ingest_through(args: argparse.Namespace, files: list[Path]) -> int:
    """Upload the files to the running service at ``--url`` (it loads, chunks and encodes
    them), ``--batch-size`` files a request; the tenant is the credential's."""
    client = _client(args)
    path = (
        "/v1/documents"
        if args.collection == "default"
        else (f"/v1/collections/{args.collection}/documents")
    )
    totals = {"written": 0, "unchanged": 0, "chunks": 0}
    try:
        with _progress(len(files), "upload", "file") as bar:
            for start in range(0, len(files), args.batch_size):
                group = files[start : start + args.batch_size]
                parts = [
                    ("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in group
                ]
                answer = await client.call("POST", path, files=parts)
                totals["written"] += len(answer["written"])
                totals["unchanged"] += len(answer["unchanged"])
                totals["chunks"] += answer["chunks_written"]
                bar.update(len(group))
    finally:
        await client.close()
    print(
        f"files: {len(files)} uploaded to {args.url} ({totals['written']} written, "
        f"{totals['unchanged']} unchanged); chunks written: {totals['chunks']}"
    )
    return 0


def _client(args: argparse.Namespace):
    from serve_app.client import ServiceClient

    if getattr(args, "tenant", None) not in (None, "default"):
        raise InvalidInputError(
            "--tenant does not apply with --url: the service takes the tenant from the "
            f"credential (${args.api_key_env})"
        )
    return ServiceClient(args.url, os.environ.get(args.api_key_env), args.timeout_s)


# -- search ----------------------------------------------------------------------------------
def _format_results(response) -> str:
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


async def _search(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.api.models import SearchResponseOut
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.search import SearchPipeline
    from serve_app.stores.base import scope

    request = SearchRequest(
        query=args.query,
        top_k=args.top_k,
        strategies=args.strategies.split(",") if args.strategies else None,
        fusion=FusionSpec(method=args.fusion) if args.fusion else None,
        rerank=True if args.rerank else None,
    )
    if args.url:
        client = _client(args)
        body = request.model_dump(exclude_none=True)
        body["collection"] = args.collection
        try:
            answer = SearchResponseOut.model_validate(
                await client.call("POST", "/v1/search", json=body)
            )
        finally:
            await client.close()
        print(answer.model_dump_json(indent=2) if args.json else _format_results(answer))
        return 0
    components = await build_components(config)
    try:
        request.collection = args.collection
        response = await SearchPipeline(components).search(
            request, scope(args.tenant, args.collection)
        )
    finally:
        await components.close()
    if args.json:
        print(response.model_dump_json(indent=2))
    else:
        print(_format_results(SearchResponseOut.from_response(response)))
    return 0


# -- answer ----------------------------------------------------------------------------------
def _answer_request(args: argparse.Namespace, stream: bool):
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


def _print_event(kind: str, data: dict) -> None:
    """An answer's events for a terminal: the text as it is written, then its sources."""
    if kind == "metadata":
        queries = " | ".join(data["sub_queries"])
        filters = f"; filters {json.dumps(data['filters'])}" if data.get("filters") else ""
        print(f"[{len(data['results'])} passages for: {queries}{filters}]", file=sys.stderr)
        return
    if kind == "delta":
        print(data["text"], end="", flush=True)
        return
    if kind == "error":
        print(f"\nerror [{data['code']}]: {data['message']}", file=sys.stderr)
        return
    print()
    cited = {}
    for citation in data["citations"]:
        cited.setdefault(citation["number"], citation)
    for number, citation in sorted(cited.items()):
        where = f" / {citation['section']}" if citation["section"] else ""
        print(f"  [{number}] {citation['doc_id']}{where}: {citation['title'][:80]}")
    for invalid in data["invalid_citations"]:
        print(f"  {invalid['mark']} cites no passage: {invalid['reason']}", file=sys.stderr)
    timings = data["timings_ms"]
    first = (
        f"first token {timings['first_token'] / 1000:.1f} s, " if "first_token" in timings else ""
    )
    print(
        f"({first}total {timings['total'] / 1000:.1f} s; "
        f"{len(data['uncited_sentences'])} sentences without a citation)",
        file=sys.stderr,
    )


async def _answer(config: AppConfig, args: argparse.Namespace) -> int:
    """A cited answer, streamed as it is written; in process, or through ``--url``."""
    if args.url:
        client = _client(args)
        path = f"/v1/collections/{args.collection}/answer"
        try:
            if args.json:
                body = _answer_request(args, stream=False).model_dump(exclude_none=True)
                print(json.dumps(await client.call("POST", path, json=body), indent=2))
                return 0
            body = _answer_request(args, stream=True).model_dump(exclude_none=True)
            failed = False
            async for kind, data in client.events(path, body):
                _print_event(kind, data)
                failed = failed or kind == "error"
        finally:
            await client.close()
        return 1 if failed else 0
    from serve_app.generation import build_llm
    from serve_app.pipelines.components import build_components
    from serve_app.service import RetrievalService

    if not config.llm.enabled:
        raise InvalidInputError("answers need an LLM: set llm.enabled (config/local.yaml has one)")
    components = await build_components(config)
    llm = build_llm(config.llm)
    try:
        pipeline = RetrievalService(components, llm=llm).answer_pipeline
        request = _answer_request(args, stream=not args.json)
        if args.json:
            answer = await pipeline.answer(request, args.tenant)
            print(json.dumps(answer, indent=2))
            return 1 if answer["error"] is not None else 0
        failed = False
        async for kind, data in pipeline.stream(await pipeline.check(request, args.tenant)):
            _print_event(kind, data)
            failed = failed or kind == "error"
    finally:
        close = getattr(llm, "close", None)
        if close is not None:
            close()
        await components.close()
    return 1 if failed else 0


# -- eval ------------------------------------------------------------------------------------
async def _eval(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.evaluation.beir import load_beir
    from serve_app.evaluation.runner import (
        DEFAULT_RUN,
        default_run,
        ingest_corpus,
        retrieve_all,
        score_runs,
    )
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.ingest import IngestPipeline
    from serve_app.pipelines.search import SearchPipeline

    tenant = "eval"
    dataset = load_beir(args.beir, args.split, tenant, max_docs=args.max_docs)
    if args.max_queries:
        keep = sorted(dataset.queries)[: args.max_queries]
        dataset.queries = {q: dataset.queries[q] for q in keep}
        dataset.qrels = {q: dataset.qrels[q] for q in keep}
    config = _eval_config(config, dataset.name)
    components = await build_components(config)
    try:
        reused = ()
        if args.reuse_encodings:
            from serve_app.evaluation.encodings import reuse_document_encodings

            cache = config.data_path / "tune" / "cache"
            reused = reuse_document_encodings(components, cache)
        with _progress(len(dataset.corpus), "index corpus", "doc") as bar:
            await ingest_corpus(IngestPipeline(components), dataset, progress=bar.update)
        for encoder in reused:
            print(f"{encoder.model_id}: {encoder.hits} chunk encodings reused from the cache")
        search = SearchPipeline(components)
        strategies = search.strategies_for(args.strategies.split(",") if args.strategies else None)
        with _progress(len(dataset.queries), f"default search {args.split}", "query") as bar:
            default = await default_run(search, dataset, tenant, progress=bar.update)
        with _progress(len(dataset.queries), f"retrieve {args.split}", "query") as bar:
            runs = await retrieve_all(search, dataset, strategies, args.depth, tenant, bar.update)
        report = score_runs(search, dataset, args.split, runs, strategies, default=default)
    finally:
        await components.close()

    width = max(len(name) for name in report.results)
    print(
        f"{dataset.name} ({args.split}, {config.stores.topology}): {report.queries} queries, "
        f"{report.documents} documents"
    )
    print(
        f"default = {report.default['name']}: what /v1/search answers with no parameters "
        f"({report.default['candidates']} candidates a strategy, chunk-level fusion"
        f"{', reranked' if report.default['rerank'] else ''}); the other runs fuse "
        f"documents from {args.depth} chunks a strategy"
    )
    print(f"{'run':<{width}}  nDCG@10  Recall@100  MRR@10")
    for name, metrics in report.results.items():
        print(
            f"{name:<{width}}  {metrics['ndcg@10']:.4f}   {metrics['recall@100']:.4f}    {metrics['mrr@10']:.4f}"
        )
    single, single_score = report.best([s for s in strategies if s in report.results])
    fused_names = [n for n in report.results if "(" in n]
    line = f"default {report.results[DEFAULT_RUN]['ndcg@10']:.4f}; best single: {single} {single_score:.4f}"
    if fused_names:
        fused, fused_score = report.best(fused_names)
        line += f"; best fused: {fused} {fused_score:.4f}"
    print(line)
    runs_dir = Path(args.runs) if args.runs else config.data_path / "eval" / "runs"
    written = report.write_runs(runs_dir / f"{dataset.name}-{args.split}")
    print(f"TREC run files: {len(written)} in {runs_dir / f'{dataset.name}-{args.split}'}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2))
    return 0


async def _tune(config: AppConfig, args: argparse.Namespace) -> int:
    import yaml

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

    dataset = load_beir(args.beir, args.split, "tune")
    if args.max_queries:
        keep = sorted(dataset.queries)[: args.max_queries]
        dataset.queries = {q: dataset.queries[q] for q in keep}
        dataset.qrels = {q: dataset.qrels[q] for q in keep}
    chunkings = [Chunking(*map(int, spec.split("/"))) for spec in args.chunkings.split(",")]
    cache = config.data_path / "tune" / "cache"
    tuner = Tuner(config, dataset, chunkings, cache, GRIDS[args.grid], not args.cached_only)
    chosen = await asyncio.to_thread(tuner.run)
    payload: dict = {
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
        held_out = load_beir(args.beir, args.final_split, "tune")
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


def _eval_config(config: AppConfig, dataset: str) -> AppConfig:
    """The eval index lives apart from the service's, one per dataset (reused across runs)."""
    stores = config.stores
    eval_name = f"eval-{dataset}"
    qdrant_update: dict = {"collection": eval_name}
    if stores.qdrant.local_path and stores.qdrant.local_path != ":memory:":
        qdrant_update["local_path"] = f"eval/{dataset}-qdrant"
    stores = stores.model_copy(
        update={
            "embedded": stores.embedded.model_copy(update={"path": f"eval/{dataset}"}),
            "qdrant": stores.qdrant.model_copy(update=qdrant_update),
            "opensearch": stores.opensearch.model_copy(update={"index": eval_name}),
        }
    )
    return config.model_copy(update={"stores": stores})


async def _snapshot(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.stores.base import TOPOLOGIES
    from serve_app.stores.index import StoreIndex

    index = TOPOLOGIES.create(config.stores.topology, config)
    assert isinstance(index, StoreIndex)
    try:
        stores = index.snapshot_stores()  # ConfigError when a store cannot snapshot itself
        if args.action == "create":
            name = args.name or time.strftime("serve-app-%Y%m%dt%H%M%Sz", time.gmtime())
            result = [await store.create_snapshot(name) for store in stores]
        else:
            result = [found for store in stores for found in await store.list_snapshots()]
    finally:
        await index.close()
    print(json.dumps(result, indent=2))
    return 0


def _embedded_path(config: AppConfig, command: str) -> Path:
    if config.stores.topology != "embedded":
        raise ConfigError(
            f"{command} is for the embedded store; server stores take snapshots of their own "
            "(serve-app snapshot create|list)"
        )
    return config.data_path / config.stores.embedded.path


def _backup(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.stores.embedded_backup import backup

    print(json.dumps(backup(_embedded_path(config, "backup"), Path(args.path)), indent=2))
    return 0


def _restore(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.stores.embedded_backup import restore

    done = restore(Path(args.path), _embedded_path(config, "restore"), replace=args.replace)
    print(json.dumps(done, indent=2))
    return 0


async def _inspect(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.inspection import format_report, inspect_stores

    if args.collection and not args.tenant:
        raise InvalidInputError("--collection needs --tenant")
    if args.url:
        from serve_app.client import ServiceClient

        client = ServiceClient(args.url, os.environ.get(args.api_key_env), args.timeout_s)
        query = {k: v for k, v in (("tenant", args.tenant), ("collection", args.collection)) if v}
        try:
            report = await client.call("GET", "/v1/admin/inspect", params=query)
        finally:
            await client.close()
    else:
        report = await inspect_stores(config, args.tenant, args.collection)
    print(json.dumps(report, indent=2, default=str) if args.json else format_report(report))
    return 0


async def _validate(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.validation import format_checks, passed, report, validate

    checks = await validate(config, load=not args.no_load)
    print(json.dumps(report(checks), indent=2) if args.json else format_checks(checks))
    return 0 if passed(checks) else 1


async def _collections(config: AppConfig, args: argparse.Namespace) -> int:
    """The HTTP API's collection operations, on the index here or through ``--url``."""
    if args.action != "list" and not args.name:
        raise InvalidInputError(f"collections {args.action} needs a NAME")
    if args.url:
        calls = {
            "list": ("GET", "/v1/collections", None),
            "create": ("POST", "/v1/collections", {"name": args.name}),
            "delete": ("DELETE", f"/v1/collections/{args.name}", None),
        }
        method, path, body = calls[args.action]
        answer = await _through(args, method, path, body)
    else:
        async with _attached(config) as index:
            if args.action == "list":
                answer = {"collections": await index.list_collections(args.tenant)}
            elif args.action == "create":
                answer = await index.create_collection(args.tenant, args.name)
            else:
                removed = await index.delete_collection(args.tenant, args.name)
                answer = {"deleted": args.name, "chunks_removed": removed}
    print(json.dumps(answer, indent=2, default=str))
    return 0


async def _documents(config: AppConfig, args: argparse.Namespace) -> int:
    """A document's record (``get``) or its removal (``delete``), here or through ``--url``."""
    from serve_app.errors import NotFoundError
    from serve_app.stores.base import scope

    if args.url:
        path = f"/v1/collections/{args.collection}/documents/{args.doc_id}"
        answer = await _through(args, "GET" if args.action == "get" else "DELETE", path, None)
    else:
        key = scope(args.tenant, args.collection)
        async with _attached(config) as index:
            if args.action == "get":
                info = await index.document_info(key, args.doc_id)
                if info is None:
                    raise NotFoundError(f"document {args.doc_id!r} not found")
                answer = info.model_dump(mode="json")
            else:
                removed = await index.delete_document(key, args.doc_id)
                if removed == 0:
                    raise NotFoundError(f"document {args.doc_id!r} not found")
                answer = {"deleted": args.doc_id, "chunks_removed": removed}
    print(json.dumps(answer, indent=2, default=str))
    return 0


async def _through(args: argparse.Namespace, method: str, path: str, body: dict | None) -> dict:
    client = _client(args)
    try:
        return await client.call(method, path, **({"json": body} if body is not None else {}))
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def _attached(config: AppConfig):
    """The configured stores as they are (no model is loaded), closed after use."""
    from serve_app.stores.base import TOPOLOGIES

    index = TOPOLOGIES.create(config.stores.topology, config)
    try:
        await index.attach()
        yield index
    finally:
        await index.close()


def _mcp(config: AppConfig, args: argparse.Namespace) -> int:
    del config  # the MCP server talks to a running service over its HTTP API
    from serve_app import mcp_server

    return mcp_server.run(args)


def _mcp_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=os.environ.get("SERVE_APP_URL", "http://127.0.0.1:8000"),
        help="the service's base URL (default $SERVE_APP_URL or http://127.0.0.1:8000)",
    )
    parser.add_argument(
        "--api-key-env",
        default="SERVE_APP_API_KEY",
        help="environment variable holding the API key (default SERVE_APP_API_KEY)",
    )
    parser.add_argument("--timeout-s", type=float, default=60.0, help="bound of every tool call")
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="streamable HTTP bind address")
    parser.add_argument("--port", type=int, default=8765, help="streamable HTTP port")


def _service_arguments(parser: argparse.ArgumentParser) -> None:
    """``--url``: go through a running service's HTTP API instead of opening the index, which
    that service holds (one process owns an embedded index)."""
    parser.add_argument(
        "--url", help="a running service (e.g. http://127.0.0.1:8000): use its HTTP API"
    )
    parser.add_argument(
        "--api-key-env",
        default="SERVE_APP_API_KEY",
        help="environment variable holding the API key sent with --url",
    )
    parser.add_argument("--timeout-s", type=float, default=900.0, help="bound of each request")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="serve-app", description=__doc__)
    parser.add_argument(
        "--config", help="YAML config (default: $SERVE_APP_CONFIG or built-in defaults)"
    )
    parser.add_argument("--log-level", default="WARNING")
    sub = parser.add_subparsers(dest="command", required=True)

    ingest = sub.add_parser("ingest", help="index files or folders (txt, md, html, JATS xml, pdf)")
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument("--tenant", default="default")
    ingest.add_argument("--batch-size", type=int, default=16)
    ingest.add_argument("--skip-invalid", action="store_true")
    ingest.add_argument("--collection", default="default", help="a named collection")
    _service_arguments(ingest)

    search = sub.add_parser("search", help="hybrid search")
    search.add_argument("query")
    search.add_argument("--top-k", type=int, default=10)
    search.add_argument("--strategies", help=f"comma-separated subset of {','.join(STRATEGIES)}")
    search.add_argument("--fusion", choices=FUSION_METHODS)
    search.add_argument("--rerank", action="store_true")
    search.add_argument("--tenant", default="default")
    search.add_argument("--json", action="store_true", help="print the SearchResponse as JSON")
    search.add_argument("--collection", default="default", help="a named collection")
    _service_arguments(search)

    answer = sub.add_parser("answer", help="a cited answer from the documents (needs llm:)")
    answer.add_argument("question")
    answer.add_argument("--collection", default="default", help="a named collection")
    answer.add_argument("--top-k", type=int, help="passages given to the model")
    answer.add_argument("--multi-query", action="store_true", help="retrieve reformulations too")
    answer.add_argument("--no-understand", action="store_true", help="skip query understanding")
    answer.add_argument("--max-tokens", type=int, help="cap on the answer's tokens")
    answer.add_argument("--tenant", default="default")
    answer.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    _service_arguments(answer)

    evaluate = sub.add_parser("eval", help="nDCG@10, Recall@100, MRR@10 on a BEIR folder")
    evaluate.add_argument("--beir", required=True, help="BEIR-layout folder")
    evaluate.add_argument("--split", default="test")
    evaluate.add_argument("--json", help="write the results as JSON to this path")
    evaluate.add_argument("--depth", type=int, default=1000, help="chunks retrieved per strategy")
    evaluate.add_argument("--strategies")
    evaluate.add_argument("--max-queries", type=int)
    evaluate.add_argument("--max-docs", type=int, help="judged documents plus others up to N")
    evaluate.add_argument(
        "--runs", help="folder for the TREC run files (default: <data_dir>/eval/runs)"
    )
    evaluate.add_argument(
        "--reuse-encodings",
        action="store_true",
        help="index the chunk vectors `serve-app tune` cached for this model setting "
        "(<data_dir>/tune/cache) instead of encoding them again; queries are encoded live",
    )

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

    inspect = sub.add_parser(
        "inspect", help="what the stores hold: sizes, models, versions, payload, per collection"
    )
    inspect.add_argument("--tenant", help="only this tenant (default: every tenant)")
    inspect.add_argument("--collection", help="only this collection of --tenant")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    _service_arguments(inspect)

    validate = sub.add_parser(
        "validate",
        help="check the configuration against reality (devices, models, tokenizer, stores); "
        "exit 1 on any failure",
    )
    validate.add_argument("--json", action="store_true", help="print the checks as JSON")
    validate.add_argument(
        "--no-load",
        action="store_true",
        help="load no model: check each model's files and take the dense dimension from its "
        "config.json; device checks are reported as not run (a pod without the replicas' "
        "GPUs: the chart's pre-upgrade hook)",
    )

    _mcp_arguments(
        sub.add_parser(
            "mcp", help="MCP server (stdio or streamable HTTP) over a running service's API"
        )
    )

    collections = sub.add_parser("collections", help="list, create or delete named collections")
    collections.add_argument("action", choices=["list", "create", "delete"])
    collections.add_argument("name", nargs="?")
    collections.add_argument("--tenant", default="default")
    _service_arguments(collections)

    documents = sub.add_parser("documents", help="a document's record, or delete it")
    documents.add_argument("action", choices=["get", "delete"])
    documents.add_argument("doc_id")
    documents.add_argument("--collection", default="default")
    documents.add_argument("--tenant", default="default")
    _service_arguments(documents)

    snapshot = sub.add_parser("snapshot", help="create or list store snapshots (server stores)")
    snapshot.add_argument("action", choices=["create", "list"])
    snapshot.add_argument("--name", help="snapshot name (default: serve-app-<UTC timestamp>)")
    backup = sub.add_parser(
        "backup", help="write the embedded index to a tar file (the index must not be open)"
    )
    backup.add_argument("path", help="the backup file to create (e.g. backups/index.tar)")
    restore = sub.add_parser(
        "restore", help="restore the embedded index from a backup (the index must not be open)"
    )
    restore.add_argument("path", help="a file written by serve-app backup")
    restore.add_argument(
        "--replace", action="store_true", help="remove the index stores.embedded.path holds"
    )
    return parser


COMMANDS = {
    "ingest": _ingest,
    "search": _search,
    "answer": _answer,
    "eval": _eval,
    "tune": _tune,
    "snapshot": _snapshot,
    "backup": _backup,
    "restore": _restore,
    "inspect": _inspect,
    "validate": _validate,
    "collections": _collections,
    "documents": _documents,
    "mcp": _mcp,
}


def main(
    argv: list[str] | None = None,
    parser: argparse.ArgumentParser | None = None,
    commands: dict | None = None,
) -> int:
    """Entry point; ``parser``/``commands`` let the Serve layer add its own subcommands."""
    commands = commands or COMMANDS
    for stream in (sys.stdout, sys.stderr):  # a line is seen when it is printed, piped or not
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    args = (parser or build_parser()).parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    _quiet_libraries()
    try:
        config = load_config(args.config)
        require_extras(args.command, config, args)
        handler = commands[args.command]
        if asyncio.iscoroutinefunction(handler):
            return asyncio.run(handler(config, args))
        return handler(config, args)
    except ServeAppError as error:
        print(f"error [{error.code}]: {error.message}", file=sys.stderr)
        return 2
    except ValidationError as error:
        print(
            f"error [INVALID_INPUT]: {describe_validation_errors(error.errors())}", file=sys.stderr
        )
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
