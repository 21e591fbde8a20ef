// Whole-model checks: every parameter's gradient against central differences (double precision) for
// every block preset and the key combinations their code paths branch on, shapes and names of the
// parameter table, initialisation, bit-identical results for any thread count, and explicit activations.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <span>
#include <tuple>

#include "data/copy_task.h"
#include "gradcheck.h"
#include "model/flops.h"
#include "model/hyper.h"
#include "model/model.h"
#include "util/error.h"
#include "util/threads.h"

using namespace blocklab;

namespace {
ModelConfig tiny_config(NormPlacement placement, NormKind norm) {
  ModelConfig c;
  c.norm_placement = placement;
  c.norm = norm;
  c.layers = 2;
  c.width = 8;
  c.heads = 2;
  c.vocab = 7;
  c.seq_len = 5;
  return c;
}

// A named architecture variant of the tiny model: every preset, and the combinations of keys their
// code paths branch on (placement x norm, fused/separate qkv, GQA, RoPE, q/k norm, MLP kinds, tied head,
// cross-attention under both placements).
struct Variant {
  std::string name;
  ModelConfig config;
  // Finite-difference step: larger where an unnormalised stack (no norms, random gates) makes the loss and
  // its rounding error large, so that rounding / step stays below the tolerance on the smallest entries.
  double step = 1e-4;
  // Tensors (a name fragment) whose gradients the whole-model central differences resolve only to a few digits.
  // mHC with n >= 2 dynamic streams: its doubly stochastic mix keeps the streams' sum and acts on the loss only
  // through the next inputs' slightly unequal weights, so the gradients of W_r, of the residual mix and of its
  // scale are 1e-10..1e-6, near the differences' rounding. Such an entry must agree to 1e-4 of itself plus 1e-9
  // of the model's largest gradient (instead of 1e-6 relative); its mixing is also checked on its own
  // (HyperConnections.MixingGradientsMatchFiniteDifferences) and against the PyTorch reference.
  std::vector<std::string> unresolved = {};
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  for (NormPlacement p : {NormPlacement::Post, NormPlacement::Pre})
    for (NormKind n : {NormKind::LayerNorm, NormKind::RMSNorm})
      v.push_back({"seed_" + to_string(p) + "_" + to_string(n), tiny_config(p, n)});
  auto preset = [](const std::string& name) {
    ModelConfig c = tiny_config(NormPlacement::Pre, NormKind::LayerNorm);
    apply_block_preset(c, name);
    c.heads = 4;  // D = 2
    return c;
  };
  v.push_back({"gpt2", preset("gpt2")});
  ModelConfig q = preset("qwen3");
  q.kv_heads = 2, q.head_dim = 4, q.rope_theta = 100;  // GQA, H*D = 16 != width, visible rotation angles
  v.push_back({"qwen3_gqa", q});
  q.tie_head = true;
  q.kv_heads = 1;
  v.push_back({"qwen3_tied_mqa", q});
  ModelConfig fused = preset("qwen3");
  fused.qkv = QkvLayout::Fused, fused.qk_norm = false, fused.kv_heads = 2, fused.rope_theta = 100;
  fused.mlp = MlpKind::GeGLU, fused.qkv_bias = true;
  v.push_back({"fused_gqa_rope_geglu", fused});
  ModelConfig sd = preset("sd");
  sd.context_len = 3;
  v.push_back({"sd", sd});
  sd.norm_placement = NormPlacement::Post;
  sd.mlp = MlpKind::GeluTanh;
  sd.layers = 3;  // an odd number of blocks with three sub-layers each: the gradient buffers swap an odd number of times
  v.push_back({"sd_post_gelu_tanh", sd});
  // Every placement of docs/placements.md, with LayerNorm and with DyT (RMSNorm for a few).
  for (NormPlacement p : {NormPlacement::Peri, NormPlacement::Reordered, NormPlacement::DeepNorm, NormPlacement::Admin,
                          NormPlacement::ReZero, NormPlacement::TFixup, NormPlacement::Mix, NormPlacement::LNS}) {
    ModelConfig c = tiny_config(p, NormKind::LayerNorm);
    if (p == NormPlacement::Mix) c.layers = 4;  // block 1 Post-LN, blocks 2-4 Pre-LN
    v.push_back({to_string(p) + "_layernorm", c});
    if (p == NormPlacement::ReZero || p == NormPlacement::TFixup) continue;  // no norms
    c.norm = NormKind::DyT;
    v.push_back({to_string(p) + "_dyt", c});
  }
  for (NormPlacement p : {NormPlacement::Post, NormPlacement::Pre}) v.push_back({to_string(p) + "_dyt", tiny_config(p, NormKind::DyT)});
  for (NormPlacement p : {NormPlacement::Post, NormPlacement::Pre, NormPlacement::Peri})
    v.push_back({to_string(p) + "_derf", tiny_config(p, NormKind::Derf)});
  // Gated attention: fused qkv with the register-tiled attention (pre, post), separate q/k/v with GQA, q/k norm
  // and H*D != width (the gate is (Q,C)), and a block with cross-attention (only self-attention is gated).
  for (NormPlacement p : {NormPlacement::Pre, NormPlacement::Post}) {
    ModelConfig g = tiny_config(p, NormKind::LayerNorm);
    g.attn_gate = true;
    v.push_back({to_string(p) + "_attn_gate", g});
  }
  ModelConfig gated_qwen = q;
  gated_qwen.tie_head = false, gated_qwen.kv_heads = 2, gated_qwen.attn_gate = true;
  v.push_back({"qwen3_gqa_attn_gate", gated_qwen});
  ModelConfig gated_sd = preset("sd");
  gated_sd.context_len = 3, gated_sd.attn_gate = true;
  v.push_back({"sd_attn_gate", gated_sd});
  // Value residual: fused qkv (register-tiled attention) under pre and post with three blocks (two of them
  // mixing), separate q/k/v with GQA (K != Q) and RoPE, and together with the attention gate.
  for (NormPlacement p : {NormPlacement::Pre, NormPlacement::Post}) {
    ModelConfig vr = tiny_config(p, NormKind::LayerNorm);
    vr.value_residual = true, vr.layers = 3;
    v.push_back({to_string(p) + "_value_residual", vr});
  }
  ModelConfig vr_qwen = q;
  vr_qwen.tie_head = false, vr_qwen.kv_heads = 2, vr_qwen.value_residual = true, vr_qwen.layers = 3;
  v.push_back({"qwen3_gqa_value_residual", vr_qwen});
  vr_qwen.attn_gate = true;
  v.push_back({"qwen3_gqa_value_residual_attn_gate", vr_qwen});
  ModelConfig peri_qwen = preset("qwen3");
  peri_qwen.norm_placement = NormPlacement::Peri;
  peri_qwen.kv_heads = 2;
  v.push_back({"qwen3_peri", peri_qwen});
  ModelConfig admin_sd = preset("sd");
  admin_sd.norm_placement = NormPlacement::Admin;
  admin_sd.context_len = 3;
  v.push_back({"sd_admin", admin_sd});
  ModelConfig rezero_sd = admin_sd;
  rezero_sd.norm_placement = NormPlacement::ReZero;
  v.push_back({"sd_rezero", rezero_sd, 4e-4});
  // HybridNorm and HybridNorm*: the per-head Q/K/V norms of every norm kind with fused qkv (the parts copied out
  // for the norms) on three blocks (hybrid_star: block 0 Pre-LN, then HybridNorm); separate q/k/v with GQA,
  // RoPE and D != C/H; fused with GQA and RoPE; and with the value residual (mixed after the v norm) and the gate.
  for (NormPlacement p : {NormPlacement::Hybrid, NormPlacement::HybridStar}) {
    for (NormKind n : {NormKind::LayerNorm, NormKind::RMSNorm, NormKind::DyT, NormKind::Derf}) {
      ModelConfig h = tiny_config(p, n);
      h.layers = 3;
      v.push_back({to_string(p) + "_" + to_string(n), h, 1e-3});  // per-head norms over D = 4: a larger step
    }
    ModelConfig hq = q;
    hq.norm_placement = p, hq.qk_norm = false, hq.tie_head = false, hq.kv_heads = 2, hq.layers = 3;
    v.push_back({to_string(p) + "_qwen3_gqa", hq});
    hq.norm = NormKind::LayerNorm, hq.value_residual = true, hq.attn_gate = true;
    v.push_back({to_string(p) + "_separate_layernorm_value_residual_attn_gate", hq});
    ModelConfig hf = fused;  // D = 4 (a LayerNorm over D = 2 is a step function: finite differences fail on it)
    hf.norm_placement = p, hf.layers = 3, hf.value_residual = true, hf.head_dim = 4;
    v.push_back({to_string(p) + "_fused_gqa_rope_rmsnorm_value_residual", hf});
    hf.norm = NormKind::LayerNorm, hf.value_residual = false, hf.attn_gate = true;
    v.push_back({to_string(p) + "_fused_gqa_rope_layernorm_attn_gate", hf, 3e-4});
  }
  // Hyper-connections: static and dynamic, n = 1, 2, 3, every norm kind for the dynamic form's stream norm,
  // three blocks (six sub-layers: A_m's init e_(k mod n) wraps), the Qwen3 block, and with the attention options.
  // A norm is blind to the scale of its input up to its eps, and the first sub-layer's streams are equal copies
  // of the embedding: A_m's gradient there (and for n = 1 everywhere) is only the eps term's, too small for
  // finite differences at eps 1e-5. A large eps makes it visible.
  for (bool dynamic : {false, true})
    for (int n : {1, 2, 3}) {
      ModelConfig hc = tiny_config(NormPlacement::Hc, NormKind::LayerNorm);
      hc.residual_streams = n, hc.hc_dynamic = dynamic, hc.layers = 3, hc.norm_eps = 0.5;
      v.push_back({std::string("hc_") + (dynamic ? "dynamic" : "static") + "_n" + std::to_string(n), hc});
    }
  for (NormKind k : {NormKind::RMSNorm, NormKind::DyT, NormKind::Derf}) {
    ModelConfig hc = tiny_config(NormPlacement::Hc, k);
    hc.residual_streams = 2, hc.norm_eps = 0.5;
    v.push_back({"hc_dynamic_" + to_string(k), hc});
  }
  ModelConfig hc_qwen = preset("qwen3");
  hc_qwen.norm_placement = NormPlacement::Hc, hc_qwen.residual_streams = 3, hc_qwen.kv_heads = 2;
  hc_qwen.norm_eps = 0.5;
  v.push_back({"qwen3_hc", hc_qwen});
  hc_qwen.value_residual = hc_qwen.attn_gate = true, hc_qwen.layers = 3;
  v.push_back({"qwen3_hc_value_residual_attn_gate", hc_qwen});
  // mHC: sigmoid, 2 sigmoid and Sinkhorn on the same weights, static and dynamic.
  const std::vector<std::string> mhc_mixing = {"_hc.w_res", "_hc.alpha_res", "_hc.scale_alpha"};
  for (bool dynamic : {false, true})
    for (int n : {1, 3}) {
      ModelConfig mhc = tiny_config(NormPlacement::Mhc, NormKind::LayerNorm);
      mhc.residual_streams = n, mhc.hc_dynamic = dynamic, mhc.norm_eps = 0.5;
      v.push_back({std::string("mhc_") + (dynamic ? "dynamic" : "static") + "_n" + std::to_string(n), mhc, 1e-4,
                   dynamic && n > 1 ? mhc_mixing : std::vector<std::string>{}});
    }
  ModelConfig mhc_rms = tiny_config(NormPlacement::Mhc, NormKind::RMSNorm);
  mhc_rms.residual_streams = 4, mhc_rms.norm_eps = 0.5;
  v.push_back({"mhc_dynamic_rmsnorm_n4", mhc_rms, 1e-4, mhc_mixing});
  // nGPT: the seed block (fused qkv with biases, learned positions, exact GELU under s_uv) on three blocks; separate
  // q/k/v with RoPE and SwiGLU (nGPT's own MLP) without biases; fused with RoPE and tanh GELU; with the value
  // residual and the attention gate.
  ModelConfig ngpt = tiny_config(NormPlacement::NGPT, NormKind::LayerNorm);
  ngpt.layers = 3;
  v.push_back({"ngpt_seed", ngpt});
  ModelConfig ngpt_swiglu = preset("qwen3");
  ngpt_swiglu.norm_placement = NormPlacement::NGPT, ngpt_swiglu.norm = NormKind::LayerNorm;
  ngpt_swiglu.qk_norm = false, ngpt_swiglu.head_dim = 4, ngpt_swiglu.rope_theta = 100, ngpt_swiglu.layers = 3;
  v.push_back({"ngpt_separate_rope_swiglu", ngpt_swiglu});
  ModelConfig ngpt_fused = ngpt;
  ngpt_fused.positions = Positions::RoPE, ngpt_fused.rope_theta = 100, ngpt_fused.mlp = MlpKind::GeluTanh;
  v.push_back({"ngpt_fused_rope_gelu_tanh", ngpt_fused});
  ModelConfig ngpt_options = ngpt_swiglu;
  ngpt_options.value_residual = ngpt_options.attn_gate = true, ngpt_options.mlp = MlpKind::GeGLU;
  v.push_back({"ngpt_separate_value_residual_attn_gate_geglu", ngpt_options});
  ModelConfig ngpt_fused_vr = ngpt;
  ngpt_fused_vr.value_residual = true;
  v.push_back({"ngpt_fused_value_residual", ngpt_fused_vr});
  return v;
}

// Random values everywhere (biases and norm parameters too), so every term of the backward pass matters.
template <typename T>
void randomise(Model<T>& model, uint64_t seed) {
  Rng rng(seed);
  for (const ParamSpec& s : model.table().specs()) {
    auto p = model.param(s.name);
    // Norm weights and Admin's omega near 1, DyT's / Derf's alpha near 0.5, everything else (ReZero's gate and
    // Derf's shift included) N(0, 0.5^2)
    // (hyper-connections' W and scales included: the tanh path of the dynamic form is exercised). Their A_m, A_r,
    // B: 0.5, I, 1 plus 0.3 N(0, 1), so that the streams neither vanish nor grow n-fold per sub-layer.
    if (s.role == ParamRole::HyperInput || s.role == ParamRole::HyperResidual || s.role == ParamRole::HyperOutput) {
      const long n = s.shape[0];
      for (long i = 0; i < s.numel; ++i) {
        const double centre = s.role == ParamRole::HyperInput ? 0.5
                              : s.role == ParamRole::HyperOutput ? 1.0
                                                                 : (i / n == i % n ? 1.0 : 0.0);
        p[i] = static_cast<T>(centre + 0.3 * rng.normal());
      }
      continue;
    }
    // nGPT's scales near 1 too (stored: alpha 0.14, s_qk, s_uv, s_z 2.8 in use at C = 8; |alpha| away from its kink)
    const bool near_one =
        s.role == ParamRole::NormWeight || s.role == ParamRole::ResidualScale || s.role == ParamRole::SphereScale;
    const double centre = near_one ? 1.0 : s.role == ParamRole::NormAlpha ? 0.5 : 0.0;
    for (auto& x : p) x = static_cast<T>(centre + (near_one || s.role == ParamRole::NormAlpha ? 0.2 : 0.5) * rng.normal());
  }
}

// Two double-precision models on one copy-task batch (2 sequences, seed 11), for tests that compare them.
struct PairedBatch {
  PairedBatch(Model<double>& a, Model<double>& b, const ModelConfig& c)
      : acts_a(a.make_activations(2, c.seq_len)), acts_b(b.make_activations(2, c.seq_len)) {
    CopyTask task(c.vocab, 3, 11);
    task.next(batch, 2);
  }
  double forward(Model<double>& m, Activations<double>& acts) const {
    return m.forward(acts, batch.inputs.data(), batch.targets.data(), batch.loss_mask.data());
  }
  Activations<double> acts_a, acts_b;
  Batch batch;
};
}  // namespace

