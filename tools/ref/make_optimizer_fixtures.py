#!/usr/bin/env python3
"""Generate the optimizer parity fixture (tests/data/ref_optimizers.safetensors): every optimizer blocklab
has, run by PyTorch's own implementation for 10 steps of given gradients on a few parameter tensors.

Usage (from the repository root, with a Python that has PyTorch >= 2.9, for torch.optim.Muon):
  /work/venv-ref/bin/python tools/ref/make_optimizer_fixtures.py            # write the file
  /work/venv-ref/bin/python tools/ref/make_optimizer_fixtures.py --verify   # re-read it and recompute it
  /work/venv-ref/bin/python tools/ref/make_optimizer_fixtures.py --check    # self-checks only

The tensors: w_hidden (6, 10) and w_tall (12, 5), two hidden weight matrices (Muon's: w_tall has more rows
than columns, so Newton-Schulz runs on its transpose), emb (9, 4), a 2-D tensor that is not a hidden matrix
(Muon leaves it to AdamW, as it does embeddings and heads), and bias (7). Initial values and gradients are
float32 numbers (drawn in float32, seed 0), so that blocklab's float run starts from exactly the same inputs;
everything else is float64. Element 0 of bias has a zero gradient at every step (sign(0) = 0 in Lion, 0 / eps in
Adam). Step k (k = 0..9) uses lr = case lr * lr_factor[k], a warm-up over the first 4 steps, so that each
optimizer's dependence on the step's lr is checked too.

Each case is a set of blocklab config keys (stored in the metadata as JSON, applied by the C++ test through
the same key table as the CLI), and its reference:
  adam, adamw, radam    torch.optim.Adam / AdamW / RAdam (RAdam: weight decay added to the gradient, its
                        default decoupled_weight_decay=False; the rectification branch rho_t > 5 starts at
                        step 6 with beta2 0.999, so both branches run)
  *_v0grad              the same with adam_v0 = grad (GI-Adam, Kalra & Barkeshli 2024): the optimizer's
                        exp_avg_sq state set to g_1^2 before its first step, everything else PyTorch's
                        (bias correction included)
  sgd, sgd_nesterov, sgd_plain   torch.optim.SGD (momentum 0.9 with and without Nesterov, dampening 0; momentum 0)
  lion                  PyTorch has no Lion: the update of Chen et al. 2023 written in PyTorch ops (lion_step)
  muon, muon_plain      torch.optim.Muon on w_hidden and w_tall (lr = muon_lr * lr_factor[k]), torch.optim.AdamW
                        on emb and bias. torch.optim.Muon runs Newton-Schulz in bfloat16; blocklab runs it in
                        float, so the reference runs torch's iteration in float64 (newton_schulz_float64, the
                        same code without the cast), patched in for torch's. --check shows how far torch's own
                        bfloat16 iteration is from it.

Tensors: init.<t> (F32), grad.<t> (F32, (10, *shape)), lr_factor (F64, (10)), <case>.<t> (F64, (10, *shape):
the parameters after each step). Metadata: tensors, hidden, steps, cases (JSON: case -> {key: text}),
generator, torch_version.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.optim._muon as torch_muon

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_tools import REPO, OUT_DIR, read_safetensors, write_safetensors  # noqa: E402

PATH = os.path.join(OUT_DIR, "ref_optimizers.safetensors")
STEPS = 10
SHAPES = {"w_hidden": (6, 10), "w_tall": (12, 5), "emb": (9, 4), "bias": (7,)}
HIDDEN = ["w_hidden", "w_tall"]
GRAD_SCALE = {"w_hidden": 1.0, "w_tall": 0.1, "emb": 0.01, "bias": 1.0}
LR_FACTOR = [min(1.0, (k + 1) / 4) for k in range(STEPS)]

CASES = {
    "adam": {"optimizer": "adam", "lr": "0.01"},
    "adam_v0grad": {"optimizer": "adam", "lr": "0.01", "adam_v0": "grad"},
    "adamw": {"optimizer": "adamw", "lr": "0.01", "weight_decay": "0.1"},
    "adamw_v0grad": {"optimizer": "adamw", "lr": "0.01", "weight_decay": "0.1", "adam_v0": "grad"},
    "radam": {"optimizer": "radam", "lr": "0.01", "weight_decay": "0.01"},
    "radam_v0grad": {"optimizer": "radam", "lr": "0.01", "adam_v0": "grad", "beta2": "0.99"},
    "sgd": {"optimizer": "sgd", "lr": "0.05", "momentum": "0.9", "weight_decay": "0.01"},
    "sgd_nesterov": {"optimizer": "sgd", "lr": "0.05", "momentum": "0.9", "nesterov": "true"},
    "sgd_plain": {"optimizer": "sgd", "lr": "0.05", "momentum": "0"},
    "lion": {"optimizer": "lion", "lr": "0.01", "lion_beta1": "0.9", "lion_beta2": "0.99", "weight_decay": "0.1"},
    "muon": {"optimizer": "muon", "lr": "0.01", "weight_decay": "0.01", "muon_lr": "0.02", "muon_momentum": "0.95",
             "muon_weight_decay": "0.1"},
    "muon_plain": {"optimizer": "muon", "lr": "0.01", "muon_lr": "0.05", "muon_momentum": "0.9",
                   "muon_nesterov": "false", "muon_ns_steps": "3"},
}
# blocklab's defaults for the keys a case leaves out (src/train/optimizer.h)
DEFAULTS = {"beta1": "0.9", "beta2": "0.999", "adam_eps": "1e-8", "weight_decay": "0", "adam_v0": "zero",
            "momentum": "0.9", "nesterov": "false", "lion_beta1": "0.9", "lion_beta2": "0.99", "muon_lr": "0.02",
            "muon_momentum": "0.95", "muon_nesterov": "true", "muon_ns_steps": "5", "muon_weight_decay": "0"}


def inputs():
    """The float32 initial values and gradients (seed 0), as float64 tensors."""
    g = torch.Generator().manual_seed(0)
    init = {n: torch.randn(s, generator=g, dtype=torch.float32).double() for n, s in SHAPES.items()}
    grads = {n: (torch.randn((STEPS,) + s, generator=g, dtype=torch.float32) * GRAD_SCALE[n]).double()
             for n, s in SHAPES.items()}
    grads["bias"][:, 0] = 0.0
    return init, grads


def newton_schulz_float64(grad, ns_coefficients, ns_steps, eps):
    """torch.optim._muon._zeropower_via_newtonschulz without its cast to bfloat16: in the input's dtype."""
    a, b, c = ns_coefficients
    x = grad.clone()
    if grad.size(0) > grad.size(1):
        x = x.T
    x.div_(x.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram = x @ x.T
        gram_update = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, gram_update, x, beta=a)
    if grad.size(0) > grad.size(1):
        x = x.T
    return x


