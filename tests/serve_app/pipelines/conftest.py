import json

import pytest

from serve_app.pipelines.components import build_components
from serve_app.schemas import Document


def scifact_docs(scifact_dir, n: int) -> list[Document]:
    docs = []
    with (scifact_dir / "corpus.jsonl").open() as handle:
        for line in handle:
            row = json.loads(line)
            docs.append(Document(id=row["_id"], title=row["title"], text=row["text"]))
            if len(docs) == n:
                break
    return docs


@pytest.fixture(scope="module")
async def components(app_config_factory):
    built = await build_components(app_config_factory())
    yield built
    await built.close()


@pytest.fixture(scope="module")
def corpus(scifact_dir):
    return scifact_docs(scifact_dir, 40)