class WholeModel : public ::testing::TestWithParam<Variant> {};

TEST_P(WholeModel, EveryParameterGradientMatchesFiniteDifferences) {
  const ModelConfig config = GetParam().config;
  const int B = 2;
  set_num_threads(1);  // thousands of tiny forward passes: threads would only add overhead
  Model<double> model(config);
  Activations<double> acts = model.make_activations(B, config.seq_len);
  randomise(model, 7);
  CopyTask task(config.vocab, 3, 11);
  Batch batch;
  task.next(batch, B);
  auto loss = [&] { return model.forward(acts, batch.inputs.data(), batch.targets.data(), batch.loss_mask.data()); };
  loss();
  model.backward(acts);
  std::vector<double> analytic(model.grads().begin(), model.grads().end());
  double largest = 0;
  for (double g : analytic) largest = std::max(largest, std::abs(g));
  for (const ParamSpec& s : model.table().specs()) {
    auto p = model.param(s.name);
    std::vector<double> x(p.begin(), p.end());
    std::vector<double> g(analytic.begin() + s.offset, analytic.begin() + s.offset + s.numel);
    if (s.name.ends_with(".attn.k_norm.bias") && config.positions == Positions::Learned) {
      // HybridNorm's key-norm bias adds one vector to every key of a head: without RoPE each query's scores
      // shift by a constant, which softmax cancels. Its gradient is zero up to rounding (finite differences
      // only see noise).
      for (double v : g) EXPECT_LE(std::abs(v), 1e-12) << s.name;
      continue;
    }
    // A tensor whose gradient is zero by construction (mHC's residual mix where its doubly stochastic columns
    // or rows cancel it: the first sub-layer reads equal streams, the last one's streams are summed) is
    // checked to be zero, analytic and by one central difference per entry, not relative to itself.
    double tensor_largest = 0;
    for (double v : g) tensor_largest = std::max(tensor_largest, std::abs(v));
    // d loss / d p[i] by one second-order central difference
    auto central_difference = [&](size_t i) {
      const double h = GetParam().step;
      p[i] = x[i] + h;
      const double up = loss();
      p[i] = x[i] - h;
      const double down = loss();
      p[i] = x[i];
      return (up - down) / (2 * h);
    };
    const auto& unresolved = GetParam().unresolved;
    if (std::any_of(unresolved.begin(), unresolved.end(), [&](const std::string& f) { return s.name.find(f) != std::string::npos; })) {
      for (size_t i = 0; i < x.size(); ++i) {
        const double numeric = central_difference(i);
        EXPECT_LE(std::abs(numeric - g[i]), 1e-4 * std::abs(g[i]) + 1e-9 * largest)
            << s.name << "[" << i << "]: analytic " << g[i] << ", numeric " << numeric;
      }
      continue;
    }
    if (tensor_largest < 1e-14 * largest) {
      for (size_t i = 0; i < x.size(); ++i)
        EXPECT_LE(std::abs(central_difference(i)), 1e-8 * largest) << s.name << "[" << i << "]";
      continue;
    }
    auto loss_at = [&] {
      std::copy(x.begin(), x.end(), p.begin());
      return loss();
    };
    blocklab::testing::expect_gradient_matches(s.name, x, g, loss_at, GetParam().step, 1e-6);
    std::copy(x.begin(), x.end(), p.begin());
  }
}

