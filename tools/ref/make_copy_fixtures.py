#!/usr/bin/env -S /usr/bin/python3
"""Generate float64 reference fixtures for the copy-task model (tests/data/ref_copy_*.safetensors).

Usage (from the repository root, needs PyTorch -> Debian's /usr/bin/python3):
  tools/ref/make_copy_fixtures.py            # write the 4 fixtures
  tools/ref/make_copy_fixtures.py --verify   # re-read them with an independent reader, check
                                             # format + round trip + recomputation
Each file holds param.<name>, tokens, logits, loss, grad.<name>, adam_losses,
adam_final.<name> (see tools/ref/README.md).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import copy_model as cm  # noqa: E402
import fixture_tools as ft  # noqa: E402  (safetensors writer and reader, fixture run, generate/verify, CLI)

CFG = dict(layers=2, width=16, heads=2, vocab=11, copy_len=5, batch=3)
VARIANTS = [("post", "layernorm"), ("post", "rmsnorm"), ("pre", "layernorm"), ("pre", "rmsnorm")]
# A fixed seed per variant (stable across runs; do not reorder).
SEEDS = {("post", "layernorm"): 1001, ("post", "rmsnorm"): 1002,
         ("pre", "layernorm"): 1003, ("pre", "rmsnorm"): 1004}


def fixture_path(placement, norm):
    return os.path.join(ft.OUT_DIR, f"ref_copy_{placement}_{norm}.safetensors")


# ----------------------------------------------------------------------------- reference run

def build_model(placement, norm):
    return cm.CopyModel(CFG["layers"], CFG["width"], CFG["heads"], CFG["vocab"], CFG["copy_len"],
                        placement=placement, norm=norm, eps=cm.NORM_EPS)


def compute(placement, norm, params=None, tokens=None):
    """Return dict of results. If params/tokens are given they are used instead of seeded init."""
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(SEEDS[(placement, norm)])
    model = build_model(placement, norm).double()
    if params is None:
        cm.init_params(model, "fixture")
    if tokens is None:
        tokens = cm.copy_batch(CFG["batch"], CFG["copy_len"], CFG["vocab"])
    return ft.run_fixture(model, tokens, params)


def metadata(placement, norm):
    return {"layers": str(CFG["layers"]), "width": str(CFG["width"]), "heads": str(CFG["heads"]),
            "vocab": str(CFG["vocab"]), "copy_len": str(CFG["copy_len"]),
            "batch": str(CFG["batch"]), "norm_placement": placement, "norm": norm,
            "norm_eps": "1e-05", "mlp_ratio": str(cm.MLP_RATIO), "adam_lr": "0.01",
            "generator": "tools/ref/make_copy_fixtures.py", "torch_version": torch.__version__}


FIXTURES = ft.Fixtures(VARIANTS, fixture_path, metadata, compute, cfg=lambda placement, norm: CFG,
                       loose=ft.loose_key_bias)


if __name__ == "__main__":
    ft.main(__doc__, FIXTURES)
