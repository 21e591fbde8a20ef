#!/usr/bin/env python3
"""A random-weight model with the shapes of Qwen3-4B (or a smaller preset), in Hugging Face layout, for
measuring memory and time of `blocklab probe residual` on a model of real size. No weights can be
downloaded here; the numbers are random, so only the cost is meaningful, not the norms.

Usage:
  python3 tools/make_random_hf_model.py --out /tmp/qwen3-4b-random            # 36 blocks, 4.02 B params, BF16
  python3 tools/make_random_hf_model.py --out DIR --preset small --shards 1   # a quick 2-block version

Writes DIR/config.json (Qwen3-4B's published fields) and the weights as BF16 safetensors shards with
model.safetensors.index.json, streaming each tensor in chunks (little memory; ~8 GB on disk for 4B).
Values: random sign, random 7-bit mantissa, magnitudes between 2^-7 and 2^-4 (std ~0.03); norm
weights 1. Needs only numpy.
"""
import argparse
import json
import os
import struct

import numpy as np

PRESETS = {
    "qwen3-4b": dict(layers=36, hidden=2560, intermediate=9728, heads=32, kv_heads=8, head_dim=128, vocab=151936),
    "small": dict(layers=2, hidden=256, intermediate=512, heads=4, kv_heads=2, head_dim=64, vocab=1024),
}


def tensors(p):
    C, I, V = p["hidden"], p["intermediate"], p["vocab"]
    Q, K, D = p["heads"] * p["head_dim"], p["kv_heads"] * p["head_dim"], p["head_dim"]
    out = [("model.embed_tokens.weight", (V, C), "random")]
    for l in range(p["layers"]):
        b = f"model.layers.{l}."
        out += [(b + "input_layernorm.weight", (C,), "ones"),
                (b + "self_attn.q_proj.weight", (Q, C), "random"),
                (b + "self_attn.k_proj.weight", (K, C), "random"),
                (b + "self_attn.v_proj.weight", (K, C), "random"),
                (b + "self_attn.o_proj.weight", (C, Q), "random"),
                (b + "self_attn.q_norm.weight", (D,), "ones"),
                (b + "self_attn.k_norm.weight", (D,), "ones"),
                (b + "post_attention_layernorm.weight", (C,), "ones"),
                (b + "mlp.gate_proj.weight", (I, C), "random"),
                (b + "mlp.up_proj.weight", (I, C), "random"),
                (b + "mlp.down_proj.weight", (C, I), "random")]
    out.append(("model.norm.weight", (C,), "ones"))
    return out


def bf16_chunk(rng, n, kind):
    if kind == "ones":
        return np.full(n, 0x3F80, dtype="<u2")
    r = rng.integers(0, 1 << 32, size=n, dtype=np.uint32)
    sign = (r >> 16) & 0x8000
    exponent = (0x78 + ((r >> 8) & 3)) << 7  # 2^-7 .. 2^-4
    mantissa = r & 0x7F
    return (sign | exponent | mantissa).astype("<u2")


def write_shard(path, items, rng):
    header, off = {}, 0
    for name, shape, _ in items:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    chunk = 1 << 24
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, shape, kind in items:
            left = int(np.prod(shape))
            while left > 0:
                n = min(chunk, left)
                f.write(bf16_chunk(rng, n, kind).tobytes())
                left -= n
    return off


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="qwen3-4b")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    p = PRESETS[args.preset]
    os.makedirs(args.out, exist_ok=True)
    config = {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": p["head_dim"], "hidden_act": "silu",
        "hidden_size": p["hidden"], "initializer_range": 0.02, "intermediate_size": p["intermediate"],
        "max_position_embeddings": 40960, "max_window_layers": p["layers"], "model_type": "qwen3",
        "num_attention_heads": p["heads"], "num_hidden_layers": p["layers"], "num_key_value_heads": p["kv_heads"],
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
        "vocab_size": p["vocab"]}
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    items = tensors(p)
    rng = np.random.default_rng(args.seed)
    per = (len(items) + args.shards - 1) // args.shards
    weight_map, total = {}, 0
    for s in range(args.shards):
        part = items[s * per:(s + 1) * per]
        name = f"model-{s + 1:05d}-of-{args.shards:05d}.safetensors"
        total += write_shard(os.path.join(args.out, name), part, rng)
        weight_map.update({t[0]: name for t in part})
        print(f"wrote {name}", flush=True)
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    params = sum(int(np.prod(t[1])) for t in items)
    print(f"{args.out}: {params:,} parameters, {total / 2**30:.2f} GiB of BF16 in {args.shards} shards")


if __name__ == "__main__":
    main()