TEST_P(WholeModel, ThreadCountDoesNotChangeResults) {
  ModelConfig config = GetParam().config;
  config.width = 32;
  config.heads = 4;
  config.layers = std::max(config.layers, 3);
  config.vocab = 16;
  config.seq_len = 15;
  if (config.cross_attention) config.context_len = 8;
  const int B = 8;
  CopyTask task(config.vocab, 8, 5);
  Batch batch;
  task.next(batch, B);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Model<float> model(config);
    Activations<float> acts = model.make_activations(B, config.seq_len);
    model.init_weights(3);
    const float loss = model.forward(acts, batch.inputs.data(), batch.targets.data(), batch.loss_mask.data());
    model.backward(acts);
    return std::make_pair(loss, std::vector<float>(model.grads().begin(), model.grads().end()));
  };
  const auto one = run(1);
  const auto two = run(2);
  set_num_threads(0);
  EXPECT_EQ(one.first, two.first);
  ASSERT_EQ(one.second.size(), two.second.size());
  size_t differing = 0;
  for (size_t i = 0; i < one.second.size(); ++i) differing += one.second[i] != two.second[i];
  EXPECT_EQ(differing, 0u) << "gradients differ between 1 and 2 threads";
}

// A forward into a second set of activations (a probe between steps) leaves a pending backward unchanged.
TEST_P(WholeModel, SecondForwardDoesNotDisturbAPendingBackward) {
  const ModelConfig config = GetParam().config;
  const int B = 2;
  Model<float> model(config);
  model.init_weights(5);
  Activations<float> acts = model.make_activations(B, config.seq_len);
  Activations<float> probe = model.make_activations(B, config.seq_len);
  CopyTask task(config.vocab, 3, 11);
  Batch batch, other;
  task.next(batch, B);
  task.next(other, B);
  model.forward(acts, batch.inputs.data(), batch.targets.data(), batch.loss_mask.data());
  model.backward(acts);
  const std::vector<float> expected(model.grads().begin(), model.grads().end());
  model.forward(acts, batch.inputs.data(), batch.targets.data(), batch.loss_mask.data());
  model.forward_hidden(probe, other.inputs.data());
  model.backward(acts);
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), model.grads().begin()));
}

// The head and the loss in chunks of a few counted positions (the gathered path too: the copy task counts the second
// half of each sequence, so a chunk can span two sequences) give the loss of one chunk and the same gradients up to
// rounding (the order in which the head weight's gradient is summed); forward_backward is forward() then
// backward() bit for bit, and a second backward (which computes the chunks' logits again) repeats them.
TEST_P(WholeModel, HeadChunksChangeOnlyTheOrderOfTheHeadWeightsSum) {
  const ModelConfig config = GetParam().config;
  const int B = 3;
  set_num_threads(1);
  Model<double> model(config);
  randomise(model, 7);
  CopyTask task(config.vocab, 3, 11);
  Batch batch;
  task.next(batch, B);
  const int32_t *inputs = batch.inputs.data(), *targets = batch.targets.data();
  const uint8_t* mask = batch.loss_mask.data();
  Activations<double> whole = model.make_activations(B, config.seq_len);
  const double loss = model.forward(whole, inputs, targets, mask);
  model.backward(whole);
  const std::vector<double> expected(model.grads().begin(), model.grads().end());
  double largest = 0;
  for (double g : expected) largest = std::max(largest, std::abs(g));
  for (int rows : {1, 2, 3}) {
    Activations<double> acts = model.make_activations(B, config.seq_len, rows);
    // the same loss up to rounding: a product's row need not take the same bits at every row count (the
    // kernels may take another path for one row)
    EXPECT_NEAR(model.forward_backward(acts, inputs, targets, mask), loss, 1e-13 * loss) << rows << " rows per chunk";
    const std::vector<double> fused(model.grads().begin(), model.grads().end());
    size_t far = 0;
    for (size_t i = 0; i < fused.size(); ++i) far += !(std::abs(fused[i] - expected[i]) <= 1e-13 * largest);
    EXPECT_EQ(far, 0u) << rows << " rows per chunk: gradients differ beyond the summation order";
    EXPECT_NEAR(model.forward(acts, inputs, targets, mask), loss, 1e-13 * loss) << rows;
    model.backward(acts);
    EXPECT_TRUE(std::equal(fused.begin(), fused.end(), model.grads().begin())) << rows << ": forward, backward";
    model.backward(acts);
    EXPECT_TRUE(std::equal(fused.begin(), fused.end(), model.grads().begin())) << rows << ": second backward";
  }
  set_num_threads(0);
}

