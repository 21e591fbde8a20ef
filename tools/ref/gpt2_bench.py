#!/usr/bin/env -S /usr/bin/python3
"""PyTorch (eager) training speed of GPT-2 small on the copy task's shapes: the baseline that
bench/compare_pytorch --model gpt2 times blocklab against.

The model is GPT-2 as nanoGPT writes it, in plain torch modules: token embedding + learned position
table (1024 rows, GPT-2's; --pos-table 0 = T rows, as blocklab's copy task has); per block Pre-LN
LayerNorm (eps 1e-5), fused qkv (3C,C) with bias, causal attention by
torch.nn.functional.scaled_dot_product_attention, proj with bias, MLP fc1 (4C,C) + bias -> GELU
(tanh form) -> fc2 + bias; final LayerNorm; logits = h @ tok_emb.weight^T (the head is tied).
Init: every Linear weight and both embeddings N(0, 0.02), biases 0, LayerNorm weight 1 and bias 0
(blocklab's `init = gpt2`; GPT-2's extra 1/sqrt(2L) on the residual projections is left out, as
blocklab leaves it out: it does not change the speed).

Task: each step draws B fresh random copy sequences of 2n tokens (copy_model.copy_batch), feeds the
first T = 2n-1; the loss is the mean cross-entropy over the last n positions only (copy_model.copy_loss's
definition), as blocklab's copy task. The head runs for those n positions alone (the final norm's output sliced
before the tied projection), as blocklab's does; --head-rows all computes logits for all B*T positions and
slices them for the loss instead (the plain nanoGPT form). Optimizer: AdamW,
lr 1e-3 constant, betas 0.9/0.999, eps 1e-8, weight decay 0.1 on every parameter (embeddings, biases
and LayerNorm parameters too: blocklab's adamw decays all of them). Each step also takes the global
gradient norm, as blocklab's trainer does. --precision bf16 runs the forward pass and the loss under
torch.autocast("cpu", dtype=torch.bfloat16); weights, gradients and AdamW stay float32.

stdout: CSV `step,loss,ms` (loss of that step's batch before the update; wall ms of the step).
stderr: `# key=value` lines: torch (version, BLAS library, MKL, oneDNN, CPU capability), threads,
        precision, adamw (implementation), parameters (count and position table length), then at the
        end cpu_ms_per_step (median process CPU time, all threads), ms_per_step_mean, peak_rss_mib
        (resource.getrusage ru_maxrss of this process) and, as the last line,
        `# ms_per_step=<median wall ms of the timed steps>`.
A step's time covers the batch draw, forward, loss, backward, gradient norm and the AdamW update.
"""
import argparse
import math
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# torch is imported in main() after --threads has been applied to the environment (OpenMP, MKL and
# OpenBLAS read their thread counts at load time).
torch = nn = F = cm = None

# --adamw-impl auto: the implementation measured fastest on the dev box (AMD EPYC, Zen 4, 2 cores with
# AVX-512, shared with a compiler at the time: load about 3; torch 2.15.0+cu132 from PyPI, oneMKL).
# AdamW's update alone (opt.step() with random gradients) on the 124,439,808 parameters of GPT-2 small,
# median ms of 5 steps after 2 untimed ones, at 1 thread / 2 threads:
#   fused 98 / 121     foreach 538 / 624     forloop 704 / 782
# fused makes one pass over each tensor; foreach and forloop make a pass per elementwise operation.
# (PyTorch before 2.4 has no fused AdamW on the CPU: auto is foreach there.)
AUTO_ADAMW = "fused"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--pos-table", type=int, default=1024,
                    help="rows of the learned position table (GPT-2: 1024; 0 = T = 2*copy_len-1,\n"
                         "the table blocklab's copy task has)")
    ap.add_argument("--copy-len", type=int, default=32, help="n: sequences of T = 2n-1 tokens")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--head-rows", choices=["counted", "all"], default="counted",
                    help="the positions the head computes logits for: those the loss counts, or all B*T")
    ap.add_argument("--threads", type=int, default=0,
                    help="total compute threads: torch.set_num_threads(N) and also\n"
                         "OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS=N, and\n"
                         "OMP_WAIT_POLICY=PASSIVE unless already set (0 = library defaults)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: forward and loss under torch.autocast('cpu', dtype=torch.bfloat16)")
    ap.add_argument("--adamw-impl", choices=["auto", "fused", "foreach", "forloop"], default="auto",
                    help=f"torch.optim.AdamW's implementation (auto = {AUTO_ADAMW}, the fastest measured\n"
                         "on the dev box; see AUTO_ADAMW in the source)")
    ap.add_argument("--count-only", action="store_true",
                    help="print the torch, adamw and parameters lines and stop (no training)")
    a = ap.parse_args(argv)
    for name in ("layers", "width", "heads", "vocab", "copy_len", "batch", "steps"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(a, name)}")
    if a.warmup_steps < 0 or a.threads < 0 or a.pos_table < 0:
        ap.error("--warmup-steps, --threads and --pos-table must not be negative")
    if a.width % a.heads:
        ap.error(f"--heads {a.heads} does not divide --width {a.width}")
    if a.pos_table and a.pos_table < 2 * a.copy_len - 1:
        ap.error(f"--pos-table {a.pos_table} is shorter than T = 2*copy_len-1 = {2 * a.copy_len - 1}")
    return a


