#!/usr/bin/env python3
"""PyTorch's fp32 matmul (oneMKL in the PyPI wheel, OpenBLAS in Debian's) on the GEMM shapes of one training step
of the source model, or of GPT-2 124M (--model gpt2), timed as build/bench_gemm times blocklab's sgemm and
OpenBLAS: the same shapes and operand layouts (bench/gemm_problem.h), the same operands every call
(cache-resident), GFLOP/s of the median call. --bf16 adds the same products with bf16 operands (oneDNN's matmul,
what autocast runs), beside blocklab's bf16 GEMM (build/bench_gemm, BM_*bf16_gemm).

    bench/torch_gemm.py [--model source|gpt2] [--threads "1 2"] [--min-time SECONDS] [--bf16]
    MKL_ENABLE_INSTRUCTIONS=AVX2 ~/venv-ref/bin/python bench/torch_gemm.py   # oneMKL capped at AVX2

Run it beside `BLOCKLAB_ISA=avx2 build/bench_gemm --benchmark_filter=sgemm` (GPT-2: `--benchmark_filter=gpt2`)
for a per-shape table against blocklab; cap both at the same level (BLOCKLAB_ISA, MKL_ENABLE_INSTRUCTIONS,
OPENBLAS_CORETYPE; ATEN_CPU_CAPABILITY for the elementwise kernels).

Then the MLP's GELU as PyTorch runs it, each a pass of its own after the product: the fc1 forward product with its
bias (torch.nn.functional.linear, 2016 x 512 x 128), GELU of its output, and GELU's backward (the incoming gradient
times the derivative), with what each pass adds to the product; build/bench_epilogue prints the same for blocklab's
epilogues fused into the product.
"""
import argparse
import statistics
import sys
import time

# (trans_a, trans_b, M, N, K, what): as bench/gemm_problem.h's step_shapes
SHAPES = [
    (0, 1, 2016, 384, 128, "qkv forward"),
    (0, 1, 2016, 512, 128, "fc1 forward"),
    (0, 1, 2016, 128, 512, "fc2 forward"),
    (0, 0, 2016, 128, 384, "qkv backward dX"),
    (0, 0, 2016, 128, 512, "fc1 backward dX"),
    (1, 0, 512, 128, 2016, "fc1 backward dW"),
    (1, 0, 128, 512, 2016, "fc2 backward dW"),
]

# (trans_a, trans_b, M, N, K, what): as bench/gemm_problem.h's gpt2_shapes (252 token rows; the head's products
# take the 128 positions the copy task's loss counts)
_T, _C, _V, _R = 252, 768, 50257, 128
GPT2_SHAPES = []
for _oc, _name in ((3 * _C, "qkv"), (_C, "proj"), (4 * _C, "fc1")):
    GPT2_SHAPES += [(0, 1, _T, _oc, _C, f"{_name} forward"), (0, 0, _T, _C, _oc, f"{_name} dX"),
                    (1, 0, _oc, _C, _T, f"{_name} dW")]
GPT2_SHAPES += [(0, 1, _T, _C, 4 * _C, "fc2 forward"), (0, 0, _T, 4 * _C, _C, "fc2 dX"),
                (1, 0, _C, 4 * _C, _T, "fc2 dW"), (0, 1, _R, _V, _C, "head logits"), (0, 0, _R, _C, _V, "head dX"),
                (1, 0, _V, _C, _R, "head dW")]


def median_seconds(fn, min_time: float) -> float:
    """Seconds of the median call of fn, after 3 warm-up calls; calls for at least min_time seconds and 5 calls."""
    for _ in range(3):
        fn()
    calls = []
    start = time.perf_counter()
    while time.perf_counter() - start < min_time or len(calls) < 5:
        t0 = time.perf_counter()
        fn()
        calls.append(time.perf_counter() - t0)
    return statistics.median(calls)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("source", "gpt2"), default="source",
                        help="whose step's shapes: the source model's (default) or GPT-2 124M's")
    parser.add_argument("--bf16", action="store_true", help="also time each product with bf16 operands")
    parser.add_argument("--threads", default="1 2", help='thread counts, e.g. "1 2" (default)')
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds of calls per shape and thread count (default 0.5)")
    args = parser.parse_args()
    try:
        threads = [int(t) for t in args.threads.split()]
    except ValueError:
        parser.error(f"--threads: not a list of integers: {args.threads!r}")
    if not threads or min(threads) < 1:
        parser.error("--threads: give at least one positive thread count")
    if args.min_time <= 0:
        parser.error("--min-time: must be positive")
    try:
        import torch
    except ImportError:
        print(f"{sys.executable}: cannot import torch (apt-get install python3-torch, or a virtual environment "
              "with torch)", file=sys.stderr)
        return 2
    blas = "oneMKL" if torch.backends.mkl.is_available() else "not oneMKL (OpenBLAS in Debian's build)"
    print(f"PyTorch {torch.__version__}, fp32 matmul: {blas}; cache-resident operands, GFLOP/s of the median call")
    columns = [f"{t} thread" + ("s" if t > 1 else "") for t in threads]
    if args.bf16:
        columns += [f"bf16 {t}t" for t in threads]
    print(f"{'product':16} {'M x N x K':>16} {'op':>3}" + "".join(f" {c:>10}" for c in columns))
    gen = torch.Generator().manual_seed(1)
    for ta, tb, m, n, k, what in (GPT2_SHAPES if args.model == "gpt2" else SHAPES):
        # stored as bench_gemm stores them: A (K, M) when transposed, B (N, K) when transposed
        a = torch.randn((k, m) if ta else (m, k), generator=gen)
        b = torch.randn((n, k) if tb else (k, n), generator=gen)
        opa, opb = (a.t() if ta else a), (b.t() if tb else b)
        c = torch.empty(m, n)
        rates = []
        for t in threads:
            torch.set_num_threads(t)
            seconds = median_seconds(lambda: torch.matmul(opa, opb, out=c), args.min_time)
            rates.append(2.0 * m * n * k / seconds / 1e9)
        if args.bf16:  # operands converted once, outside the timing
            opa16, opb16, c16 = opa.bfloat16(), opb.bfloat16(), c.bfloat16()
            for t in threads:
                torch.set_num_threads(t)
                seconds = median_seconds(lambda: torch.matmul(opa16, opb16, out=c16), args.min_time)
                rates.append(2.0 * m * n * k / seconds / 1e9)
        op = ("T" if ta else "N") + ("T" if tb else "N")
        print(f"{what:16} {f'{m}x{n}x{k}':>16} {op:>3}" + "".join(f" {r:10.1f}" for r in rates))

    if args.model == "gpt2":
        return 0
    m, n, k = 2016, 512, 128
    x, w, bias = torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen), torch.randn(n, generator=gen)
    pre, grad = torch.randn(m, n, generator=gen), torch.randn(m, n, generator=gen)
    print(f"GELU (erf form) beside the fc1 forward product {m}x{n}x{k} with bias, each a separate pass; "
          "ms of the median call (% of the product)")
    for t in threads:
        torch.set_num_threads(t)
        product = median_seconds(lambda: torch.nn.functional.linear(x, w, bias), args.min_time)
        gelu = median_seconds(lambda: torch.nn.functional.gelu(pre), args.min_time)
        backward = median_seconds(lambda: torch.ops.aten.gelu_backward(grad, pre), args.min_time)
        print(f"{t} thread{'s' if t > 1 else ' '}: product {1e3 * product:.3f}, gelu {1e3 * gelu:.3f} "
              f"({100 * gelu / product:.0f}%), gelu backward {1e3 * backward:.3f} ({100 * backward / product:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