// In float (the vectorised kernels), at 1 and 2 threads: forward_backward is forward() then backward() bit for bit,
// with one chunk and with several, and the thread count changes neither.
TEST_P(WholeModel, ForwardBackwardIsForwardThenBackwardAtAnyThreadCount) {
  const ModelConfig config = GetParam().config;
  const int B = 4;
  Model<float> model(config);
  model.init_weights(5);
  CopyTask task(config.vocab, 3, 11);
  Batch batch;
  task.next(batch, B);
  const int32_t *inputs = batch.inputs.data(), *targets = batch.targets.data();
  const uint8_t* mask = batch.loss_mask.data();
  for (int rows : {0, 3}) {
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Activations<float> acts = model.make_activations(B, config.seq_len, rows);
      const float loss = model.forward_backward(acts, inputs, targets, mask);
      std::vector<float> fused(model.grads().begin(), model.grads().end());
      EXPECT_EQ(model.forward(acts, inputs, targets, mask), loss) << rows << " rows, " << threads << " threads";
      model.backward(acts);
      EXPECT_TRUE(std::equal(fused.begin(), fused.end(), model.grads().begin())) << rows << ", " << threads;
      fused.push_back(loss);
      results.push_back(std::move(fused));
    }
    EXPECT_TRUE(results[0] == results[1]) << rows << " rows per chunk: 1 and 2 threads differ";
  }
  set_num_threads(0);
}

// Logits of any run of positions are those rows of every position's logits.
TEST_P(WholeModel, LogitsOfSomePositionsAreThoseRowsOfAll) {
  const ModelConfig config = GetParam().config;
  const int B = 2, V = config.vocab;
  Model<float> model(config);
  model.init_weights(5);
  CopyTask task(config.vocab, 3, 11);
  Batch batch;
  task.next(batch, B);
  Activations<float> acts = model.make_activations(B, config.seq_len);
  const std::vector<float> all = model.forward_logits(acts, batch.inputs.data());
  ASSERT_EQ(all.size(), static_cast<size_t>(B) * config.seq_len * V);
  std::vector<float> some(3 * static_cast<size_t>(V));
  model.forward_logits(acts, batch.inputs.data(), 2, some);
  EXPECT_TRUE(std::equal(some.begin(), some.end(), all.begin() + 2 * V));
  std::vector<float> past(2 * static_cast<size_t>(V));
  EXPECT_THROW(model.forward_logits(acts, batch.inputs.data(), B * config.seq_len - 1, past), Error);
}

// The gradient norm the backward's weight-gradient products take from their blocks in cache (model/grad_squares.h) is
// the norm summed from memory over every row, bit for bit, and close to a plain sum of squares: float at fp32 and
// bf16 (the bf16 GEMM paths), with one head chunk and several (the head weight's rows are taken on the last; a tied
// embedding's rows summed again after the embedding's terms), at 1 and 2 threads (the same bits); and in double.
TEST_P(WholeModel, GradNormTakenInTheBackwardIsTheNormOfEveryRow) {
  ModelConfig config = GetParam().config;
  const int B = 4;
  CopyTask task(config.vocab, 3, 11);
  Batch batch, other;
  task.next(batch, B);
  task.next(other, B);
  const int32_t *inputs = batch.inputs.data(), *targets = batch.targets.data();
  const uint8_t* mask = batch.loss_mask.data();
  const auto plain_norm = [](auto grads) {
    long double total = 0;
    for (const auto g : grads) total += static_cast<long double>(g) * g;
    return static_cast<double>(std::sqrt(total));
  };
  for (const Precision precision : {Precision::Fp32, Precision::Bf16}) {
    config.precision = precision;
    if (precision == Precision::Bf16 && config.stream() == ResidualStream::Sphere) continue;  // fp32 only
    Model<float> model(config);
    model.init_weights(5);
    for (int rows : {0, 3}) {
      std::vector<double> norms;
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        Activations<float> acts = model.make_activations(B, config.seq_len, rows);
        model.forward_backward(acts, inputs, targets, mask);
        const double taken = model.grad_norm();
        model.grads();  // mutable access: grad_norm() sums every row again
        const double summed = model.grad_norm();
        const std::string where = std::string(precision == Precision::Bf16 ? "bf16, " : "fp32, ") +
                                  std::to_string(rows) + " rows, " + std::to_string(threads) + " threads";
        EXPECT_EQ(taken, summed) << where;
        EXPECT_NEAR(taken, plain_norm(std::span<const float>(model.grads())), 1e-12 * taken) << where;
        model.forward(acts, inputs, targets, mask);
        model.backward(acts);
        EXPECT_EQ(model.grad_norm(), taken) << where << ": forward, backward";
        norms.push_back(taken);
        // another batch: no row's sum is left from the one before
        model.forward_backward(acts, other.inputs.data(), other.targets.data(), other.loss_mask.data());
        const double next = model.grad_norm();
        model.grads();
        EXPECT_EQ(next, model.grad_norm()) << where << ": the next batch";
      }
      EXPECT_EQ(norms[0], norms[1]) << rows << " rows per chunk: 1 and 2 threads differ";
    }
  }
  set_num_threads(0);
  config.precision = Precision::Fp32;
  Model<double> model(config);
  randomise(model, 7);
  Activations<double> acts = model.make_activations(B, config.seq_len, 3);
  model.forward_backward(acts, inputs, targets, mask);
  const double taken = model.grad_norm();
  model.grads();
  EXPECT_EQ(taken, model.grad_norm()) << "double";
  EXPECT_NEAR(taken, plain_norm(std::span<const double>(model.grads())), 1e-12 * taken) << "double";
}

INSTANTIATE_TEST_SUITE_P(Variants, WholeModel, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return info.param.name; });

// With W_g = 0 every gate is sigmoid(0) = 1/2: the gated stack equals the ungated one whose output projection
// weights are halved (biases unchanged), for fused and for separate q/k/v.
TEST(AttentionGate, ZeroGateWeightsHalveTheHeadsOutputs) {
  ModelConfig fused = tiny_config(NormPlacement::Pre, NormKind::LayerNorm);
  ModelConfig separate = fused;
  separate.qkv = QkvLayout::Separate, separate.kv_heads = 1;
  for (ModelConfig plain : {fused, separate}) {
    ModelConfig gated = plain;
    gated.attn_gate = true;
    Model<double> a(plain), b(gated);
    randomise(a, 3);
    for (const ParamSpec& s : a.table().specs()) {
      auto src = a.param(s.name);
      std::copy(src.begin(), src.end(), b.param(s.name).begin());
    }
    for (int l = 0; l < plain.layers; ++l) {
      const std::string p = "blocks." + std::to_string(l) + ".attn.";
      for (double& w : b.param(p + "gate.weight")) w = 0;
      for (double& w : a.param(p + "proj.weight")) w *= 0.5;
    }
    EXPECT_EQ(b.table().at("blocks.0.attn.gate.weight").shape, (std::vector<int64_t>{plain.q_dim(), plain.width}));
    EXPECT_EQ(b.table().find("blocks.0.attn.gate.bias"), nullptr);
    PairedBatch pair(a, b, plain);
    const double la = pair.forward(a, pair.acts_a), lb = pair.forward(b, pair.acts_b);
    EXPECT_NEAR(la, lb, 1e-12 * std::abs(la));
    // and a non-zero gate changes the result (the gate is in the computation, not beside it)
    for (double& w : b.param("blocks.1.attn.gate.weight")) w = 1.0;
    EXPECT_GT(std::abs(pair.forward(b, pair.acts_b) - la), 1e-6);
  }
}

