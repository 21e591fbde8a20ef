// Parity with the independent PyTorch implementations in tools/ref/ (fixtures in tests/data, made in
// float64 by tools/ref/make_copy_fixtures.py for the seed block under {post, pre} x {layernorm, rmsnorm},
// by tools/ref/make_block_fixtures.py for the gpt2, qwen3 and sd blocks, by make_placement_fixtures.py for every
// placement, by make_hyper_fixtures.py for hyper-connections with the `hyper-connections` package's own
// mixing modules, and by make_ngpt_fixtures.py for nGPT, its renormalisation after each Adam step included):
// logits, loss, every parameter
// gradient, and 5 Adam steps. The double model must agree to ~1e-10, the float model to 1e-4.
// Errors are normwise per tensor: max |ours - ref| / max |ref|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "io/safetensors.h"
#include "model/model.h"
#include "train/optimizer.h"
#include "util/threads.h"

using namespace blocklab;

namespace {

struct Fixture {
  io::SafetensorsReader file;
  ModelConfig config;
  int batch = 0, copy_len = 0;
  double adam_lr = 0;
  std::vector<int32_t> inputs, targets;
  std::vector<uint8_t> mask;

  explicit Fixture(const std::string& variant)
      : file(std::string(BLOCKLAB_TEST_DATA) + "/ref_" + variant + ".safetensors") {
    const auto& m = file.metadata();
    if (m.count("block") != 0) {
      // A block preset with its sizes; rope_theta "0" means the preset has no rotary embedding.
      apply_block_preset(config, m.at("block"));
      config.kv_heads = std::stoi(m.at("kv_heads"));
      config.head_dim = std::stoi(m.at("head_dim"));
      config.tie_head = m.at("tie_head") == "true";
      if (std::stod(m.at("rope_theta")) > 0) config.rope_theta = std::stod(m.at("rope_theta"));
    } else {
      config.norm_placement = parse_norm_placement(m.at("norm_placement"));
      config.norm = parse_norm_kind(m.at("norm"));
      config.attn_gate = m.count("attn_gate") != 0 && m.at("attn_gate") == "true";
      config.value_residual = m.count("value_residual") != 0 && m.at("value_residual") == "true";
      if (m.count("residual_streams") != 0) {  // hyper-connections (tools/ref/make_hyper_fixtures.py)
        config.residual_streams = std::stoi(m.at("residual_streams"));
        config.hc_dynamic = m.at("hc_dynamic") == "true";
      }
      // nGPT (tools/ref/make_ngpt_fixtures.py): the block's own keys
      if (m.count("mlp") != 0) config.mlp = parse_mlp_kind(m.at("mlp"));
      if (m.count("qkv") != 0) config.qkv = parse_qkv_layout(m.at("qkv"));
      if (m.count("biases") != 0) config.qkv_bias = config.proj_bias = config.mlp_bias = m.at("biases") == "true";
      if (m.count("positions") != 0) config.positions = parse_positions(m.at("positions"));
      if (m.count("rope_theta") != 0) config.rope_theta = std::stod(m.at("rope_theta"));
    }
    config.layers = std::stoi(m.at("layers"));
    config.width = std::stoi(m.at("width"));
    config.heads = std::stoi(m.at("heads"));
    config.vocab = std::stoi(m.at("vocab"));
    config.mlp_ratio = std::stoi(m.at("mlp_ratio"));
    config.norm_eps = std::stod(m.at("norm_eps"));
    copy_len = std::stoi(m.at("copy_len"));
    config.seq_len = 2 * copy_len - 1;
    if (config.cross_attention) config.context_len = copy_len;  // the embedded first half
    batch = std::stoi(m.at("batch"));
    adam_lr = std::stod(m.at("adam_lr"));
    // tokens (B, 2n): inputs are the first 2n-1, targets the last 2n-1, loss on positions n-1 .. 2n-2
    const std::vector<int64_t> tokens = file.read_i64("tokens");
    const int T = config.seq_len;
    for (int b = 0; b < batch; ++b)
      for (int t = 0; t < T; ++t) {
        inputs.push_back(static_cast<int32_t>(tokens[b * (T + 1) + t]));
        targets.push_back(static_cast<int32_t>(tokens[b * (T + 1) + t + 1]));
        mask.push_back(t >= copy_len - 1 ? 1 : 0);
      }
  }