def lion_step(p, g, m, lr, b1, b2, wd):
    """Lion (Chen et al. 2023, Algorithm 2): c = b1 m + (1-b1) g; p -= lr (sign(c) + wd p); m = b2 m + (1-b2) g."""
    c = b1 * m + (1 - b1) * g
    p.sub_(lr * (torch.sign(c) + wd * p))
    m.mul_(b2).add_((1 - b2) * g)


def run_case(keys, init, grads, dtype=torch.float64, bf16_muon=False):
    """The parameters after each of the STEPS steps: {name: (STEPS, *shape)}."""
    k = dict(DEFAULTS, **keys)
    f = lambda key: float(k[key])  # noqa: E731
    params = {n: torch.nn.Parameter(t.clone().to(dtype)) for n, t in init.items()}
    lr = f("lr")
    betas = (f("beta1"), f("beta2"))
    kind = k["optimizer"]
    groups = []  # (optimizer, [names], lr)
    if kind in ("adam", "adamw", "radam"):
        make = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "radam": torch.optim.RAdam}[kind]
        opt = make(list(params.values()), lr=lr, betas=betas, eps=f("adam_eps"), weight_decay=f("weight_decay"))
        groups.append((opt, list(params), lr))
    elif kind == "sgd":
        opt = torch.optim.SGD(list(params.values()), lr=lr, momentum=f("momentum"), dampening=0,
                              nesterov=k["nesterov"] == "true", weight_decay=f("weight_decay"))
        groups.append((opt, list(params), lr))
    elif kind == "muon":
        hidden = [params[n] for n in HIDDEN]
        rest = [n for n in params if n not in HIDDEN]
        muon = torch.optim.Muon(hidden, lr=f("muon_lr"), weight_decay=f("muon_weight_decay"),
                                momentum=f("muon_momentum"), nesterov=k["muon_nesterov"] == "true",
                                ns_steps=int(k["muon_ns_steps"]))
        adamw = torch.optim.AdamW([params[n] for n in rest], lr=lr, betas=betas, eps=f("adam_eps"),
                                  weight_decay=f("weight_decay"))
        groups += [(muon, HIDDEN, f("muon_lr")), (adamw, rest, lr)]
    elif kind != "lion":
        raise ValueError(kind)
    lion_m = {n: torch.zeros_like(p) for n, p in params.items()}
    out = {n: [] for n in params}
    saved_ns = torch_muon._zeropower_via_newtonschulz
    if not bf16_muon:
        torch_muon._zeropower_via_newtonschulz = newton_schulz_float64
    try:
        for step in range(STEPS):
            for n, p in params.items():
                p.grad = grads[n][step].to(dtype).clone()
            if kind == "lion":
                with torch.no_grad():
                    for n, p in params.items():
                        lion_step(p, p.grad, lion_m[n], lr * LR_FACTOR[step], f("lion_beta1"), f("lion_beta2"),
                                  f("weight_decay"))
            for opt, names, base_lr in groups:
                if step == 0 and k["adam_v0"] == "grad":
                    # GI-Adam: v_0 = g_1^2, set as the state the optimizer would otherwise start from zeros
                    for n in names:
                        p = params[n]
                        opt.state[p] = {"step": torch.zeros((), dtype=dtype), "exp_avg": torch.zeros_like(p),
                                        "exp_avg_sq": p.grad * p.grad}
                for group in opt.param_groups:
                    group["lr"] = base_lr * LR_FACTOR[step]
                opt.step()
            for n, p in params.items():
                out[n].append(p.detach().clone())
    finally:
        torch_muon._zeropower_via_newtonschulz = saved_ns
    return {n: torch.stack(v).double() for n, v in out.items()}


