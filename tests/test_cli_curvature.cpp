// blocklab curvature and train --curvature-every as a user runs them: JSON output, the batch from a seed or a
// token file (.npy, safetensors), errors for bad input, curvature.csv during training, and a run's numbers
// unchanged by recording it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "data/copy_task.h"
#include "io/csv.h"
#include "io/safetensors.h"
#include "probe/curvature_run.h"

namespace fs = std::filesystem;
using namespace blocklab::testing;

namespace {

const std::string kModel = " --layers 2 --width 16 --heads 2 --vocab 6 --copy-len 4 --batch 4 --threads 1 --seed 3 ";

// A .npy file of int64 (or int32) values with the given 2-D shape.
void write_npy(const fs::path& path, const std::vector<int64_t>& values, int64_t rows, int64_t cols,
               const std::string& descr = "<i8") {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.put(static_cast<char>(len & 0xff));
  out.put(static_cast<char>(len >> 8));
  out << header;
  for (int64_t v : values) {
    if (descr == "<i4") {
      const int32_t x = static_cast<int32_t>(v);
      out.write(reinterpret_cast<const char*>(&x), 4);
    } else if (descr == "<f8") {
      const double x = static_cast<double>(v);
      out.write(reinterpret_cast<const char*>(&x), 8);
    } else {
      out.write(reinterpret_cast<const char*>(&v), 8);
    }
  }
}

nlohmann::json parse_json(const CliResult& r) {
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON: " << e.what() << "\n" << r.out << r.err;
    return {};
  }
}

class CurvatureCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fresh_dir("cli_curvature");
    const CliResult r = run_cli("train" + kModel + "--steps 3 --checkpoint-every 2 --curvature-every 2 --out " +
                                (dir_ / "run").string());
    ASSERT_EQ(r.status, 0) << r.err;
  }
  static fs::path dir_;
};
fs::path CurvatureCli::dir_;

}  // namespace

