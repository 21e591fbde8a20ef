// blocklab: build, train and probe stacks of transformer blocks.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>

#include "commands.h"
#include "train/run.h"
#include "util/error.h"

namespace {
// OpenMP threads that wait by spinning (libgomp's default: up to ~3 ms) make every parallel region wait
// for the slowest core: on a 2-core machine shared with other work, a 2-thread training step measured 7x
// slower than with passive waiting (8.7 s vs 1.2 s). Purely passive waiting (sleep at once) costs a
// wake-up per parallel region instead: ~12% of a 2-thread step on an idle machine (470 vs 415 ms). A
// short spin (GOMP_SPINCOUNT 3000, tens of microseconds) bridges the gaps between the regions of a step
// and still gives the core away soon when another program wants it (busy machine: 830 vs 790 ms).
// libgomp reads both variables when it loads, so when the user has set neither we set them and restart
// the program once. Results do not depend on them.
void prefer_short_openmp_waits(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "passive", 1);
  ::setenv("GOMP_SPINCOUNT", "3000", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then run on with the default policy
}
}  // namespace

int main(int argc, char** argv) {
  using namespace blocklab;
  prefer_short_openmp_waits(argv);
  CLI::App app{"blocklab: build, train and probe stacks of transformer blocks on the CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "blocklab 0.1.0");
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
  cli::register_sample(app, commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "blocklab: error: %s (see --help)\n", e.what());
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