def metadata():
    return {"tensors": ",".join(SHAPES), "hidden": ",".join(HIDDEN), "steps": str(STEPS),
            "cases": json.dumps(CASES, sort_keys=True), "generator": "tools/ref/make_optimizer_fixtures.py",
            "torch_version": torch.__version__}


def generate():
    init, grads = inputs()
    tensors = [(f"init.{n}", t, "F32") for n, t in init.items()]
    tensors += [(f"grad.{n}", t, "F32") for n, t in grads.items()]
    tensors.append(("lr_factor", torch.tensor(LR_FACTOR, dtype=torch.float64)))
    for case, keys in CASES.items():
        for n, t in run_case(keys, init, grads).items():
            tensors.append((f"{case}.{n}", t))
    write_safetensors(PATH, tensors, metadata())
    print(f"{os.path.relpath(PATH, REPO)}: {os.path.getsize(PATH)} bytes, {len(tensors)} tensors, {len(CASES)} cases")


def verify():
    meta, t = read_safetensors(PATH)
    expected = metadata()
    for key in ("tensors", "hidden", "steps", "cases"):
        assert meta[key] == expected[key], f"metadata {key}: {meta[key]!r} != {expected[key]!r}"
    init, grads = inputs()
    ok = True
    for n in SHAPES:
        ok &= bool(torch.equal(torch.from_numpy(t[f"init.{n}"].copy()).double(), init[n]))
        ok &= bool(torch.equal(torch.from_numpy(t[f"grad.{n}"].copy()).double(), grads[n]))
    for case, keys in CASES.items():
        for n, ref in run_case(keys, init, grads).items():
            diff = (torch.from_numpy(t[f"{case}.{n}"].copy()) - ref).abs().max().item()
            if diff > 1e-12:
                print(f"FAIL {case}.{n}: max |stored - recomputed| = {diff:.3g}")
                ok = False
    print("ok" if ok else "FAILED")
    return ok


