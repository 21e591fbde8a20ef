#pragma once
// The arithmetic peak of this machine at the running instruction-set level (kernels/isa.h): multiply-add
// throughput in a loop that touches no memory, on every thread of the current OpenMP team size. The
// denominator of an honest MFU (model FLOP/s over what the cores can do, not over what our own GEMM does).
namespace blocklab::kernels {

struct FmaPeak {
  double gflops = 0;      // the best of a few runs by wall time, all threads together
  double gflops_cpu = 0;  // the same by the process's CPU time (without the waits for a core on a busy machine)
  int threads = 0;
  int chains = 0;     // independent accumulator registers per thread
  int lanes = 0;      // floats per register
  bool fused = true;  // one fused multiply-add per lane and step (false: a multiply and an add, generic level)
  int products = 1;   // products added into each lane per instruction (2: a bf16 dot instruction)
  const char* instruction = "";  // the bf16 peak's instruction ("vdpbf16ps", "bfdot")
};

// Runs for about `seconds` in all (several repeats; the best is kept).
FmaPeak measure_fma_peak(int threads, double seconds = 0.3);

// The bf16 peak: the dot instruction of the bf16 GEMM kernel (vdpbf16ps, BFDOT: two bf16 products added into each
// float lane) in independent chains in registers, the denominator of a bf16 step's MFU. All zero where the CPU
// has no such instruction. On a CPU whose bf16 products run on AMX tiles (oneDNN) this is the AVX512-BF16 rate,
// not the tiles'.
FmaPeak measure_bf16_peak(int threads, double seconds = 0.3);

}  // namespace blocklab::kernels