// lambda1 = 1, lambda2 = 0 in every block reproduces the stack without value residual bit for bit (1 * v + 0 * v1
// is v exactly); lambda2 != 0 then changes the result. Block 1 has no lambdas; they start at 0.5.
TEST(ValueResidual, UnitOwnWeightIsThePlainStackAndTheFirstValuesMatter) {
  ModelConfig fused = tiny_config(NormPlacement::Pre, NormKind::LayerNorm);
  fused.layers = 3;
  ModelConfig separate = fused;
  separate.qkv = QkvLayout::Separate, separate.kv_heads = 1;
  for (ModelConfig plain : {fused, separate}) {
    ModelConfig mixed = plain;
    mixed.value_residual = true;
    Model<double> a(plain), b(mixed);
    b.init_weights(1);
    EXPECT_EQ(b.table().find("blocks.0.attn.value_lambda"), nullptr);
    for (int l = 1; l < plain.layers; ++l) {
      auto lambda = b.param("blocks." + std::to_string(l) + ".attn.value_lambda");
      ASSERT_EQ(lambda.size(), 2u);
      EXPECT_EQ(lambda[0], 0.5);
      EXPECT_EQ(lambda[1], 0.5);
      lambda[0] = 1, lambda[1] = 0;
    }
    randomise(a, 3);
    for (const ParamSpec& s : a.table().specs()) {
      auto src = a.param(s.name);
      std::copy(src.begin(), src.end(), b.param(s.name).begin());
    }
    PairedBatch pair(a, b, plain);
    const double la = pair.forward(a, pair.acts_a), lb = pair.forward(b, pair.acts_b);
    EXPECT_EQ(la, lb);
    a.backward(pair.acts_a);
    b.backward(pair.acts_b);
    for (const ParamSpec& s : a.table().specs()) {
      auto ga = a.grad(s.name), gb = b.grad(s.name);
      EXPECT_TRUE(std::equal(ga.begin(), ga.end(), gb.begin())) << s.name;
    }
    b.param("blocks.2.attn.value_lambda")[1] = 0.5;
    EXPECT_GT(std::abs(pair.forward(b, pair.acts_b) - la), 1e-6);
  }
}

