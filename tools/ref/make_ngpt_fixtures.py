#!/usr/bin/env -S /usr/bin/python3
"""Generate float64 parity fixtures of nGPT (norm_placement = ngpt; tools/ref/ngpt_models.py)
(tests/data/ref_ngpt_<case>.safetensors).

Usage (from the repository root, any Python with PyTorch):
  tools/ref/make_ngpt_fixtures.py            # self-checks, then write the fixtures
  tools/ref/make_ngpt_fixtures.py --verify   # self-checks, then re-read and recompute the fixtures
  tools/ref/make_ngpt_fixtures.py --check    # self-checks only

Cases: `seed` (the seed block: fused qkv with biases, learned positions, exact GELU under s_uv; 2 blocks) and
`swiglu_rope` (nGPT's own block: separate q/k/v without biases, RoPE, SwiGLU; 3 blocks).

Self-checks, per case:
  1. parameter names and shapes equal `expected_params`, written a second time from the spec;
  2. the model against nGPT's code form of the update, norm(h) + |alpha| (norm(F(h)) - norm(h)) computed with
     F.normalize, and the per-head q/k scaling computed head by head: logits to 1e-12;
  3. torch.autograd.gradcheck of the logits w.r.t. every parameter tensor on a tiny one-sequence input;
  4. after each Adam step plus renormalisation every renormalised vector has unit norm (1e-12).

Each file holds what every fixture holds (tools/ref/README.md), except that each of the 5 Adam steps (lr 1e-2,
no weight decay) is followed by nGPT's renormalisation: adam_final.<name> are the weights after step 5 and its
renormalisation.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import copy_model as cm  # noqa: E402
import fixture_tools as ft  # noqa: E402
import ngpt_models as nm  # noqa: E402

BASE = dict(layers=2, width=16, heads=2, vocab=11, copy_len=5, batch=3, mlp_ratio=4)
CASES = {
    "seed": (dict(qkv="fused", biases=True, positions="learned", rope_theta=10000.0, mlp="gelu"), 5001),
    "swiglu_rope": (dict(qkv="separate", biases=False, positions="rope", rope_theta=100.0, mlp="swiglu",
                         layers=3), 5002),
}
CHECK_SEED = 5100


def cfg_of(case, base=BASE):
    return dict(base, **CASES[case][0])


def fixture_path(case):
    return os.path.join(ft.OUT_DIR, f"ref_ngpt_{case}.safetensors")


def expected_params(cfg):
    C, V, N, T = cfg["width"], cfg["vocab"], cfg["layers"], 2 * cfg["copy_len"] - 1
    I = cfg["mlp_ratio"] * C
    I_in = 2 * I if cfg["mlp"] in ("swiglu", "geglu") else I
    p = {"tok_emb.weight": (V, C), "head.weight": (V, C), "head.s_z": (V,)}
    if cfg["positions"] == "learned":
        p["pos_emb.weight"] = (T, C)
    for i in range(N):
        b = f"blocks.{i}."
        p.update({b + "attn_alpha": (C,), b + "mlp_alpha": (C,), b + "attn.s_qk": (C,), b + "mlp.s_uv": (I_in,),
                  b + "attn.proj.weight": (C, C), b + "mlp.fc1.weight": (I_in, C), b + "mlp.fc2.weight": (C, I)})
        if cfg["qkv"] == "fused":
            p[b + "attn.qkv.weight"] = (3 * C, C)
        else:
            p.update({b + "attn.q.weight": (C, C), b + "attn.k.weight": (C, C), b + "attn.v.weight": (C, C)})
        if cfg["biases"]:
            p.update({b + "attn.proj.bias": (C,), b + "mlp.fc1.bias": (I_in,), b + "mlp.fc2.bias": (C,)})
            if cfg["qkv"] == "fused":
                p[b + "attn.qkv.bias"] = (3 * C,)
            else:
                p.update({b + "attn.q.bias": (C,), b + "attn.k.bias": (C,), b + "attn.v.bias": (C,)})
    return p


def metadata(case):
    cfg = cfg_of(case)
    meta = {"norm_placement": "ngpt", "norm": "layernorm", "qkv": cfg["qkv"],
            "biases": "true" if cfg["biases"] else "false", "positions": cfg["positions"],
            "rope_theta": f"{cfg['rope_theta']:g}", "mlp": cfg["mlp"], "norm_eps": "1e-05"}
    for k in ("layers", "width", "heads", "vocab", "copy_len", "batch", "mlp_ratio"):
        meta[k] = str(cfg[k])
    meta["adam_lr"] = f"{ft.ADAM['lr']:g}"
    meta["generator"] = "tools/ref/make_ngpt_fixtures.py"
    meta["torch_version"] = torch.__version__
    return meta


def seeded_model(cfg, seed):
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(seed)
    model = nm.init_fixture(nm.NGPT(cfg).double(), cfg)
    tokens = cm.copy_batch(cfg["batch"], cfg["copy_len"], cfg["vocab"])
    ft.check_param_shapes(model, expected_params(cfg), "ngpt: parameter names/shapes differ from the spec")
    return model, tokens


def run(model, tokens, params=None, check_units=False):
    """ft.run_fixture's results, with nGPT's renormalisation after every Adam step."""
    def renormalise(m):
        nm.renormalise(m)
        if check_units:
            for name, p in m.named_parameters():
                how = nm.renormalised(name)
                if how is not None:
                    n = p.detach().norm(dim=1 if how == "rows" else 0)
                    assert float((n - 1).abs().max()) < 1e-12, f"{name}: not unit after the step"
    return ft.run_fixture(model, tokens, params, after_step=renormalise)


def compute(case, params=None, tokens=None, check_units=False):
    model, seeded_tokens = seeded_model(cfg_of(case), CASES[case][1])
    return run(model, seeded_tokens if tokens is None else tokens, params, check_units)


# ----------------------------------------------------------------------------- self-checks

def code_form(P, cfg, inputs):
    """The same model as nGPT's code writes the update (F.normalize, norm(h) recomputed), heads one at a time."""
    C, H = cfg["width"], cfg["heads"]
    D = C // H
    B, T = inputs.shape
    x = P["tok_emb.weight"][inputs]
    if cfg["positions"] == "learned":
        x = x + P["pos_emb.weight"][:T]
    cos, sin = nm.rope_cos_sin(T, D, cfg["rope_theta"])

    def lin(name, v):
        w = P[name + ".weight"]
        b = P.get(name + ".bias")
        return v @ w.t() + (b if b is not None else 0)

    for i in range(cfg["layers"]):
        b = f"blocks.{i}."
        if cfg["qkv"] == "fused":
            q, k, v = lin(b + "attn.qkv", x).split(C, dim=-1)
        else:
            q, k, v = lin(b + "attn.q", x), lin(b + "attn.k", x), lin(b + "attn.v", x)
        heads = []
        for h in range(H):
            sl = slice(h * D, (h + 1) * D)
            qh, kh, vh = q[..., sl], k[..., sl], v[..., sl]
            if cfg["positions"] == "rope":
                qh = qh * cos + nm.rotate_half(qh) * sin
                kh = kh * cos + nm.rotate_half(kh) * sin
            s = P[b + "attn.s_qk"][sl] * math.sqrt(C)
            qh, kh = s * F.normalize(qh, dim=-1, eps=0.0), s * F.normalize(kh, dim=-1, eps=0.0)
            sc = (qh @ kh.transpose(-1, -2)) / (1.0 / math.sqrt(D))
            sc = sc + torch.full((T, T), float("-inf")).triu(1)
            heads.append(torch.softmax(sc, dim=-1) @ vh)
        h_att = lin(b + "attn.proj", torch.cat(heads, dim=-1))
        lr = (P[b + "attn_alpha"] * (0.05 / (1.0 / math.sqrt(C)))).abs()
        A = F.normalize(x, dim=-1, eps=0.0)
        x = F.normalize(A + lr * (F.normalize(h_att, dim=-1, eps=0.0) - A), dim=-1, eps=0.0)
        uv = lin(b + "mlp.fc1", x) * (P[b + "mlp.s_uv"] * math.sqrt(C))
        if cfg["mlp"] == "gelu":
            act = F.gelu(uv)
        else:
            u, g = uv.chunk(2, dim=-1)
            act = u * F.silu(g)
        h_mlp = lin(b + "mlp.fc2", act)
        lr = (P[b + "mlp_alpha"] * (0.05 / (1.0 / math.sqrt(C)))).abs()
        A = F.normalize(x, dim=-1, eps=0.0)
        x = F.normalize(A + lr * (F.normalize(h_mlp, dim=-1, eps=0.0) - A), dim=-1, eps=0.0)
    return (x @ P["head.weight"].t()) * (P["head.s_z"] * (1.0 / (1.0 / math.sqrt(C))))


def self_check(case):
    cfg = cfg_of(case)
    model, tokens = seeded_model(cfg, CHECK_SEED)
    inputs = tokens[:, :-1]
    with torch.no_grad():
        a, b = model(inputs), code_form(dict(model.named_parameters()), cfg, inputs)
    e = ft.normwise(b, a)
    assert e < 1e-12, f"{case}: code form differs by {e:.2e}"
    tiny = dict(cfg, width=8, heads=2, vocab=5, copy_len=3, batch=1, layers=2)
    tmodel, ttok = seeded_model(tiny, CHECK_SEED + 1)
    checked = ft.gradcheck_model(tmodel, ttok, case)
    compute(case, check_units=True)
    return f"code form {e:.1e}, {checked}, unit norms after 5 steps"


def run_self_checks():
    for case in CASES:
        print(f"self-check ngpt/{case}: {self_check(case)}", flush=True)


FIXTURES = ft.Fixtures(list(CASES), fixture_path, metadata, compute, cfg=lambda case: cfg_of(case),
                       expected=lambda case: expected_params(cfg_of(case)))

if __name__ == "__main__":
    torch.set_num_threads(1)  # tiny tensors: more threads only wait on each other
    ft.main(__doc__, FIXTURES, run_self_checks)