def check():
    """Self-checks: each case against a float32 PyTorch run (the size of float rounding after 10 steps, which
    the C++ tolerance is set from); the Lion and GI-Adam references against hand-written forms; and the float64
    Newton-Schulz against torch's own bfloat16 one."""
    init, grads = inputs()
    ok = True
    for case, keys in CASES.items():
        ref = run_case(keys, init, grads)
        f32 = run_case(keys, init, grads, dtype=torch.float32)
        worst = max((f32[n] - ref[n]).abs().max().item() for n in ref)
        print(f"{case:14s} float32 PyTorch vs float64: max |diff| {worst:.2e}")
        ok &= worst < 1e-5
    # RAdam's threshold: the first step with rho_t > 5 (beta2 0.999 and 0.99)
    for b2 in (0.999, 0.99):
        rho_inf = 2 / (1 - b2) - 1
        first = next(t for t in range(1, 100) if rho_inf - 2 * t * b2**t / (1 - b2**t) > 5)
        print(f"RAdam beta2 {b2}: rho_t > 5 from step {first}")
    # Lion by hand for one element
    m, p = 0.0, init["w_hidden"][0, 0].item()
    for s in range(STEPS):
        g, lr = grads["w_hidden"][s, 0, 0].item(), 0.01 * LR_FACTOR[s]
        c = 0.9 * m + 0.1 * g
        p -= lr * (math.copysign(1.0, c) if c != 0 else 0.0) + lr * 0.1 * p
        m = 0.99 * m + 0.01 * g
    lion = run_case(CASES["lion"], init, grads)["w_hidden"][-1, 0, 0].item()
    print(f"lion by hand: {abs(lion - p):.2e}")
    ok &= abs(lion - p) < 1e-14
    # GI-Adam by hand for one element: v_0 = g_1^2, bias correction kept
    m = v = 0.0
    p = init["bias"][1].item()
    for s in range(STEPS):
        g, lr = grads["bias"][s, 1].item(), 0.01 * LR_FACTOR[s]
        if s == 0:
            v = g * g
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        t = s + 1
        p -= lr / (1 - 0.9**t) * m / (math.sqrt(v / (1 - 0.999**t)) + 1e-8)
    gi = run_case(CASES["adam_v0grad"], init, grads)["bias"][-1, 1].item()
    print(f"GI-Adam by hand: {abs(gi - p):.2e}")
    ok &= abs(gi - p) < 1e-14
    # torch.optim.Muon as shipped (Newton-Schulz in bfloat16) against the float64 reference
    for case in ("muon", "muon_plain"):
        ref = run_case(CASES[case], init, grads)
        bf16 = run_case(CASES[case], init, grads, bf16_muon=True)
        worst = max((bf16[n] - ref[n]).abs().max().item() for n in HIDDEN)
        print(f"{case}: torch.optim.Muon with its bfloat16 Newton-Schulz vs float64: max |diff| {worst:.2e}")
        ok &= worst < 1e-2
    print("ok" if ok else "FAILED")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verify", action="store_true", help="re-read the fixture and recompute it")
    ap.add_argument("--check", action="store_true", help="self-checks only")
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    if a.verify:
        sys.exit(0 if verify() else 1)
    if a.check:
        sys.exit(0 if check() else 1)
    generate()


if __name__ == "__main__":
    main()
