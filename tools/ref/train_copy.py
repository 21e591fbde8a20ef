#!/usr/bin/env -S /usr/bin/python3
"""PyTorch reference trainer for the copy task (speed / training-behaviour baseline for blocklab).

Needs PyTorch: run with Debian's /usr/bin/python3 (the shebang does that).
stdout: CSV `step,loss,lr,grad_norm` (grad_norm = global L2 norm of all grads before the update;
        lr = the lr used for that step's update; loss = loss of that step's batch before the update)
stderr: at the end `# cpu_ms_per_step=<process CPU ms, all threads>` and, as the last line,
        `# ms_per_step=<mean wall ms over steps after the first 3>`.
Each step draws a fresh random copy batch; optimizer is plain Adam (betas 0.9/0.999, eps 1e-8, no
weight decay); lr_k = lr * min(1, k/warmup) for step k = 1.. (warmup 0 = constant).
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# torch / copy_model are imported in main() after --threads has been applied to the environment,
# because OpenBLAS (the GEMM backend of Debian's torch) reads OPENBLAS_NUM_THREADS at load time.
torch = cm = None


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--norm-placement", choices=["post", "pre"], default="pre")
    ap.add_argument("--norm", choices=["layernorm", "rmsnorm"], default="layernorm")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--copy-len", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0,
                    help="total compute threads: torch.set_num_threads(N) and also\n"
                         "OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS=N, and\n"
                         "OMP_WAIT_POLICY=PASSIVE unless already set (0 = library defaults)")
    ap.add_argument("--init", choices=["xavier", "gpt2"], default="xavier")
    ap.add_argument("--embed-std", type=float, default=1.0)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help="bf16: forward and loss under torch.autocast('cpu', dtype=torch.bfloat16)\n"
                         "(PyTorch's own mixed precision; weights, grads and Adam stay float32)")
    ap.add_argument("--log-every", type=int, default=1,
                    help="print a CSV line every N steps (plus step 1 and the last step)")
    return ap.parse_args(argv)


def lr_at(step, lr, warmup):
    return lr * min(1.0, step / warmup) if warmup > 0 else lr


def main(argv=None):
    global torch, cm
    a = parse_args(argv)
    if a.threads > 0:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(a.threads)
        # Idle OpenMP workers spin by default; on a shared/loaded box that makes multi-threaded
        # torch pathologically slow (measured 34 s/step vs 6 s/step). Override with
        # OMP_WAIT_POLICY=ACTIVE in the environment for a dedicated machine.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch as _torch
    import copy_model as _cm
    torch, cm = _torch, _cm
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    torch.set_default_dtype(dtype)
    torch.manual_seed(a.seed)
    model = cm.CopyModel(a.layers, a.width, a.heads, a.vocab, a.copy_len,
                         placement=a.norm_placement, norm=a.norm).to(dtype)
    cm.init_params(model, a.init, embed_std=a.embed_std)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=lr_at(1, a.lr, a.warmup), betas=(0.9, 0.999), eps=1e-8,
                           weight_decay=0.0, foreach=True)
    gen = torch.Generator().manual_seed(a.seed + 1)  # data stream independent of init draws

    out = sys.stdout
    out.write("step,loss,lr,grad_norm\n")
    times, cpu_times = [], []
    for step in range(1, a.steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        lr = lr_at(step, a.lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        tokens = cm.copy_batch(a.batch, a.copy_len, a.vocab, generator=gen)
        opt.zero_grad(set_to_none=True)
        if a.autocast == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = cm.copy_loss(model, tokens)
        else:
            loss = cm.copy_loss(model, tokens)
        loss.backward()
        grad_norm = torch.linalg.vector_norm(
            torch.stack(torch._foreach_norm([p.grad for p in params])))
        opt.step()
        loss_v, gn_v = loss.item(), grad_norm.item()
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
        if step == 1 or step == a.steps or (a.log_every > 0 and step % a.log_every == 0):
            out.write(f"{step},{loss_v:.6f},{lr:.6g},{gn_v:.6f}\n")
            out.flush()
        if not math.isfinite(loss_v):
            print(f"# non-finite loss at step {step}", file=sys.stderr)
            break
    skip = 3 if len(times) > 3 else 0
    wall, cpu = times[skip:], cpu_times[skip:]
    # Process CPU time (all threads) is a contention-robust cross-check for --threads 1 runs.
    print(f"# cpu_ms_per_step={1000.0 * sum(cpu) / max(1, len(cpu)):.3f}", file=sys.stderr)
    print(f"# ms_per_step={1000.0 * sum(wall) / max(1, len(wall)):.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
