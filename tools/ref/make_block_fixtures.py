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
import argparse
import os
import sys

import torch
from torch.nn.utils import stateless

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import block_models as bm  # noqa: E402
import copy_model as cm  # noqa: E402
import make_copy_fixtures as mcf  # noqa: E402  (safetensors writer and independent reader)

REPO = mcf.REPO
OUT_DIR = mcf.OUT_DIR

BASE = dict(layers=2, width=16, heads=4, vocab=11, copy_len=5, batch=3, mlp_ratio=4)
CFGS = {
    "gpt2": dict(BASE, block="gpt2", kv_heads=4, head_dim=4, norm_eps=1e-5, rope_theta=0.0, tie_head=True),
    "qwen3": dict(BASE, block="qwen3", kv_heads=2, head_dim=8, norm_eps=1e-6, rope_theta=10000.0,
                  tie_head=False),
    "sd": dict(BASE, block="sd", kv_heads=4, head_dim=4, norm_eps=1e-5, rope_theta=0.0, tie_head=False),
}
# A fixed seed per preset (stable across runs; do not change).
SEEDS = {"gpt2": 2001, "qwen3": 2002, "sd": 2003}
ADAM = mcf.ADAM            # lr 1e-2, betas (0.9, 0.999), eps 1e-8, no weight decay
ADAM_STEPS = mcf.ADAM_STEPS  # 5
META_KEYS = ("block", "layers", "width", "heads", "kv_heads", "head_dim", "vocab", "copy_len", "batch",
             "mlp_ratio", "norm_eps", "rope_theta", "tie_head", "adam_lr")


def fixture_path(preset):
    return os.path.join(OUT_DIR, f"ref_block_{preset}.safetensors")


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
    meta["adam_lr"] = f"{ADAM['lr']:g}"
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
    got = {n: tuple(p.shape) for n, p in model.named_parameters()}
    exp = expected_params(cfg)
    assert got == exp, f"{preset}: parameter names/shapes differ from blocklab's: " \
        f"extra {sorted(set(got) - set(exp))}, missing {sorted(set(exp) - set(got))}, " \
        f"shape {[n for n in got if n in exp and got[n] != exp[n]]}"
    return model, tokens


def compute(preset, params=None, tokens=None):
    """Results for the seeded init/batch, or for the given params/tokens."""
    model, seeded_tokens = seeded_model(preset)
    if params is not None:
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(params[name])
    if tokens is None:
        tokens = seeded_tokens
    return mcf.run_fixture(model, tokens)


# ----------------------------------------------------------------------------- self-checks

normwise = mcf.normwise


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
    n = cfg["copy_len"]
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    names = [k for k, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    P = dict(model.named_parameters())

    def loss_of(logits):
        V = logits.shape[-1]
        return torch.nn.functional.cross_entropy(logits[:, n - 1:].reshape(-1, V),
                                                 targets[:, n - 1:].reshape(-1))

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
    gen = torch.Generator().manual_seed(7)
    h, worst_fd, count = 1e-5, 0.0, 0
    with torch.no_grad():
        for name, p, g in zip(names, params, g_main):
            for idx in torch.randint(0, p.numel(), (2,), generator=gen).tolist():
                flat = p.view(-1)
                old = flat[idx].item()
                flat[idx] = old + h
                lp = cm.copy_loss(model, tokens).item()
                flat[idx] = old - h
                lm = cm.copy_loss(model, tokens).item()
                flat[idx] = old
                fd, ad = (lp - lm) / (2 * h), g.view(-1)[idx].item()
                err = abs(fd - ad) / (1e-6 + abs(ad))
                assert abs(fd - ad) < 1e-8 + 1e-6 * abs(ad), \
                    f"{preset}: {name}[{idx}] autograd {ad:.10g} vs central difference {fd:.10g}"
                worst_fd, count = max(worst_fd, err), count + 1
    msg += f", central differences {count} entries (worst rel {worst_fd:.1e})"
    return msg


def run_self_checks():
    for preset in CFGS:
        print(f"self-check {preset}: {self_check(preset)}")


# ----------------------------------------------------------------------------- generate / verify

def generate():
    os.makedirs(OUT_DIR, exist_ok=True)
    for preset in CFGS:
        r = compute(preset)
        tensors = [("tokens", r["tokens"]), ("logits", r["logits"]), ("loss", r["loss"]),
                   ("adam_losses", r["adam_losses"])]
        tensors += [(f"param.{n}", r["init"][n]) for n in r["names"]]
        tensors += [(f"grad.{n}", r["grads"][n]) for n in r["names"]]
        tensors += [(f"adam_final.{n}", r["final"][n]) for n in r["names"]]
        path = fixture_path(preset)
        mcf.write_safetensors(path, tensors, metadata(preset))
        print(f"{os.path.relpath(path, REPO)}: {os.path.getsize(path)} bytes, {len(tensors)} tensors, "
              f"loss={r['loss'].item():.17g} "
              f"adam_losses={[float(f'{x:.10g}') for x in r['adam_losses'].tolist()]}")


def verify():
    import numpy as np
    ok = True
    for preset in CFGS:
        cfg = CFGS[preset]
        path = fixture_path(preset)
        meta, t = mcf.read_safetensors(path)      # numpy-only reader with strict format checks
        exp_meta = metadata(preset)
        exp_meta.pop("torch_version")
        for k, v in exp_meta.items():
            assert meta.get(k) == v, f"{path}: metadata {k}={meta.get(k)!r}, expected {v!r}"
        assert "torch_version" in meta
        exp = expected_params(cfg)
        names = [k[len("param."):] for k in t if k.startswith("param.")]
        assert sorted(names) == sorted(exp), f"{path}: parameter set differs from blocklab's names"
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
        r = compute(preset, params=params, tokens=tokens)
        # Fresh regeneration from the seed must also reproduce the stored init and batch.
        r0 = compute(preset)
        maxdiff = 0.0
        checks = [("logits", r["logits"]), ("loss", r["loss"]), ("adam_losses", r["adam_losses"])]
        checks += [("grad." + k, r["grads"][k]) for k in names]
        checks += [("adam_final." + k, r["final"][k]) for k in names]
        checks += [("param." + k, r0["init"][k]) for k in names]
        checks += [("tokens", r0["tokens"])]
        for key, val in checks:
            stored = t[key]
            assert list(stored.shape) == list(val.shape), f"{key}: shape {stored.shape} vs {val.shape}"
            d = float(np.max(np.abs(stored.astype(np.float64) - val.numpy().astype(np.float64))))
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
