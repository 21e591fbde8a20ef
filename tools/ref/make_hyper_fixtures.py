#!/usr/bin/env python3
"""Generate float64 parity fixtures of hyper-connections (hc) and manifold-constrained hyper-connections
(mhc) around the seed block (tests/data/ref_hyper_<placement>_<form>_n<n>_<norm>.safetensors).

Usage (from the repository root; needs PyTorch and the PyPI package `hyper-connections`, whose modules do
the mixing: hyper_models.py):
  tools/ref/make_hyper_fixtures.py            # self-checks, then write the fixtures
  tools/ref/make_hyper_fixtures.py --verify   # self-checks, then re-read and recompute the fixtures
  tools/ref/make_hyper_fixtures.py --check    # self-checks only

Self-checks, for every case:
  1. parameter names and shapes equal `expected_params`, written a second time from the spec;
  2. the package-based stack (hyper_models.HyperModel) against hyper_models.own_forward (the equations of
     docs/placements.md written directly): logits and every gradient to 1e-12;
  3. hc with one stream and the static init (A_m = 1, A_r = 1, B = 1) against placement_models'
     Pre-LN stack with the same weights: logits to 1e-12;
  4. mhc: every token's residual mix doubly stochastic (rows and columns sum to 1 within 1e-8);
  5. torch.autograd.gradcheck of the logits w.r.t. every parameter tensor on a tiny input (GRADCHECK cases).

Each file holds what tools/ref/fixture_tools.run_fixture stores (logits, loss, gradients, 5 Adam steps) and
metadata norm_placement, norm, residual_streams, hc_dynamic and the sizes.
"""
import os
import sys

import torch
from torch.func import functional_call

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import copy_model as cm  # noqa: E402
import fixture_tools as ft  # noqa: E402
import hyper_models as hm  # noqa: E402
import placement_models as pm  # noqa: E402

BASE = dict(layers=2, width=16, heads=2, vocab=11, copy_len=5, batch=3, mlp_ratio=4, norm_eps=1e-5)
TINY = dict(layers=2, width=8, heads=2, vocab=5, copy_len=3, batch=1, mlp_ratio=4, norm_eps=1e-5)

# (placement, dynamic, n, norm): fixed seeds (do not change or reorder).
VARIANTS = {
    ("hc", "static", 2, "layernorm"): 3101,
    ("hc", "dynamic", 3, "layernorm"): 3102,
    ("hc", "dynamic", 4, "rmsnorm"): 3103,
    ("hc", "dynamic", 2, "dyt"): 3104,
    ("mhc", "static", 3, "layernorm"): 3105,
    ("mhc", "dynamic", 4, "layernorm"): 3106,
    ("mhc", "dynamic", 2, "rmsnorm"): 3107,
}
CHECK_SEED = 4100
# gradcheck (minutes each on 2 cores) on one case per placement, the dynamic forms (they contain the static one)
GRADCHECK = (("hc", "dynamic", 3, "layernorm"), ("mhc", "dynamic", 2, "rmsnorm"))


def cfg_for(placement, form, n, norm, base=BASE):
    return dict(base, residual_streams=n, hc_dynamic=form == "dynamic")


def fixture_path(placement, form, n, norm):
    return os.path.join(ft.OUT_DIR, f"ref_hyper_{placement}_{form}_n{n}_{norm}.safetensors")


