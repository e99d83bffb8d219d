"""The tokenizer and chat template of a GGUF model, read from the file's own metadata, so the
llama.cpp backend can count a prompt's tokens (the prompt budget, passage packing) and list
the strings llama.cpp reads as control tokens, without xllamacpp (which tokenizes only inside
a generation).

The rules are llama.cpp's (``llama-vocab.cpp``): a byte-level BPE whose pre-tokenizer is the
one named by ``tokenizer.ggml.pre``; with special tokens parsed, which is how llama.cpp's
server reads a templated chat prompt, every CONTROL and USER_DEFINED token's text becomes
that token. ``tests/serve_app/generation/test_prompt_safety.py`` checks the counts against
the engine's own.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from serve_app.errors import ConfigError

# GGUF metadata value types (gguf.h).
_SCALARS = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
    10: "<Q", 11: "<q", 12: "<d",
}  # fmt: skip
_STRING, _ARRAY = 8, 9
_CONTROL, _USER_DEFINED = 3, 4
_WANTED = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.chat_template",
)

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
# llama.cpp's pre-tokenizer expressions by ``tokenizer.ggml.pre``, applied one after another.
PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    "qwen2": (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
        r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)",
    ),
    "smollm": (r"\p{N}", _GPT2),
    "gpt-2": (_GPT2,),
}


def _read(handle: BinaryIO, fmt: str) -> Any:
    return struct.unpack(fmt, handle.read(struct.calcsize(fmt)))[0]


def _string(handle: BinaryIO) -> str:
    return handle.read(_read(handle, "<Q")).decode("utf-8", errors="replace")


def _value(handle: BinaryIO, kind: int, keep: bool) -> Any:
    if kind == _STRING:
        return _string(handle)
    if kind == _ARRAY:
        item, count = _read(handle, "<I"), _read(handle, "<Q")
        if not keep and item in _SCALARS:  # skip a long numeric array without decoding it
            handle.seek(struct.calcsize(_SCALARS[item]) * count, 1)
            return None
        return [_value(handle, item, keep) for _ in range(count)]
    return _read(handle, _SCALARS[kind])


def read_metadata(path: Path, keys: tuple[str, ...] = _WANTED) -> dict[str, Any]:
    """The GGUF key-value metadata named by ``keys`` (the others are read past)."""
    found: dict[str, Any] = {}
    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise ConfigError(f"{path} is not a GGUF file")
        _read(handle, "<I")  # version
        _read(handle, "<Q")  # tensors
        for _ in range(_read(handle, "<Q")):
            key = _string(handle)
            value = _value(handle, _read(handle, "<I"), key in keys)
            if key in keys:
                found[key] = value
            if len(found) == len(keys):
                break
    return found


@dataclass(frozen=True)
class ChatTokenizer:
    """Counts tokens as the engine will read them and renders the model's chat template."""

    tokenizer: Any  # tokenizers.Tokenizer
    chat_template: str
    special_tokens: tuple[str, ...]  # what llama.cpp parses as one token inside a prompt
    bos: str
    eos: str
    add_bos: bool

    def count(self, texts: list[str]) -> list[int]:
        """Tokens of each text as plain text (no special token added or parsed)."""
        return [len(e.ids) for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def prompt(self, messages: list[dict[str, str]]) -> str:
        """The chat template rendered with the generation prompt, as llama.cpp's server
        renders it before tokenizing."""
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise ValueError(message)

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = raise_exception
        return environment.from_string(self.chat_template).render(
            messages=messages, add_generation_prompt=True, bos_token=self.bos, eos_token=self.eos
        )

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The token ids of the templated prompt with special tokens parsed (llama.cpp's
        server: ``tokenize(prompt, add_special=true, parse_special=true)``)."""
        ids = self.tokenizer.encode(self.prompt(messages), add_special_tokens=False).ids
        if self.add_bos:
            ids = [self.tokenizer.token_to_id(self.bos), *ids]
        return ids


def load_chat_tokenizer(path: Path) -> ChatTokenizer:
    """The tokenizer of the GGUF at ``path``; ConfigError for a tokenizer kind or
    pre-tokenizer this reader does not know (only byte-level BPE models are)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    meta = read_metadata(path)
    kind, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre", "gpt-2")
    if kind != "gpt2" or pre not in PRE_TOKENIZERS:
        raise ConfigError(
            f"{path.name}: no token counter for tokenizer {kind!r} with pre-tokenizer {pre!r} "
            f"(known: gpt2 with {', '.join(PRE_TOKENIZERS)})"
        )
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types: list[int] = meta["tokenizer.ggml.token_type"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tokenizer = Tokenizer(
        models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, ignore_merges=False)
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            *(pre_tokenizers.Split(Regex(p), behavior="isolated") for p in PRE_TOKENIZERS[pre]),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    special = tuple(t for t, k in zip(tokens, types, strict=True) if k in (_CONTROL, _USER_DEFINED))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    bos_id = meta.get("tokenizer.ggml.bos_token_id")
    eos_id = meta.get("tokenizer.ggml.eos_token_id")
    return ChatTokenizer(
        tokenizer=tokenizer,
        chat_template=meta.get("tokenizer.chat_template", ""),
        special_tokens=special,
        bos=tokens[bos_id] if bos_id is not None else "",
        eos=tokens[eos_id] if eos_id is not None else "",
        add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
    )