def build_model(layers, width, heads, vocab, positions):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(width, eps=1e-5)
            self.attn = nn.Module()
            self.attn.qkv = nn.Linear(width, 3 * width)
            self.attn.proj = nn.Linear(width, width)
            self.norm2 = nn.LayerNorm(width, eps=1e-5)
            self.mlp = nn.Module()
            self.mlp.fc1 = nn.Linear(width, 4 * width)
            self.mlp.fc2 = nn.Linear(4 * width, width)

        def forward(self, h):
            B, T, C = h.shape
            # qkv's columns: [q | k | v], head j = columns j*D:(j+1)*D of each -> (3, B, H, T, D)
            q, k, v = self.attn.qkv(self.norm1(h)).view(B, T, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)       # scale 1/sqrt(D)
            h = h + self.attn.proj(y.transpose(1, 2).reshape(B, T, C))
            return h + self.mlp.fc2(F.gelu(self.mlp.fc1(self.norm2(h)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb = nn.Embedding(vocab, width)
            self.pos_emb = nn.Embedding(positions, width)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.final_norm = nn.LayerNorm(width, eps=1e-5)

        def forward(self, inputs, first=0):
            h = self.tok_emb(inputs) + self.pos_emb.weight[:inputs.shape[1]]
            for block in self.blocks:
                h = block(h)
            return F.linear(self.final_norm(h)[:, first:], self.tok_emb.weight)  # (B, T - first, V), tied

    model = GPT2()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif ".norm" in name or name.startswith("final_norm"):
                p.fill_(1.0)
            else:  # Linear weights, tok_emb, pos_emb
                p.normal_(0.0, 0.02)
    return model


def make_adamw(params, impl, lr, weight_decay):
    kinds = {"fused": dict(fused=True), "foreach": dict(foreach=True), "forloop": dict(foreach=False, fused=False)}
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay,
                             **kinds[impl])


def torch_at_least(major, minor):
    version = torch.__version__.split("+")[0].split(".")
    return (int(version[0]), int(version[1])) >= (major, minor)


def torch_info():
    config = torch.__config__.show()
    blas = next((part.split("=", 1)[1] for part in config.replace(",", " ").split() if part.startswith("BLAS_INFO=")),
                "unknown")
    capability = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "unknown"
    return (f"{torch.__version__} blas={blas} mkl={'yes' if torch.backends.mkl.is_available() else 'no'} "
            f"onednn={'yes' if torch.backends.mkldnn.is_available() else 'no'} cpu_capability={capability}")


def main(argv=None):
    global torch, nn, F, cm
    a = parse_args(argv)
    if a.threads > 0:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(a.threads)
        # Idle OpenMP workers spin by default, which a shared machine punishes (see train_copy.py).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch as _torch
    import torch.nn as _nn
    import torch.nn.functional as _F
    import copy_model as _cm
    torch, nn, F, cm = _torch, _nn, _F, _cm
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    err = sys.stderr
    print(f"# torch={torch_info()}", file=err)
    print(f"# threads={torch.get_num_threads()}", file=err)
    print(f"# head_rows={a.head_rows}", file=err)
    print(f"# precision={a.precision}" + (" (torch.autocast cpu bfloat16)" if a.precision == "bf16" else ""),
          file=err)

    if not hasattr(F, "scaled_dot_product_attention"):
        sys.exit(f"gpt2_bench.py: needs PyTorch 2.0 or later (scaled_dot_product_attention); this is {torch.__version__}")
    impl = a.adamw_impl
    if impl == "auto":
        impl = AUTO_ADAMW if torch_at_least(2, 4) else "foreach"
    print(f"# adamw={impl}" + (" (auto)" if a.adamw_impl == "auto" else "")
          + f" lr={a.lr:g} weight_decay={a.weight_decay:g} (all parameters)", file=err)
    n, T = a.copy_len, 2 * a.copy_len - 1
    positions = a.pos_table or T
    torch.manual_seed(a.seed)
    if a.count_only:  # shapes only: on the meta device nothing is allocated or drawn
        with torch.device("meta"):
            model = build_model(a.layers, a.width, a.heads, a.vocab, positions)
    else:
        model = build_model(a.layers, a.width, a.heads, a.vocab, positions)
    params = list(model.parameters())  # the tied embedding once
    print(f"# parameters={sum(p.numel() for p in params)} pos_table={positions} T={T}", file=err)
    err.flush()
    if a.count_only:
        return
    opt = make_adamw(params, impl, a.lr, a.weight_decay)
    gen = torch.Generator().manual_seed(a.seed + 1)  # the data stream, apart from the init's draws

    def step():
        tokens = cm.copy_batch(a.batch, n, a.vocab, generator=gen)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            if a.head_rows == "all":
                logits = model(inputs)[:, n - 1:]                                # all B*T rows, then sliced
            else:
                logits = model(inputs, n - 1)                                    # the counted rows only
            loss = F.cross_entropy(logits.reshape(-1, a.vocab), targets[:, n - 1:].reshape(-1))
        loss.backward()
        grad_norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm([p.grad for p in params])))
        opt.step()
        return loss.item(), grad_norm.item()

    out = sys.stdout
    out.write("step,loss,ms\n")
    wall, cpu = [], []
    for k in range(1, a.warmup_steps + a.steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        loss, _ = step()
        ms, cpu_ms = 1e3 * (time.perf_counter() - t0), 1e3 * (time.process_time() - c0)
        out.write(f"{k},{loss:.6f},{ms:.1f}\n")
        out.flush()
        if not math.isfinite(loss):
            print(f"# non-finite loss at step {k}", file=err)
            sys.exit(1)
        if k > a.warmup_steps:
            wall.append(ms)
            cpu.append(cpu_ms)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB
    print(f"# cpu_ms_per_step={statistics.median(cpu):.1f}", file=err)
    print(f"# ms_per_step_mean={statistics.fmean(wall):.1f}", file=err)
    print(f"# peak_rss_mib={rss_mib:.1f}", file=err)
    print(f"# ms_per_step={statistics.median(wall):.1f}", file=err)


if __name__ == "__main__":
    main()