def expected_params(cfg, placement, norm):
    C, V, N, T, n = cfg["width"], cfg["vocab"], cfg["layers"], 2 * cfg["copy_len"] - 1, cfg["residual_streams"]
    I = cfg["mlp_ratio"] * C

    def norm_params(prefix):
        p = {prefix + ".weight": (C,)}
        if norm != "rmsnorm":
            p[prefix + ".bias"] = (C,)
        if norm in ("dyt", "derf"):
            p[prefix + ".alpha"] = (1,)
        if norm == "derf":
            p[prefix + ".shift"] = (1,)
        return p

    def mix(prefix):
        p = {prefix + "alpha_in": (n,), prefix + "alpha_res": (n, n), prefix + "beta": (n,)}
        if cfg["hc_dynamic"]:
            p.update(norm_params(prefix + "norm"))
            p.update({prefix + "w_in": (C,), prefix + "w_res": (C, n), prefix + "w_beta": (C,),
                      prefix + "scale_alpha": (2 if placement == "mhc" else 1,), prefix + "scale_beta": (1,)})
        return p

    p = {"tok_emb.weight": (V, C), "pos_emb.weight": (T, C), "head.weight": (V, C)}
    p.update(norm_params("final_norm"))
    for i in range(N):
        b = f"blocks.{i}."
        p.update(mix(b + "attn_hc."))
        p.update(mix(b + "mlp_hc."))
        p.update(norm_params(b + "norm1"))
        p.update(norm_params(b + "norm2"))
        p.update({b + "attn.qkv.weight": (3 * C, C), b + "attn.qkv.bias": (3 * C,),
                  b + "attn.proj.weight": (C, C), b + "attn.proj.bias": (C,),
                  b + "mlp.fc1.weight": (I, C), b + "mlp.fc1.bias": (I,),
                  b + "mlp.fc2.weight": (C, I), b + "mlp.fc2.bias": (C,)})
    return p


def metadata(placement, form, n, norm):
    cfg = cfg_for(placement, form, n, norm)
    meta = {"norm_placement": placement, "norm": norm, "residual_streams": str(n),
            "hc_dynamic": "true" if cfg["hc_dynamic"] else "false"}
    for k in ("layers", "width", "heads", "vocab", "copy_len", "batch", "mlp_ratio"):
        meta[k] = str(cfg[k])
    meta["norm_eps"] = f"{cfg['norm_eps']:g}"
    meta["adam_lr"] = f"{ft.ADAM['lr']:g}"
    meta["generator"] = "tools/ref/make_hyper_fixtures.py"
    meta["torch_version"] = torch.__version__
    return meta


def seeded_model(placement, norm, cfg, seed):
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(seed)
    model = hm.init_fixture(hm.HyperModel(cfg, placement, norm).double())
    tokens = cm.copy_batch(cfg["batch"], cfg["copy_len"], cfg["vocab"])
    ft.check_param_shapes(model, expected_params(cfg, placement, norm),
                          f"{placement}/{norm}: parameter names/shapes differ from the spec")
    return model, tokens


def compute(placement, form, n, norm, params=None, tokens=None):
    model, seeded_tokens = seeded_model(placement, norm, cfg_for(placement, form, n, norm),
                                        VARIANTS[(placement, form, n, norm)])
    return ft.run_fixture(model, seeded_tokens if tokens is None else tokens, params)


# ----------------------------------------------------------------------------- self-checks

def check_own(placement, form, n, norm):
    """2. the package's mixing against the equations written directly."""
    cfg = cfg_for(placement, form, n, norm)
    model, tokens = seeded_model(placement, norm, cfg, CHECK_SEED)
    inputs, lf = tokens[:, :-1], ft.copy_loss_of(tokens)
    names, params = zip(*model.named_parameters())
    logits = model(inputs)
    g_main = torch.autograd.grad(lf(logits), params)
    own = hm.own_forward(dict(model.named_parameters()), cfg, placement, norm, inputs)
    g_own = torch.autograd.grad(lf(own), params)
    worst = ft.normwise(own.detach(), logits.detach())
    assert worst < 1e-12, f"{placement}/{form}/{n}/{norm}: own formulation logits differ by {worst:.2e}"
    # relative to each tensor's largest entry, floored at 1e-3 of the largest gradient: A_m's gradient at the first
    # sub-layer is near zero (a norm is blind to its input's scale and the streams are equal copies there)
    floor = 1e-3 * max(float(g.abs().max()) for g in g_main)
    for name, a, b in zip(names, g_own, g_main):
        e = float((a - b).abs().max()) / max(float(b.abs().max()), floor)
        assert e < 1e-12, f"{placement}/{form}/{n}/{norm}: own formulation gradient of {name} differs by {e:.2e}"
        worst = max(worst, e)
    return f"package vs own {worst:.1e}"


