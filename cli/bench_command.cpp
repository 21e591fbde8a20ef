// blocklab bench: time training steps of any config (no files written), with model FLOP/s, MFU against
// the GEMM peak measured in the same run, and an optional per-kernel profile. With --precision bf16 the
// bf16 steps alternate with fp32 steps of the same model, so that the ratio of the two is measured under
// the same machine conditions.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "jobs/build_info.h"
#include "report/labels.h"
#include "kernels/bf16_gemm.h"
#include "kernels/bf16_onednn.h"
#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "kernels/peak.h"
#include "util/mpi.h"
#include "kernels/sgemm.h"
#include "model/flops.h"
#include "train/memory.h"
#include "train/trainer.h"
#include "util/profiler.h"
#include "util/rng.h"
#include "util/threads.h"

namespace blocklab::cli {

namespace {

// A count of GFLOP or GFLOP/s: `decimals` decimals from 1 up, three significant digits below (a tiny model's
// FLOPs or an emulated run's rate are small, not 0).
std::string gflop_text(double x, int decimals = 1) {
  char text[32];
  if (x >= 1.0 || x <= 0.0)
    std::snprintf(text, sizeof text, "%.*f", decimals, x);
  else
    std::snprintf(text, sizeof text, "%.*f", std::min(9, 2 - static_cast<int>(std::floor(std::log10(x)))), x);
  return text;
}

struct GemmPeak {
  double wall = 0;  // GFLOP/s by wall time
  double cpu = 0;   // GFLOP/s by the process's CPU time (with one thread: without the waits for a core)
};

// GFLOP/s of the GEMM the model uses (blocklab's sgemm, or BLAS; the bf16 GEMM for bf16), on a
// forward-pass-sized shape, the same operands every call: cache-resident, the best of 5 runs of 0.1 s.
GemmPeak measure_gemm_peak(int M, int N, int K, Precision precision) {
  Rng rng(1);
  std::vector<float> A(static_cast<size_t>(M) * K), B(static_cast<size_t>(N) * K), C(static_cast<size_t>(M) * N);
  for (auto& x : A) x = static_cast<float>(rng.normal());
  for (auto& x : B) x = static_cast<float>(rng.normal());
  GemmPeak best;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_seconds();
    int calls = 0;
    double elapsed = 0;
    do {
      if (precision != Precision::Bf16 ||
          !kernels::bf16_gemm(false, true, M, N, K, A.data(), K, B.data(), K, 0.f, C.data(), N))
        kernels::gemm<float>(false, true, M, N, K, 1.f, A.data(), K, B.data(), K, 0.f, C.data(), N);
      ++calls;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (elapsed < 0.1);
    const double flops = 2.0 * M * N * K * calls;
    best.wall = std::max(best.wall, flops / elapsed / 1e9);
    best.cpu = std::max(best.cpu, flops / (process_cpu_seconds() - cpu_start) / 1e9);
  }
  return best;
}

}  // namespace

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

void register_bench(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand("bench", "time training steps of a config: ms/step, tokens/s, model FLOP/s, MFU");
  auto flags = std::make_shared<ConfigFlags>();
  auto options = std::make_shared<std::pair<int, int>>(10, 3);  // measured steps, warm-up steps
  auto profile = std::make_shared<bool>(false);
  add_config_flags(app, *flags);
  app->add_option("--bench-steps", options->first, "steps to time [10]")->check(at_least(1));
  app->add_option("--warmup-steps", options->second, "untimed steps first [3]")->check(at_least(0));
  app->add_flag("--profile", *profile, "also print where a step's time goes, per kernel");
  commands.push_back({app, [app, flags, options, profile] {
                        RunConfig config = build_config(app, *flags);
                        resolve(config);
                        require_training_memory(config, "bench");
                        set_num_threads(config.threads);
                        const int threads = num_threads();
                        Trainer trainer(config);
                        const int T = config.model.seq_len;  // resolved: 2n-1 for the copy task
                        const Precision precision = config.model.precision;
                        const bool bf16 = precision == Precision::Bf16;
                        std::printf("%s %s, %d blocks x width %d, %d heads, V %d, T %d, batch %d (%d tokens/step), "
                                    "threads %d, gemm %s\n",
                                    report::placement_label(config.model.norm_placement).c_str(), to_string(config.model.norm).c_str(),
                                    config.model.layers, config.model.width, config.model.heads, config.model.vocab, T,
                                    config.batch, config.batch * T, threads,
                                    kernels::sgemm_isa_name(kernels::sgemm_isa()));
                        std::printf("%s\n", jobs::describe_kernels().c_str());
                        if (bf16)
                          std::printf("precision bf16: %s; fp32 steps of the same model interleaved\n",
                                      kernels::bf16_isa_description());
                        std::fflush(stdout);
                        Model<float>& model = trainer.model();
                        // bf16: each timed bf16 step is followed by an fp32 step (and each warm-up step too)
                        std::vector<double> cpu_seconds, fp32_cpu_seconds;
                        auto fp32_step = [&] {
                          model.set_precision(Precision::Fp32);
                          const double cpu = process_cpu_seconds();
                          const double secs = trainer.step().seconds;
                          fp32_cpu_seconds.push_back(process_cpu_seconds() - cpu);
                          model.set_precision(precision);
                          return secs;
                        };
                        for (int s = 0; s < options->second; ++s) {
                          trainer.step();
                          if (bf16) fp32_step();
                        }
                        Profiler profiler;
                        std::vector<double> seconds, fp32_seconds;
                        for (int s = 0; s < options->first; ++s) {
                          if (*profile) Profiler::install(&profiler);
                          const double cpu = process_cpu_seconds();
                          seconds.push_back(trainer.step().seconds);
                          cpu_seconds.push_back(process_cpu_seconds() - cpu);
                          Profiler::install(nullptr);
                          if (bf16) fp32_seconds.push_back(fp32_step());
                        }
                        double total = 0;
                        for (double x : seconds) total += x;
                        const double step = median(seconds);
                        const std::vector<uint8_t>& mask = trainer.last_batch().loss_mask;
                        const long loss_positions = std::count_if(mask.begin(), mask.end(), [](uint8_t m) { return m != 0; });
                        const double flops = training_flops_per_step(config.model, config.batch, T, loss_positions);
                        const GemmPeak peaks = measure_gemm_peak(config.batch * T, 4 * config.model.width,
                                                              config.model.width, precision);
                        const double peak = peaks.wall;
                        const kernels::FmaPeak machine = kernels::measure_fma_peak(threads);
                        std::printf("step: %.1f ms (median of %d; mean %.1f)  %.0f tokens/s\n", 1e3 * step,
                                    options->first, 1e3 * total / options->first, config.batch * T / step);
                        if (bf16) {
                          const double fp32 = median(fp32_seconds);
                          std::printf("fp32 step: %.1f ms (median of %d, interleaved) -> bf16 %.2fx faster than fp32\n",
                                      1e3 * fp32, options->first, fp32 / step);
                          // the first entries of fp32_cpu_seconds are the warm-up's fp32 steps: drop them
                          fp32_cpu_seconds.erase(fp32_cpu_seconds.begin(),
                                                 fp32_cpu_seconds.end() - static_cast<long>(cpu_seconds.size()));
                          const double cpu = median(cpu_seconds), fp32_cpu = median(fp32_cpu_seconds);
                          std::printf("process CPU time per step (all threads): bf16 %.1f ms, fp32 %.1f ms -> %.2fx\n",
                                      1e3 * cpu, 1e3 * fp32_cpu, fp32_cpu / cpu);
                        }
                        // (0 where the platform has no process CPU clock: WebAssembly under Node)
                        const bool have_cpu_time = median(cpu_seconds) > 0;
                        if (!bf16 && have_cpu_time)  // a cross-check of the wall time on a busy machine
                          std::printf("process CPU time per step (all threads): %.1f ms (median)\n",
                                      1e3 * median(cpu_seconds));
                        std::printf("model: %s GFLOP/step -> %s GFLOP/s\n", gflop_text(flops / 1e9, 2).c_str(),
                                    gflop_text(flops / step / 1e9).c_str());
                        // whole percent, or two significant digits below 10% (a tiny model's MFU is not 0)
                        const auto percent = [](double p) {
                          char text[32];
                          std::snprintf(text, sizeof text, p >= 10 ? "%.0f%%" : "%.2g%%", p);
                          return std::string(text);
                        };
                        // MFU against what the cores can do at the running level (a register-only multiply-add
                        // loop), and at bf16 against the bf16 dot instruction's rate (the kernel's own
                        // instruction); the GEMM's own cache-resident rate beside it, as the second line.
                        const char* thread_word = threads == 1 ? "thread" : "threads";
                        const kernels::FmaPeak bf16_machine = bf16 && kernels::bf16_isa() != kernels::Bf16Isa::None
                                                                  ? kernels::measure_bf16_peak(threads)
                                                                  : kernels::FmaPeak{};
                        const bool bf16_mfu = bf16_machine.gflops > 0;
                        const kernels::FmaPeak& reference = bf16_mfu ? bf16_machine : machine;
                        const char* mfu_word = bf16_mfu ? "bf16 MFU" : "MFU";
                        std::printf("machine peak (%s: %d independent %s of %d floats in registers, %d %s): "
                                    "%s GFLOP/s -> %s %s\n",
                                    kernels::isa_name(kernels::isa()), machine.chains,
                                    machine.fused ? "FMAs" : "multiply-adds", machine.lanes, threads, thread_word,
                                    gflop_text(machine.gflops).c_str(), bf16_mfu ? "the step runs at" : "MFU",
                                    percent(100.0 * flops / step / 1e9 / machine.gflops).c_str());
                        if (bf16_mfu)
                          std::printf("bf16 peak (%s: %d independent dot products of %d float lanes in registers, %d "
                                      "%s): %s GFLOP/s -> bf16 MFU %s%s\n",
                                      bf16_machine.instruction, bf16_machine.chains, bf16_machine.lanes, threads,
                                      thread_word, gflop_text(bf16_machine.gflops).c_str(),
                                      percent(100.0 * flops / step / 1e9 / bf16_machine.gflops).c_str(),
                                      kernels::bf16_isa() == kernels::Bf16Isa::OneDnn
                                          ? " (the products run on AMX tiles here, whose peak is higher)"
                                          : "");
                        std::printf("%s peak (%dx%dx%d, %d %s, cache-resident): %s GFLOP/s = %s of the %s"
                                    "peak; the step runs at %s of it\n",
                                    bf16 ? "bf16 gemm" : "sgemm", config.batch * T, 4 * config.model.width,
                                    config.model.width, threads, thread_word, gflop_text(peak).c_str(),
                                    percent(100.0 * peak / reference.gflops).c_str(), bf16_mfu ? "bf16 " : "machine ",
                                    percent(100.0 * flops / step / 1e9 / peak).c_str());
                        if (threads == 1 && have_cpu_time)  // the same ratio by CPU time, without the waits for a core
                          std::printf("by CPU time: step %.1f ms, %s peak %s GFLOP/s -> %s %s; %s peak %s "
                                      "GFLOP/s\n",
                                      1e3 * median(cpu_seconds), bf16_mfu ? "bf16" : "machine",
                                      gflop_text(reference.gflops_cpu).c_str(), mfu_word,
                                      percent(100.0 * flops / median(cpu_seconds) / 1e9 / reference.gflops_cpu).c_str(),
                                      bf16 ? "bf16 gemm" : "sgemm", gflop_text(peaks.cpu).c_str());
                        // Peak RSS (the whole process: program, libraries, threads, the peak measurement's
                        // buffers) against the training state proper.
                        const double mib = 1024.0 * 1024.0;
                        const Model<float>& trained = trainer.model();
                        const double param_bytes = static_cast<double>(trained.params().size_bytes());
                        // the bf16 copy of the parameters, where the model keeps one (Model::rounded_params_to_write)
                        const double rounded_bytes = static_cast<double>(trained.rounded_params_bytes());
                        const double state =
                            4 * param_bytes + rounded_bytes + static_cast<double>(trainer.activations().activation_bytes());
                        rusage usage{};
                        ::getrusage(RUSAGE_SELF, &usage);
                        const double rss = static_cast<double>(usage.ru_maxrss) * 1024.0;
                        std::printf("memory: parameters + gradients + Adam moments %.1f MiB, ", 4 * param_bytes / mib);
                        if (rounded_bytes > 0) std::printf("parameters in bf16 %.1f MiB, ", rounded_bytes / mib);
                        std::printf("activations %.1f MiB, backward buffers %.1f MiB",
                                    static_cast<double>(trainer.activations().activation_bytes()) / mib,
                                    static_cast<double>(trainer.activations().scratch_bytes()) / mib);
                        if (rss > 0)  // (0 where the platform keeps no peak RSS: WebAssembly)
                          std::printf("; peak RSS %.1f MiB = %.2fx (parameters + gradients + moments%s + activations)",
                                      rss / mib, rss / state, rounded_bytes > 0 ? " + bf16 parameters" : "");
                        std::printf("\n");
                        if (*profile) {
                          // wall ms per step and share of the step; the calling thread's CPU ms (with one
                          // thread: the kernel's time without the waits for a core on a busy machine)
                          const double step_seconds = total / options->first;
                          double step_cpu = 0;
                          for (double x : cpu_seconds) step_cpu += x;
                          step_cpu /= options->first;
                          std::printf("\nper step        kernel   ms      %%  cpu ms\n");
                          double accounted = 0, accounted_cpu = 0;
                          auto entries = profiler.entries();
                          std::sort(entries.begin(), entries.end(),
                                    [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
                          for (const auto& e : entries) {
                            const double per_step = e.seconds / options->first;
                            accounted += per_step;
                            accounted_cpu += e.cpu_seconds / options->first;
                            std::printf("%28s %7.1f %5.1f %7.1f\n", e.name.c_str(), 1e3 * per_step,
                                        100.0 * per_step / step_seconds, 1e3 * e.cpu_seconds / options->first);
                          }
                          const double rest = step_seconds - accounted;
                          std::printf("%28s %7.1f %5.1f %7.1f\n", "other (zeroing, optimizer)", 1e3 * rest,
                                      100.0 * rest / step_seconds, threads == 1 ? 1e3 * (step_cpu - accounted_cpu) : 0.0);
                          // The GEMMs inside those kernels, by shape (M x N x K; A and B as stored: N, or
                          // transposed: T), with their rate in the step, by wall and by CPU time.
                          auto gemms = profiler.gemms();
                          std::sort(gemms.begin(), gemms.end(),
                                    [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
                          double gemm_seconds = 0, gemm_cpu = 0, gemm_flops = 0;
                          // bf16 steps run their products in the bf16 GEMM where the CPU has one (the profile
                          // covers only those steps, not the interleaved fp32 ones)
                          const bool bf16_gemms = bf16 && kernels::bf16_isa() != kernels::Bf16Isa::None;
                          const char* gemm_name = bf16_gemms ? "bf16 GEMM" : "sgemm";
                          std::printf("\n%s by shape (in the kernels above) calls/step   ms     %%  cpu ms  GFLOP/s  per cpu s\n",
                                      gemm_name);
                          // GFLOP/s by CPU time: a one-thread figure ("-" with more threads)
                          const auto row = [&](const char* name, const char* calls, double secs, double cpu, double fl) {
                            std::printf("%34s %10s %7.1f %5.1f %7.1f %8s %10s\n", name, calls, 1e3 * secs / options->first,
                                        100.0 * secs / total, 1e3 * cpu / options->first, gflop_text(fl / secs / 1e9).c_str(),
                                        threads == 1 ? gflop_text(fl / cpu / 1e9).c_str() : "-");
                          };
                          for (const auto& g : gemms) {
                            gemm_seconds += g.seconds, gemm_cpu += g.cpu_seconds, gemm_flops += g.flops;
                            row(g.shape.c_str(), std::to_string(g.calls / options->first).c_str(), g.seconds,
                                g.cpu_seconds, g.flops);
                          }
                          if (!gemms.empty())
                            row((std::string("all ") + gemm_name + " calls").c_str(), "", gemm_seconds, gemm_cpu, gemm_flops);
                        }
                        return 0;
                      }});
}

}  // namespace blocklab::cli
