#!/usr/bin/env -S /usr/bin/python3
"""Generate float64 reference fixtures for stacks of the gpt2 / qwen3 / sd block presets
(tests/data/ref_block_{gpt2,qwen3,sd}.safetensors).

Usage (from the repository root, needs PyTorch -> Debian's /usr/bin/python3):
  tools/ref/make_block_fixtures.py            # self-checks, then write the 3 fixtures
  tools/ref/make_block_fixtures.py --verify   # self-checks, then re-read the fixtures with the
                                              # independent reader: format, names/shapes, round
                                              # trip, recomputation from the stored params/tokens
  tools/ref/make_block_fixtures.py --check    # self-checks only

Self-checks (per preset): the module stack (block_models.py) against a second formulation
(block_models.alt_forward: torch's multi_head_attention_forward / F.layer_norm / F.gelu for gpt2 and sd,
per-head loops with complex-rotation RoPE for qwen3), logits and every gradient; gpt2 and qwen3 also
against the Hugging Face-layout forward of make_hf_fixtures.py (Conv1D-transposed GPT-2 weights,
gate/up/down Qwen3 MLP); torch.autograd.gradcheck on a one-sequence batch for a subset of tensors; and
central differences at 2 entries of every parameter tensor.

Each file holds param.<name>, tokens, logits, loss, grad.<name>, adam_losses, adam_final.<name>
and metadata (see tools/ref/README.md). Task and loss are copy_model.copy_batch / copy_loss.
"""
import os
import sys

import torch
from torch.nn.utils import stateless

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import block_models as bm  # noqa: E402
import copy_model as cm  # noqa: E402
import fixture_tools as ft  # noqa: E402  (safetensors writer and reader, fixture run, generate/verify, CLI)

BASE = dict(layers=2, width=16, heads=4, vocab=11, copy_len=5, batch=3, mlp_ratio=4)
CFGS = {
    "gpt2": dict(BASE, block="gpt2", kv_heads=4, head_dim=4, norm_eps=1e-5, rope_theta=0.0, tie_head=True),
    "qwen3": dict(BASE, block="qwen3", kv_heads=2, head_dim=8, norm_eps=1e-6, rope_theta=10000.0,
                  tie_head=False),
    "sd": dict(BASE, block="sd", kv_heads=4, head_dim=4, norm_eps=1e-5, rope_theta=0.0, tie_head=False),
}
# A fixed seed per preset (stable across runs; do not change).
SEEDS = {"gpt2": 2001, "qwen3": 2002, "sd": 2003}
META_KEYS = ("block", "layers", "width", "heads", "kv_heads", "head_dim", "vocab", "copy_len", "batch",
             "mlp_ratio", "norm_eps", "rope_theta", "tie_head", "adam_lr")


def fixture_path(preset):
    return os.path.join(ft.OUT_DIR, f"ref_block_{preset}.safetensors")


