#!/usr/bin/env -S /usr/bin/python3
"""Loads a blocklab checkpoint into the independent PyTorch model by parameter name and checks that it
gives blocklab's loss on the same batch.

    tools/ref/check_checkpoint.py RUN_DIR [--step N] [--tolerance 1e-5]

RUN_DIR is a `blocklab train --out` directory with checkpoints (--checkpoint-every). The checkpoint
(the newest, or step_N) is read with an independent safetensors reader:
  * model.safetensors -> CopyModel.load_state_dict(strict=True): every name and shape must match;
  * state.safetensors -> the resolved config (__metadata__ "config") and the data stream's generator
    state (rng.data, xoshiro256**). The batch blocklab draws next is regenerated here from that state
    (xoshiro256** and Lemire's unbiased bounded integers, reimplemented below).
The loss of the loaded weights on that batch must equal the loss blocklab logged for the next step
(metrics.csv row N+1, computed by blocklab from the same weights and batch before its update), within
--tolerance (relative; float32). Prints both, in float32 and float64. Exit status 0 when they agree.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import copy_model as cm  # noqa: E402
from fixture_tools import read_safetensors  # noqa: E402  (spec-based reader, numpy only)

MASK = (1 << 64) - 1


class Xoshiro256StarStar:
    """The generator of blocklab's data stream (src/util/rng.h), from its 4-word state."""

    def __init__(self, state):
        self.s = [int(x) & MASK for x in state]

    @staticmethod
    def _rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & MASK

    def next_u64(self):
        s = self.s
        result = (self._rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self._rotl(s[3], 45)
        return result

    def below(self, n):
        """Uniform integer in [0, n): multiply-and-reject (Lemire)."""
        m = self.next_u64() * n
        low = m & MASK
        if low < n:
            threshold = ((-n) & MASK) % n
            while low < threshold:
                m = self.next_u64() * n
                low = m & MASK
        return m >> 64


def next_copy_batch(rng, batch, copy_len, vocab):
    """tokens (B, 2n): n draws per sequence, then the same n again (blocklab's CopyTask::next)."""
    rows = []
    for _ in range(batch):
        first = [rng.below(vocab) for _ in range(copy_len)]
        rows.append(first + first)
    return torch.tensor(rows, dtype=torch.int64)


def find_checkpoint(run_dir, step):
    root = os.path.join(run_dir, "checkpoints")
    steps = sorted(int(d[5:]) for d in os.listdir(root)
                   if d.startswith("step_") and d[5:].isdigit() and os.path.exists(os.path.join(root, d, "COMPLETE")))
    if not steps:
        sys.exit(f"{root}: no complete checkpoint")
    if step is None:
        step = steps[-1]
    elif step not in steps:
        sys.exit(f"{root}: no complete checkpoint for step {step} (have {steps})")
    return step, os.path.join(root, f"step_{step:07d}")


def logged_loss(run_dir, step):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        header = f.readline().strip().split(",")
        for line in f:
            cells = line.strip().split(",")
            if cells and cells[0] == str(step):
                return float(cells[header.index("loss")])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--step", type=int, default=None, help="checkpoint step (default: the newest)")
    ap.add_argument("--tolerance", type=float, default=1e-5, help="relative, float32 loss vs blocklab's")
    args = ap.parse_args()

    step, ckpt = find_checkpoint(args.run_dir, args.step)
    model_meta, weights = read_safetensors(os.path.join(ckpt, "model.safetensors"))
    state_meta, state = read_safetensors(os.path.join(ckpt, "state.safetensors"))
    config = json.loads(state_meta["config"])
    if state_meta.get("format") != "blocklab-checkpoint" or state_meta.get("format_version") != "1":
        sys.exit(f"{ckpt}: not a blocklab checkpoint of format version 1")
    if config["task"] != "copy" or config["mlp_ratio"] != cm.MLP_RATIO:
        sys.exit(f"{ckpt}: the reference model covers the copy task with mlp_ratio {cm.MLP_RATIO}")

    model = cm.CopyModel(config["layers"], config["width"], config["heads"], config["vocab"], config["copy_len"],
                         placement=config["norm_placement"], norm=config["norm"], eps=config["norm_eps"])
    # By name: strict=True fails on any missing, unexpected or misshapen tensor.
    model.load_state_dict({name: torch.from_numpy(array.copy()) for name, array in weights.items()}, strict=True)
    model.eval()

    rng = Xoshiro256StarStar(int(x) for x in state["rng.data"].tolist())
    tokens = next_copy_batch(rng, config["batch"], config["copy_len"], config["vocab"])
    with torch.no_grad():
        loss32 = cm.copy_loss(model, tokens).item()
        loss64 = cm.copy_loss(model.double(), tokens).item()

    expected = logged_loss(args.run_dir, step + 1)
    print(f"checkpoint {ckpt}: {len(weights)} tensors loaded by name (strict), "
          f"{config['norm_placement']}-LN {config['norm']}, {config['layers']} blocks x width {config['width']}")
    print(f"batch {int(state['data.batches_drawn'])} + 1 of the data stream ({config['batch']} x {2 * config['copy_len']} tokens)")
    print(f"PyTorch loss  float32 {loss32:.9g}   float64 {loss64:.9g}")
    if expected is None:
        print(f"metrics.csv has no step {step + 1}: nothing to compare with (checkpoint a step before the last)")
        return 1
    rel = abs(loss32 - expected) / abs(expected)
    print(f"blocklab loss {expected:.9g} (metrics.csv step {step + 1}, float32)   relative difference {rel:.2e}")
    ok = rel <= args.tolerance
    print("OK: same loss on the same batch" if ok else f"MISMATCH (tolerance {args.tolerance:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
