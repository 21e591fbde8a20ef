#!/usr/bin/env -S /usr/bin/python3
"""Generate float64 parity fixtures of the seed block under every norm placement and norm kind
(tests/data/ref_place_<placement>_<norm>.safetensors).

Usage (from the repository root, needs PyTorch -> Debian's /usr/bin/python3):
  tools/ref/make_placement_fixtures.py            # self-checks, then write the 27 fixtures
  tools/ref/make_placement_fixtures.py --verify   # self-checks, then re-read the fixtures with the
                                                  # independent reader: format, metadata, names/shapes,
                                                  # round trip, recomputation from the stored params/tokens
  tools/ref/make_placement_fixtures.py --check    # self-checks only

Self-checks, for every placement x norm kind (rezero and tfixup have no norms: once each):
  1. parameter names and shapes equal `expected_params`, a list written a second time from the spec;
  2. the module stack (placement_models.PlacementModel, direct per-placement code) against
     placement_models.alt_forward (one generic sub-layer y = after(s*x + g*out(F(c*in(x)))) driven by a
     per-placement table; F.multi_head_attention_forward, F.layer_norm, F.gelu): logits and every
     gradient to 1e-12; mix additionally at N = 1..8 (logits), which moves the post/pre boundary;
  3. post/pre with layernorm/rmsnorm against the existing seed reference copy_model.CopyModel
     (load_state_dict(strict=True)): logits and gradients to 1e-12;
  4. torch.autograd.gradcheck of the logits w.r.t. every parameter tensor on a tiny one-sequence input
     (width 8, heads 2, vocab 5, copy_len 3; layers 2, mix 4);
  5. central differences of the loss at 2 random entries of every parameter tensor (fixture size).

Each file holds param.<name>, tokens, logits, loss, grad.<name>, adam_losses (5 Adam steps, lr 1e-2),
adam_final.<name> and metadata (see tools/ref/README.md). Task and loss: copy_model.copy_batch / copy_loss.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import copy_model as cm  # noqa: E402
import fixture_tools as ft  # noqa: E402  (safetensors writer and reader, fixture run, generate/verify, CLI)
import placement_models as pm  # noqa: E402

BASE = dict(layers=2, width=16, heads=2, vocab=11, copy_len=5, batch=3, mlp_ratio=4, norm_eps=1e-5)
TINY = dict(layers=2, width=8, heads=2, vocab=5, copy_len=3, batch=1, mlp_ratio=4, norm_eps=1e-5)

# The 27 fixtures and their fixed seeds (stable across runs; do not change or reorder).
VARIANTS = {
    ("post", "layernorm"): 3001, ("pre", "layernorm"): 3002, ("peri", "layernorm"): 3003,
    ("reordered", "layernorm"): 3004, ("deepnorm", "layernorm"): 3005, ("admin", "layernorm"): 3006,
    ("rezero", "layernorm"): 3007, ("tfixup", "layernorm"): 3008, ("mix", "layernorm"): 3009,
    ("lns", "layernorm"): 3010,
    ("pre", "dyt"): 3011, ("post", "dyt"): 3012, ("peri", "rmsnorm"): 3013,
    ("deepnorm", "rmsnorm"): 3014, ("admin", "dyt"): 3015,
    ("pre", "derf"): 3016, ("post", "derf"): 3017,
    # attention options (third element): gated attention
    ("pre", "layernorm", "gate"): 3018, ("post", "rmsnorm", "gate"): 3019, ("peri", "derf", "gate"): 3020,
    # value residual (3 blocks), alone and with the gate
    ("pre", "layernorm", "vres"): 3021, ("post", "layernorm", "vres"): 3022, ("pre", "rmsnorm", "gate_vres"): 3023,
    # HybridNorm, HybridNorm* (3 blocks with the value residual and the gate: the v norm before the mix)
    ("hybrid", "layernorm"): 3024, ("hybrid_star", "rmsnorm"): 3025, ("hybrid", "derf"): 3026,
    ("hybrid_star", "layernorm", "gate_vres"): 3027,
}
# Self-checks run on every combination (norm kind is irrelevant for rezero / tfixup).
CHECK_COMBOS = [(p, n) for p in pm.PLACEMENTS for n in pm.NORMS
                if n == "layernorm" or p not in ("rezero", "tfixup")]
CHECK_COMBOS += [("pre", "layernorm", "gate"), ("post", "rmsnorm", "gate"), ("peri", "derf", "gate"),
                 ("mix", "layernorm", "gate"), ("rezero", "layernorm", "gate"),
                 ("pre", "layernorm", "vres"), ("post", "layernorm", "vres"), ("pre", "rmsnorm", "gate_vres"),
                 ("mix", "dyt", "vres"), ("hybrid", "rmsnorm", "gate_vres"), ("hybrid_star", "layernorm", "gate_vres")]
# a case's third element -> cfg keys
OPTIONS = {"": {}, "gate": {"attn_gate": True}, "vres": {"value_residual": True, "layers": 3},
           "gate_vres": {"attn_gate": True, "value_residual": True, "layers": 3}}
CHECK_SEED = 4000


def cfg_for(placement, base=BASE, option=""):
    """mix needs 4 blocks for a post block to exist (floor(0.25 * 2) = 0)."""
    cfg = dict(base, layers=4 if placement == "mix" else base["layers"])
    cfg.update(OPTIONS[option])
    if placement == "mix":
        cfg["layers"] = 4
    return cfg


def fixture_path(placement, norm, option=""):
    suffix = f"_{option}" if option else ""
    return os.path.join(ft.OUT_DIR, f"ref_place_{placement}_{norm}{suffix}.safetensors")


def expected_params(cfg, placement, norm):
    """Names and shapes written out a second time from the spec (not from the modules)."""
    C, V, N, T = cfg["width"], cfg["vocab"], cfg["layers"], 2 * cfg["copy_len"] - 1
    I = cfg["mlp_ratio"] * C

    def norm_params(prefix, C=C):
        if norm == "layernorm":
            return {prefix + ".weight": (C,), prefix + ".bias": (C,)}
        if norm == "rmsnorm":
            return {prefix + ".weight": (C,)}
        if norm == "derf":
            return {prefix + ".weight": (C,), prefix + ".bias": (C,), prefix + ".alpha": (1,), prefix + ".shift": (1,)}
        return {prefix + ".weight": (C,), prefix + ".bias": (C,), prefix + ".alpha": (1,)}

    p = {"tok_emb.weight": (V, C), "pos_emb.weight": (T, C), "head.weight": (V, C)}
    for i in range(N):
        b = f"blocks.{i}."
        if cfg.get("attn_gate"):
            p[b + "attn.gate.weight"] = (C, C)
        if cfg.get("value_residual") and i > 0:
            p[b + "attn.value_lambda"] = (2,)
        p.update({b + "attn.qkv.weight": (3 * C, C), b + "attn.qkv.bias": (3 * C,),
                  b + "attn.proj.weight": (C, C), b + "attn.proj.bias": (C,),
                  b + "mlp.fc1.weight": (I, C), b + "mlp.fc1.bias": (I,),
                  b + "mlp.fc2.weight": (C, I), b + "mlp.fc2.bias": (C,)})
        if placement in ("post", "pre", "peri", "deepnorm", "admin", "mix", "lns"):
            p.update(norm_params(b + "norm1"))
            p.update(norm_params(b + "norm2"))
        if placement in ("hybrid", "hybrid_star"):
            if placement == "hybrid_star" and i == 0:
                p.update(norm_params(b + "norm1"))
            p.update(norm_params(b + "norm2"))
            for nm in ("q_norm", "k_norm", "v_norm"):
                p.update(norm_params(b + "attn." + nm, cfg["width"] // cfg["heads"]))
        if placement in ("peri", "reordered"):
            p.update(norm_params(b + "attn_out_norm"))
            p.update(norm_params(b + "mlp_out_norm"))
        if placement == "admin":
            p.update({b + "attn_omega": (C,), b + "mlp_omega": (C,)})
        if placement == "rezero":
            p[b + "rezero_alpha"] = (1,)
    if placement in ("pre", "peri", "reordered", "mix", "lns", "hybrid", "hybrid_star"):
        p.update(norm_params("final_norm"))
    return p


def metadata(placement, norm, option=""):
    cfg = cfg_for(placement, option=option)
    meta = {"norm_placement": placement, "norm": norm}
    if cfg.get("attn_gate"):
        meta["attn_gate"] = "true"
    if cfg.get("value_residual"):
        meta["value_residual"] = "true"
    for k in ("layers", "width", "heads", "vocab", "copy_len", "batch", "mlp_ratio"):
        meta[k] = str(cfg[k])
    meta["norm_eps"] = f"{cfg['norm_eps']:g}"          # "1e-05", as the ref_copy fixtures
    meta["adam_lr"] = f"{ft.ADAM['lr']:g}"             # "0.01"
    if placement == "deepnorm":
        meta["deepnorm_alpha"] = repr(pm.deepnorm_alpha(cfg["layers"]))
    meta["generator"] = "tools/ref/make_placement_fixtures.py"
    meta["torch_version"] = torch.__version__
    return meta


# ----------------------------------------------------------------------------- reference run

def seeded_model(placement, norm, cfg, seed):
    """Model with the fixture init and a copy batch, both drawn from `seed`; names/shapes checked."""
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(seed)
    model = pm.init_fixture(pm.PlacementModel(cfg, placement, norm).double())
    tokens = cm.copy_batch(cfg["batch"], cfg["copy_len"], cfg["vocab"])
    ft.check_param_shapes(model, expected_params(cfg, placement, norm),
                          f"{placement}/{norm}: parameter names/shapes differ from the spec")
    return model, tokens


def compute(placement, norm, option="", params=None, tokens=None):
    """Results for the seeded init/batch, or for the given params/tokens."""
    key = (placement, norm, option) if option else (placement, norm)
    model, seeded_tokens = seeded_model(placement, norm, cfg_for(placement, option=option), VARIANTS[key])
    return ft.run_fixture(model, seeded_tokens if tokens is None else tokens, params)


# ----------------------------------------------------------------------------- self-checks

normwise = ft.normwise
loss_fn = ft.copy_loss_of


def check_alt(placement, norm, option=""):
    """2. second formulation: logits and every gradient to 1e-12 (mix also at N = 1..8, logits)."""
    cfg = cfg_for(placement, option=option)
    model, tokens = seeded_model(placement, norm, cfg, CHECK_SEED)      # check 1 (names/shapes)
    inputs, lf = tokens[:, :-1], loss_fn(tokens)
    names, params = zip(*model.named_parameters())
    logits = model(inputs)
    g_main = torch.autograd.grad(lf(logits), params)
    alt = pm.alt_forward(dict(model.named_parameters()), cfg, placement, norm, inputs)
    g_alt = torch.autograd.grad(lf(alt), params)
    worst = normwise(alt.detach(), logits.detach())
    assert worst < 1e-12, f"{placement}/{norm}: alt formulation logits differ by {worst:.2e}"
    for name, a, b in zip(names, g_alt, g_main):
        e = normwise(a, b)
        assert e < 1e-12, f"{placement}/{norm}: alt formulation gradient of {name} differs by {e:.2e}"
        worst = max(worst, e)
    msg = f"alt {worst:.1e}"
    if placement == "mix":
        for N in range(1, 9):
            c = dict(cfg, layers=N)
            m2, _ = seeded_model(placement, norm, c, CHECK_SEED + N)
            with torch.no_grad():
                e = normwise(pm.alt_forward(dict(m2.named_parameters()), c, placement, norm, inputs),
                             m2(inputs))
            assert e < 1e-12, f"mix/{norm} N={N}: alt formulation logits differ by {e:.2e}"
        msg += ", mix N=1..8"
    return msg


def check_copy_model(placement, norm, option=""):
    """3. the existing seed reference (copy_model.CopyModel), post/pre with layernorm/rmsnorm only."""
    if placement not in ("post", "pre") or norm not in ("layernorm", "rmsnorm") or option:
        return None
    cfg = cfg_for(placement)
    model, tokens = seeded_model(placement, norm, cfg, CHECK_SEED)
    inputs, lf = tokens[:, :-1], loss_fn(tokens)
    names, params = zip(*model.named_parameters())
    logits = model(inputs)
    g_main = torch.autograd.grad(lf(logits), params)
    ref = cm.CopyModel(cfg["layers"], cfg["width"], cfg["heads"], cfg["vocab"], cfg["copy_len"],
                       placement=placement, norm=norm, eps=cfg["norm_eps"]).double()
    ref.load_state_dict({k: v.detach() for k, v in model.named_parameters()}, strict=True)
    rl = ref(inputs)
    g_ref = torch.autograd.grad(lf(rl), [dict(ref.named_parameters())[k] for k in names])
    e = normwise(rl.detach(), logits.detach())
    for a, b in zip(g_ref, g_main):
        e = max(e, normwise(a, b))
    assert e < 1e-12, f"{placement}/{norm}: copy_model.CopyModel differs by {e:.2e}"
    return f"copy_model {e:.1e}"


def check_gradcheck(placement, norm, option=""):
    """4. gradcheck of the logits w.r.t. every parameter tensor, tiny one-sequence input."""
    tcfg = cfg_for(placement, TINY, option)
    tmodel, ttok = seeded_model(placement, norm, tcfg, CHECK_SEED + 100)
    return ft.gradcheck_model(tmodel, ttok, f"{placement}/{norm}")


def check_central(placement, norm, option=""):
    """5. central differences of the loss at 2 entries of every parameter tensor (fixture size)."""
    cfg = cfg_for(placement, option=option)
    model, tokens = seeded_model(placement, norm, cfg, CHECK_SEED)
    inputs, lf = tokens[:, :-1], loss_fn(tokens)
    names, params = zip(*model.named_parameters())
    g_main = torch.autograd.grad(lf(model(inputs)), params)
    count, worst_fd = ft.central_differences(f"{placement}/{norm}", names, params, g_main,
                                             lambda: lf(model(inputs)).item())
    return f"central differences {count} (worst rel {worst_fd:.1e})"


CHECKS = (check_alt, check_copy_model, check_gradcheck, check_central)


def self_check(placement, norm, option=""):
    """Raises AssertionError on any failure; returns a one-line summary. Check 1 (names and shapes
    against expected_params) runs inside seeded_model, i.e. in every other check."""
    return ", ".join(m for m in (c(placement, norm, option) for c in CHECKS) if m)


def run_self_checks():
    for combo in CHECK_COMBOS:
        print(f"self-check {'/'.join(combo)}: {self_check(*combo)}", flush=True)


# ----------------------------------------------------------------------------- generate / verify

FIXTURES = ft.Fixtures(VARIANTS, fixture_path, metadata, compute,
                       cfg=lambda placement, norm, option="": cfg_for(placement, option=option),
                       expected=lambda placement, norm, option="": expected_params(
                           cfg_for(placement, option=option), placement, norm),
                       loose=ft.loose_key_bias)


if __name__ == "__main__":
    ft.main(__doc__, FIXTURES, run_self_checks)
