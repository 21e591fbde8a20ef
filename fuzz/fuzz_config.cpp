// libFuzzer target for the run-config parser: TOML text -> RunConfig (src/train/run_config.cpp).
//
// Every input is applied to a default config. It must either be accepted or throw blocklab::Error;
// anything else (a crash, a sanitizer report, another exception type) is a bug. An accepted config must
// survive the path a run takes: to_json, dump (config.json), apply_json into a fresh config giving the
// same JSON (the --resume path), and resolve() accepting it or throwing Error.
//
// Built and run by fuzz/run-smoke.sh. Compiled with -DBLOCKLAB_FUZZ_SEEDGEN instead, this file is a
// small program that writes seed configs into argv[1] and a libFuzzer dictionary of the keys to argv[2].
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "train/run_config.h"
#include "util/error.h"

using blocklab::RunConfig;

#ifndef BLOCKLAB_FUZZ_SEEDGEN

namespace {

[[noreturn]] void oracle_failure(const char* what) {
  std::fprintf(stderr, "config fuzz oracle failed: %s\n", what);
  std::abort();  // libFuzzer reports the input as a crash
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  RunConfig config;
  try {
    blocklab::apply_toml_text(config, text, "fuzz.toml");
  } catch (const blocklab::Error&) {
    return 0;  // rejected input: expected
  }
  const nlohmann::json j = blocklab::to_json(config);
  (void)j.dump(2);  // what config.json gets; must not throw
  RunConfig again;
  try {
    blocklab::apply_json(again, j);
  } catch (const blocklab::Error&) {
    oracle_failure("an accepted config does not read back from its own JSON");
  }
  if (blocklab::to_json(again) != j) oracle_failure("JSON round trip changed the config");
  try {
    blocklab::resolve(config);
    (void)blocklab::to_json(config).dump();
  } catch (const blocklab::Error&) {
  }
  return 0;
}

#else  // seed generator

#include <fstream>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <seed-dir> <dict-file>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  // Every key at its default value, as TOML.
  std::string all;
  for (const auto& k : blocklab::config_keys()) {
    const nlohmann::json v = k.get(RunConfig{});
    all += k.name + " = " + v.dump() + "\n";  // JSON numbers and strings are valid TOML values
  }
  std::ofstream(dir + "/defaults.toml") << all;
  std::ofstream(dir + "/readme.toml") << "norm_placement = \"post\"\nwarmup = 400\nsteps = 1200\n";
  std::ofstream(dir + "/resume.toml")
      << "# a comment\nsteps = 2_400\ncheckpoint_every = 100\nkeep_checkpoints = 3\non_nonfinite = \"skip\"\n"
         "lr = 1e-3\nclip_grad_norm = 1\nseed = 0x10\n";
  std::ofstream(dir + "/bad.toml") << "layers = [1, 2\nwidth = \"wide\"\n[table]\nx = 1\n";
  std::ofstream dict(argv[2]);
  for (const auto& k : blocklab::config_keys()) dict << "\"" << k.name << "\"\n";
  for (const char* word : {"\" = \"", "\"\\x0a\"", "\"[\"", "\"]\"", "\"{\"", "\"}\"", "\"\\\"\"", "\"'''\"",
                           "\"9223372036854775807\"", "\"-9223372036854775808\"", "\"2147483648\"", "\"1e308\"",
                           "\"inf\"", "\"nan\"", "\"-0.0\"", "\"true\"", "\"1979-05-27T07:32:00Z\"", "\"post\"",
                           "\"pre\"", "\"rmsnorm\"", "\"cosine\"", "\"adamw\"", "\"skip\"", "\"abort\"", "\"gpt2\""})
    dict << word << "\n";
  return 0;
}

#endif
