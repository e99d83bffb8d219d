"""`serve-app validate` checks the LLM too: its pinned GGUF (and, loading, that it writes),
a file that is not the pinned one, and a GPU device that is not there."""

import pytest

from serve_app.generation.model_files import CATALOG, part_path
from serve_app.preflight import validate

pytestmark = pytest.mark.asyncio(loop_scope="session")
SMOL = CATALOG["smollm2-135m-instruct-q4_1"]


def llm_checks(checks):
    return [c for c in checks if c.field.startswith("llm.")]


async def test_the_pinned_model_passes_and_writes(app_config_factory):
    checks = await validate(app_config_factory(), load=True)
    [model] = [c for c in llm_checks(checks) if c.field == "llm.model"]
    assert model.ok is True and "pinned SHA-256" in model.message and "wrote" in model.message
    [device] = [c for c in llm_checks(checks) if c.field == "llm.device"]
    assert device.ok is True


async def test_another_file_or_a_missing_gpu_fails_naming_the_field(app_config_factory, tmp_path):
    changed = tmp_path / "model.gguf"
    data = bytearray(part_path(SMOL.parts[0]).read_bytes())
    data[100] ^= 1
    changed.write_bytes(bytes(data))
    config = app_config_factory(
        llm={"model": str(changed), "sha256": SMOL.sha256, "device": "cuda"}
    )
    checks = await validate(config, load=False)
    [model] = [c for c in llm_checks(checks) if c.field == "llm.model"]
    assert model.ok is False and "not the pinned" in model.message
    [device] = [c for c in llm_checks(checks) if c.field == "llm.device"]
    assert device.ok is None  # --no-load: reported, not run
    checks = await validate(config, load=True)
    [device] = [c for c in llm_checks(checks) if c.field == "llm.device"]
    assert device.ok is False and "set llm.device: cpu" in device.message
