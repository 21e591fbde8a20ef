#!/usr/bin/env -S /usr/bin/python3
"""Generate float64 parity fixtures of the seed block under every norm placement and norm kind
(tests/data/ref_place_<placement>_<norm>.safetensors).

Usage (from the repository root, needs PyTorch -> Debian's /usr/bin/python3):
  tools/ref/make_placement_fixtures.py            # self-checks, then write the 15 fixtures
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
import argparse
import os
import sys

import torch
from torch.nn.utils import stateless

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import copy_model as cm  # noqa: E402
import make_copy_fixtures as mcf  # noqa: E402  (safetensors writer and independent reader)
import placement_models as pm  # noqa: E402

REPO = mcf.REPO
OUT_DIR = mcf.OUT_DIR

BASE = dict(layers=2, width=16, heads=2, vocab=11, copy_len=5, batch=3, mlp_ratio=4, norm_eps=1e-5)
TINY = dict(layers=2, width=8, heads=2, vocab=5, copy_len=3, batch=1, mlp_ratio=4, norm_eps=1e-5)
ADAM = mcf.ADAM              # lr 1e-2, betas (0.9, 0.999), eps 1e-8, no weight decay
ADAM_STEPS = mcf.ADAM_STEPS  # 5

# The 15 fixtures and their fixed seeds (stable across runs; do not change or reorder).
VARIANTS = {
    ("post", "layernorm"): 3001, ("pre", "layernorm"): 3002, ("peri", "layernorm"): 3003,
    ("reordered", "layernorm"): 3004, ("deepnorm", "layernorm"): 3005, ("admin", "layernorm"): 3006,
    ("rezero", "layernorm"): 3007, ("tfixup", "layernorm"): 3008, ("mix", "layernorm"): 3009,
    ("lns", "layernorm"): 3010,
    ("pre", "dyt"): 3011, ("post", "dyt"): 3012, ("peri", "rmsnorm"): 3013,
    ("deepnorm", "rmsnorm"): 3014, ("admin", "dyt"): 3015,
}
# Self-checks run on every combination (norm kind is irrelevant for rezero / tfixup).
CHECK_COMBOS = [(p, n) for p in pm.PLACEMENTS for n in pm.NORMS
                if n == "layernorm" or p not in ("rezero", "tfixup")]
CHECK_SEED = 4000


def cfg_for(placement, base=BASE):
    """mix needs 4 blocks for a post block to exist (floor(0.25 * 2) = 0)."""
    return dict(base, layers=4 if placement == "mix" else base["layers"])


def fixture_path(placement, norm):
    return os.path.join(OUT_DIR, f"ref_place_{placement}_{norm}.safetensors")


def expected_params(cfg, placement, norm):
    """Names and shapes written out a second time from the spec (not from the modules)."""
    C, V, N, T = cfg["width"], cfg["vocab"], cfg["layers"], 2 * cfg["copy_len"] - 1
    I = cfg["mlp_ratio"] * C

    def norm_params(prefix):
        if norm == "layernorm":
            return {prefix + ".weight": (C,), prefix + ".bias": (C,)}
        if norm == "rmsnorm":
            return {prefix + ".weight": (C,)}
        return {prefix + ".weight": (C,), prefix + ".bias": (C,), prefix + ".alpha": (1,)}

    p = {"tok_emb.weight": (V, C), "pos_emb.weight": (T, C), "head.weight": (V, C)}
    for i in range(N):
        b = f"blocks.{i}."
        p.update({b + "attn.qkv.weight": (3 * C, C), b + "attn.qkv.bias": (3 * C,),
                  b + "attn.proj.weight": (C, C), b + "attn.proj.bias": (C,),
                  b + "mlp.fc1.weight": (I, C), b + "mlp.fc1.bias": (I,),
                  b + "mlp.fc2.weight": (C, I), b + "mlp.fc2.bias": (C,)})
        if placement in ("post", "pre", "peri", "deepnorm", "admin", "mix", "lns"):
            p.update(norm_params(b + "norm1"))
            p.update(norm_params(b + "norm2"))
        if placement in ("peri", "reordered"):
            p.update(norm_params(b + "attn_out_norm"))
            p.update(norm_params(b + "mlp_out_norm"))
        if placement == "admin":
            p.update({b + "attn_omega": (C,), b + "mlp_omega": (C,)})
        if placement == "rezero":
            p[b + "rezero_alpha"] = (1,)
    if placement in ("pre", "peri", "reordered", "mix", "lns"):
        p.update(norm_params("final_norm"))
    return p


def metadata(placement, norm):
    cfg = cfg_for(placement)
    meta = {"norm_placement": placement, "norm": norm}
    for k in ("layers", "width", "heads", "vocab", "copy_len", "batch", "mlp_ratio"):
        meta[k] = str(cfg[k])
    meta["norm_eps"] = f"{cfg['norm_eps']:g}"          # "1e-05", as the ref_copy fixtures
    meta["adam_lr"] = f"{ADAM['lr']:g}"                # "0.01"
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
    got = {n: tuple(p.shape) for n, p in model.named_parameters()}
    exp = expected_params(cfg, placement, norm)
    assert got == exp, f"{placement}/{norm}: parameter names/shapes differ from the spec: " \
        f"extra {sorted(set(got) - set(exp))}, missing {sorted(set(exp) - set(got))}, " \
        f"shape {[n for n in got if n in exp and got[n] != exp[n]]}"
    return model, tokens


def compute(placement, norm, params=None, tokens=None):
    """Results for the seeded init/batch, or for the given params/tokens."""
    model, seeded_tokens = seeded_model(placement, norm, cfg_for(placement), VARIANTS[(placement, norm)])
    if params is not None:
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(params[name])
    if tokens is None:
        tokens = seeded_tokens
    return mcf.run_fixture(model, tokens)


# ----------------------------------------------------------------------------- self-checks

normwise = mcf.normwise


def loss_fn(tokens):
    n = tokens.shape[1] // 2
    targets = tokens[:, 1:]

    def f(logits):
        V = logits.shape[-1]
        return torch.nn.functional.cross_entropy(logits[:, n - 1:].reshape(-1, V),
                                                 targets[:, n - 1:].reshape(-1))
    return f


def check_alt(placement, norm):
    """2. second formulation: logits and every gradient to 1e-12 (mix also at N = 1..8, logits)."""
    cfg = cfg_for(placement)
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


def check_copy_model(placement, norm):
    """3. the existing seed reference (copy_model.CopyModel), post/pre with layernorm/rmsnorm only."""
    if placement not in ("post", "pre") or norm not in ("layernorm", "rmsnorm"):
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


def check_gradcheck(placement, norm):
    """4. gradcheck of the logits w.r.t. every parameter tensor, tiny one-sequence input."""
    tcfg = cfg_for(placement, TINY)
    tmodel, ttok = seeded_model(placement, norm, tcfg, CHECK_SEED + 100)
    tnames = [k for k, _ in tmodel.named_parameters()]
    tin = ttok[:1, :-1]

    def f(*ts):
        return stateless.functional_call(tmodel, dict(zip(tnames, ts)), (tin,))

    ins = tuple(p.detach().clone().requires_grad_(True) for _, p in tmodel.named_parameters())
    assert torch.autograd.gradcheck(f, ins, eps=1e-6, atol=1e-7, rtol=1e-5, raise_exception=False), \
        f"{placement}/{norm}: gradcheck failed"
    return f"gradcheck {sum(t.numel() for t in ins)} entries"


def check_central(placement, norm):
    """5. central differences of the loss at 2 entries of every parameter tensor (fixture size)."""
    cfg = cfg_for(placement)
    model, tokens = seeded_model(placement, norm, cfg, CHECK_SEED)
    inputs, lf = tokens[:, :-1], loss_fn(tokens)
    names, params = zip(*model.named_parameters())
    g_main = torch.autograd.grad(lf(model(inputs)), params)
    gen = torch.Generator().manual_seed(7)
    h, worst_fd, count = 1e-5, 0.0, 0
    with torch.no_grad():
        for name, p, g in zip(names, params, g_main):
            for idx in torch.randint(0, p.numel(), (2,), generator=gen).tolist():
                flat = p.view(-1)
                old = flat[idx].item()
                flat[idx] = old + h
                lp = lf(model(inputs)).item()
                flat[idx] = old - h
                lm = lf(model(inputs)).item()
                flat[idx] = old
                fd, ad = (lp - lm) / (2 * h), g.view(-1)[idx].item()
                assert abs(fd - ad) < 1e-8 + 1e-6 * abs(ad), \
                    f"{placement}/{norm}: {name}[{idx}] autograd {ad:.10g} vs central difference {fd:.10g}"
                worst_fd, count = max(worst_fd, abs(fd - ad) / (1e-6 + abs(ad))), count + 1
    return f"central differences {count} (worst rel {worst_fd:.1e})"


CHECKS = (check_alt, check_copy_model, check_gradcheck, check_central)


def self_check(placement, norm):
    """Raises AssertionError on any failure; returns a one-line summary. Check 1 (names and shapes
    against expected_params) runs inside seeded_model, i.e. in every other check."""
    return ", ".join(m for m in (c(placement, norm) for c in CHECKS) if m)


def run_self_checks():
    for placement, norm in CHECK_COMBOS:
        print(f"self-check {placement}/{norm}: {self_check(placement, norm)}", flush=True)


# ----------------------------------------------------------------------------- generate / verify

def generate():
    os.makedirs(OUT_DIR, exist_ok=True)
    for placement, norm in VARIANTS:
        r = compute(placement, norm)
        tensors = [("tokens", r["tokens"]), ("logits", r["logits"]), ("loss", r["loss"]),
                   ("adam_losses", r["adam_losses"])]
        tensors += [(f"param.{n}", r["init"][n]) for n in r["names"]]
        tensors += [(f"grad.{n}", r["grads"][n]) for n in r["names"]]
        tensors += [(f"adam_final.{n}", r["final"][n]) for n in r["names"]]
        path = fixture_path(placement, norm)
        mcf.write_safetensors(path, tensors, metadata(placement, norm))
        print(f"{os.path.relpath(path, REPO)}: {os.path.getsize(path)} bytes, {len(tensors)} tensors, "
              f"loss={r['loss'].item():.17g} "
              f"adam_losses={[float(f'{x:.10g}') for x in r['adam_losses'].tolist()]}")


# The key rows [C, 2C) of attn.qkv.bias get a gradient that is zero up to rounding (softmax is invariant
# to a per-query constant); Adam (eps 1e-8) turns that ~1e-17 noise into steps of ~1e-11, which depend
# on the machine's summation order. Only those entries of adam_final are compared loosely.
KEY_BIAS_TOL = 1e-9


def verify():
    import numpy as np
    ok = True
    for placement, norm in VARIANTS:
        cfg = cfg_for(placement)
        C = cfg["width"]
        path = fixture_path(placement, norm)
        meta, t = mcf.read_safetensors(path)      # numpy-only reader with strict format checks
        exp_meta = metadata(placement, norm)
        exp_meta.pop("torch_version")
        assert "torch_version" in meta
        assert sorted(meta) == sorted(list(exp_meta) + ["torch_version"]), f"{path}: metadata keys {sorted(meta)}"
        for k, v in exp_meta.items():
            assert meta.get(k) == v, f"{path}: metadata {k}={meta.get(k)!r}, expected {v!r}"
        exp = expected_params(cfg, placement, norm)
        names = [k[len("param."):] for k in t if k.startswith("param.")]
        assert sorted(names) == sorted(exp), f"{path}: parameter set differs from the spec"
        for prefix in ("param.", "grad.", "adam_final."):
            for name, shape in exp.items():
                assert tuple(t[prefix + name].shape) == shape, f"{path}: {prefix}{name} shape"
                assert t[prefix + name].dtype == np.float64
        other = sorted(k for k in t if not k.startswith(("param.", "grad.", "adam_final.")))
        assert other == ["adam_losses", "logits", "loss", "tokens"], f"{path}: unexpected tensors {other}"
        B, n, V = cfg["batch"], cfg["copy_len"], cfg["vocab"]
        assert t["tokens"].shape == (B, 2 * n) and t["tokens"].dtype == np.int64
        assert t["logits"].shape == (B, 2 * n - 1, V) and t["loss"].shape == (1,)
        assert t["adam_losses"].shape == (ADAM_STEPS,)
        params = {k: torch.from_numpy(t["param." + k].copy()) for k in names}
        tokens = torch.from_numpy(t["tokens"].copy())
        assert torch.equal(tokens[:, :n], tokens[:, n:]), "tokens second half is not a copy"
        assert int(tokens.min()) >= 0 and int(tokens.max()) < V
        # Recompute from the stored params/tokens only, compare to stored results.
        r = compute(placement, norm, params=params, tokens=tokens)
        # Fresh regeneration from the seed must also reproduce the stored init and batch.
        r0 = compute(placement, norm)
        maxdiff = 0.0
        checks = [("logits", r["logits"]), ("loss", r["loss"]), ("adam_losses", r["adam_losses"])]
        checks += [("grad." + k, r["grads"][k]) for k in names]
        checks += [("adam_final." + k, r["final"][k]) for k in names]
        checks += [("param." + k, r0["init"][k]) for k in names]
        checks += [("tokens", r0["tokens"])]
        for key, val in checks:
            stored = t[key].astype(np.float64)
            val = val.numpy().astype(np.float64)
            assert list(stored.shape) == list(val.shape), f"{key}: shape {stored.shape} vs {val.shape}"
            diff = np.abs(stored - val)
            if key.startswith("adam_final.") and key.endswith(".attn.qkv.bias"):
                if float(diff[C:2 * C].max()) > KEY_BIAS_TOL:
                    ok = False
                    print(f"FAIL {path}: {key}[C:2C] max|diff|={float(diff[C:2 * C].max()):.3e}")
                diff[C:2 * C] = 0.0
            d = float(diff.max())
            maxdiff = max(maxdiff, d)
            if d > 1e-12:
                ok = False
                print(f"FAIL {path}: {key} max|diff|={d:.3e}")
        assert t["adam_losses"][0] == t["loss"][0], "adam_losses[0] != loss"
        zero = [k for k in names if not np.any(t["grad." + k])]
        if zero:
            ok = False
            print(f"FAIL {path}: all-zero grads for {zero}")
        print(f"ok {os.path.relpath(path, REPO)}: {len(t)} tensors, loss={t['loss'][0]:.17g}, "
              f"max recompute diff {maxdiff:.1e}")
    if not ok:
        sys.exit(1)
    print("verify: all fixtures OK")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--verify", action="store_true", help="self-checks, then re-read and check the fixtures")
    g.add_argument("--check", action="store_true", help="self-checks only")
    args = ap.parse_args()
    run_self_checks()
    if args.verify:
        verify()
    elif not args.check:
        generate()


if __name__ == "__main__":
    main()