TEST(ParameterTable, NamesAndShapesFollowPyTorch) {
  ModelConfig c;  // 24 x 128, 4 heads, V 64, T 63, Pre-LN LayerNorm
  ParameterTable table(c);
  EXPECT_EQ(table.at("tok_emb.weight").shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(table.at("pos_emb.weight").shape, (std::vector<int64_t>{63, 128}));
  EXPECT_EQ(table.at("blocks.3.mlp.fc2.weight").shape, (std::vector<int64_t>{128, 512}));
  EXPECT_EQ(table.at("blocks.23.attn.qkv.weight").shape, (std::vector<int64_t>{384, 128}));
  EXPECT_EQ(table.at("final_norm.bias").shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(table.at("head.weight").shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(table.find("head.bias"), nullptr);
  EXPECT_EQ(table.find("blocks.24.norm1.weight"), nullptr);
  long numel = 0;
  for (const auto& s : table.specs()) numel += s.numel;
  // per block: 2 norms (2C each) + qkv (3C^2+3C) + proj (C^2+C) + fc1 (4C^2+4C) + fc2 (4C^2+C)
  const long C = 128, per_block = 4 * C + 12 * C * C + 9 * C;
  EXPECT_EQ(numel, 64 * C + 63 * C + 24 * per_block + 2 * C + 64 * C);

  c.norm_placement = NormPlacement::Post;
  c.norm = NormKind::RMSNorm;
  ParameterTable post(c);
  EXPECT_EQ(post.find("final_norm.weight"), nullptr);
  EXPECT_EQ(post.find("blocks.0.norm1.bias"), nullptr);
  EXPECT_NE(post.find("blocks.0.norm1.weight"), nullptr);
  EXPECT_THROW(post.at("nope"), Error);
}

TEST(ModelInit, XavierBoundsZeroBiasesUnitNorms) {
  ModelConfig c = tiny_config(NormPlacement::Pre, NormKind::LayerNorm);
  c.width = 64;
  c.heads = 4;
  Model<float> model(c);
  model.init_weights(42);
  auto qkv = model.param("blocks.0.attn.qkv.weight");  // (192, 64)
  const double bound = std::sqrt(6.0 / (192 + 64));
  double sumsq = 0;
  for (float x : qkv) {
    EXPECT_LE(std::abs(x), bound);
    sumsq += x * x;
  }
  // U(-a, a) has variance a^2/3
  EXPECT_NEAR(sumsq / qkv.size(), bound * bound / 3, 0.1 * bound * bound / 3);
  for (float x : model.param("blocks.1.mlp.fc1.bias")) EXPECT_EQ(x, 0.f);
  for (float x : model.param("blocks.1.norm2.weight")) EXPECT_EQ(x, 1.f);
  auto emb = model.param("tok_emb.weight");
  double esq = 0;
  for (float x : emb) esq += x * x;
  EXPECT_NEAR(esq / emb.size(), 1.0, 0.15);  // N(0, 1) by default
  // Same seed, same weights; another seed, other weights.
  Model<float> again(c), other(c);
  again.init_weights(42);
  other.init_weights(43);
  EXPECT_TRUE(std::equal(model.params().begin(), model.params().end(), again.params().begin()));
  EXPECT_FALSE(std::equal(model.params().begin(), model.params().end(), other.params().begin()));
}

TEST(ModelConfig, RejectsBadShapes) {
  ModelConfig c;
  c.heads = 5;
  EXPECT_THROW(c.validate(), Error);
  c = ModelConfig{};
  c.layers = 0;
  EXPECT_THROW(c.validate(), Error);
  c = ModelConfig{};
  EXPECT_THROW(Activations<float>(c, 0, 10), Error);
  EXPECT_THROW(Activations<float>(c, 1, 64), Error);  // longer than the position table
}

TEST(ModelForward, RejectsOutOfRangeTokens) {
  ModelConfig c = tiny_config(NormPlacement::Pre, NormKind::LayerNorm);
  Model<float> model(c);
  Activations<float> acts = model.make_activations(1, c.seq_len);
  std::vector<int32_t> inputs = {0, 1, 2, 7, 0}, targets = {1, 2, 3, 4, 5};
  std::vector<uint8_t> mask = {0, 0, 1, 1, 1};
  EXPECT_THROW(model.forward(acts, inputs.data(), targets.data(), mask.data()), Error);
  inputs[3] = 1;
  std::vector<uint8_t> none(5, 0);
  EXPECT_THROW(model.forward(acts, inputs.data(), targets.data(), none.data()), Error);
  EXPECT_NO_THROW(model.forward(acts, inputs.data(), targets.data(), mask.data()));
}

namespace {
double sample_std(std::span<const float> v, long begin = 0, long end = -1) {
  if (end < 0) end = static_cast<long>(v.size());
  double sum = 0, sq = 0;
  for (long i = begin; i < end; ++i) sum += v[i], sq += static_cast<double>(v[i]) * v[i];
  const double n = static_cast<double>(end - begin), mean = sum / n;
  return std::sqrt(sq / n - mean * mean);
}
}  // namespace

// HybridNorm's parameters and sub-layer plans: per-head q/k/v norms of the config's kind (D), norm2 in every
// block, norm1 only in HybridNorm*'s first block, a final norm; the MLP's residual from its normalised input.
TEST(Model, HybridNormParametersAndPlans) {
  ModelConfig c = tiny_config(NormPlacement::HybridStar, NormKind::Derf);
  c.layers = 3;
  c.heads = 2;  // D = 4
  const ParameterTable table(c);
  for (const char* n : {"q_norm", "k_norm", "v_norm"}) {
    EXPECT_EQ(table.at(std::string("blocks.1.attn.") + n + ".weight").shape, std::vector<int64_t>{4});
    EXPECT_EQ(table.at(std::string("blocks.1.attn.") + n + ".bias").shape, std::vector<int64_t>{4});
    EXPECT_EQ(table.at(std::string("blocks.1.attn.") + n + ".shift").shape, std::vector<int64_t>{1});
  }
  EXPECT_NE(table.find("blocks.0.norm1.weight"), nullptr);
  EXPECT_EQ(table.find("blocks.1.norm1.weight"), nullptr);
  EXPECT_NE(table.find("blocks.2.norm2.alpha"), nullptr);
  EXPECT_NE(table.find("final_norm.weight"), nullptr);
  const SublayerPlan first = c.sublayer_plan(0, Sublayer::Mlp), later = c.sublayer_plan(1, Sublayer::Mlp);
  EXPECT_TRUE(first.in_norm && !first.residual_from_norm);
  EXPECT_TRUE(later.in_norm && later.residual_from_norm);
  EXPECT_TRUE(c.sublayer_plan(0, Sublayer::Attention).in_norm);
  EXPECT_FALSE(c.sublayer_plan(1, Sublayer::Attention).in_norm || c.sublayer_plan(1, Sublayer::Attention).after_norm);
  c.norm_placement = NormPlacement::Hybrid;
  EXPECT_EQ(ParameterTable(c).find("blocks.0.norm1.weight"), nullptr);
  EXPECT_TRUE(c.sublayer_plan(0, Sublayer::Mlp).residual_from_norm);
  c.norm = NormKind::RMSNorm;
  EXPECT_EQ(ParameterTable(c).find("blocks.0.attn.k_norm.bias"), nullptr);
}

// DeepNet's constants for decoder-only stacks, as docs/placements.md lists them.
TEST(InitSchemes, DeepNormConstantsMatchThePaperTable) {
  const std::vector<std::tuple<int, double, double>> table = {
      {6, 1.861, 0.380}, {12, 2.213, 0.320}, {18, 2.449, 0.289}, {24, 2.632, 0.269}, {48, 3.130, 0.226}, {96, 3.722, 0.190}};
  for (const auto& [N, a, b] : table) {
    ModelConfig c;
    c.layers = N;
    EXPECT_NEAR(c.deepnorm_alpha(), a, 1e-3) << N;  // the table's three decimals (96^(-1/4) = 0.3195 is listed as 0.320)
    EXPECT_NEAR(c.deepnorm_beta(), b, 1e-3) << N;
  }
}

TEST(InitSchemes, AutoFollowsThePlacementAndExplicitSchemesWin) {
  ModelConfig c;
  EXPECT_EQ(c.effective_init(), InitScheme::Xavier);
  c.norm_placement = NormPlacement::DeepNorm;
  EXPECT_EQ(c.effective_init(), InitScheme::DeepNorm);
  c.norm_placement = NormPlacement::TFixup;
  EXPECT_EQ(c.effective_init(), InitScheme::TFixup);
  c.init = InitScheme::Xavier;
  EXPECT_EQ(c.effective_init(), InitScheme::Xavier);
  apply_block_preset(c, "gpt2");  // resets init to auto and the placement to pre
  EXPECT_EQ(c.effective_init(), InitScheme::GPT2);
  c.norm_placement = NormPlacement::DeepNorm;
  EXPECT_EQ(c.effective_init(), InitScheme::DeepNorm);
}

// Every tensor an init scheme touches has the standard deviation of its formula, within 2%, on draws of
// 65k+ values (the standard error of a sample std is 1/sqrt(2n) ~ 0.3%).
TEST(InitSchemes, StandardDeviationsFollowTheFormulas) {
  for (InitScheme scheme : {InitScheme::DeepNorm, InitScheme::TFixup}) {
    ModelConfig c;
    c.layers = 6;
    c.width = 256;
    c.heads = 4;
    c.vocab = 512;
    c.seq_len = 256;
    c.init = scheme;
    Model<float> model(c);
    model.init_weights(11);
    const double C = 256, N = 6;
    const bool deepnorm = scheme == InitScheme::DeepNorm;
    const double scale = deepnorm ? std::pow(8 * N, -0.25) : std::pow(9 * N, -0.25);
    // Xavier-normal std = gain sqrt(2 / (fan_in + fan_out)); Xavier-uniform has the same std
    auto expected = [&](double fan_out, double fan_in, bool scaled) {
      return (scaled ? scale : 1.0) * std::sqrt(2.0 / (fan_in + fan_out));
    };
    auto check = [&](const std::string& name, long row0, long rows, double want) {
      const auto p = model.param(name);
      const long cols = model.table().at(name).shape[1];
      const double got = sample_std(p, row0 * cols, (row0 + rows) * cols);
      EXPECT_NEAR(got / want, 1.0, 0.02) << to_string(scheme) << " " << name << " rows " << row0 << "+" << rows;
    };
    check("blocks.2.attn.qkv.weight", 0, 256, expected(C, C, false));    // q
    check("blocks.2.attn.qkv.weight", 256, 256, expected(C, C, false));  // k
    check("blocks.2.attn.qkv.weight", 512, 256, expected(C, C, true));   // v
    check("blocks.2.attn.proj.weight", 0, 256, expected(C, C, true));
    check("blocks.2.mlp.fc1.weight", 0, 1024, expected(4 * C, C, true));
    check("blocks.2.mlp.fc2.weight", 0, 256, expected(C, 4 * C, true));
    check("head.weight", 0, 512, expected(512, C, false));
    if (!deepnorm) {  // T-Fixup embeddings: N(0, 1/C) times (9N)^(-1/4)
      EXPECT_NEAR(sample_std(model.param("tok_emb.weight")) / (scale / std::sqrt(C)), 1.0, 0.02);
      EXPECT_NEAR(sample_std(model.param("pos_emb.weight")) / (scale / std::sqrt(C)), 1.0, 0.02);
    }
  }
}

TEST(InitSchemes, LearnedResidualTermsStartAtTheirPaperValues) {
  ModelConfig c = tiny_config(NormPlacement::Admin, NormKind::DyT);
  Model<float> admin(c);
  admin.init_weights(1);
  const double n = 2.0 * c.layers;  // residual sub-layers
  for (float w : admin.param("blocks.1.mlp_omega")) EXPECT_FLOAT_EQ(w, std::sqrt((n + 1) / std::log(n + 1) - 1));
  for (float a : admin.param("blocks.0.norm1.alpha")) EXPECT_FLOAT_EQ(a, 0.5f);
  c.norm = NormKind::Derf;  // Derf: alpha 0.5 as DyT's, shift 0, weight 1, bias 0
  Model<float> derf(c);
  derf.init_weights(1);
  for (const char* name : {"blocks.0.norm1.alpha", "blocks.1.norm2.alpha"}) EXPECT_FLOAT_EQ(derf.param(name)[0], 0.5f);
  for (const char* name : {"blocks.0.norm1.shift", "blocks.1.norm2.shift"}) EXPECT_EQ(derf.param(name)[0], 0.f);
  for (float w : derf.param("blocks.0.norm1.weight")) EXPECT_EQ(w, 1.f);
  for (float b : derf.param("blocks.0.norm1.bias")) EXPECT_EQ(b, 0.f);
  EXPECT_EQ(derf.table().at("blocks.0.norm1.shift").shape, std::vector<int64_t>{1});
  c.norm_placement = NormPlacement::ReZero;
  Model<float> rezero(c);
  rezero.init_weights(1);
  EXPECT_EQ(rezero.param("blocks.1.rezero_alpha")[0], 0.f);
  EXPECT_EQ(rezero.table().find("blocks.1.norm1.weight"), nullptr);  // no norms at all
  EXPECT_EQ(rezero.table().find("final_norm.weight"), nullptr);
}

// Hyper-connections with one stream and the static init are Pre-LN: h = H, H' = T(h) + H. The same operations
// in the same order: loss and every shared parameter's gradient bit for bit, over several SGD steps of the shared
// parameters (A_m, A_r, B are held at their init: once they learn, the two models part), with two threads.
TEST(HyperConnections, OneStaticStreamIsPreLNBitForBit) {
  for (const std::string block : {"seed", "qwen3"}) {
    ModelConfig pre = tiny_config(NormPlacement::Pre, NormKind::LayerNorm);
    apply_block_preset(pre, block);
    pre.width = 32, pre.heads = 4, pre.layers = 3, pre.vocab = 16, pre.seq_len = 15;
    ModelConfig hc = pre;
    hc.norm_placement = NormPlacement::Hc, hc.residual_streams = 1, hc.hc_dynamic = false;
    set_num_threads(2);
    Model<float> a(pre), b(hc);
    a.init_weights(9);
    b.init_weights(9);
    const int B = 4;
    Activations<float> acts_a = a.make_activations(B, pre.seq_len), acts_b = b.make_activations(B, pre.seq_len);
    CopyTask task(pre.vocab, 8, 3);
    Batch batch;
    for (int step = 0; step < 4; ++step) {
      task.next(batch, B);
      const float la = a.forward(acts_a, batch.inputs.data(), batch.targets.data(), batch.loss_mask.data());
      const float lb = b.forward(acts_b, batch.inputs.data(), batch.targets.data(), batch.loss_mask.data());
      ASSERT_EQ(la, lb) << block << " step " << step;
      a.backward(acts_a);
      b.backward(acts_b);
      for (const ParamSpec& s : a.table().specs()) {
        auto ga = a.grad(s.name), gb = b.grad(s.name);
        ASSERT_TRUE(std::equal(ga.begin(), ga.end(), gb.begin())) << block << " step " << step << " " << s.name;
        auto pa = a.param(s.name), pb = b.param(s.name);
        for (size_t i = 0; i < pa.size(); ++i) pa[i] -= 0.05f * ga[i], pb[i] -= 0.05f * gb[i];
      }
      for (int l = 0; l < pre.layers; ++l)  // A_m's gradient is there, and not zero
        EXPECT_NE(b.grad("blocks." + std::to_string(l) + ".attn_hc.alpha_in")[0], 0.f);
    }
    set_num_threads(0);
  }
}

TEST(HyperConnections, InitFollowsThePaper) {
  ModelConfig c = tiny_config(NormPlacement::Hc, NormKind::LayerNorm);
  c.layers = 3, c.residual_streams = 4;
  Model<float> m(c);
  m.init_weights(1);
  for (int k = 0; k < 2 * c.layers; ++k) {
    const std::string p = "blocks." + std::to_string(k / 2) + (k % 2 == 0 ? ".attn_hc." : ".mlp_hc.");
    auto a_in = m.param(p + "alpha_in"), a_res = m.param(p + "alpha_res"), beta = m.param(p + "beta");
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(a_in[i], i == k % 4 ? 1.f : 0.f) << p;
      EXPECT_EQ(beta[i], 1.f);
      for (int j = 0; j < 4; ++j) EXPECT_EQ(a_res[i * 4 + j], i == j ? 1.f : 0.f);
    }
    for (const char* w : {"w_in", "w_res", "w_beta"})
      for (float x : m.param(p + w)) EXPECT_EQ(x, 0.f);
    EXPECT_FLOAT_EQ(m.param(p + "scale_alpha")[0], 0.01f);
    EXPECT_FLOAT_EQ(m.param(p + "scale_beta")[0], 0.01f);
    for (float x : m.param(p + "norm.weight")) EXPECT_EQ(x, 1.f);
  }
  EXPECT_EQ(m.table().at("blocks.0.attn_hc.w_res").shape, (std::vector<int64_t>{8, 4}));
  EXPECT_NE(m.table().find("final_norm.weight"), nullptr);
  c.hc_dynamic = false;
  ParameterTable fixed(c);
  EXPECT_EQ(fixed.find("blocks.0.attn_hc.w_in"), nullptr);
  EXPECT_EQ(fixed.find("blocks.0.attn_hc.norm.weight"), nullptr);
  EXPECT_NE(fixed.find("blocks.2.mlp_hc.alpha_res"), nullptr);
}

TEST(HyperConnections, RefusesWhatItDoesNotSupport) {
  ModelConfig c = tiny_config(NormPlacement::Hc, NormKind::LayerNorm);
  c.residual_streams = 0;
  EXPECT_THROW(c.validate(), Error);
  c.residual_streams = 2;
  c.validate();
  apply_block_preset(c, "sd");
  c.norm_placement = NormPlacement::Hc, c.context_len = 3;
  try {
    c.validate();
    ADD_FAILURE() << "cross-attention accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cross_attention"), std::string::npos) << e.what();
  }
}

