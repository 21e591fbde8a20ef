#!/usr/bin/env -S /usr/bin/python3
"""Float64 Hessian-vector products of the copy-task loss by autograd, for blocklab's curvature probes
(tests/data/ref_hvp_{post,pre}_layernorm.safetensors).

Usage (from the repository root, needs PyTorch; Debian's /usr/bin/python3 or any newer torch):
  tools/ref/make_hvp_fixtures.py            # self-checks, then write the 2 fixtures
  tools/ref/make_hvp_fixtures.py --verify   # re-read them (independent reader) and recompute every product

Weights and batch are those of the parity fixtures ref_copy_{post,pre}_layernorm.safetensors (read, not
regenerated), so the model is the one tests/test_reference_parity.cpp already checks. For K = 0, 1 a random
direction over every parameter, for K = 2 one over block 0's parameters only (zero elsewhere); each file holds
  param.<name>, tokens (B, 2n)       the parity fixture's weights and batch
  v.K.<name>                         the direction (normal draws, seed 5000 + K, scaled to unit norm)
  hv.K.<name>                        H v by torch.autograd.functional.hvp (exact: double backward)
  loss                               the loss at param (equal to the parity fixture's to 1e-12)
Self-check: each product against a central difference of autograd gradients (h = 1e-5), to 1e-6.
"""
import os
import sys

import torch
from torch.nn.utils import stateless

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import copy_model as cm  # noqa: E402
import fixture_tools as ft  # noqa: E402

VARIANTS = [("post", "layernorm"), ("pre", "layernorm")]
DIRECTIONS = 3  # K = 0, 1: every parameter; K = 2: block 0 only


def source_path(placement, norm):
    return os.path.join(ft.OUT_DIR, f"ref_copy_{placement}_{norm}.safetensors")


def fixture_path(placement, norm):
    return os.path.join(ft.OUT_DIR, f"ref_hvp_{placement}_{norm}.safetensors")


def load(placement, norm):
    meta, t = ft.read_safetensors(source_path(placement, norm))
    model = cm.CopyModel(int(meta["layers"]), int(meta["width"]), int(meta["heads"]), int(meta["vocab"]),
                         int(meta["copy_len"]), placement=placement, norm=norm).double()
    names = [n for n, _ in model.named_parameters()]
    params = {n: torch.tensor(t["param." + n]).double() for n in names}
    tokens = torch.tensor(t["tokens"]).long()
    return meta, model, names, params, tokens, float(t["loss"][0])


def products(placement, norm):
    meta, model, names, params, tokens, ref_loss = load(placement, norm)

    def loss_of(*ps):
        return cm.copy_loss(lambda x: stateless.functional_call(model, dict(zip(names, ps)), (x,)), tokens)

    base = tuple(params[n] for n in names)
    loss = loss_of(*base).item()
    assert abs(loss - ref_loss) <= 1e-12 * abs(ref_loss), (loss, ref_loss)
    out = []
    for k in range(DIRECTIONS):
        g = torch.Generator().manual_seed(5000 + k)
        v = [torch.randn(params[n].shape, generator=g, dtype=torch.float64) for n in names]
        if k == 2:
            v = [x if n.startswith("blocks.0.") else torch.zeros_like(x) for n, x in zip(names, v)]
        scale = torch.sqrt(sum((x * x).sum() for x in v))
        v = tuple(x / scale for x in v)
        _, hv = torch.autograd.functional.hvp(loss_of, base, v)
        out.append((v, hv))
    return meta, names, params, tokens, loss, out


def gradient(model, names, tokens, ps):
    ps = [p.detach().clone().requires_grad_(True) for p in ps]
    l = cm.copy_loss(lambda x: stateless.functional_call(model, dict(zip(names, ps)), (x,)), tokens)
    return torch.autograd.grad(l, ps)


def self_check(placement, norm):
    meta, model, names, params, tokens, _ = load(placement, norm)
    _, _, _, _, _, out = products(placement, norm)
    base = [params[n] for n in names]
    h = 1e-5
    for k, (v, hv) in enumerate(out):
        gp = gradient(model, names, tokens, [b + h * x for b, x in zip(base, v)])
        gm = gradient(model, names, tokens, [b - h * x for b, x in zip(base, v)])
        fd = torch.cat([((a - b) / (2 * h)).reshape(-1) for a, b in zip(gp, gm)])
        ex = torch.cat([x.reshape(-1) for x in hv])
        err = ((fd - ex).abs().max() / ex.abs().max()).item()
        print(f"  {placement}/{norm} K={k}: |Hv autograd - central difference| / max|Hv| = {err:.2e}")
        assert err < 1e-6, err


def tensors_of(names, params, tokens, loss, out):
    t = [("param." + n, params[n]) for n in names] + [("tokens", tokens)]
    for k, (v, hv) in enumerate(out):
        t += [(f"v.{k}.{n}", x) for n, x in zip(names, v)]
        t += [(f"hv.{k}.{n}", x) for n, x in zip(names, hv)]
    t.append(("loss", torch.tensor([loss], dtype=torch.float64)))
    return t


def main():
    torch.set_default_dtype(torch.float64)
    verify = "--verify" in sys.argv[1:]
    for placement, norm in VARIANTS:
        meta, names, params, tokens, loss, out = products(placement, norm)
        if verify:
            _, stored = ft.read_safetensors(fixture_path(placement, norm))
            worst = 0.0
            for name, x in tensors_of(names, params, tokens, loss, out):
                worst = max(worst, float((torch.tensor(stored[name]).double() - x.double()).abs().max()))
            print(f"{fixture_path(placement, norm)}: max |stored - recomputed| = {worst:.2e}")
            assert worst <= 1e-12, worst
            continue
        self_check(placement, norm)
        metadata = {k: meta[k] for k in ("layers", "width", "heads", "vocab", "copy_len", "batch", "mlp_ratio",
                                         "norm_eps", "norm_placement", "norm")}
        metadata.update(directions=str(DIRECTIONS), block_only_direction="2", generator="tools/ref/make_hvp_fixtures.py",
                        torch_version=torch.__version__)
        ft.write_safetensors(fixture_path(placement, norm), tensors_of(names, params, tokens, loss, out), metadata)
        print("wrote", fixture_path(placement, norm))


if __name__ == "__main__":
    main()