def check_pre(norm):
    """3. hc, n = 1, static init == Pre-LN with the same weights."""
    cfg = cfg_for("hc", "static", 1, norm)
    torch.manual_seed(CHECK_SEED)
    hc = hm.HyperModel(cfg, "hc", norm).double()          # the mixing at its init: A_m = A_r = B = 1
    torch.manual_seed(CHECK_SEED)
    pre = pm.init_fixture(pm.PlacementModel(cfg, "pre", norm).double())
    shared = dict(pre.named_parameters())
    with torch.no_grad():
        for name, p in hc.named_parameters():
            if "_hc." not in name:
                p.copy_(shared[name])
    tokens = cm.copy_batch(cfg["batch"], cfg["copy_len"], cfg["vocab"])
    with torch.no_grad():
        e = ft.normwise(hc(tokens[:, :-1]), pre(tokens[:, :-1]))
    assert e < 1e-12, f"hc n=1 static vs pre/{norm}: logits differ by {e:.2e}"
    return f"hc n=1 == pre {e:.1e}"


def check_doubly_stochastic(placement, form, n, norm):
    """4. mhc's residual mixes, every token, every sub-layer."""
    if placement != "mhc":
        return None
    cfg = cfg_for(placement, form, n, norm)
    model, tokens = seeded_model(placement, norm, cfg, CHECK_SEED)
    P = dict(model.named_parameters())
    mixes = []
    orig = hm._sinkhorn

    def spy(A, iters=hm.SINKHORN_ITERS):
        M = orig(A, iters)
        mixes.append(M.detach())
        return M

    hm._sinkhorn = spy
    try:
        with torch.no_grad():
            hm.own_forward(P, cfg, placement, norm, tokens[:, :-1])
    finally:
        hm._sinkhorn = orig
    worst = 0.0
    for M in mixes:
        worst = max(worst, float((M.sum(-1) - 1).abs().max()), float((M.sum(-2) - 1).abs().max()))
    # rows sum to 1 to rounding (the last step), columns to the 20 iterations' convergence
    assert worst < 1e-8, f"{placement}: mixing not doubly stochastic ({worst:.1e})"
    return f"doubly stochastic {worst:.1e}"


def check_gradcheck(placement, form, n, norm):
    """5. gradcheck of the logits w.r.t. every parameter tensor, tiny input."""
    tcfg = cfg_for(placement, form, n, norm, TINY)
    tmodel, ttok = seeded_model(placement, norm, tcfg, CHECK_SEED + 100)
    tnames = [k for k, _ in tmodel.named_parameters()]
    tin = ttok[:1, :-1]

    def f(*ts):
        return functional_call(tmodel, dict(zip(tnames, ts)), (tin,))

    ins = tuple(p.detach().clone().requires_grad_(True) for _, p in tmodel.named_parameters())
    assert torch.autograd.gradcheck(f, ins, eps=1e-6, atol=1e-7, rtol=1e-5, raise_exception=False), \
        f"{placement}/{form}/{n}/{norm}: gradcheck failed"
    return f"gradcheck {sum(t.numel() for t in ins)} entries"


def run_self_checks():
    for norm in ("layernorm", "rmsnorm"):
        print(f"self-check {check_pre(norm)} ({norm})", flush=True)
    for case in VARIANTS:
        checks = (check_own, check_doubly_stochastic) + ((check_gradcheck,) if case in GRADCHECK else ())
        msgs = [m for m in (c(*case) for c in checks) if m]
        print(f"self-check {'/'.join(map(str, case))}: {', '.join(msgs)}", flush=True)


FIXTURES = ft.Fixtures(list(VARIANTS), fixture_path, metadata, compute,
                       cfg=lambda placement, form, n, norm: cfg_for(placement, form, n, norm),
                       expected=lambda placement, form, n, norm: expected_params(
                           cfg_for(placement, form, n, norm), placement, norm),
                       loose=ft.loose_key_bias)


if __name__ == "__main__":
    ft.main(__doc__, FIXTURES, run_self_checks)
