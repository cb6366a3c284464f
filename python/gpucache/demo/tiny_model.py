"""Write a small Llama-architecture model that needs no hub.

    python -m gpucache.demo.tiny_model DIR [--size ci|bench] [--seed N]

DIR receives what vLLM and transformers load with ``model=DIR``: a
``config.json`` (``LlamaForCausalLM``), ``model.safetensors`` with weights
drawn from a seeded generator, a ``generation_config.json``, and a byte-level
tokenizer built here with the ``tokenizers`` package (every byte is a token,
plus ``<s>`` and ``</s>``): nothing is downloaded, and the same seed always
writes the same bytes. The seed is part of the model's identity: a model
written with another seed is another model, whose KV must never be reused.

Two sizes:

- ``ci``: 2 layers, hidden 128, 4 query heads and 2 KV heads of 32 (vLLM's
  CPU attention takes head sizes from 32 up); small enough for every test
  run (about 0.4 M parameters).
- ``bench``: 8 layers, hidden 1024, 16 query heads and 4 KV heads of 64,
  MLP 2816 (about 100 M parameters): CPU prefill of 2,048 tokens takes
  seconds, so a TTFT saved by reusing KV means something.

Needs torch, transformers and tokenizers (the engines environment,
``scripts/engines-env``); the rest of the gpucache package does not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict

SIZES: Dict[str, Dict[str, int]] = {
    "ci": dict(hidden_size=128, intermediate_size=352, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=32),
    "bench": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                  num_attention_heads=16, num_key_value_heads=4, head_dim=64),
}

# Token ids: 0..255 are the bytes, then the two specials; the embedding is
# padded to a multiple of 64.
BOS_ID, EOS_ID = 256, 257
VOCAB_SIZE = 320
MAX_POSITIONS = 16384


def _byte_symbol_table() -> Dict[int, str]:
    """The printable stand-in of each byte that byte-level BPE uses (GPT-2's
    table: printable Latin-1 bytes map to themselves, the rest to U+0100+)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def build_tokenizer() -> Any:
    """A byte-level tokenizer: one token per byte, no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors  # type: ignore

    symbols = _byte_symbol_table()
    vocab = {symbols[b]: b for b in range(256)}
    vocab["<s>"], vocab["</s>"] = BOS_ID, EOS_ID
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS_ID)])
    tok.add_special_tokens(["<s>", "</s>"])
    return tok


def write(out_dir: str, size: str = "ci", seed: int = 0, dtype: str = "bfloat16") -> Dict[str, Any]:
    """Write the model of `size` with weights from `seed` into out_dir and
    return a summary (parameters, bytes of KV per token, the directory)."""
    import torch  # type: ignore
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # type: ignore

    if size not in SIZES:
        raise ValueError("size %r: one of %s" % (size, ", ".join(sorted(SIZES))))
    shape = SIZES[size]
    cfg = LlamaConfig(vocab_size=VOCAB_SIZE, max_position_embeddings=MAX_POSITIONS,
                      bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=EOS_ID,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, **shape)
    cfg.dtype = dtype
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    # Wider than the default init (std 0.02) so that greedy decoding is not
    # one token repeated: outputs differ when the KV differs.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 1.0 / (p.shape[-1] ** 0.5))
    model = model.to(getattr(torch, dtype))
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=build_tokenizer(), bos_token="<s>",
                                   eos_token="</s>", pad_token="</s>", model_max_length=MAX_POSITIONS)
    fast.save_pretrained(out_dir)
    params = sum(p.numel() for p in model.parameters())
    kv_per_token = 2 * shape["num_hidden_layers"] * shape["num_key_value_heads"] * shape["head_dim"] * \
        torch.tensor([], dtype=getattr(torch, dtype)).element_size()
    summary = {"dir": os.path.abspath(out_dir), "size": size, "seed": seed, "dtype": dtype,
               "parameters": params, "kv_bytes_per_token": kv_per_token}
    with open(os.path.join(out_dir, "gpucache-tiny-model.json"), "w") as f:
        json.dump(summary, f, indent=2, sort_keys=True)
    return summary


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpucache.demo.tiny_model",
                                 description="Write a seeded Llama-architecture model and a byte-level tokenizer into DIR.")
    ap.add_argument("dir")
    ap.add_argument("--size", choices=sorted(SIZES), default="ci")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["bfloat16", "float32", "float16"], default="bfloat16")
    a = ap.parse_args(argv)
    try:
        s = write(a.dir, a.size, a.seed, a.dtype)
    except ImportError as e:
        print("tiny_model: %s (run it with the engines environment: scripts/engines-env)" % e, file=sys.stderr)
        return 2
    print(json.dumps(s, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