// mHC's residual mixing after the projection is doubly stochastic: every token's A_r(H), every sub-layer, rows
// and columns summing to 1 within 1e-5 (float), with dynamic weights far from their init.
TEST(HyperConnections, ManifoldMixingIsDoublyStochastic) {
  ModelConfig c = tiny_config(NormPlacement::Mhc, NormKind::RMSNorm);
  c.residual_streams = 4, c.width = 32, c.heads = 4, c.layers = 3, c.vocab = 16, c.seq_len = 15;
  Model<float> model(c);
  model.init_weights(2);
  Rng rng(4);
  for (const ParamSpec& s : model.table().specs())
    if (s.role == ParamRole::HyperDynamic || s.role == ParamRole::HyperScale || s.role == ParamRole::HyperResidual)
      for (float& x : model.param(s.name)) x = static_cast<float>((s.role == ParamRole::HyperResidual ? 1.0 : 0.3) * rng.normal());
  const int B = 3;
  Activations<float> acts = model.make_activations(B, c.seq_len);
  CopyTask task(c.vocab, 8, 1);
  Batch batch;
  task.next(batch, B);
  model.forward(acts, batch.inputs.data(), batch.targets.data(), batch.loss_mask.data());
  const int n = c.residual_streams;
  double spread = 0;  // how far from uniform the matrices are: the projection has work to do
  for (int k = 0; k < 2 * c.layers; ++k)
    for (long t = 0; t < static_cast<long>(B) * c.seq_len; ++t) {
      const float* m = acts.hyper(k).a_res + t * n * n;
      for (int i = 0; i < n; ++i) {
        double row = 0, col = 0;
        for (int j = 0; j < n; ++j) {
          row += m[i * n + j], col += m[j * n + i];
          EXPECT_GE(m[i * n + j], 0.f);
          spread = std::max(spread, std::abs(m[i * n + j] - 1.0 / n));
        }
        ASSERT_NEAR(row, 1.0, 1e-5) << "sub-layer " << k << " token " << t << " row " << i;
        ASSERT_NEAR(col, 1.0, 1e-5) << "sub-layer " << k << " token " << t << " column " << i;
      }
      const float* pre = acts.hyper(k).pre_res + t * n * n;  // and it is the projection of its input
      float again[16];
      sinkhorn_forward(again, pre, n);
      for (int e = 0; e < n * n; ++e) EXPECT_EQ(again[e], m[e]);
    }
  EXPECT_GT(spread, 0.1);
}