def expected_params(cfg):
    """blocklab's parameter names and shapes for a preset, written out from the spec (not from the
    modules), so a renamed or reshaped module parameter fails loudly."""
    C, V, H, Hkv, D = cfg["width"], cfg["vocab"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    I, T = cfg["mlp_ratio"] * C, 2 * cfg["copy_len"] - 1
    p = {"tok_emb.weight": (V, C)}
    kind = cfg["block"]
    if kind in ("gpt2", "sd"):
        p["pos_emb.weight"] = (T, C)
    for l in range(cfg["layers"]):
        b = f"blocks.{l}."
        if kind == "gpt2":
            p.update({b + "norm1.weight": (C,), b + "norm1.bias": (C,),
                      b + "attn.qkv.weight": (3 * C, C), b + "attn.qkv.bias": (3 * C,),
                      b + "attn.proj.weight": (C, C), b + "attn.proj.bias": (C,),
                      b + "norm2.weight": (C,), b + "norm2.bias": (C,),
                      b + "mlp.fc1.weight": (I, C), b + "mlp.fc1.bias": (I,),
                      b + "mlp.fc2.weight": (C, I), b + "mlp.fc2.bias": (C,)})
        elif kind == "qwen3":
            p.update({b + "norm1.weight": (C,),
                      b + "attn.q.weight": (H * D, C), b + "attn.k.weight": (Hkv * D, C),
                      b + "attn.v.weight": (Hkv * D, C),
                      b + "attn.q_norm.weight": (D,), b + "attn.k_norm.weight": (D,),
                      b + "attn.proj.weight": (C, H * D), b + "norm2.weight": (C,),
                      b + "mlp.fc1.weight": (2 * I, C), b + "mlp.fc2.weight": (C, I)})
        else:
            p.update({b + "norm1.weight": (C,), b + "norm1.bias": (C,),
                      b + "attn.q.weight": (C, C), b + "attn.k.weight": (C, C), b + "attn.v.weight": (C, C),
                      b + "attn.proj.weight": (C, C), b + "attn.proj.bias": (C,),
                      b + "cross_norm.weight": (C,), b + "cross_norm.bias": (C,),
                      b + "cross.q.weight": (C, C), b + "cross.k.weight": (C, C), b + "cross.v.weight": (C, C),
                      b + "cross.proj.weight": (C, C), b + "cross.proj.bias": (C,),
                      b + "norm2.weight": (C,), b + "norm2.bias": (C,),
                      b + "mlp.fc1.weight": (2 * I, C), b + "mlp.fc1.bias": (2 * I,),
                      b + "mlp.fc2.weight": (C, I), b + "mlp.fc2.bias": (C,)})
    p["final_norm.weight"] = (C,)
    if kind != "qwen3":
        p["final_norm.bias"] = (C,)
    if not cfg["tie_head"]:
        p["head.weight"] = (V, C)
    return p


def embed_std(cfg):
    """N(0,1) embeddings, except 1/sqrt(C) when the head is tied to tok_emb (else logits ~ N(0, C))."""
    return cfg["width"] ** -0.5 if cfg["tie_head"] else 1.0


def metadata(preset):
    cfg = CFGS[preset]
    fmt = {bool: lambda v: "true" if v else "false", int: str, str: str, float: lambda v: f"{v:g}"}
    meta = {k: fmt[type(cfg[k])](cfg[k]) for k in META_KEYS if k != "adam_lr"}
    meta["adam_lr"] = f"{ft.ADAM['lr']:g}"
    meta["generator"] = "tools/ref/make_block_fixtures.py"
    meta["torch_version"] = torch.__version__
    return meta


# ----------------------------------------------------------------------------- reference run

def seeded_model(preset):
    """Model with the preset's fixture init and the batch, both drawn from the preset's seed."""
    torch.set_default_dtype(torch.float64)
    cfg = CFGS[preset]
    torch.manual_seed(SEEDS[preset])
    model = bm.init_fixture(bm.build(cfg).double(), embed_std=embed_std(cfg))
    tokens = cm.copy_batch(cfg["batch"], cfg["copy_len"], cfg["vocab"])
    ft.check_param_shapes(model, expected_params(cfg), f"{preset}: parameter names/shapes differ from blocklab's")
    return model, tokens


def compute(preset, params=None, tokens=None):
    """Results for the seeded init/batch, or for the given params/tokens."""
    model, seeded_tokens = seeded_model(preset)
    return ft.run_fixture(model, seeded_tokens if tokens is None else tokens, params)


# ----------------------------------------------------------------------------- self-checks

normwise = ft.normwise


def hf_layout_logits(preset, P, tokens):
    """Logits from make_hf_fixtures.py's Hugging Face-layout forward (one sequence at a time)."""
    import make_hf_fixtures as hf
    cfg = CFGS[preset]
    C, I = cfg["width"], cfg["mlp_ratio"] * cfg["width"]
    W = {}
    if preset == "gpt2":
        W["wte.weight"], W["wpe.weight"] = P["tok_emb.weight"], P["pos_emb.weight"]
        for l in range(cfg["layers"]):
            s, d = f"blocks.{l}.", f"h.{l}."
            for a, b in (("norm1", "ln_1"), ("norm2", "ln_2")):
                W[d + b + ".weight"], W[d + b + ".bias"] = P[s + a + ".weight"], P[s + a + ".bias"]
            for a, b in (("attn.qkv", "attn.c_attn"), ("attn.proj", "attn.c_proj"),
                         ("mlp.fc1", "mlp.c_fc"), ("mlp.fc2", "mlp.c_proj")):
                W[d + b + ".weight"] = P[s + a + ".weight"].t()           # Conv1D stores (in, out)
                W[d + b + ".bias"] = P[s + a + ".bias"]
        W["ln_f.weight"], W["ln_f.bias"] = P["final_norm.weight"], P["final_norm.bias"]
        hcfg = dict(hidden=C, heads=cfg["heads"], eps=cfg["norm_eps"], layers=cfg["layers"])
        return torch.stack([hf.gpt2_forward(W, hcfg, t)[2] for t in tokens])
    assert preset == "qwen3"
    W["model.embed_tokens.weight"], W["lm_head.weight"] = P["tok_emb.weight"], P["head.weight"]
    W["model.norm.weight"] = P["final_norm.weight"]
    for l in range(cfg["layers"]):
        s, d = f"blocks.{l}.", f"model.layers.{l}."
        W[d + "input_layernorm.weight"] = P[s + "norm1.weight"]
        W[d + "post_attention_layernorm.weight"] = P[s + "norm2.weight"]
        for a, b in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("proj", "o_proj"),
                     ("q_norm", "q_norm"), ("k_norm", "k_norm")):
            W[d + "self_attn." + b + ".weight"] = P[s + "attn." + a + ".weight"]
        W[d + "mlp.up_proj.weight"] = P[s + "mlp.fc1.weight"][:I]
        W[d + "mlp.gate_proj.weight"] = P[s + "mlp.fc1.weight"][I:]
        W[d + "mlp.down_proj.weight"] = P[s + "mlp.fc2.weight"]
    hcfg = dict(hidden=C, heads=cfg["heads"], kv_heads=cfg["kv_heads"], head_dim=cfg["head_dim"],
                eps=cfg["norm_eps"], theta=cfg["rope_theta"], layers=cfg["layers"], qkv_bias=False,
                o_bias=False, qk_norm=True, tied=False)
    return torch.stack([hf.qwen_forward(W, hcfg, "model.", t)[2] for t in tokens])


