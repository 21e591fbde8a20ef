// blocklab: build, train and probe stacks of transformer blocks.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>

#include "commands.h"
#include "jobs/build_info.h"
#include "kernels/isa.h"
#include "train/run.h"
#include "util/error.h"
#include "util/threads.h"

int main(int argc, char** argv) {
  using namespace blocklab;
  prefer_short_openmp_waits(argv);  // util/threads.h: why
  CLI::App app{"blocklab: build, train and probe stacks of transformer blocks on the CPU"};
  app.require_subcommand(1);
  app.footer(
      "Environment: BLOCKLAB_ISA=generic|avx2|avx512 caps every kernel's instruction set (--version shows the\n"
      "level in use); BLOCKLAB_GEMM=blas|fp32|avx2|avx512|avx512_bf16|onednn forces a GEMM path.");
  app.set_version_flag("--version", [] {
    return "blocklab " + std::string(jobs::kVersion) + "\n" + jobs::describe_kernels() + "\n" +
           jobs::describe_optional_parts();
  });
  if (const std::string bad = kernels::check_isa_setting(); !bad.empty()) {
    std::fprintf(stderr, "blocklab: error: %s\n", bad.c_str());
    return 2;
  }
  std::vector<cli::Command> commands;
  cli::register_train(app, commands);
  cli::register_bench(app, commands);
  cli::register_gradnorm(app, commands);
  cli::register_sweep(app, commands);
  cli::register_residual(app, commands);
  cli::register_standardize(app, commands);
  cli::register_reproduce(app, commands);
  cli::register_inspect(app, commands);
  cli::register_probe(app, commands);
  cli::register_export(app, commands);
  cli::register_depthmap(app, commands);
  cli::register_stabilitymap(app, commands);
  cli::register_sample(app, commands);
  cli::register_curvature(app, commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "blocklab: error: %s (see --help)\n", e.what());
    return 2;
  }
  // a forced GEMM path this CPU cannot run: refused before the command starts (gemm_env.cpp)
  if (const std::string why = cli::gemm_env_problem(); !why.empty()) {
    std::fprintf(stderr, "blocklab: error: %s\n", why.c_str());
    return 2;
  }
  try {
    for (const auto& c : commands)
      if (c.app->parsed()) return c.action();
  } catch (const Interrupted& e) {  // SIGINT/SIGTERM: the run wrote a checkpoint and stopped
    std::fflush(stdout);
    std::fprintf(stderr, "blocklab: %s; wrote %s\n", e.what(), e.checkpoint().c_str());
    return 128 + e.signal();
  } catch (const Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "blocklab: error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {  // what the memory estimates did not foresee: still the input's size
    std::fflush(stdout);
    std::fprintf(stderr, "blocklab: error: out of memory (the sizes asked for do not fit; try smaller ones)\n");
    return 2;
  } catch (const std::length_error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "blocklab: error: out of memory (a size too large to allocate: %s)\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "blocklab: internal error: %s\n", e.what());
    return 3;
  }
  return 2;
}