// Sinkhorn's backward against central differences on its own, in double precision, for a lopsided matrix: n = 3
// (compiled for that n) and n = 5 (the code for any n); the projection is doubly stochastic in both.
TEST(HyperConnections, SinkhornBackwardMatchesFiniteDifferences) {
  for (const int n : {3, 5}) {
    Rng rng(5);
    std::vector<double> P(n * n), dM(n * n), dP(n * n), M(n * n);
    for (auto& x : P) x = 1.5 * rng.normal();
    for (auto& x : dM) x = rng.normal();
    sinkhorn_forward(M.data(), P.data(), n);
    for (int i = 0; i < n; ++i) {
      double row = 0, col = 0;
      for (int j = 0; j < n; ++j) row += M[i * n + j], col += M[j * n + i];
      EXPECT_NEAR(row, 1.0, 1e-12) << "n " << n << " row " << i;  // the last normalisation is over the rows
      EXPECT_NEAR(col, 1.0, 1e-5) << "n " << n << " column " << i;
    }
    sinkhorn_backward(dP.data(), dM.data(), P.data(), n);
    for (int k = 0; k < n * n; ++k) {
      auto loss = [&](double delta) {
        std::vector<double> q = P;
        q[k] += delta;
        sinkhorn_forward(M.data(), q.data(), n);
        double l = 0;
        for (int e = 0; e < n * n; ++e) l += dM[e] * M[e];
        return l;
      };
      const double h = 1e-6;
      EXPECT_NEAR(dP[k], (loss(h) - loss(-h)) / (2 * h), 1e-8) << "n " << n << " entry " << k;
    }
  }
}

// The mixing of one sub-layer on its own, every form, in double precision: random, unequal streams H, a branch
// output G that does not depend on h, and loss = <R, H'> + <Q, h>; the gradients of every mixing parameter and
// of H against central differences.
TEST(HyperConnections, MixingGradientsMatchFiniteDifferences) {
  for (NormPlacement placement : {NormPlacement::Hc, NormPlacement::Mhc})
    for (bool dynamic : {false, true})
      for (NormKind kind : {NormKind::LayerNorm, NormKind::RMSNorm}) {
        ModelConfig c = tiny_config(placement, kind);
        c.residual_streams = 3, c.hc_dynamic = dynamic, c.layers = 1;
        const std::string what = to_string(placement) + (dynamic ? " dynamic " : " static ") + to_string(kind);
        const long N = 4, C = c.width, n = c.residual_streams;
        Model<double> model(c);  // for the mixing parameters' table
        randomise(model, 3);
        const HyperTensors<double> w = bind_tensors(model.table(), c, model.params().data()).blocks[0].attn_hc;
        const HyperTensors<double> g = bind_tensors(model.table(), c, model.grads().data()).blocks[0].attn_hc;
        Rng rng(8);
        std::vector<double> H(n * N * C), G(N * C), R(n * N * C), Q(N * C);
        for (auto* v : {&H, &G, &R, &Q})
          for (double& x : *v) x = rng.normal();
        HyperActs<double> a;
        HyperScratch<double> s;
        std::vector<double> acts(carve_hyper_acts(a, static_cast<double*>(nullptr), c, N, true));
        std::vector<double> scratch(carve_hyper_scratch(s, static_cast<double*>(nullptr), c, N));
        carve_hyper_acts(a, acts.data(), c, N, true);
        carve_hyper_scratch(s, scratch.data(), c, N);
        auto loss = [&] {
          hyper_input_forward(a, H.data(), w, c, N);
          hyper_output_forward(a, H.data(), G.data(), c, N);
          double l = 0;
          for (long i = 0; i < n * N * C; ++i) l += R[i] * a.out[i];
          for (long i = 0; i < N * C; ++i) l += Q[i] * a.h[i];
          return l;
        };
        loss();
        std::fill(model.grads().begin(), model.grads().end(), 0.0);
        std::vector<double> dH(n * N * C);
        hyper_output_backward(dH.data(), s, R.data(), a, H.data(), G.data(), c, N);
        std::copy(Q.begin(), Q.end(), s.dh);
        hyper_input_backward(dH.data(), s, g, a, H.data(), w, c, N, false);
        for (const ParamSpec& spec : model.table().specs()) {
          if (spec.name.find("attn_hc.") == std::string::npos) continue;
          auto p = model.param(spec.name);
          std::vector<double> x(p.begin(), p.end());
          std::vector<double> analytic(model.grad(spec.name).begin(), model.grad(spec.name).end());
          auto loss_at = [&] {
            std::copy(x.begin(), x.end(), p.begin());
            return loss();
          };
          blocklab::testing::expect_gradient_matches(what + " " + spec.name, x, analytic, loss_at, 1e-4, 1e-7);
          std::copy(x.begin(), x.end(), p.begin());
        }
        std::vector<double> x = H;
        auto loss_at = [&] {
          H = x;
          return loss();
        };
        blocklab::testing::expect_gradient_matches(what + " streams", x, dH, loss_at, 1e-4, 1e-7);
      }
}

// nGPT refuses by name what it does not define, ignores the init key (its own init), and starts with unit weight
// vectors and its scales at their stored starts.
TEST(Ngpt, RefusesWhatItDoesNotSupportAndHasItsOwnInit) {
  ModelConfig c = tiny_config(NormPlacement::NGPT, NormKind::LayerNorm);
  auto refused = [&](ModelConfig bad, const std::string& what) {
    try {
      bad.validate();
      ADD_FAILURE() << what << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ngpt"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  ModelConfig bad = c;
  bad.cross_attention = true, bad.context_len = 2;
  refused(bad, "cross_attention");
  bad = c, bad.qkv = QkvLayout::Separate, bad.qk_norm = true;
  refused(bad, "qk_norm");
  bad = c, bad.tie_head = true;
  refused(bad, "tie_head");
  bad = c, bad.kv_heads = 1;
  refused(bad, "kv_heads");
  bad = c, bad.precision = Precision::Bf16;
  refused(bad, "fp32");
  bad = c, bad.norm = NormKind::RMSNorm;
  refused(bad, "norm");
  Model<double> a(c);
  ModelConfig xavier = c;
  xavier.init = InitScheme::Xavier;
  Model<double> b(xavier);
  a.init_weights(4);
  b.init_weights(4);
  EXPECT_TRUE(std::equal(a.params().begin(), a.params().end(), b.params().begin()));
  const double s = 1 / std::sqrt(8.0);
  for (double v : a.param("blocks.0.attn_alpha")) EXPECT_DOUBLE_EQ(v, s);
  for (double v : a.param("blocks.1.attn.s_qk")) EXPECT_DOUBLE_EQ(v, s);
  for (double v : a.param("blocks.1.mlp.s_uv")) EXPECT_DOUBLE_EQ(v, 1.0);
  for (double v : a.param("head.s_z")) EXPECT_DOUBLE_EQ(v, s);
  EXPECT_EQ(a.table().find("final_norm.weight"), nullptr);
  EXPECT_EQ(a.table().find("blocks.0.norm1.weight"), nullptr);
  const auto head = a.param("head.weight");
  for (int v = 0; v < c.vocab; ++v) {
    double ss = 0;
    for (int i = 0; i < c.width; ++i) ss += head[v * c.width + i] * head[v * c.width + i];
    EXPECT_NEAR(ss, 1.0, 1e-12) << "head row " << v;
  }
}

// A step's work: 6 x (parameters in products) x tokens + attention, the head counted for the positions the loss
// counts (it runs for them alone).
TEST(TrainingFlops, TheHeadCountsTheCountedPositions) {
  ModelConfig c = tiny_config(NormPlacement::Pre, NormKind::LayerNorm);
  c.seq_len = 8;
  const int B = 3, T = 8;
  const double C = c.width, V = c.vocab, L = c.layers, hidden = c.mlp_hidden();
  const double blocks = L * (4 * C * C + 2 * hidden * C), attention = 12.0 * L * B * T * T * C;
  EXPECT_DOUBLE_EQ(training_flops_per_step(c, B, T), 6 * (blocks + V * C) * B * T + attention);
  EXPECT_DOUBLE_EQ(training_flops_per_step(c, B, T, B * T), training_flops_per_step(c, B, T));
  EXPECT_DOUBLE_EQ(training_flops_per_step(c, B, T) - training_flops_per_step(c, B, T, 5), 6 * V * C * (B * T - 5));
}
