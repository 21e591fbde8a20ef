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
};

// Runs for about `seconds` in all (several repeats; the best is kept).
FmaPeak measure_fma_peak(int threads, double seconds = 0.3);

}  // namespace blocklab::kernels
