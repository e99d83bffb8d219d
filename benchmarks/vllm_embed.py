"""Embedding throughput of a Qwen3-Embedding-0.6B-shaped model: vLLM vs transformers on this
CPU, and what token-budget batching gains over fixed-count batching.

    .venv-vllm/bin/python benchmarks/vllm_embed.py [--passages 1000] [--max-length 512]

The model has Qwen3-Embedding-0.6B's shapes (28 layers, hidden 1024, 16 heads / 8 KV heads,
head_dim 128, intermediate 3072, the real Qwen3 tokenizer) and random weights: good for speed,
meaningless for quality. Passages are the first SciFact abstracts (title + abstract).

1. vLLM (``VllmDenseEncoder``, bf16) vs transformers (``TransformersDenseEncoder``, bf16) on
   the same passages and token ids; passages/s and tokens/s, after one warm-up call.
2. Batching, with the transformers backend: token-budget batches (longest first, a budget of
   ``--batch-tokens`` padded tokens) vs fixed-count batches of ``--batch-size`` in input order.
   The padding ratio is computed for all passages (no model needed); the time on ``--passages``.

Writes ``benchmarks/results/vllm_embed.json`` and ``.md``. Needs .venv-vllm (scripts/setup_vllm.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from serve_app.config import DenseConfig  # noqa: E402
from serve_app.encoders.batching import padding_ratio, token_budget_batches  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
TOKENIZER = ROOT / ".cache" / "assets" / "qwen3-tokenizer"
SCIFACT = ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl"
# Qwen3-Embedding-0.6B's shapes; "tiny" is for the smoke test only.
SHAPES = {
    "0.6b": {
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
    },
}
TASK = "Given a scientific claim, retrieve documents that support or refute the claim"


def build_model(path: Path, shape: str) -> None:
    """A random Qwen3 with Qwen3-Embedding-0.6B's configuration, saved in bf16 once."""
    if (path / "config.json").is_file():
        return
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3Model

    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER))
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        **SHAPES[shape],
        max_position_embeddings=32768,
        rope_theta=1_000_000,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen3Model(config).to(torch.bfloat16).eval()
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def passages(n: int) -> list[str]:
    out = []
    with SCIFACT.open() as handle:
        for line in handle:
            row = json.loads(line)
            out.append(f"{row['title']}\n{row['text']}")
            if len(out) == n:
                break
    return out


def dense_config(backend: str, args: argparse.Namespace) -> DenseConfig:
    return DenseConfig(
        backend=backend,
        model=str(args.model_dir),
        pooling="last_token",
        append_token="<|endoftext|>",
        query_instruction=TASK,
        max_length=args.max_length,
        batch_size=args.batch_size,
        max_batch_tokens=args.batch_tokens,
        dtype="bfloat16",
        device="cpu",
        vllm={"cpu_kvcache_gib": 2},
    )


def timed(fn, *call_args) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn(*call_args)
    return time.perf_counter() - start, result


