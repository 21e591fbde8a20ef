// The optimizers (train/optimizer.h) against PyTorch's own, on the fixture tests/data/ref_optimizers.safetensors
// (tools/ref/make_optimizer_fixtures.py: torch.optim.Adam, AdamW, RAdam, SGD and Muon, GI-Adam as PyTorch's Adam
// started from v_0 = g_1^2, Lion written in PyTorch ops): four tensors (two hidden matrices, one of them taller
// than wide, a 2-D tensor that is not one, a bias), 10 steps of given float32 gradients, the parameters compared
// after every step. Then what training needs of each optimizer: the fused update (clipping folded in, gradients
// cleared) equal to the separate passes bit for bit, results independent of the thread count, a checkpoint that
// resumes bit for bit, and clear errors for bad keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/checkpoint.h"
#include "kernels/bf16_gemm.h"
#include "io/safetensors.h"
#include "model/parameters.h"
#include "train/optimizer.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/threads.h"

using namespace blocklab;
using blocklab::testing::fresh_dir;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kCases = {"adam",         "adam_v0grad", "adamw",        "adamw_v0grad",
                                         "radam",        "radam_v0grad", "sgd",         "sgd_nesterov",
                                         "sgd_plain",    "lion",         "muon",        "muon_plain"};

// The fixture: the tensors laid out in one arena as the model lays out its own (each tensor at a multiple of 16
// elements, zeros between them), and the optimizer keys of every case.
struct OptimizerFixture {
  io::SafetensorsReader file{std::string(BLOCKLAB_TEST_DATA) + "/ref_optimizers.safetensors"};
  std::vector<std::string> names;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, long> offsets;
  std::vector<MatrixRange> hidden;
  long size = 0;
  int steps = 0;
  std::vector<double> lr_factor;
  nlohmann::json cases;

  OptimizerFixture() {
    steps = std::stoi(file.metadata().at("steps"));
    cases = nlohmann::json::parse(file.metadata().at("cases"));
    lr_factor = file.read_f64("lr_factor");
    std::string list = file.metadata().at("tensors");
    for (size_t start = 0; start <= list.size();) {
      const size_t end = std::min(list.find(',', start), list.size());
      names.push_back(list.substr(start, end - start));
      start = end + 1;
    }
    for (const std::string& n : names) {
      shapes[n] = file.at("init." + n).shape;
      offsets[n] = size;
      long numel = 1;
      for (int64_t d : shapes[n]) numel *= d;
      size += (numel + 15) / 16 * 16;
      if (file.metadata().at("hidden").find(n) != std::string::npos)
        hidden.push_back({offsets[n], static_cast<int>(shapes[n][0]), static_cast<int>(shapes[n][1])});
    }
  }
  long numel(const std::string& n) const {
    long k = 1;
    for (int64_t d : shapes.at(n)) k *= d;
    return k;
  }
  // The config of a case, through the key table as the CLI sets it, resolved (which checks the keys).
  RunConfig config(const std::string& name) const {
    RunConfig c;
    for (const auto& [key, value] : cases.at(name).items()) set_config_value(c, key, value.get<std::string>());
    resolve(c);
    return c;
  }
  // Runs a case in T; calls check(step, name, values) after every step with each tensor's parameters.
  template <typename T, typename Check>
  void run(const std::string& name, Check check) const {
    const RunConfig c = config(name);
    auto opt = make_optimizer<T>(c.optimizer, size, hidden, c.lr);
    std::vector<T> p(size, T(0)), g(size, T(0));
    for (const std::string& n : names) {
      const std::vector<float> init = file.read_f32("init." + n);
      std::copy(init.begin(), init.end(), p.begin() + offsets.at(n));
    }
    std::map<std::string, std::vector<float>> grads;
    for (const std::string& n : names) grads[n] = file.read_f32("grad." + n);
    for (int s = 0; s < steps; ++s) {
      for (const std::string& n : names)
        std::copy(grads[n].begin() + s * numel(n), grads[n].begin() + (s + 1) * numel(n), g.begin() + offsets.at(n));
      opt->step_and_zero_grads(p, g, c.lr * lr_factor[s], 1.0);
      for (const std::string& n : names) check(s, n, std::span<const T>(p.data() + offsets.at(n), numel(n)));
    }
  }
};

