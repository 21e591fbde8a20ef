#!/usr/bin/env python3
"""PyHessian's top Hessian eigenvalue and trace of a small trained model next to `blocklab curvature` on the
same weights and the same batch. Needs PyTorch and `pyhessian` (PyPI; Yao et al. 2020); on demand, never in CI.

Usage (from the repository root, after building build/blocklab):
  python tools/ref/pyhessian_check.py [--placement post|pre] [--steps 20] [--out /tmp/pyhessian-check]

It trains a 4-block, width-32 model (V 16, n 8, batch 16) with blocklab, loads the final checkpoint's
weights into the reference CopyModel (copy_model.py, float64), draws a copy batch, writes it as a .npy file
for `blocklab curvature --tokens`, and prints both estimates. PyHessian's power iteration finds the eigenvalue
of largest magnitude; blocklab's Lanczos the largest algebraic one (the same when the top one dominates).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import copy_model as cm  # noqa: E402
import fixture_tools as ft  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CFG = dict(layers=4, width=32, heads=4, vocab=16, copy_len=8, batch=16)


class SecondHalf(torch.nn.Module):
    """The copy task's loss positions as PyHessian's (outputs, targets) pair: logits of positions n-1..2n-2."""

    def __init__(self, model, n):
        super().__init__()
        self.model, self.n = model, n

    def forward(self, inputs):
        logits = self.model(inputs)
        return logits[:, self.n - 1:].reshape(-1, logits.shape[-1])


def main():
    from pyhessian import hessian  # noqa: PLC0415  (on demand)

    ap = argparse.ArgumentParser()
    ap.add_argument("--placement", default="post", choices=["post", "pre"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", default="/tmp/pyhessian-check")
    ap.add_argument("--blocklab", default=os.path.join(REPO, "build", "blocklab"))
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)  # PyHessian draws its vectors in the default dtype
    run = os.path.join(args.out, args.placement)
    c = CFG
    subprocess.run([args.blocklab, "train", "--norm-placement", args.placement, "--layers", str(c["layers"]),
                    "--width", str(c["width"]), "--heads", str(c["heads"]), "--vocab", str(c["vocab"]),
                    "--copy-len", str(c["copy_len"]), "--batch", str(c["batch"]), "--steps", str(args.steps),
                    "--checkpoint-every", str(args.steps), "--lr", "1e-3", "--no-tensorboard", "--force",
                    "--out", run], check=True, stdout=subprocess.DEVNULL)
    step_dir = os.path.join(run, "checkpoints", f"step_{args.steps:07d}")
    _, weights = ft.read_safetensors(os.path.join(step_dir, "model.safetensors"))
    model = cm.CopyModel(c["layers"], c["width"], c["heads"], c["vocab"], c["copy_len"], placement=args.placement)
    model = model.double()
    state = {name: torch.tensor(np.asarray(weights[name], dtype=np.float64)) for name, _ in model.named_parameters()}
    model.load_state_dict(state, strict=True)

    g = torch.Generator().manual_seed(11)
    tokens = cm.copy_batch(c["batch"], c["copy_len"], c["vocab"], generator=g)
    npy = os.path.join(args.out, f"tokens_{args.placement}.npy")
    np.save(npy, tokens.numpy().astype(np.int64))
    n = c["copy_len"]
    inputs, targets = tokens[:, :-1], tokens[:, n:].reshape(-1)
    wrapped = SecondHalf(model, n)
    with torch.no_grad():
        ref_loss = torch.nn.functional.cross_entropy(wrapped(inputs), targets).item()

    h = hessian(wrapped, torch.nn.CrossEntropyLoss(), data=(inputs, targets), cuda=False)
    top, _ = h.eigenvalues(maxIter=1000, tol=1e-7, top_n=2)
    trace = h.trace(maxIter=400, tol=1e-4)

    out = subprocess.run([args.blocklab, "curvature", run, "--tokens", npy, "--top", "2", "--tol", "1e-9",
                          "--max-iter", "200", "--trace-samples", "200", "--no-per-block", "--json"],
                         check=True, capture_output=True, text=True)
    b = json.loads(out.stdout)
    print(f"{args.placement}-LN, {c['layers']} blocks x width {c['width']}, after {args.steps} steps; "
          f"loss on the batch: PyTorch {ref_loss:.10f}, blocklab {b['loss']:.10f}")
    print(f"  PyHessian top eigenvalues (power iteration): {top}")
    print(f"  blocklab  top eigenvalues (Lanczos):         {b['top']}")
    rel = abs(top[0] - b["sharpness"]) / abs(b["sharpness"])
    print(f"  relative difference of the top eigenvalue: {rel:.2e}")
    print(f"  trace: PyHessian Hutchinson {np.mean(trace):.4f} ({len(trace)} samples), "
          f"blocklab {b['trace']:.4f} +- {b['trace_std_error']:.4f} (200 samples)")
    return 0 if rel < 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