def rate(n: int, tokens: int, seconds: float) -> dict:
    return {
        "seconds": round(seconds, 2),
        "passages_per_s": round(n / seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--passages", type=int, default=1000)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--padding-passages", type=int, default=1000)
    parser.add_argument("--skip", choices=["vllm", "transformers", "batching"], action="append")
    parser.add_argument("--out", type=Path, default=RESULTS / "vllm_embed")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="0.6b")
    parser.add_argument("--model-dir", type=Path, help="where the random model is built once")
    args = parser.parse_args(argv)
    args.model_dir = args.model_dir or RESULTS / "tmp" / f"qwen3-embedding-{args.shape}-shape"
    skip = set(args.skip or [])

    import torch
    from transformers import AutoTokenizer

    started = time.perf_counter()
    build_model(args.model_dir, args.shape)
    print(f"model ready in {time.perf_counter() - started:.0f}s at {args.model_dir}", flush=True)
    from serve_app.encoders.dense_inputs import DenseInputs

    texts = passages(args.passages)
    inputs = DenseInputs(
        dense_config("transformers", args), AutoTokenizer.from_pretrained(str(args.model_dir))
    )
    ids = inputs.token_ids(texts)
    tokens = sum(len(x) for x in ids)
    warm = texts[:2]

    # Padding of both batchings over all --padding-passages (token counts only).
    all_lengths = [len(x) for x in inputs.token_ids(passages(args.padding_passages))]
    budget_all = token_budget_batches(all_lengths, args.batch_tokens, args.batch_size)
    fixed_all = [
        list(range(i, min(i + args.batch_size, len(all_lengths))))
        for i in range(0, len(all_lengths), args.batch_size)
    ]
    report: dict = {
        "model": f"random Qwen3, shape {args.shape} {SHAPES[args.shape]}, bf16, real Qwen3 tokenizer",
        "passages": len(texts),
        "tokens": tokens,
        "mean_tokens": round(tokens / len(texts), 1),
        "max_length": args.max_length,
        "cpu": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}",
        "torch_threads": torch.get_num_threads(),
        "padding": {
            "passages": len(all_lengths),
            "token_budget": round(padding_ratio(all_lengths, budget_all), 3),
            "fixed_count": round(padding_ratio(all_lengths, fixed_all), 3),
            "computed_tokens_token_budget": sum(
                len(b) * max(all_lengths[i] for i in b) for b in budget_all
            ),
            "computed_tokens_fixed_count": sum(
                len(b) * max(all_lengths[i] for i in b) for b in fixed_all
            ),
        },
    }
    print(json.dumps(report["padding"]), flush=True)

    if "vllm" not in skip:
        from serve_app.encoders.dense_vllm import VllmDenseEncoder

        load_s, encoder = timed(VllmDenseEncoder, dense_config("vllm", args))
        encoder.encode(warm)
        seconds, vectors_vllm = timed(encoder.encode, texts)
        report["vllm"] = {"load_s": round(load_s, 1), **rate(len(texts), tokens, seconds)}
        print("vllm", report["vllm"], flush=True)
        encoder.close()
        del encoder

    if "transformers" not in skip or "batching" not in skip:
        from serve_app.encoders.dense_transformers import TransformersDenseEncoder

        load_s, encoder = timed(TransformersDenseEncoder, dense_config("transformers", args))
        encoder.encode(warm)
        lengths = [len(x) for x in ids]
        budget = token_budget_batches(lengths, args.batch_tokens, args.batch_size)
        seconds, vectors_tf = timed(encoder.encode_token_ids, ids, budget)
        report["transformers"] = {"load_s": round(load_s, 1), **rate(len(texts), tokens, seconds)}
        print("transformers (token budget)", report["transformers"], flush=True)
        if "vllm" in report:
            import numpy as np

            cos = (vectors_vllm * vectors_tf).sum(axis=1)
            report["vllm_vs_transformers_min_cosine_bf16"] = round(float(np.min(cos)), 5)
            report["vllm_speedup"] = round(
                report["transformers"]["seconds"] / report["vllm"]["seconds"], 2
            )
        if "batching" not in skip:
            fixed = [
                list(range(i, min(i + args.batch_size, len(ids))))
                for i in range(0, len(ids), args.batch_size)
            ]
            fixed_s, _ = timed(encoder.encode_token_ids, ids, fixed)
            report["batching"] = {
                "token_budget": {
                    "batches": len(budget),
                    "padding_ratio": round(padding_ratio(lengths, budget), 3),
                    **rate(len(texts), tokens, seconds),
                },
                "fixed_count": {
                    "batches": len(fixed),
                    "padding_ratio": round(padding_ratio(lengths, fixed), 3),
                    **rate(len(texts), tokens, fixed_s),
                },
                "speedup": round(fixed_s / seconds, 2),
            }
            print("batching", report["batching"], flush=True)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report, args))
    print(f"wrote {args.out}.json and .md", flush=True)
    return 0


def markdown(report: dict, args: argparse.Namespace) -> str:
    lines = [
        "# Embedding throughput: vLLM vs transformers (CPU)",
        "",
        f"{report['model']}; {report['passages']} SciFact passages, {report['tokens']} tokens "
        f"(mean {report['mean_tokens']}, truncated at {report['max_length']}); {report['cpu']}.",
        "",
        "| backend | passages/s | tokens/s | seconds | load s |",
        "|---|---|---|---|---|",
    ]
    for name in ("vllm", "transformers"):
        if name in report:
            r = report[name]
            lines.append(
                f"| {name} | {r['passages_per_s']} | {r['tokens_per_s']} | {r['seconds']} | "
                f"{r['load_s']} |"
            )
    if "vllm_speedup" in report:
        lines += [
            "",
            f"vLLM speed-up: {report['vllm_speedup']}x; min cosine between the two backends' "
            f"bf16 vectors: {report['vllm_vs_transformers_min_cosine_bf16']}.",
        ]
    pad = report["padding"]
    lines += [
        "",
        f"## Batching (transformers, batch size {args.batch_size}, budget {args.batch_tokens} tokens)",
        "",
        f"Padding over {pad['passages']} passages: token-budget {pad['token_budget']} "
        f"({pad['computed_tokens_token_budget']} positions computed) vs fixed-count "
        f"{pad['fixed_count']} ({pad['computed_tokens_fixed_count']}).",
    ]
    if "batching" in report:
        b = report["batching"]
        lines += [
            "",
            "| batching | batches | padding | passages/s | seconds |",
            "|---|---|---|---|---|",
        ]
        for name in ("token_budget", "fixed_count"):
            r = b[name]
            lines.append(
                f"| {name} | {r['batches']} | {r['padding_ratio']} | {r['passages_per_s']} | "
                f"{r['seconds']} |"
            )
        lines += ["", f"Token-budget batching speed-up: {b['speedup']}x."]
    lines += [
        "",
        f"Command: `.venv-vllm/bin/python benchmarks/vllm_embed.py --passages {args.passages} "
        f"--max-length {args.max_length} --batch-size {args.batch_size} "
        f"--batch-tokens {args.batch_tokens}`",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