const OptimizerFixture& fixture() {
  static const OptimizerFixture f;
  return f;
}

class OptimizerParity : public ::testing::TestWithParam<std::string> {};

std::string case_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace

TEST(OptimizerParity, FixtureHoldsEveryCase) {
  std::vector<std::string> stored;
  for (const auto& [name, keys] : fixture().cases.items()) stored.push_back(name);
  std::vector<std::string> expected = kCases;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(stored, expected);
}

// float, as training runs: within float rounding of PyTorch's float64 run. 10 steps of float updates of O(1)
// values round each parameter by up to ~10 half-ulps (about 6e-7 at |p| ~ 1); PyTorch's own float32 run of the
// same cases stays within 1e-6 of its float64 run (make_optimizer_fixtures.py --check). The tolerance,
// 3e-6 (1 + |p|), leaves room for the different order of operations (FMA, Newton-Schulz's products in sgemm's
// order) and is still far below one step's change (lr 1e-2 .. 5e-2 times O(1) updates).
TEST_P(OptimizerParity, FloatMatchesPyTorch) {
  const OptimizerFixture& f = fixture();
  const std::string name = GetParam();
  std::map<std::string, std::vector<double>> ref;
  for (const std::string& n : f.names) ref[n] = f.file.read_f64(name + "." + n);
  double worst = 0;
  f.run<float>(name, [&](int s, const std::string& n, std::span<const float> p) {
    for (size_t i = 0; i < p.size(); ++i) {
      const double r = ref[n][s * p.size() + i], diff = std::abs(p[i] - r);
      worst = std::max(worst, diff);
      ASSERT_LE(diff, 3e-6 * (1 + std::abs(r))) << name << " step " << s + 1 << " " << n << "[" << i << "]";
    }
  });
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", worst);
  RecordProperty("max_abs_diff", text);
}

