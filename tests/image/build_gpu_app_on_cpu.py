"""Run by the clean venv's Python (tests/image/test_image_install.py), not by pytest.

    python build_gpu_app_on_cpu.py CONFIG_JSON IMPORT_PATH VENV

1. Builds the Serve application the way the Serve controller builds a RayService's
   serveConfigV2 entry: it imports the import path, calls the builder with
   ``args={"config": ...}``, then runs Ray's build_app and its single-ingress check. Building
   binds the deployment graph and loads no model.
2. Runs the model replicas' constructors without Ray, as each replica does at start: chunker
   (tokenizer and spaCy), dense, SPLADE, reranker and store (qdrant-edge). Each one then
   answers a small call on the CPU.
Prints one JSON line, prefixed RESULT.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import warnings
from pathlib import Path


def main() -> None:
    config_path, import_path, venv = sys.argv[1:4]
    config = json.loads(Path(config_path).read_text())

    import deployments
    import serve_app

    for module in (deployments, serve_app):
        where = Path(module.__file__).resolve()
        assert where.is_relative_to(Path(venv).resolve()), f"{module.__name__} from {where}"
    # --without-gpu leaves out the gpu extra and nothing else.
    assert importlib.util.find_spec("vllm") is None, (
        "vllm is installed: the gpu extra was not skipped"
    )

    from ray._common.utils import import_attr
    from ray.serve import Application
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary
    from ray.serve._private.build_app import build_app

    app = call_user_app_builder_with_args_if_necessary(import_attr(import_path), {"config": config})
    assert isinstance(app, Application), type(app)
    built = build_app(app, name=config["serve"]["app_name"])
    built.validate_single_fastapi_ingress()
    graph = {d.name: d.ray_actor_options for d in built.deployments}

    replicas = asyncio.run(start_replicas(config))
    import torch

    print(
        "RESULT "
        + json.dumps(
            {
                "ingress": built.ingress_deployment_name,
                "graph": graph,
                "replicas": replicas,
                "torch": torch.__version__,
                "torch_cuda": torch.version.cuda,
            }
        )
    )


async def start_replicas(data: dict) -> dict:
    from deployments.replicas.chunker import ChunkerDeployment
    from deployments.replicas.dense import DenseDeployment
    from deployments.replicas.reranker import RerankerDeployment
    from deployments.replicas.splade import SpladeDeployment
    from deployments.replicas.store import StoreDeployment
    from deployments.settings import service_config
    from serve_app.pipelines.components import index_models
    from serve_app.schemas import Document

    config = service_config(data, "test")  # parsed once, as the graph builder does
    dense = DenseDeployment.func_or_class(config)
    info = dense.info()
    vectors, _ = await dense.embed("query", ["which cells respond to interferon?"])
    splade = SpladeDeployment.func_or_class(config)
    sparse, _ = await splade.encode("query", ["which cells respond to interferon?"])
    reranker = RerankerDeployment.func_or_class(config)
    [(scores, _)] = await reranker.score_many([("interferon", ["Cells respond.", "Other text."])])
    chunker = ChunkerDeployment.func_or_class(config)
    document = Document(
        id="d1", text="Introduction\n\nInterferon acts on cells. It binds receptors."
    )
    [chunks] = await chunker.chunk_many([document])

    # The store's constructor is async (Ray awaits it the same way).
    models = index_models(config, info.model_id, info.dim)
    store = StoreDeployment.func_or_class.__new__(StoreDeployment.func_or_class)
    await store.__init__(config, models.as_dict())
    await store.check_health()
    await store.__del__()  # closes the index, as Ray does at the replica's shutdown
    # Ray awaits the async __del__; the interpreter's own call of it at exit would only warn.
    warnings.filterwarnings("ignore", message="coroutine 'StoreDeployment.__del__'")
    for replica in (dense, splade, reranker):
        replica.__del__()
    return {
        "dense": {
            "backend": info.backend,
            "dim": info.dim,
            "shape": list(vectors.shape),
        },
        "splade_terms": len(sparse[0].indices),
        "reranker_scores": len(scores),
        "chunks": len(chunks),
        "store": store.info().strategies,
    }


if __name__ == "__main__":
    main()