TEST_F(CurvatureCli, JsonHasEveryEstimate) {
  const CliResult r = run_cli("curvature " + (dir_ / "run").string() + " --json --top 2 --threads 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = parse_json(r);
  for (const char* key : {"sharpness", "preconditioned_sharpness", "trace", "per_block", "method", "batch"})
    EXPECT_TRUE(j.contains(key)) << key;
  ASSERT_TRUE(j["sharpness"].is_number());
  const double s = j["sharpness"];
  EXPECT_GT(s, 0);
  ASSERT_EQ(j["top"].size(), 2u);
  EXPECT_EQ(j["top"][0].get<double>(), s);
  EXPECT_GE(s, j["top"][1].get<double>());
  EXPECT_TRUE(j["preconditioned_sharpness"].is_number());  // step 3: Adam's state is there
  EXPECT_TRUE(j["trace"].is_number());
  ASSERT_EQ(j["per_block"].size(), 2u);
  for (const auto& b : j["per_block"]) EXPECT_LE(b.get<double>(), s * (1 + 1e-3));  // interlacing, up to Lanczos's tolerance
  EXPECT_NE(j["method"].get<std::string>().find("central differences"), std::string::npos);
  EXPECT_EQ(j["batch"]["source"], "task");
  EXPECT_EQ(j["batch"]["sequences"], 4);
  EXPECT_EQ(j["step"], 3);
  // the expected time, then progress, on stderr
  EXPECT_NE(r.err.find("expect at most"), std::string::npos) << r.err;
  // The row that training recorded after step 3 is the same estimate (same weights, batch, seeds, options).
  const auto rows = blocklab::io::read_csv((dir_ / "run" / "curvature.csv").string());
  ASSERT_EQ(rows.size(), 4u);  // header, steps 0, 2, 3
  EXPECT_EQ(rows[3].fields[0], "3");
  EXPECT_EQ(rows[3].fields[3], blocklab::io::csv_number(s));
  EXPECT_EQ(rows[3].fields[4], blocklab::io::csv_number(j["preconditioned_sharpness"].get<double>()));
  EXPECT_EQ(rows[3].fields[8], j["converged"].get<bool>() ? "1" : "0");
  EXPECT_EQ(rows[3].fields[9], j["preconditioned_converged"].get<bool>() ? "1" : "0");
  EXPECT_EQ(rows[3].fields[10], blocklab::io::csv_number(j["per_block"][0].get<double>()));
  EXPECT_EQ(rows[1].fields[9], "");  // step 0: no Adam state, no preconditioned estimate
}

TEST_F(CurvatureCli, CheckpointsAndTokenFiles) {
  const std::string run = (dir_ / "run").string();
  CliResult r = run_cli("curvature " + run + " --checkpoint 2 --json --no-per-block --trace-samples 0");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json at2 = parse_json(r);
  EXPECT_EQ(at2["step"], 2);
  EXPECT_TRUE(at2["trace"].is_null());
  EXPECT_TRUE(at2["per_block"].empty());

  // The default batch written out as token ids: the same estimate from .npy (int64 and int32) and safetensors.
  blocklab::CopyTask task(6, 4, blocklab::probe::curvature_batch_seed(3));
  blocklab::Batch b;
  task.next(b, 4);
  const int T = b.seq_len;
  std::vector<int64_t> ids;
  for (int r0 = 0; r0 < 4; ++r0) {
    for (int t = 0; t < T; ++t) ids.push_back(b.inputs[r0 * T + t]);
    ids.push_back(b.targets[r0 * T + T - 1]);
  }
  write_npy(dir_ / "batch.npy", ids, 4, T + 1);
  write_npy(dir_ / "batch32.npy", ids, 4, T + 1, "<i4");
  blocklab::io::write_safetensors((dir_ / "batch.safetensors").string(),
                                  {blocklab::io::tensor_view("tokens", {4, T + 1}, std::span<const int64_t>(ids))}, {});
  for (const char* file : {"batch.npy", "batch32.npy", "batch.safetensors"}) {
    r = run_cli("curvature " + run + " --checkpoint 2 --json --no-per-block --trace-samples 0 --tokens " +
                (dir_ / file).string());
    ASSERT_EQ(r.status, 0) << file << r.err;
    const nlohmann::json j = parse_json(r);
    EXPECT_EQ(j["batch"]["source"], "file");
    EXPECT_EQ(j["sharpness"], at2["sharpness"]) << file;
    EXPECT_EQ(j["preconditioned_sharpness"], at2["preconditioned_sharpness"]) << file;
  }
  // another batch seed: another batch, another estimate
  r = run_cli("curvature " + run + " --checkpoint 2 --json --no-per-block --trace-samples 0 --batch-seed 99");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(parse_json(r)["sharpness"], at2["sharpness"]);
}

TEST_F(CurvatureCli, BadInputIsRefusedWithOneLine) {
  const std::string run = (dir_ / "run").string();
  struct Case {
    std::string args, message;
  };
  const fs::path empty = dir_ / "empty";
  fs::create_directories(empty);
  std::ofstream(dir_ / "garbage.npy") << "not an array";
  write_npy(dir_ / "float.npy", {1, 2, 3, 4, 5, 6, 7, 8}, 1, 8, "<f8");
  write_npy(dir_ / "short.npy", {1, 2, 3, 4, 5}, 1, 5);
  write_npy(dir_ / "big_id.npy", {1, 2, 3, 4, 1, 2, 3, 9}, 1, 8);
  std::ofstream(dir_ / "tokens.txt") << "1 2 3";
  const std::vector<Case> cases = {
      {(dir_ / "missing").string(), "no such run directory"},
      {empty.string(), "no config.json"},
      {run + " --checkpoint 5", "no checkpoint at step 5 (checkpoints at steps 2, 3)"},
      {run + " --tokens " + (dir_ / "garbage.npy").string(), "not a .npy file"},
      {run + " --tokens " + (dir_ / "float.npy").string(), "is not supported"},
      {run + " --tokens " + (dir_ / "short.npy").string(), "2n = 8 tokens"},
      {run + " --tokens " + (dir_ / "big_id.npy").string(), "outside the vocabulary"},
      {run + " --tokens " + (dir_ / "tokens.txt").string(), ".npy (int32 or int64) or .safetensors"},
      {run + " --tokens " + (dir_ / "nope.npy").string(), "no such file"},
      {run + " --tokens x.npy --batch-seed 1", "excludes"},
  };
  for (const Case& c : cases) {
    const CliResult r = run_cli("curvature " + c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(line_count(r.err), 1) << c.args << "\n" << r.err;
  }
}

TEST(CurvatureTrain, RecordingDoesNotChangeTheRun) {
  const fs::path dir = fresh_dir("cli_curvature_train");
  const std::string common = "train" + kModel + "--steps 5 --warmup 3 --lr 3e-3 --checkpoint-every 5 --no-tensorboard --out ";
  CliResult r = run_cli(common + (dir / "plain").string());
  ASSERT_EQ(r.status, 0) << r.err;
  r = run_cli(common + (dir / "probed").string() + " --curvature-every 2 --no-curvature-per-block");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_text(dir / "plain" / "metrics.csv"), read_text(dir / "probed" / "metrics.csv"));
  EXPECT_FALSE(read_text(dir / "plain" / "metrics.csv").empty());
  const auto ckpt = [&](const char* run) {
    return read_text(dir / run / "checkpoints" / "step_0000005" / "model.safetensors");
  };
  EXPECT_FALSE(ckpt("plain").empty());
  EXPECT_EQ(ckpt("plain"), ckpt("probed"));
  EXPECT_FALSE(fs::exists(dir / "plain" / "curvature.csv"));
  const auto rows = blocklab::io::read_csv((dir / "probed" / "curvature.csv").string());
  ASSERT_EQ(rows.size(), 5u);  // header, steps 0, 2, 4, 5
  EXPECT_EQ(rows[0].fields, blocklab::probe::curvature_columns(2));
  const std::vector<std::string> steps = {"0", "2", "4", "5"};
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& f = rows[i].fields;
    EXPECT_EQ(f[0], steps[i - 1]);
    const double lr = std::stod(f[1]);
    // lr of the next update under a 3-step warm-up: 1e-3, 3e-3 (after step 2), then 3e-3
    const int step = std::stoi(f[0]);
    EXPECT_NEAR(lr, 3e-3 * std::min(step + 1, 3) / 3.0, 1e-12);
    EXPECT_GT(std::stod(f[3]), 0);
    EXPECT_NEAR(std::stod(f[5]) * lr, 2.0, 1e-6);
    EXPECT_NEAR(std::stod(f[6]) * lr, 38.0, 1e-5);
    EXPECT_EQ(f[4].empty(), step == 0) << "preconditioned sharpness: empty exactly before the first update";
    EXPECT_TRUE(f[8] == "0" || f[8] == "1") << f[8];                  // the sharpness's Lanczos converged?
    EXPECT_EQ(f[9].empty(), step == 0) << "preconditioned_converged: " << f[9];  // as the estimate itself
    EXPECT_TRUE(f[10].empty() && f[11].empty());                        // per-block left out
  }
}