// double: the same formulas to double rounding, which a float run could not tell apart from a small mistake in
// one of them (where eps goes, a bias correction, the rectification's constant).
TEST_P(OptimizerParity, DoubleMatchesPyTorchClosely) {
  const OptimizerFixture& f = fixture();
  const std::string name = GetParam();
  std::map<std::string, std::vector<double>> ref;
  for (const std::string& n : f.names) ref[n] = f.file.read_f64(name + "." + n);
  f.run<double>(name, [&](int s, const std::string& n, std::span<const double> p) {
    for (size_t i = 0; i < p.size(); ++i)
      ASSERT_NEAR(p[i], ref[n][s * p.size() + i], 1e-11) << name << " step " << s + 1 << " " << n << "[" << i << "]";
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, OptimizerParity, ::testing::ValuesIn(kCases), case_name);

namespace {

// Arena of n elements with a hidden matrix (rows x cols) at offset 16 and a tall one after it; gradients with a
// large norm so that clipping acts.
struct Arena {
  static constexpr long n = 40000;
  std::vector<MatrixRange> hidden = {{16, 100, 150}, {16 + 15008, 120, 40}};
  std::vector<float> p0 = std::vector<float>(n), g0 = std::vector<float>(n);
  Arena() {
    for (long i = 0; i < n; ++i) {
      p0[i] = std::sin(0.37f * static_cast<float>(i));
      g0[i] = 0.01f * std::cos(1.3f * static_cast<float>(i)) + (i % 7 == 0 ? 0.5f : 0.f);
    }
  }
};

std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> kinds() {
  return {{"adam", {{"optimizer", "adam"}}},
          {"adamw_v0grad", {{"optimizer", "adamw"}, {"weight_decay", "0.1"}, {"adam_v0", "grad"}}},
          {"radam", {{"optimizer", "radam"}, {"weight_decay", "0.01"}}},
          {"radam_v0grad", {{"optimizer", "radam"}, {"adam_v0", "grad"}}},
          {"sgd", {{"optimizer", "sgd"}, {"weight_decay", "0.01"}}},
          {"sgd_nesterov", {{"optimizer", "sgd"}, {"nesterov", "true"}}},
          {"sgd_plain", {{"optimizer", "sgd"}, {"momentum", "0"}}},
          {"lion", {{"optimizer", "lion"}, {"weight_decay", "0.1"}}},
          {"muon", {{"optimizer", "muon"}, {"weight_decay", "0.01"}, {"muon_weight_decay", "0.1"}}}};
}

RunConfig with_keys(RunConfig c, const std::vector<std::pair<std::string, std::string>>& keys) {
  set_config_values(c, keys);
  return c;
}

bool same_bytes(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// The training step's fused update (clipping folded in, gradients cleared as they are read) against clipping in
// place and the plain update, for every optimizer, over several of the update's parallel chunks, at 1 and 2
// threads: the same bits, and every gradient zero afterwards. At 2 threads the result also equals 1 thread's.
TEST(OptimizerFused, ClipUpdateAndZeroEqualTheSeparatePassesForEveryOptimizer) {
  const Arena a;
  const double max_norm = 1.0;
  for (const auto& [label, keys] : kinds()) {
    SCOPED_TRACE(label);
    const RunConfig c = with_keys(RunConfig{}, keys);
    std::vector<float> first_threads;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      auto separate = make_optimizer<float>(c.optimizer, Arena::n, a.hidden, c.lr);
      auto fused = make_optimizer<float>(c.optimizer, Arena::n, a.hidden, c.lr);
      std::vector<float> p_separate = a.p0, p_fused = a.p0;
      for (int step = 1; step <= 3; ++step) {
        std::vector<float> g = a.g0, g_fused = a.g0;
        for (float& x : g) x *= static_cast<float>(step);
        for (float& x : g_fused) x *= static_cast<float>(step);
        const double norm = global_norm<float>(g);
        ASSERT_GT(norm, max_norm);
        clip_to_norm<float>(g, norm, max_norm);
        separate->step(p_separate, g, 1e-2);
        fused->step_and_zero_grads(p_fused, g_fused, 1e-2, clip_scale(norm, max_norm));
        ASSERT_EQ(p_fused, p_separate) << "step " << step;
        for (float x : g_fused) ASSERT_EQ(x, 0.f);
      }
      ASSERT_EQ(fused->state().size(), separate->state().size());
      for (size_t i = 0; i < fused->state().size(); ++i)
        EXPECT_TRUE(same_bytes(fused->state()[i].values, separate->state()[i].values)) << fused->state()[i].name;
      if (threads == 1)
        first_threads = p_fused;
      else
        EXPECT_EQ(p_fused, first_threads) << "2 threads differ from 1";
      EXPECT_NE(p_fused, a.p0);
    }
  }
  set_num_threads(0);
}

// The fused update with a rounded copy asked for: adam and adamw write it (each new value as round_to_bf16 rounds
// it, into a copy at any alignment, across the update's parallel chunks, at 1 and 2 threads), the others leave it
// alone; the update itself is the same bits either way.
TEST(OptimizerFused, RoundedCopyHoldsTheNewWeightsRoundedWhereTheOptimizerWritesIt) {
  const Arena a;
  for (const auto& [label, keys] : kinds()) {
    SCOPED_TRACE(label);
    const RunConfig c = with_keys(RunConfig{}, keys);
    const bool adam = c.optimizer.kind == OptimizerKind::Adam || c.optimizer.kind == OptimizerKind::AdamW;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      auto plain = make_optimizer<float>(c.optimizer, Arena::n, a.hidden, c.lr);
      auto rounding = make_optimizer<float>(c.optimizer, Arena::n, a.hidden, c.lr);
      std::vector<float> p_plain = a.p0, p_rounding = a.p0;
      std::vector<uint16_t> storage(Arena::n + 3, 0x7fc1), want(Arena::n);
      for (int offset : {0, 1, 3}) {  // the copy 0, 2 and 6 bytes past the allocation
        std::vector<float> g = a.g0, g_rounding = a.g0;
        const std::span<uint16_t> rounded(storage.data() + offset, Arena::n);
        std::fill(rounded.begin(), rounded.end(), uint16_t{0x7fc1});
        plain->step_and_zero_grads(p_plain, g, 1e-2, 0.5);
        EXPECT_EQ(rounding->step_and_zero_grads(p_rounding, g_rounding, 1e-2, 0.5, rounded), adam);
        ASSERT_EQ(p_rounding, p_plain) << "offset " << offset;
        for (float x : g_rounding) ASSERT_EQ(x, 0.f);
        kernels::round_to_bf16(p_plain.data(), want.data(), Arena::n);
        if (adam)
          EXPECT_TRUE(std::equal(want.begin(), want.end(), rounded.begin())) << "offset " << offset;
        else
          EXPECT_TRUE(std::all_of(rounded.begin(), rounded.end(), [](uint16_t x) { return x == 0x7fc1; }));
      }
    }
  }
  set_num_threads(0);
}

namespace {

RunConfig small_run(const std::vector<std::pair<std::string, std::string>>& keys, int threads = 1) {
  RunConfig c;
  c.model.layers = 2;
  c.model.width = 32;
  c.model.heads = 2;
  c.model.vocab = 6;
  c.copy_len = 4;
  c.batch = 4;
  c.steps = 40;
  c.lr = 3e-3;
  c.warmup = 3;
  c.threads = threads;
  c.clip_grad_norm = 0.5;
  c = with_keys(c, keys);
  resolve(c);
  return c;
}

}  // namespace

// Muon's matrices are the blocks' linear weights and nothing else.
TEST(Muon, OrthogonalisesTheBlocksLinearWeightsOnly) {
  RunConfig c = small_run({{"optimizer", "muon"}, {"mlp_bias", "true"}});
  const ParameterTable table(c.model);
  std::vector<std::string> chosen;
  for (const MatrixRange& r : hidden_matrices(table))
    for (const ParamSpec& p : table.specs())
      if (p.offset == r.offset) {
        chosen.push_back(p.name);
        EXPECT_EQ(p.shape, (std::vector<int64_t>{r.rows, r.cols}));
      }
  EXPECT_EQ(chosen, (std::vector<std::string>{"blocks.0.attn.qkv.weight", "blocks.0.attn.proj.weight",
                                              "blocks.0.mlp.fc1.weight", "blocks.0.mlp.fc2.weight",
                                              "blocks.1.attn.qkv.weight", "blocks.1.attn.proj.weight",
                                              "blocks.1.mlp.fc1.weight", "blocks.1.mlp.fc2.weight"}));
}

// A training run with muon or radam gives the same bits at 1 and 2 threads (Newton-Schulz's products through
// sgemm, whose every element sums in a fixed order; elementwise passes in fixed chunks).
TEST(OptimizerThreads, MuonAndRAdamTrainTheSameAtOneAndTwoThreads) {
  for (const auto& keys : std::vector<std::vector<std::pair<std::string, std::string>>>{
           {{"optimizer", "muon"}, {"muon_weight_decay", "0.1"}, {"weight_decay", "0.01"}},
           {{"optimizer", "radam"}, {"weight_decay", "0.01"}, {"adam_v0", "grad"}}}) {
    SCOPED_TRACE(keys[0].second);
    std::vector<std::vector<float>> params;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Trainer t(small_run(keys, threads));
      for (int s = 0; s < 8; ++s) ASSERT_FALSE(t.step().nonfinite);
      params.emplace_back(t.model().params().begin(), t.model().params().end());
    }
    EXPECT_TRUE(same_bytes(params[0], params[1]));
  }
  set_num_threads(0);
}

// Every optimizer's state saves and resumes bit for bit: 7 steps, a checkpoint, a second trainer loads it, and
// both take 5 more steps. The state file holds each state array under its name.
TEST(OptimizerCheckpoint, EveryOptimizerResumesBitForBit) {
  set_num_threads(1);
  for (const auto& [label, keys] : kinds()) {
    SCOPED_TRACE(label);
    const fs::path dir = fresh_dir("optimizer_resume_" + label);
    const RunConfig c = small_run(keys);
    Trainer a(c);
    for (int s = 0; s < 7; ++s) a.step();
    const fs::path written = io::write_checkpoint(dir, a.checkpoint_state(), 0);
    const io::SafetensorsReader state((written / "state.safetensors").string());
    const size_t arrays = a.optimizer().state().size();
    EXPECT_EQ(state.tensors().size(), arrays * a.model().table().specs().size() + 5);
    for (const auto& array : a.optimizer().state())
      EXPECT_NE(state.find(array.name + ".blocks.0.attn.qkv.weight"), nullptr) << array.name;

    Trainer b(c);
    b.load_checkpoint(written);
    EXPECT_EQ(b.optimizer().steps_taken(), 7);
    EXPECT_TRUE(same_bytes(a.model().params(), b.model().params()));
    for (size_t i = 0; i < arrays; ++i)
      EXPECT_TRUE(same_bytes(a.optimizer().state()[i].values, b.optimizer().state()[i].values));
    for (int s = 0; s < 5; ++s) {
      const StepResult ra = a.step(), rb = b.step();
      EXPECT_EQ(std::memcmp(&ra.loss, &rb.loss, sizeof ra.loss), 0) << "step " << ra.step;
    }
    EXPECT_TRUE(same_bytes(a.model().params(), b.model().params()));
    for (size_t i = 0; i < arrays; ++i)
      EXPECT_TRUE(same_bytes(a.optimizer().state()[i].values, b.optimizer().state()[i].values));
  }
  set_num_threads(0);
}

// adam and adamw keep the checkpoint names of the first format (adam.m.<param>, adam.v.<param>), so checkpoints
// written before the other optimizers existed load unchanged; other optimizers' arrays have their own names, as
// many as the memory estimate counts.
TEST(OptimizerCheckpoint, StateArraysHaveTheirNames) {
  auto names = [](const std::vector<std::pair<std::string, std::string>>& keys) {
    Trainer t(small_run(keys));
    std::vector<std::string> out;
    for (const auto& a : t.optimizer().state()) out.push_back(a.name);
    EXPECT_EQ(static_cast<size_t>(optimizer_state_arrays(t.config().optimizer)), out.size());  // the memory estimate's
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names({{"optimizer", "adam"}}), (V{"adam.m", "adam.v"}));
  EXPECT_EQ(names({{"optimizer", "adamw"}, {"adam_v0", "grad"}}), (V{"adam.m", "adam.v"}));
  EXPECT_EQ(names({{"optimizer", "radam"}}), (V{"radam.m", "radam.v"}));
  EXPECT_EQ(names({{"optimizer", "sgd"}}), (V{"sgd.momentum"}));
  EXPECT_EQ(names({{"optimizer", "sgd"}, {"momentum", "0"}}), V{});
  EXPECT_EQ(names({{"optimizer", "lion"}}), (V{"lion.m"}));
  EXPECT_EQ(names({{"optimizer", "muon"}}), (V{"muon.momentum", "adam.m", "adam.v"}));
}

namespace {
std::string error_of(const std::vector<std::pair<std::string, std::string>>& keys) {
  try {
    RunConfig c;
    set_config_values(c, keys);
    resolve(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(OptimizerConfig, BadInputNamesTheValidChoices) {
  auto has = [](const std::string& text, const std::string& part) {
    if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "'" << text << "' lacks '" << part << "'";
  };
  EXPECT_TRUE(has(error_of({{"optimizer", "adagrad"}}),
                  "unknown optimizer 'adagrad' (expected adam, adamw, radam, sgd, lion or muon)"));
  EXPECT_TRUE(has(error_of({{"adam_v0", "ones"}}), "unknown adam_v0 'ones' (expected zero or grad)"));
  EXPECT_TRUE(has(error_of({{"optimizer", "sgd"}, {"momentum", "1"}}), "momentum must be in [0, 1), got 1"));
  EXPECT_TRUE(has(error_of({{"optimizer", "lion"}, {"lion_beta2", "-0.5"}}), "lion_beta2 must be in [0, 1)"));
  EXPECT_TRUE(
      has(error_of({{"optimizer", "muon"}, {"muon_ns_steps", "0"}}), "muon_ns_steps must be in [1, 99], got 0"));
  EXPECT_TRUE(has(error_of({{"optimizer", "muon"}, {"muon_lr", "0"}}), "muon_lr must be positive"));
  EXPECT_TRUE(has(error_of({{"optimizer", "muon"}, {"muon_weight_decay", "-1"}}), "muon_weight_decay must be >= 0"));
  EXPECT_TRUE(has(error_of({{"optimizer", "sgd"}, {"momentum", "0"}, {"nesterov", "true"}}),
                  "nesterov needs momentum > 0"));
  // a key of another optimizer: which optimizers read it
  EXPECT_TRUE(has(error_of({{"optimizer", "adam"}, {"momentum", "0.5"}}),
                  "momentum is set but optimizer is adam: momentum is read by optimizer sgd"));
  EXPECT_TRUE(has(error_of({{"optimizer", "sgd"}, {"adam_v0", "grad"}}),
                  "adam_v0 is read by optimizer adam, adamw or radam"));
  EXPECT_TRUE(has(error_of({{"optimizer", "adam"}, {"weight_decay", "0.1"}}),
                  "weight_decay is read by optimizer adamw, radam, sgd, lion or muon"));
  EXPECT_TRUE(has(error_of({{"optimizer", "lion"}, {"muon_lr", "0.1"}}), "muon_lr is read by optimizer muon"));
  EXPECT_TRUE(has(error_of({{"optimizer", "muon"}, {"norm_placement", "ngpt"}, {"muon_weight_decay", "0.1"}}),
                  "muon_weight_decay = 0"));
  EXPECT_EQ(error_of({{"optimizer", "muon"}, {"muon_nesterov", "false"}, {"muon_ns_steps", "3"}}), "");
  // the CLI: exit status 2 and the same message
  const auto r = blocklab::testing::run_cli("train --optimizer adagrad --steps 1 --out " +
                                            (fresh_dir("optimizer_bad_cli") / "run").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "expected adam, adamw, radam, sgd, lion or muon"));
}

// Keys added with the new optimizers leave results_json (and so sweep directory hashes) of existing configs as
// they were, unless set.
TEST(OptimizerConfig, NewKeysAtTheirDefaultsStayOutOfResultsJson) {
  RunConfig c;
  resolve(c);
  const nlohmann::json j = results_json(c);
  for (const char* key : {"adam_v0", "momentum", "nesterov", "lion_beta1", "lion_beta2", "muon_lr", "muon_momentum",
                          "muon_nesterov", "muon_ns_steps", "muon_weight_decay"})
    EXPECT_FALSE(j.contains(key)) << key;
  EXPECT_TRUE(j.contains("optimizer"));
  RunConfig m;
  set_config_values(m, {{"optimizer", "muon"}, {"muon_lr", "0.05"}});
  resolve(m);
  EXPECT_EQ(results_json(m).at("muon_lr"), 0.05);
  EXPECT_EQ(to_json(m).at("muon_ns_steps"), 5);  // config.json holds every key
}