GRADCHECK = {  # tensors checked with torch.autograd.gradcheck (full finite-difference Jacobian)
    "gpt2": ["tok_emb.weight", "blocks.0.norm1.bias", "blocks.1.attn.qkv.bias", "blocks.0.attn.proj.bias",
             "blocks.1.norm2.weight", "blocks.0.mlp.fc1.bias", "blocks.1.mlp.fc2.bias", "final_norm.weight"],
    "qwen3": ["blocks.0.norm1.weight", "blocks.1.attn.q_norm.weight", "blocks.0.attn.k_norm.weight",
              "blocks.1.attn.v.weight", "blocks.1.norm2.weight", "final_norm.weight", "head.weight"],
    "sd": ["tok_emb.weight", "blocks.0.norm1.bias", "blocks.1.attn.proj.bias", "blocks.0.cross_norm.weight",
           "blocks.1.cross.k.weight", "blocks.0.mlp.fc1.bias", "final_norm.bias"],
}


def self_check(preset):
    """Raises AssertionError on any failure; returns a one-line summary."""
    cfg = CFGS[preset]
    model, tokens = seeded_model(preset)
    inputs, loss_of = tokens[:, :-1], ft.copy_loss_of(tokens)
    names = [k for k, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    P = dict(model.named_parameters())

    # 1. the module stack against the second formulation: logits and every gradient
    logits = model(inputs)
    g_main = torch.autograd.grad(loss_of(logits), params)
    alt = bm.alt_forward(P, cfg, inputs)
    g_alt = torch.autograd.grad(loss_of(alt), params)
    worst = normwise(alt.detach(), logits.detach())
    for name, a, b in zip(names, g_alt, g_main):
        e = normwise(a, b)
        assert e < 1e-12, f"{preset}: alt formulation gradient of {name} differs by {e:.2e}"
        worst = max(worst, e)
    assert worst < 1e-12, f"{preset}: alt formulation logits differ by {worst:.2e}"
    msg = f"alt formulation {worst:.1e}"

    # 2. Hugging Face-layout forward (make_hf_fixtures.py)
    if preset in ("gpt2", "qwen3"):
        with torch.no_grad():
            e = normwise(hf_layout_logits(preset, {k: v.detach() for k, v in P.items()}, inputs), logits)
        assert e < 1e-12, f"{preset}: HF-layout logits differ by {e:.2e}"
        msg += f", HF layout {e:.1e}"

    # 3. gradcheck on a one-sequence batch, for a subset of tensors
    tiny = tokens[:1]
    sel = GRADCHECK[preset]
    base = {k: v.detach() for k, v in P.items()}

    def f(*ts):
        over = dict(base)
        over.update(zip(sel, ts))
        return cm.copy_loss(lambda x: stateless.functional_call(model, over, (x,)), tiny)

    ins = tuple(base[k].clone().requires_grad_(True) for k in sel)
    assert torch.autograd.gradcheck(f, ins, eps=1e-6, atol=1e-7, rtol=1e-5), f"{preset}: gradcheck failed"
    msg += f", gradcheck {sum(t.numel() for t in ins)} entries"

    # 4. central differences at 2 entries of every parameter tensor (full batch)
    count, worst_fd = ft.central_differences(preset, names, params, g_main,
                                             lambda: cm.copy_loss(model, tokens).item())
    msg += f", central differences {count} entries (worst rel {worst_fd:.1e})"
    return msg


def run_self_checks():
    for preset in CFGS:
        print(f"self-check {preset}: {self_check(preset)}")


# ----------------------------------------------------------------------------- generate / verify

FIXTURES = ft.Fixtures(CFGS, fixture_path, metadata, compute, cfg=CFGS.get,
                       expected=lambda preset: expected_params(CFGS[preset]))


if __name__ == "__main__":
    ft.main(__doc__, FIXTURES, run_self_checks)
