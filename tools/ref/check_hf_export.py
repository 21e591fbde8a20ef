#!/usr/bin/env python3
"""Checks `blocklab export` against Hugging Face transformers: trains small runs with the blocklab CLI,
exports each, loads the directory with transformers.AutoModelForCausalLM.from_pretrained and compares its
logits on a batch of token ids with blocklab's own logits for the same batch.

    PYTHON tools/ref/check_hf_export.py [--blocklab build/blocklab] [--blocklab-python build/venv/bin/python]
                                        [--work DIR] [--tolerance 1e-5]

PYTHON is an interpreter with torch, transformers, safetensors and numpy (a virtual environment with them
from PyPI; not Debian's python3-torch, which has no transformers). blocklab's logits come from the Python
package (`blocklab.Model.from_run(RUN_DIR).forward(tokens)`: the training engine with the checkpoint's
weights, not the exported files), run by --blocklab-python, the interpreter of the virtual environment that
`make test-python` (tools/python-tests.sh) builds the package into.

Every run is 2 blocks x width 32, 4 heads, vocabulary 16, copy task n = 8, batch 8, 30 steps at lr 3e-3
(trained, not at init), checkpointed at its last step and exported from it:
  gpt2             block = gpt2: Pre-LN LayerNorm, tanh-GELU, tied head         -> GPT2LMHeadModel
  seed-as-gpt2     block = seed, --format gpt2: exact GELU, untied head         -> GPT2LMHeadModel
  qwen3-gqa        block = qwen3, kv_heads 2 (grouped-query attention)          -> Qwen3ForCausalLM
  qwen3-tied-bias  block = qwen3, head_dim 16 (!= width / heads), q/k/v and o biases, tied head, MLP ratio 3,
                   rope_theta 1e4                                               -> Qwen3ForCausalLM
The batch: 6 copy-task sequences (15 tokens: 8 random ids, then the first 7 again), the same for both sides.
transformers must load every tensor (no missing, unexpected or mismatched keys). Prints, per model, the
largest |logit difference|, the largest |logit| and their ratio (the relative error); fails (exit 1) when a
relative error exceeds --tolerance (default 1e-5: float32 rounding through two blocks, about 100 ulps), and
exits 2 when something it needs is missing. Never run by CI (CI has no PyTorch).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    np = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

COMMON = ["--layers", "2", "--width", "32", "--heads", "4", "--vocab", "16", "--copy-len", "8", "--batch", "8",
          "--steps", "30", "--lr", "3e-3", "--seed", "7", "--threads", "1", "--checkpoint-every", "30"]
CASES = [  # name, train flags, export flags, the transformers class expected
    ("gpt2", ["--block", "gpt2"], [], "GPT2LMHeadModel"),
    ("seed-as-gpt2", ["--block", "seed", "--norm-placement", "pre"], ["--format", "gpt2"], "GPT2LMHeadModel"),
    ("qwen3-gqa", ["--block", "qwen3", "--kv-heads", "2"], [], "Qwen3ForCausalLM"),
    ("qwen3-tied-bias", ["--block", "qwen3", "--head-dim", "16", "--tie-head", "true", "--qkv-bias", "true",
                         "--proj-bias", "true", "--mlp-ratio", "3", "--rope-theta", "10000"], [], "Qwen3ForCausalLM"),
]

# Runs in --blocklab-python: blocklab's logits for the tokens, from the run's newest checkpoint.
BLOCKLAB_LOGITS = """
import sys
import numpy as np
import blocklab
run_dir, tokens_path, out_path = sys.argv[1:]
np.save(out_path, blocklab.Model.from_run(run_dir).forward(np.load(tokens_path)))
"""


def fail_setup(message):
    print(f"check_hf_export: {message}", file=sys.stderr)
    sys.exit(2)


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        print(f"check_hf_export: failed ({result.returncode}): {' '.join(cmd)}\n{result.stdout}{result.stderr}",
              file=sys.stderr)
        sys.exit(1)
    return result.stdout


def copy_batch(vocab, copy_len, batch, seed):
    rng = np.random.default_rng(seed)
    first = rng.integers(0, vocab, size=(batch, copy_len))
    return np.concatenate([first, first[:, :-1]], axis=1).astype(np.int32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocklab", default=os.path.join(ROOT, "build", "blocklab"), help="the CLI")
    parser.add_argument("--blocklab-python", default=os.path.join(ROOT, "build", "venv", "bin", "python"),
                        help="an interpreter that imports the blocklab package")
    parser.add_argument("--work", help="keep the runs and exports in this directory (default: a temporary one)")
    parser.add_argument("--tolerance", type=float, default=1e-5, help="largest relative error that passes")
    args = parser.parse_args()

    try:
        import torch
        import transformers
        if np is None:
            import numpy  # noqa: F401  (raises ImportError naming it)
    except ImportError as e:
        fail_setup(f"{e.name} is not installed in {sys.executable}; use a virtual environment with torch and "
                   "transformers from PyPI")
    if not os.access(args.blocklab, os.X_OK):
        fail_setup(f"{args.blocklab}: no blocklab CLI (make build)")
    probe = subprocess.run([args.blocklab_python, "-c", "import blocklab"], capture_output=True, text=True)
    if probe.returncode != 0:
        fail_setup(f"{args.blocklab_python} cannot import blocklab (make test-python builds the package into "
                   f"build/venv): {probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else ''}")

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}, "
          f"python {sys.version.split()[0]}")
    torch.set_num_threads(1)
    transformers.logging.disable_progress_bar()
    work = args.work or tempfile.mkdtemp(prefix="check-hf-export-")
    os.makedirs(work, exist_ok=True)
    tokens = copy_batch(vocab=16, copy_len=8, batch=6, seed=12345)
    tokens_path = os.path.join(work, "tokens.npy")
    np.save(tokens_path, tokens)

    failed = []
    print(f"{'model':<16} {'class':<17} {'loss first -> last':>20} {'max |diff|':>11} {'max |logit|':>11} "
          f"{'relative':>10}  verdict")
    for name, train_flags, export_flags, expected_class in CASES:
        run_dir, hf_dir = os.path.join(work, name), os.path.join(work, name + "-hf")
        run([args.blocklab, "train", *COMMON, *train_flags, "--out", run_dir, "--force"])
        run([args.blocklab, "export", run_dir, "--out", hf_dir, "--force", *export_flags])
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)

        ours_path = os.path.join(work, name + "-blocklab-logits.npy")
        run([args.blocklab_python, "-c", BLOCKLAB_LOGITS, run_dir, tokens_path, ours_path])
        ours = np.load(ours_path).astype(np.float64)

        model, info = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, output_loading_info=True)
        model.eval()
        problems = {k: sorted(map(str, v)) for k, v in info.items() if v}
        if type(model).__name__ != expected_class:
            problems["class"] = type(model).__name__
        if model.dtype != torch.float32:
            problems["dtype"] = str(model.dtype)
        with torch.no_grad():
            theirs = model(input_ids=torch.from_numpy(tokens.astype(np.int64))).logits.double().numpy()
        if theirs.shape != ours.shape:
            problems["shape"] = f"transformers {theirs.shape}, blocklab {ours.shape}"
            diff = scale = relative = float("nan")
        else:
            diff = float(np.max(np.abs(theirs - ours)))
            scale = float(np.max(np.abs(ours)))
            relative = diff / scale
        ok = not problems and relative <= args.tolerance
        verdict = "ok" if ok else "FAIL " + (json.dumps(problems) if problems else f"(> {args.tolerance:g})")
        print(f"{name:<16} {type(model).__name__:<17} {summary['first_loss']:>9.4f} -> {summary['final_loss']:.4f} "
              f"{diff:>11.3g} {scale:>11.3g} {relative:>10.3g}  {verdict}", flush=True)
        if not ok:
            failed.append(name)

    if not args.work:
        shutil.rmtree(work)
    if failed:
        print(f"FAILED: {', '.join(failed)} (tolerance {args.tolerance:g})")
        return 1
    print(f"all {len(CASES)} exports agree with blocklab within {args.tolerance:g} (relative to the largest |logit|)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