  template <typename T>
  void load(Model<T>& model, const std::string& prefix) const {
    for (const ParamSpec& s : model.table().specs()) {
      const auto& entry = file.at(prefix + s.name);
      ASSERT_EQ(entry.shape, s.shape) << s.name;
      file.read(entry, model.param(s.name));
    }
  }
};

template <typename T>
double normwise_error(std::span<const T> ours, const std::vector<double>& ref, double floor = 0) {
  double diff = 0, scale = floor;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(ours[i]) - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  // A tensor whose reference is zero up to rounding (HybridNorm's k-norm bias: softmax cancels it exactly, as
  // the key bias) is compared absolutely.
  return scale > 1e-12 ? diff / scale : diff;
}

template <typename T>
void check_against_reference(const std::string& variant, double tolerance) {
  set_num_threads(1);
  const Fixture fx(variant);
  Model<T> model(fx.config);
  Activations<T> acts = model.make_activations(fx.batch, fx.config.seq_len);
  // every tensor the reference has is in our table and vice versa
  size_t reference_params = 0;
  for (const auto& e : fx.file.tensors()) reference_params += e.name.rfind("param.", 0) == 0;
  ASSERT_EQ(reference_params, model.table().specs().size());
  fx.load(model, "param.");

  const T loss = model.forward(acts, fx.inputs.data(), fx.targets.data(), fx.mask.data());
  const double ref_loss = fx.file.read_f64("loss")[0];
  EXPECT_LE(std::abs(loss - ref_loss) / ref_loss, tolerance) << "loss " << loss << " vs " << ref_loss;
  {
    Activations<T> other = model.make_activations(fx.batch, fx.config.seq_len);
    const std::vector<T> logits = model.forward_logits(other, fx.inputs.data());
    EXPECT_LE(normwise_error<T>(std::span<const T>(logits), fx.file.read_f64("logits")), tolerance) << "logits";
  }

  model.backward(acts);
  // Hyper-connections' mixing tensors include gradients that are zero by construction (mHC's doubly stochastic
  // residual mix at the first sub-layer, whose streams are equal, and at the last, whose streams are summed) or
  // only a norm's eps term (A_m at the first sub-layer): theirs are compared relative to at least a thousandth
  // of the largest gradient of the model.
  double largest = 0;
  for (const ParamSpec& s : model.table().specs())
    for (double g : fx.file.read_f64("grad." + s.name)) largest = std::max(largest, std::abs(g));
  auto floor_of = [&](const ParamSpec& s) { return s.name.find("_hc.") != std::string::npos ? 1e-3 * largest : 0.0; };
  // In float the mixing tensors' gradients are differences of nearly equal sums (A_m's is d h . (H_i - H_j)
  // in effect): measured up to 1.05e-4 (hc static n = 2, generic loops) against 1e-4 elsewhere; they are held
  // to 5e-4 in float, the rest of every model to `tolerance`.
  const auto grad_tolerance = [&](const ParamSpec& s) {
    return std::is_same_v<T, float> && s.name.find("_hc.") != std::string::npos ? std::max(tolerance, 5e-4)
                                                                                 : tolerance;
  };
  for (const ParamSpec& s : model.table().specs())
    EXPECT_LE(normwise_error<T>(model.grad(s.name), fx.file.read_f64("grad." + s.name), floor_of(s)),
              grad_tolerance(s))
        << "gradient of " << s.name;

  // 5 Adam steps on the same batch; adam_losses[k] is the loss before update k+1.
  // Hyper-connections in float: the mixing's near-zero gradients (see above), each divided by its own RMS, move
  // their weights by up to a full step whatever their rounding, and every later step reads those weights:
  // measured up to 1.5e-4 on the losses and 1.5e-3 on the weights after 5 steps with the AVX-512 kernels and
  // 6.4e-3 on the weights with the AVX2 ones (mHC dynamic, n = 4), while the forward holds 1e-4 and the double
  // model 1e-9 throughout. Those float steps are held to 1e-3 and 2e-2.
  const bool hyper = fx.config.hyper() && std::is_same_v<T, float>;
  const double step_tolerance = hyper ? 1e-3 : tolerance;
  Adam<T> adam(OptimizerOptions{}, model.params().size());
  const std::vector<double> ref_losses = fx.file.read_f64("adam_losses");
  ASSERT_EQ(ref_losses.size(), 5u);
  for (int k = 0; k < 5; ++k) {
    const T l = model.forward(acts, fx.inputs.data(), fx.targets.data(), fx.mask.data());
    EXPECT_LE(std::abs(l - ref_losses[k]) / ref_losses[k], step_tolerance) << "Adam step " << k + 1;
    model.backward(acts);
    adam.step(model.params(), model.grads(), fx.adam_lr);
    model.normalize_weights();  // nGPT's renormalisation, part of its optimizer step (a no-op otherwise)
  }
  for (const ParamSpec& s : model.table().specs()) {
    std::vector<double> ref = fx.file.read_f64("adam_final." + s.name);
    std::vector<T> ours(model.param(s.name).begin(), model.param(s.name).end());
    {
      // An entry whose gradient is zero up to rounding (below 1e-12: the key-norm bias, which softmax cancels)
      // takes Adam steps of noise (in double ~1e-11 each, from ~1e-17 over eps 1e-8): not compared.
      const std::vector<double> grad = fx.file.read_f64("grad." + s.name);
      for (size_t i = 0; i < grad.size(); ++i)
        if (std::abs(grad[i]) < 1e-12) ours[i] = static_cast<T>(ref[i]);
    }
    if constexpr (std::is_same_v<T, float>) {
      // Adam divides each gradient element by its own running RMS, so an element whose gradient is
      // rounding noise (e.g. the key bias, which softmax cancels exactly, or any entry below 1e-5 of its
      // tensor's largest) moves by a full +-lr step of arbitrary sign in float. Those entries are
      // compared in double only; everything else must match to the float tolerance.
      const std::vector<double> grad = fx.file.read_f64("grad." + s.name);
      double max_grad = 0;
      for (double g : grad) max_grad = std::max(max_grad, std::abs(g));
      max_grad = std::max(max_grad, floor_of(s));  // the mixing tensors: relative to the model's largest
      for (size_t i = 0; i < grad.size(); ++i)
        if (std::abs(grad[i]) < 1e-5 * max_grad) ours[i] = static_cast<T>(ref[i]);
    }
    // Five steps amplify the float rounding of the gradients (each step is a gradient divided by its own RMS):
    // measured up to 3.9e-5 on x86-64 and 1.1e-4 on AArch64 (whose generic loops fuse multiply-adds), both on
    // the post-LN DyT fixture, whose double model agrees to 1e-9 on both; the float weights after them are
    // held to twice the tolerance of one forward and backward.
    const double adam_tolerance = hyper ? 2e-2 : std::is_same_v<T, float> ? 2 * tolerance : tolerance;
    EXPECT_LE(normwise_error<T>(std::span<const T>(ours), ref), adam_tolerance) << s.name << " after 5 Adam steps";
  }
}

}  // namespace

class ReferenceParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceParity, DoubleMatchesPyTorchFloat64) { check_against_reference<double>(GetParam(), 1e-9); }
TEST_P(ReferenceParity, FloatMatchesWithin1e4) { check_against_reference<float>(GetParam(), 1e-4); }

INSTANTIATE_TEST_SUITE_P(Variants, ReferenceParity,
                         ::testing::Values("copy_post_layernorm", "copy_post_rmsnorm", "copy_pre_layernorm",
                                           "copy_pre_rmsnorm", "block_gpt2", "block_qwen3", "block_sd",
                                           "place_post_layernorm", "place_pre_layernorm", "place_peri_layernorm",
                                           "place_reordered_layernorm", "place_deepnorm_layernorm",
                                           "place_admin_layernorm", "place_rezero_layernorm", "place_tfixup_layernorm",
                                           "place_mix_layernorm", "place_lns_layernorm", "place_pre_dyt",
                                           "place_post_dyt", "place_peri_rmsnorm", "place_deepnorm_rmsnorm",
                                           "place_admin_dyt", "place_pre_derf", "place_post_derf",
                                           "place_pre_layernorm_gate", "place_post_rmsnorm_gate",
                                           "place_peri_derf_gate", "place_pre_layernorm_vres",
                                           "place_post_layernorm_vres", "place_pre_rmsnorm_gate_vres",
                                           "place_hybrid_layernorm", "place_hybrid_star_rmsnorm",
                                           "place_hybrid_star_layernorm_gate_vres",
                                           "hyper_hc_static_n2_layernorm", "hyper_hc_dynamic_n3_layernorm",
                                           "hyper_hc_dynamic_n4_rmsnorm", "hyper_hc_dynamic_n2_dyt",
                                           "hyper_mhc_static_n3_layernorm", "hyper_mhc_dynamic_n4_layernorm",
                                           "hyper_mhc_dynamic_n2_rmsnorm", "ngpt_seed", "ngpt_swiglu_rope"),
                         [](const auto& info) { return info.param; });

// Double only: in HybridNorm with Derf the second block's key-norm shift has a gradient of 7e-6, a sum whose
// terms are ~1e-3 and cancel almost entirely (softmax cancels what is common to a head's keys), so float
// rounding alone leaves ~1e-4 of it (measured 1.09e-4). The double model matches to 1e-9.
class ReferenceParityDouble : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceParityDouble, DoubleMatchesPyTorchFloat64) { check_against_reference<double>(GetParam(), 1e-9); }

INSTANTIATE_TEST_SUITE_P(Variants, ReferenceParityDouble, ::testing::Values("place_hybrid_derf"),
                         [](const auto& info) { return info.param; });
