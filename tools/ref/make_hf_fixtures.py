#!/usr/bin/env -S /usr/bin/python3
"""Tiny random-weight Hugging Face models and their reference forward passes (tests/data/hf/).

Usage (from the repository root; needs PyTorch, i.e. Debian's /usr/bin/python3):
  tools/ref/make_hf_fixtures.py

Written from the published architectures (Qwen3 / Qwen2 / Llama: RMSNorm pre-norm, grouped-query
attention, rotary embeddings in the rotate-half layout, SwiGLU; Qwen3 adds per-head RMSNorm on q and k
before RoPE. GPT-2: Pre-LN LayerNorm, learned positions, tanh-GELU, Conv1D weights stored (in, out)),
not from the transformers package. Each model directory gets a config.json as Hugging Face writes it,
weights in safetensors (written by hand: fixture_tools.write_safetensors; 8-byte little-endian header
length, JSON header, data), and reference.safetensors:

  tokens         I64 (T)
  hidden_states  F64 (L+1, T, C)   residual stream: 0 = embeddings, l = output of block l (not normed)
  final_hidden   F64 (T, C)        the final norm of the last block's output
  logits         F64 (T, V)

The reference runs in float64 on the weights as stored (BF16/F16 weights rounded first), so the
comparison measures the C++ forward pass, not the storage format.
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_tools as ft  # noqa: E402  (safetensors writer)

OUT = os.path.join(ft.OUT_DIR, "hf")

STORAGE = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


# ----------------------------------------------------------------------------- building blocks

def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def silu(x):
    return x * torch.sigmoid(x)


def rope_inv_freq(head_dim, theta, scaling):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if scaling is None:
        return inv
    if scaling["rope_type"] == "llama3":
        factor, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / lo, old / hi
        out = []
        for f in inv.tolist():
            wavelen = 2 * math.pi / f
            if wavelen < high_wavelen:
                out.append(f)
            elif wavelen > low_wavelen:
                out.append(f / factor)
            else:
                smooth = (old / wavelen - lo) / (hi - lo)
                out.append((1 - smooth) * f / factor + smooth * f)
        return torch.tensor(out, dtype=torch.float64)
    raise ValueError(scaling)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x, inv_freq):
    """x (T, heads, D): q * cos + rotate_half(q) * sin with cos/sin of (t * inv_freq) repeated twice."""
    T = x.shape[0]
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    return x * cos + rotate_half(x) * sin


def causal_attention(q, k, v, scale):
    """q (T, H, D), k/v (T, Hkv, D); query head h reads kv head h // (H / Hkv)."""
    T, H, D = q.shape
    rep = H // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    s = torch.einsum("thd,shd->hts", q, k) * scale
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
    return torch.einsum("hts,shd->thd", p, v).reshape(T, H * D)


# ----------------------------------------------------------------------------- models

