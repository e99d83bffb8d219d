"""The MCP server end to end: the SDK's client spawns ``serve-app mcp`` as a real subprocess
(stdio), which talks over HTTP, with an API key, to the service listening on 127.0.0.1 (the
HTTP API in process with the real small models)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
import threading
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from serve_app.api.app import create_app  # noqa: E402
from serve_app.api.auth import hash_api_key  # noqa: E402
from serve_app.pipelines.components import build_components  # noqa: E402
from serve_app.ports import free_port  # noqa: E402
from serve_app.service import RetrievalService  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    {
        "id": "plasmids",
        "title": "Plasmids",
        "text": "Plasmids carry antibiotic resistance genes between bacteria by conjugation.",
        "metadata": {"year": 2021},
    },
    {
        "id": "vectors",
        "title": "Vector search",
        "text": "Qdrant stores dense embedding vectors and searches them by cosine similarity.",
    },
]


@pytest.fixture(scope="module")
def service_url(app_config_factory):
    """The HTTP API on a real port, in a thread with its own event loop."""
    import uvicorn

    keys = [{"name": "a", "sha256": hash_api_key("key-a"), "tenant_id": "tenant-a"}]
    config = app_config_factory(api={"auth": {"api_keys": keys}})
    port = free_port()
    box: dict = {}
    started = threading.Event()

    async def serve() -> None:
        from serve_app.generation import build_llm

        components = await build_components(config)
        llm = build_llm(config.llm)  # SmolLM2: the answer tool and `serve-app answer --url`
        app = create_app(RetrievalService(components, llm=llm))
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        box["server"] = server
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        started.set()
        await task
        await components.close()
        llm.close()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
    thread.start()
    assert started.wait(120), "the service did not start"
    yield f"http://127.0.0.1:{port}"
    box["server"].should_exit = True
    thread.join(30)


def server_params(url: str, key: str = "key-a", *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "serve_app.cli", "mcp", "--url", url, "--timeout-s", "60", *extra],
        env={
            "SERVE_APP_API_KEY": key,
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(ROOT),
        },
        cwd=str(ROOT),
    )


def payload(result) -> dict:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def error_text(result) -> str:
    assert result.is_error
    return " ".join(getattr(part, "text", "") for part in result.content)


async def test_an_mcp_session_ingests_and_searches_with_provenance(service_url):
    async with asyncio.timeout(240):
        async with (
            stdio_client(server_params(service_url)) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(tools) == {
                "ingest",
                "search",
                "inspect",
                "list_collections",
                "create_collection",
                "delete_collection",
                "list_documents",
                "get_document",
                "delete_document",
                "answer",
            }
            assert "query" in tools["search"].input_schema["properties"]

            ingested = payload(await session.call_tool("ingest", {"documents": DOCS}))
            assert sorted(ingested["written"]) == ["plasmids", "vectors"]

            found = payload(
                await session.call_tool(
                    "search", {"query": "antibiotic resistance plasmids", "top_k": 5}
                )
            )
            first = found["results"][0]
            assert first["doc_id"] == "plasmids" and first["title"] == "Plasmids"
            text = DOCS[0]["text"]
            assert first["text"] == text[first["char_start"] : first["char_end"]]
            assert first["chunk_id"] and first["metadata"] == {"year": 2021}
            assert set(first["scores"]) == {"bm25", "splade", "dense"}
            assert {r["doc_id"] for r in found["results"]} == {"plasmids", "vectors"}

            dense = payload(
                await session.call_tool(
                    "search",
                    {"query": "cosine similarity of embeddings", "strategies": ["dense"]},
                )
            )
            assert dense["strategies"] == ["dense"]
            assert dense["results"][0]["doc_id"] == "vectors"

            answered = payload(
                await session.call_tool(
                    "answer",
                    {
                        "question": "What carries resistance genes?",
                        "understand": False,
                        "max_tokens": 24,
                    },
                )
            )
            assert "error" not in answered and answered["answer"]
            assert answered["sub_queries"] == ["What carries resistance genes?"]
            passages = answered["passages"]
            assert [p["rank"] for p in passages] == list(range(1, len(passages) + 1))
            assert passages[0]["doc_id"] == "plasmids" and passages[0]["found_by"]
            for citation in answered["citations"]:
                assert citation["doc_id"] == passages[citation["number"] - 1]["doc_id"]

            listed = payload(await session.call_tool("list_collections", {}))
            assert [c["name"] for c in listed["collections"]] == ["default"]
            inspected = payload(await session.call_tool("inspect", {}))
            assert set(inspected["documents"].values()) == {2}

            missing = await session.call_tool("search", {"query": "plasmids", "collection": "nope"})
            message = error_text(missing)
            assert "NOT_FOUND" in message and "collection 'nope' not found" in message
            assert "request id mcp-" in message
            bad = await session.call_tool("ingest", {"collection": "Bad Name", "documents": DOCS})
            assert "INVALID_INPUT" in error_text(bad)

            # What the "not found" error tells the agent to do, it can do.
            created = payload(await session.call_tool("create_collection", {"name": "nope"}))
            assert created["name"] == "nope"
            await session.call_tool("ingest", {"collection": "nope", "documents": DOCS[:1]})
            got = payload(
                await session.call_tool(
                    "get_document", {"doc_id": "plasmids", "collection": "nope"}
                )
            )
            assert got["collection"] == "nope" and got["chunk_ids"]
            removed = payload(
                await session.call_tool(
                    "delete_document", {"doc_id": "plasmids", "collection": "nope"}
                )
            )
            assert removed["deleted"] == "plasmids"
            dropped = payload(await session.call_tool("delete_collection", {"name": "nope"}))
            assert dropped["deleted"] == "nope"


async def test_a_wrong_api_key_is_a_clear_tool_error(service_url):
    async with asyncio.timeout(120):
        async with (
            stdio_client(server_params(service_url, key="wrong")) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            refused = await session.call_tool("list_collections", {})
            assert "UNAUTHENTICATED" in error_text(refused)


def test_the_cli_answers_through_a_running_service(service_url):
    """`serve-app answer --url`: the answer streams to stdout, its passages and sources to
    stderr; an error of the service is the CLI's error line."""
    import subprocess

    import httpx

    indexed = httpx.post(
        f"{service_url}/v1/documents", json={"documents": DOCS},
        headers={"X-API-Key": "key-a"}, timeout=120,
    )  # fmt: skip
    assert indexed.status_code == 200, indexed.text  # unchanged when the MCP test ran first
    env = {"SERVE_APP_API_KEY": "key-a", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "serve_app.cli", "answer", "--url", service_url]
    done = subprocess.run(
        [*command, "What carries resistance genes?", "--no-understand", "--max-tokens", "24"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert "passages for: What carries resistance genes?" in done.stderr
    assert "first token" in done.stderr
    missing = subprocess.run(
        [*command, "anything?", "--collection", "nope"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert missing.returncode == 2 and "error [NOT_FOUND]" in missing.stderr


async def test_search_and_answer_agree_across_http_cli_and_mcp(service_url):
    """One application service behind every door: a search and an answer's passages are the
    same through the HTTP API, `serve-app ... --url` and the MCP server."""
    import subprocess

    import httpx

    headers = {"X-API-Key": "key-a"}
    async with httpx.AsyncClient(base_url=service_url, headers=headers, timeout=120) as http:
        indexed = await http.post("/v1/documents", json={"documents": DOCS})
        assert indexed.status_code == 200, indexed.text
        query, question = "antibiotic resistance plasmids", "What carries resistance genes?"
        searched = (await http.post("/v1/search", json={"query": query, "top_k": 5})).json()
        ask = {"question": question, "understand": False, "max_tokens": 8, "stream": False}
        answered = (await http.post("/v1/answer", json=ask)).json()
    env = {"SERVE_APP_API_KEY": "key-a", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}

    def cli(*args: str) -> dict:
        command = [sys.executable, "-m", "serve_app.cli", *args, "--url", service_url, "--json"]
        done = subprocess.run(
            command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    cli_searched = cli("search", query, "--top-k", "5")
    cli_answered = cli("answer", question, "--no-understand", "--max-tokens", "8")
    async with asyncio.timeout(240):
        async with (
            stdio_client(server_params(service_url)) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            mcp_searched = payload(await session.call_tool("search", {"query": query, "top_k": 5}))
            tool_args = {"question": question, "understand": False, "max_tokens": 8}
            mcp_answered = payload(await session.call_tool("answer", tool_args))

    def hits(found: dict) -> list[tuple[str, str]]:
        return [(r["doc_id"], r["chunk_id"]) for r in found["results"]]

    assert hits(searched) and hits(searched) == hits(cli_searched) == hits(mcp_searched)
    passages = [r["doc_id"] for r in answered["results"]]
    assert passages and passages == [r["doc_id"] for r in cli_answered["results"]]
    assert passages == [p["doc_id"] for p in mcp_answered["passages"]]


async def test_collections_and_uploads_agree_across_http_cli_and_mcp(
    service_url, app_config_factory, tmp_path, monkeypatch
):
    """Every remote door goes through the one client (``serve_app.client.ServiceClient``):
    the same file uploaded into a collection each door created gives the same record (hash,
    chunks, title), document list and search, whichever door wrote it, read it or deleted
    it. The CLI in process (its own index, the same models) answers in the same shapes with
    the same values: the document list, the record, the search and an answer's passages."""
    import httpx
    import yaml

    local = tmp_path / "local.yaml"  # the service's models, an index of its own
    local.write_text(yaml.safe_dump(app_config_factory().model_dump(mode="json")))

    note = tmp_path / "conjugation.md"
    note.write_text("# Conjugation\n\nPlasmids move resistance genes between bacteria.\n")
    headers = {"X-API-Key": "key-a"}
    monkeypatch.setenv("SERVE_APP_API_KEY", "key-a")

    def run_cli(*args: str) -> str:
        """``serve-app ARGS`` in this process, in a thread with its own event loop (the
        entry point as a process is the search-and-answer test's)."""
        from serve_app.cli import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(list(args)) == 0, args
        return out.getvalue()

    async def cli(*args: str) -> str:
        """``serve-app ARGS --url``: the remote door."""
        return await asyncio.to_thread(run_cli, *args, "--url", service_url)

    def in_process(*args: str) -> dict:
        """``serve-app --config local.yaml ARGS``: the CLI's in-process door."""
        text = run_cli("--config", str(local), *args)
        return json.loads(text) if text.lstrip().startswith("{") else {}

    ask = {"question": "What moves resistance genes?", "understand": False, "max_tokens": 8}

    def local_door_run() -> dict:
        scoped = ("--tenant", "tenant-a", "--collection", "door-local")
        in_process("ingest", str(note), "--tenant", "tenant-a")  # creates the index here
        in_process("collections", "create", "door-local", "--tenant", "tenant-a")
        in_process("ingest", str(note), *scoped)
        door = {
            "search": in_process("search", "plasmids genes", "--json", *scoped),
            "list": in_process("documents", "list", *scoped),
        }
        door["get"] = in_process("documents", "get", door["list"]["documents"][0]["id"], *scoped)
        door["answer"] = in_process(
            "answer", ask["question"], "--no-understand", "--max-tokens", "8", "--json", *scoped
        )
        return door

    local_door = await asyncio.to_thread(local_door_run)
    async with httpx.AsyncClient(base_url=service_url, headers=headers, timeout=120) as http:
        assert (await http.post("/v1/collections", json={"name": "door-http"})).status_code == 201
        files = {"files": (note.name, note.read_bytes(), "text/markdown")}
        uploaded = await http.post("/v1/collections/door-http/documents", files=files)
        assert uploaded.status_code == 200, uploaded.text
        await cli("collections", "create", "door-cli")
        await cli("ingest", str(note), "--collection", "door-cli")
        searched = {
            name: [
                (r["doc_id"], r["text"])
                for r in (
                    await http.post(
                        f"/v1/collections/{name}/search", json={"query": "plasmids genes"}
                    )
                ).json()["results"]
            ]
            for name in ("door-http", "door-cli")
        }
        http_search = (
            await http.post("/v1/collections/door-http/search", json={"query": "plasmids genes"})
        ).json()
        http_answer = (
            await http.post("/v1/collections/door-http/answer", json={**ask, "stream": False})
        ).json()
        async with asyncio.timeout(240):
            async with (
                stdio_client(server_params(service_url, "key-a", "--ingest-root", str(tmp_path)))
                as (read, write),
                ClientSession(read, write) as session,
            ):  # fmt: skip
                await session.initialize()
                await session.call_tool("create_collection", {"name": "door-mcp"})
                written = payload(
                    await session.call_tool(
                        "ingest", {"collection": "door-mcp", "paths": [str(note)]}
                    )
                )
                doc_id = written["written"][0]
                by_http = (await http.get(f"/v1/collections/door-cli/documents/{doc_id}")).json()
                by_mcp = payload(
                    await session.call_tool(
                        "get_document", {"doc_id": doc_id, "collection": "door-http"}
                    )
                )
                listed = payload(await session.call_tool("list_collections", {}))
                pages = {
                    "mcp": payload(
                        await session.call_tool("list_documents", {"collection": "door-cli"})
                    ),
                    "http": (await http.get("/v1/collections/door-cli/documents")).json(),
                    "cli": json.loads(await cli("documents", "list", "--collection", "door-cli")),
                }
                dropped = payload(
                    await session.call_tool("delete_collection", {"name": "door-cli"})
                )
        by_cli = json.loads(await cli("documents", "get", doc_id, "--collection", "door-mcp"))
        await cli("collections", "delete", "door-mcp")
        await http.delete("/v1/collections/door-http")
        left = [c["name"] for c in (await http.get("/v1/collections")).json()["collections"]]

    def record(info: dict) -> tuple:
        return info["id"], info["title"], info["content_hash"], len(info["chunk_ids"])

    assert {"door-http", "door-cli", "door-mcp"} <= {c["name"] for c in listed["collections"]}
    assert listed["tenant"] == "tenant-a" and listed["principal"] == "key:a"
    assert by_mcp["collection"] == "door-http" and by_cli["collection"] == "door-mcp"
    assert record(by_mcp) == record(by_cli) == record(by_http)
    assert pages["mcp"] == pages["http"] == pages["cli"]
    assert [d["id"] for d in pages["http"]["documents"]] == [doc_id]
    # In process: the same shapes, and the same values where the scope is not part of them
    # (stored chunk ids and the registry's timestamps are).
    assert local_door["list"]["documents"] == pages["http"]["documents"]
    assert record(local_door["get"]) == record(by_http)
    local_hits = [(r["doc_id"], r["text"]) for r in local_door["search"]["results"]]
    assert local_hits == searched["door-http"]
    assert set(local_door["search"]) == set(http_search)
    answered = [(r["doc_id"], r["text"]) for r in http_answer["results"]]
    assert answered and [(r["doc_id"], r["text"]) for r in local_door["answer"]["results"]] == answered
    assert set(local_door["answer"]) == set(http_answer)
    assert searched["door-http"] and searched["door-http"] == searched["door-cli"]
    assert dropped["deleted"] == "door-cli" and dropped["chunks_removed"] >= 1
    assert not {"door-http", "door-cli", "door-mcp"} & set(left)


async def test_an_agent_reaches_no_other_route_and_no_file_outside_its_roots(service_url, tmp_path):
    """What a prompt-injected agent could make the tools do, through the official client: a
    ``doc_id`` of ``../../victim`` deleted the collection ``victim`` (httpx resolves dot
    segments), a ``collection`` with ``?tenant=`` went to another route, and ``ingest(paths)``
    read any file the process could (then searchable)."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "notes.txt").write_text("Root notes about conjugation.")
    (outside / "secret.txt").write_text("the outside secret")
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "big.txt").write_text("x" * 2_000)
    params = server_params(
        service_url, "key-a", "--ingest-root", str(root), "--max-file-bytes", "1000"
    )
    async with asyncio.timeout(180):
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            payload(await session.call_tool("create_collection", {"name": "victim"}))
            walked = await session.call_tool("delete_document", {"doc_id": "../../victim"})
            assert "NOT_FOUND" in error_text(walked)  # one segment: a document id, not found
            dots = await session.call_tool("delete_document", {"doc_id": ".."})
            assert "INVALID_INPUT" in error_text(dots)
            listed = payload(await session.call_tool("list_collections", {}))
            assert "victim" in [c["name"] for c in listed["collections"]]
            sideways = await session.call_tool(
                "inspect", {"collection": "../admin/inspect?tenant=tenant-b"}
            )
            assert "INVALID_INPUT" in error_text(sideways) or "NOT_FOUND" in error_text(sideways)
            assert "tenant-b" not in error_text(sideways).replace("?tenant=tenant-b", "")

            for name, refusal in (
                (outside / "secret.txt", "outside the ingest roots"),
                (root / "link.txt", "outside the ingest roots"),  # the link is resolved
                (root / ".." / "outside" / "secret.txt", "outside the ingest roots"),
                (root / "big.txt", "PAYLOAD_TOO_LARGE"),
            ):
                refused = await session.call_tool(
                    "ingest", {"collection": "victim", "paths": [str(name)]}
                )
                assert refusal in error_text(refused), name
            written = payload(
                await session.call_tool(
                    "ingest", {"collection": "victim", "paths": [str(root / "notes.txt")]}
                )
            )
            assert written["written"] == ["notes"]
            found = payload(
                await session.call_tool(
                    "search", {"query": "outside secret", "collection": "victim"}
                )
            )
            assert {r["doc_id"] for r in found["results"]} == {"notes"}
            payload(await session.call_tool("delete_collection", {"name": "victim"}))


def mcp_over_http(service_url: str, port: int, host: str, token: str | None):
    import subprocess

    env = {"SERVE_APP_API_KEY": "key-a", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    if token:
        env["SERVE_APP_MCP_TOKEN"] = token
    command = [
        sys.executable, "-m", "serve_app.cli", "mcp", "--url", service_url,
        "--transport", "streamable-http", "--host", host, "--port", str(port),
    ]  # fmt: skip
    return subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_mcp_over_http_refuses_a_non_loopback_bind_without_a_token(service_url):
    server = mcp_over_http(service_url, free_port(), "0.0.0.0", None)
    _, stderr = server.communicate(timeout=60)
    assert server.returncode == 2 and "without a bearer token" in stderr


async def test_mcp_over_http_needs_the_bearer_token(service_url):
    import httpx
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    port = free_port()
    server = mcp_over_http(service_url, port, "127.0.0.1", "the-token")
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with asyncio.timeout(120):
            while True:  # the server starts in a second or two
                try:
                    refused = httpx.post(url, json={}, timeout=5)
                    break
                except httpx.TransportError:
                    assert server.poll() is None, server.communicate()[1]
                    await asyncio.sleep(0.3)
            assert refused.status_code == 401
            wrong = create_mcp_http_client(headers={"Authorization": "Bearer nope"})
            assert (await wrong.post(url, json={})).status_code == 401
            await wrong.aclose()
            client = create_mcp_http_client(headers={"Authorization": "Bearer the-token"})
            async with (
                client,
                streamable_http_client(url, http_client=client) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                listed = payload(await session.call_tool("list_collections", {}))
                assert "default" in [c["name"] for c in listed["collections"]]
                paths = await session.call_tool("ingest", {"paths": [str(ROOT / "README.md")]})
                assert "none configured" in error_text(paths)  # no root over HTTP by default
    finally:
        server.terminate()
        server.wait(30)