def qwen_forward(W, cfg, P, tokens):
    """Qwen3 / Qwen2 / Llama. W: name -> float64 tensor (as stored). Returns hidden states, final, logits."""
    C, H, Hkv = cfg["hidden"], cfg["heads"], cfg["kv_heads"]
    D, eps = cfg["head_dim"], cfg["eps"]
    inv = rope_inv_freq(D, cfg["theta"], cfg.get("rope_scaling"))
    x = W[P + "embed_tokens.weight"][tokens]
    hidden = [x]
    T = len(tokens)
    for l in range(cfg["layers"]):
        b = f"{P}layers.{l}."

        def lin(name, inp, bias):
            y = inp @ W[b + name + ".weight"].T
            return y + W[b + name + ".bias"] if bias else y

        h = rms_norm(x, W[b + "input_layernorm.weight"], eps)
        q = lin("self_attn.q_proj", h, cfg["qkv_bias"]).view(T, H, D)
        k = lin("self_attn.k_proj", h, cfg["qkv_bias"]).view(T, Hkv, D)
        v = lin("self_attn.v_proj", h, cfg["qkv_bias"]).view(T, Hkv, D)
        if cfg["qk_norm"]:
            q = rms_norm(q, W[b + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, W[b + "self_attn.k_norm.weight"], eps)
        q, k = apply_rope(q, inv), apply_rope(k, inv)
        a = causal_attention(q, k, v, D ** -0.5)
        x = x + lin("self_attn.o_proj", a, cfg["o_bias"])
        h = rms_norm(x, W[b + "post_attention_layernorm.weight"], eps)
        m = silu(lin("mlp.gate_proj", h, False)) * lin("mlp.up_proj", h, False)
        x = x + lin("mlp.down_proj", m, False)
        hidden.append(x)
    final = rms_norm(x, W[P + "norm.weight"], eps)
    head = W[P + "embed_tokens.weight"] if cfg["tied"] else W["lm_head.weight"]
    return torch.stack(hidden), final, final @ head.T


def gpt2_forward(W, cfg, tokens):
    C, H, eps = cfg["hidden"], cfg["heads"], cfg["eps"]
    D = C // H
    T = len(tokens)
    x = W["wte.weight"][tokens] + W["wpe.weight"][:T]
    hidden = [x]
    for l in range(cfg["layers"]):
        b = f"h.{l}."

        def conv1d(name, inp):  # Conv1D: y = x @ W + b with W stored (in, out)
            return inp @ W[b + name + ".weight"] + W[b + name + ".bias"]

        h = layer_norm(x, W[b + "ln_1.weight"], W[b + "ln_1.bias"], eps)
        q, k, v = conv1d("attn.c_attn", h).split(C, dim=-1)
        a = causal_attention(q.view(T, H, D), k.view(T, H, D), v.view(T, H, D), 1.0 / math.sqrt(D))
        x = x + conv1d("attn.c_proj", a)
        h = layer_norm(x, W[b + "ln_2.weight"], W[b + "ln_2.bias"], eps)
        x = x + conv1d("mlp.c_proj", gelu_tanh(conv1d("mlp.c_fc", h)))
        hidden.append(x)
    final = layer_norm(x, W["ln_f.weight"], W["ln_f.bias"], eps)
    return torch.stack(hidden), final, final @ W["wte.weight"].T


# ----------------------------------------------------------------------------- weights

class Weights:
    """Random weights, rounded to the storage dtype; kept in file order."""

    def __init__(self, seed, code):
        self.gen = torch.Generator().manual_seed(seed)
        self.code = code
        self.items = []  # (name, float64 tensor as stored)

    def _add(self, name, t):
        t = t.to(STORAGE[self.code]).to(torch.float64)
        self.items.append((name, t))
        return t

    def matrix(self, name, rows, cols, fan_in):
        return self._add(name, torch.randn(rows, cols, generator=self.gen, dtype=torch.float64) * (0.7 / math.sqrt(fan_in)))

    def embedding(self, name, rows, cols):
        return self._add(name, torch.randn(rows, cols, generator=self.gen, dtype=torch.float64))

    def norm(self, name, n):
        return self._add(name, 1.0 + 0.2 * torch.randn(n, generator=self.gen, dtype=torch.float64))

    def bias(self, name, n):
        return self._add(name, 0.1 * torch.randn(n, generator=self.gen, dtype=torch.float64))

    def extra(self, name, shape):
        return self._add(name, 0.1 * torch.randn(*shape, generator=self.gen, dtype=torch.float64))

    def dict(self):
        return dict(self.items)


def qwen_weights(cfg, P, seed, code):
    C, I, V = cfg["hidden"], cfg["intermediate"], cfg["vocab"]
    Q, K, D = cfg["heads"] * cfg["head_dim"], cfg["kv_heads"] * cfg["head_dim"], cfg["head_dim"]
    w = Weights(seed, code)
    w.embedding(P + "embed_tokens.weight", V, C)
    for l in range(cfg["layers"]):
        b = f"{P}layers.{l}."
        w.norm(b + "input_layernorm.weight", C)
        w.matrix(b + "self_attn.q_proj.weight", Q, C, C)
        w.matrix(b + "self_attn.k_proj.weight", K, C, C)
        w.matrix(b + "self_attn.v_proj.weight", K, C, C)
        if cfg["qkv_bias"]:
            w.bias(b + "self_attn.q_proj.bias", Q)
            w.bias(b + "self_attn.k_proj.bias", K)
            w.bias(b + "self_attn.v_proj.bias", K)
        w.matrix(b + "self_attn.o_proj.weight", C, Q, Q)
        if cfg["o_bias"]:
            w.bias(b + "self_attn.o_proj.bias", C)
        if cfg["qk_norm"]:
            w.norm(b + "self_attn.q_norm.weight", D)
            w.norm(b + "self_attn.k_norm.weight", D)
        w.norm(b + "post_attention_layernorm.weight", C)
        w.matrix(b + "mlp.gate_proj.weight", I, C, C)
        w.matrix(b + "mlp.up_proj.weight", I, C, C)
        w.matrix(b + "mlp.down_proj.weight", C, I, I)
    w.norm(P + "norm.weight", C)
    if not cfg["tied"]:
        w.matrix("lm_head.weight", V, C, C)
    return w


def gpt2_weights(cfg, seed, code):
    C, V, I = cfg["hidden"], cfg["vocab"], 4 * cfg["hidden"]
    w = Weights(seed, code)
    w.embedding("wte.weight", V, C)
    w._add("wpe.weight", 0.5 * torch.randn(cfg["positions"], C, generator=w.gen, dtype=torch.float64))
    for l in range(cfg["layers"]):
        b = f"h.{l}."
        w.norm(b + "ln_1.weight", C)
        w.bias(b + "ln_1.bias", C)
        w.matrix(b + "attn.c_attn.weight", C, 3 * C, C)  # Conv1D: (in, out)
        w.bias(b + "attn.c_attn.bias", 3 * C)
        w.matrix(b + "attn.c_proj.weight", C, C, C)
        w.bias(b + "attn.c_proj.bias", C)
        w.norm(b + "ln_2.weight", C)
        w.bias(b + "ln_2.bias", C)
        w.matrix(b + "mlp.c_fc.weight", C, I, C)
        w.bias(b + "mlp.c_fc.bias", I)
        w.matrix(b + "mlp.c_proj.weight", I, C, I)
        w.bias(b + "mlp.c_proj.bias", C)
    w.norm("ln_f.weight", C)
    w.bias("ln_f.bias", C)
    return w


# ----------------------------------------------------------------------------- tiny tokenizer

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


def tiny_tokenizer(vocab_size):
    """Byte-level BPE in the Qwen2 layout: ids 0..255 are the bytes in byte order, a few merges, and
    <|endoftext|> as the last id."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "c"), ("a", "t"), ("Ġc", "at"), ("i", "n"), ("Ġ", "s"),
              ("o", "n"), ("e", "r"), ("Ġ", "m"), ("a", "n"), ("Ġs", "at"), ("Ġ", "o"), ("Ġo", "n")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    assert len(vocab) < vocab_size
    eot = vocab_size - 1
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }


# ----------------------------------------------------------------------------- fixtures

def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_reference(d, tokens, hidden, final, logits):
    ft.write_safetensors(os.path.join(d, "reference.safetensors"), [
        ("tokens", torch.tensor(tokens, dtype=torch.int64), "I64"),
        ("hidden_states", hidden, "F64"),
        ("final_hidden", final, "F64"),
        ("logits", logits, "F64"),
    ])


def write_sharded(d, items, code, shards):
    """Splits the tensors into `shards` files plus model.safetensors.index.json."""
    n = len(items)
    per = (n + shards - 1) // shards
    weight_map, total = {}, 0
    for s in range(shards):
        part = items[s * per:(s + 1) * per]
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        total += ft.write_safetensors(os.path.join(d, name), [(k, v, code) for k, v in part], {"format": "pt"})
        for k, _ in part:
            weight_map[k] = name
    write_json(os.path.join(d, "model.safetensors.index.json"), {"metadata": {"total_size": total}, "weight_map": weight_map})


def write_model(name, w, config, metadata=None, shards=1):
    """OUT/name with config.json and the weights w in their storage dtype: model.safetensors, or `shards`
    files and their index. Returns the directory."""
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "config.json"), config)
    if shards > 1:
        write_sharded(d, w.items, w.code, shards)
    else:
        ft.write_safetensors(os.path.join(d, "model.safetensors"), [(k, v, w.code) for k, v in w.items], metadata)
    return d


def tokens_for(seed, n, vocab):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


def make_qwen3():
    cfg = dict(hidden=32, heads=4, kv_heads=2, head_dim=16, intermediate=48, layers=3, vocab=300, eps=1e-6,
               theta=10000.0, tied=False, qkv_bias=False, o_bias=False, qk_norm=True)
    w = qwen_weights(cfg, "model.", 11, "F32")
    d = write_model("qwen3", w, metadata={"format": "pt"}, config={
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 299, "eos_token_id": 299, "head_dim": 16, "hidden_act": "silu", "hidden_size": 32,
        "initializer_range": 0.02, "intermediate_size": 48, "max_position_embeddings": 128,
        "max_window_layers": 3, "model_type": "qwen3", "num_attention_heads": 4, "num_hidden_layers": 3,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000.0,
        "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "float32",
        "use_cache": True, "use_sliding_window": False, "vocab_size": 300})
    write_json(os.path.join(d, "tokenizer.json"), tiny_tokenizer(300))
    tokens = tokens_for(12, 9, cfg["vocab"])
    write_reference(d, tokens, *qwen_forward(w.dict(), cfg, "model.", tokens))


def make_qwen3_vl():
    cfg = dict(hidden=32, heads=4, kv_heads=1, head_dim=8, intermediate=64, layers=2, vocab=64, eps=1e-6,
               theta=1000000.0, tied=True, qkv_bias=False, o_bias=False, qk_norm=True)
    w = qwen_weights(cfg, "model.language_model.", 21, "BF16")
    w.extra("model.visual.patch_embed.proj.weight", (8, 3, 2, 2))  # a vision-tower tensor the language model skips
    d = write_model("qwen3_vl_bf16_sharded", w, shards=2, config={
        "architectures": ["Qwen3VLForConditionalGeneration"], "image_token_id": 60, "model_type": "qwen3_vl",
        "text_config": {
            "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 61, "dtype": "bfloat16",
            "eos_token_id": 62, "head_dim": 8, "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02,
            "intermediate_size": 64, "max_position_embeddings": 256, "model_type": "qwen3_vl_text",
            "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-06,
            "rope_scaling": {"mrope_interleaved": True, "mrope_section": [2, 1, 1], "rope_type": "default"},
            "rope_theta": 1000000, "tie_word_embeddings": True, "use_cache": True, "vocab_size": 64},
        "tie_word_embeddings": True, "transformers_version": "4.57.0.dev0", "video_token_id": 63,
        "vision_config": {"depth": 1, "hidden_size": 8, "model_type": "qwen3_vl", "out_hidden_size": 32,
                          "patch_size": 2, "in_channels": 3},
        "vision_end_token_id": 59, "vision_start_token_id": 58})
    tokens = tokens_for(22, 7, cfg["vocab"])
    write_reference(d, tokens, *qwen_forward(w.dict(), cfg, "model.language_model.", tokens))


def make_qwen2():
    cfg = dict(hidden=24, heads=6, kv_heads=2, head_dim=4, intermediate=40, layers=2, vocab=50, eps=1e-5,
               theta=50000.0, tied=True, qkv_bias=True, o_bias=False, qk_norm=False)
    w = qwen_weights(cfg, "model.", 31, "F32")
    # transformers v5 style: rope_theta inside rope_parameters
    d = write_model("qwen2", w, config={
        "architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 24, "intermediate_size": 40,
        "max_position_embeddings": 64, "model_type": "qwen2", "num_attention_heads": 6, "num_hidden_layers": 2,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 50000.0, "rope_type": "default"},
        "tie_word_embeddings": True, "use_sliding_window": False, "vocab_size": 50})
    tokens = tokens_for(32, 7, cfg["vocab"])
    write_reference(d, tokens, *qwen_forward(w.dict(), cfg, "model.", tokens))


def make_llama():
    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16, "rope_type": "llama3"}
    cfg = dict(hidden=32, heads=4, kv_heads=4, head_dim=8, intermediate=56, layers=2, vocab=48, eps=1e-5,
               theta=10000.0, tied=False, qkv_bias=False, o_bias=False, qk_norm=False, rope_scaling=scaling)
    w = qwen_weights(cfg, "model.", 41, "F16")
    d = write_model("llama_f16", w, config={
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "hidden_act": "silu", "hidden_size": 32,
        "intermediate_size": 56, "max_position_embeddings": 128, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 4, "rms_norm_eps": 1e-05,
        "rope_scaling": scaling, "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 48})
    tokens = tokens_for(42, 7, cfg["vocab"])
    write_reference(d, tokens, *qwen_forward(w.dict(), cfg, "model.", tokens))


def make_gpt2():
    cfg = dict(hidden=32, heads=4, layers=2, vocab=64, positions=16, eps=1e-5)
    w = gpt2_weights(cfg, 51, "F32")
    d = write_model("gpt2", w, metadata={"format": "pt"}, config={
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": 63, "embd_pdrop": 0.1, "eos_token_id": 63, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 16, "n_embd": 32, "n_head": 4, "n_inner": None,
        "n_layer": 2, "n_positions": 16, "resid_pdrop": 0.1, "scale_attn_weights": True, "vocab_size": 64})
    tokens = tokens_for(52, 11, cfg["vocab"])
    write_reference(d, tokens, *gpt2_forward(w.dict(), cfg, tokens))


def main():
    torch.set_grad_enabled(False)
    make_qwen3()
    make_qwen3_vl()
    make_qwen2()
    make_llama()
    make_gpt2()
    total = 0
    for root, _, files in os.walk(OUT):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    print(f"wrote {OUT} ({total / 1024:.1f} KiB in all)")


if __name__ == "__main__":
    main()
