#include "hf/model.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>

#include "kernels/bf16_linear.h"
#include "kernels/gemm.h"
#include "kernels/rope.h"
#include "kernels/sgemm.h"
#include "model/block.h"
#include "model/parameters.h"
#include "util/error.h"

namespace blocklab::hf {

namespace {

// Float scratch for one converted row block of a weight: 1 Mi floats (4 MiB), small enough to stay
// in cache between conversion and GEMM (a 2560-wide weight goes in 409-row blocks). Measured on a
// 9728 x 2560 BF16 weight, 64 tokens: 1 Mi-float blocks beat 16 Mi (whole-matrix) and 64 Ki blocks.
constexpr int64_t kScratchFloats = int64_t{1} << 20;
// Up to this many rows, BF16 weights go through kernels::bf16_linear_forward instead. On a 9728 x 2560
// weight (2 shared cores): 9 rows 0.045 s fused against 0.27 s converting 4 MiB blocks for GEMM;
// at 32-33 rows the fused kernel (0.12 s) falls behind the tiled GEMM below (0.09 s).
constexpr int kFewRows = 16;
// Per-thread tile of converted rows for more rows than that: 256 Ki floats (1 MiB), about 100 rows of a
// 2560-wide weight.
constexpr int64_t kTileFloats = int64_t{1} << 18;

std::string dims_text(const blocklab::ModelConfig& c) {
  return "hidden_size " + std::to_string(c.width) + ", num_attention_heads " + std::to_string(c.heads) +
         ", num_key_value_heads " + std::to_string(c.kv_heads) + ", head_dim " + std::to_string(c.head_size()) +
         ", intermediate_size " + std::to_string(c.mlp_hidden()) + ", vocab_size " + std::to_string(c.vocab);
}

}  // namespace

std::vector<double> rope_inv_freq(const Config& c) {
  const int D = c.model.head_size(), half = D / 2;
  std::vector<double> inv(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) inv[i] = std::pow(c.model.rope_theta, -2.0 * i / D);
  switch (c.rope.scaling) {
    case RopeConfig::Scaling::None:
      break;
    case RopeConfig::Scaling::Linear:
      for (double& f : inv) f /= c.rope.factor;
      break;
    case RopeConfig::Scaling::Llama3: {
      // Llama 3.1: long wavelengths are slowed down by `factor`, short ones kept, the band between
      // interpolated (transformers' _compute_llama3_parameters).
      const double old_len = c.rope.original_max_positions;
      const double low_wavelen = old_len / c.rope.low_freq_factor;
      const double high_wavelen = old_len / c.rope.high_freq_factor;
      for (double& f : inv) {
        const double wavelen = 2 * std::numbers::pi / f;
        if (wavelen > low_wavelen) {
          f /= c.rope.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth =
              (old_len / wavelen - c.rope.low_freq_factor) / (c.rope.high_freq_factor - c.rope.low_freq_factor);
          f = (1 - smooth) * f / c.rope.factor + smooth * f;
        }
      }
      break;
    }
  }
  return inv;
}

void stored_linear(float* out, const float* inp, const StoredMatrix& m, const float* bias, int N,
                   std::vector<float>& scratch, int64_t block_floats) {
  const WeightRef& w = m.weight;
  const int OC = m.out, C = m.in;
  const auto address = reinterpret_cast<uintptr_t>(w.bytes.data());
  const bool f32_in_place = w.dtype == io::DType::F32 && address % alignof(float) == 0;
  const bool defaults = block_floats == 0;
  if (N == 0) {
    // nothing to multiply
  } else if (f32_in_place) {
    const auto* W = reinterpret_cast<const float*>(w.bytes.data());
    if (m.transposed) {
      kernels::gemm<float>(false, false, N, OC, C, 1.0f, inp, C, W, OC, 0.0f, out, OC);  // W (C, OC)
    } else {
      kernels::gemm<float>(false, true, N, OC, C, 1.0f, inp, C, W, C, 0.0f, out, OC);  // W (OC, C)
    }
  } else if (defaults && !m.transposed && w.dtype == io::DType::BF16 && N <= kFewRows &&
             address % alignof(uint16_t) == 0) {
    // Few rows (a short prompt): read the BF16 weight once, in place, without a float copy.
    const std::size_t need = static_cast<std::size_t>(omp_get_max_threads()) * C;
    if (scratch.size() < need) scratch.resize(need);
    kernels::bf16_linear_forward(out, inp, reinterpret_cast<const uint16_t*>(w.bytes.data()), N, C, OC, scratch.data());
  } else if (defaults && !m.transposed && kernels::sgemm_isa() != kernels::SgemmIsa::None) {
    // Many rows: one parallel region for the whole weight. Each thread converts a tile of output rows
    // into its own slice of the scratch and multiplies it with a GEMM that runs on that thread alone
    // (a nested region), so there is one synchronisation per weight instead of two per block.
    const int threads = omp_get_max_threads();
    const int64_t rows = std::clamp<int64_t>(kTileFloats / C, 1, OC);
    const std::size_t need = static_cast<std::size_t>(threads) * rows * C;
    if (scratch.size() < need) scratch.resize(need);
    const int64_t tiles = (OC + rows - 1) / rows;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t r0 = tile * rows;
      const int n_rows = static_cast<int>(std::min(rows, OC - r0));
      float* s = scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * rows * C;
      convert_rows(s, w, r0, n_rows);
      // out[:, r0:r0+n] = inp @ W[r0:r0+n, :]^T
      kernels::gemm<float>(false, true, N, n_rows, C, 1.0f, inp, C, s, C, 0.0f, out + r0, OC);
    }
  } else {
    const int64_t row_len = m.transposed ? OC : C;  // stored row length
    const int64_t stored_rows = m.transposed ? C : OC;
    const int64_t budget = block_floats > 0 ? block_floats : kScratchFloats;
    const int64_t block = std::clamp<int64_t>(budget / row_len, 1, stored_rows);
    if (scratch.size() < static_cast<std::size_t>(block * row_len)) scratch.resize(block * row_len);
    for (int64_t r0 = 0; r0 < stored_rows; r0 += block) {
      const int rows = static_cast<int>(std::min(block, stored_rows - r0));
      convert_rows(scratch.data(), w, r0, rows);
      if (m.transposed) {
        // out (N, OC) += inp[:, r0:r0+rows] @ W[r0:r0+rows, :]
        kernels::gemm<float>(false, false, N, OC, rows, 1.0f, inp + r0, C, scratch.data(), OC, r0 == 0 ? 0.0f : 1.0f,
                             out, OC);
      } else {
        // out[:, r0:r0+rows] = inp @ W[r0:r0+rows, :]^T
        kernels::gemm<float>(false, true, N, rows, C, 1.0f, inp, C, scratch.data(), C, 0.0f, out + r0, OC);
      }
    }
  }
  if (bias != nullptr) {
    for (int n = 0; n < N; ++n) {
      float* row = out + static_cast<long>(n) * OC;
      for (int o = 0; o < OC; ++o) row[o] += bias[o];
    }
  }
}

// A linear layer read in place: one stored matrix, or several whose outputs are concatenated (the gated
// MLP's [up | gate], which the block engine reads as one (2I, C) layer).
class StoredLinearSource final : public LinearSource {
 public:
  explicit StoredLinearSource(std::vector<StoredMatrix> parts) : parts_(std::move(parts)) {}

  void forward(float* out, const float* inp, int N, Work& work) const override {
    if (parts_.size() == 1) {
      stored_linear(out, inp, parts_[0], nullptr, N, work.scratch);
      return;
    }
    int total = 0;
    for (const StoredMatrix& m : parts_) total += m.out;
    int col = 0;
    for (const StoredMatrix& m : parts_) {
      work.part.resize(static_cast<size_t>(N) * m.out);
      stored_linear(work.part.data(), inp, m, nullptr, N, work.scratch);
      for (int n = 0; n < N; ++n)
        std::copy_n(work.part.data() + static_cast<long>(n) * m.out, m.out, out + static_cast<long>(n) * total + col);
      col += m.out;
    }
  }
  // The stored tensors, for page hints.
  std::vector<const WeightRef*> refs() const {
    std::vector<const WeightRef*> r;
    for (const StoredMatrix& m : parts_) r.push_back(&m.weight);
    return r;
  }

 private:
  std::vector<StoredMatrix> parts_;
};

struct BlockWeights {
  std::vector<std::unique_ptr<std::vector<float>>> vectors;  // norm weights and biases, as float
  std::vector<std::unique_ptr<StoredLinearSource>> linears;
  BlockTensors<float> tensors;

  float* keep(std::vector<float> v) {
    vectors.push_back(std::make_unique<std::vector<float>>(std::move(v)));
    return vectors.back()->data();
  }
  const LinearSource* keep(std::vector<StoredMatrix> parts) {
    linears.push_back(std::make_unique<StoredLinearSource>(std::move(parts)));
    return linears.back().get();
  }
  std::vector<const WeightRef*> refs() const {
    std::vector<const WeightRef*> r;
    for (const auto& l : linears)
      for (const WeightRef* w : l->refs()) r.push_back(w);
    return r;
  }
};

Model::Model(Config config, WeightStore weights) : config_(std::move(config)), weights_(std::move(weights)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::load(const std::filesystem::path& dir) {
  Config config = load_config(dir);
  WeightStore weights = WeightStore::open(dir);
  Model m(std::move(config), std::move(weights));
  m.resolve();
  return m;
}

void Model::resolve() {
  const Config& hc = config_;
  const blocklab::ModelConfig& c = config_.model;
  const WeightStore& ws = weights_;
  const int64_t C = c.width, I = c.mlp_hidden(), V = c.vocab, Q = c.q_dim(), K = c.kv_dim(), D = c.head_size();
  const std::string dims = dims_text(c);
  std::set<std::string> used;
  std::set<std::string> dtypes;

  auto get = [&](const std::string& name, std::vector<int64_t> shape) {
    WeightRef w = ws.get(name, shape, "config: " + dims);
    used.insert(name);
    dtypes.insert(io::dtype_name(w.dtype));
    parameter_count_ += w.numel();
    return w;
  };
  auto vec = [&](const std::string& name, int64_t n) { return to_float(get(name, {n})); };
  auto matrix = [&](const std::string& name, int64_t out, int64_t in, bool transposed) {
    StoredMatrix m;
    m.weight = transposed ? get(name, {in, out}) : get(name, {out, in});
    m.out = static_cast<int>(out);
    m.in = static_cast<int>(in);
    m.transposed = transposed;
    return m;
  };
  auto first_present = [&](const std::vector<std::string>& candidates) -> std::string {
    for (const std::string& n : candidates)
      if (ws.contains(n)) return n;
    return {};
  };
  // One linear layer of a block: stored parts (concatenated along the outputs) and an optional bias.
  auto linear = [](BlockWeights& b, std::vector<StoredMatrix> parts, std::vector<float> bias) {
    LinearTensors<float> l;
    l.source = b.keep(std::move(parts));
    if (!bias.empty()) l.bias = b.keep(std::move(bias));
    return l;
  };

  if (hc.family == Family::GPT2) {
    const std::string wte = first_present({"wte.weight", "transformer.wte.weight"});
    if (wte.empty())
      throw Error(ws.source().string() + ": no GPT-2 token embedding (expected \"wte.weight\" or \"transformer.wte.weight\")");
    const std::string P = wte.substr(0, wte.size() - std::string("wte.weight").size());
    embed_ = get(P + "wte.weight", {V, C});
    positions_ = get(P + "wpe.weight", {hc.max_positions, C});
    for (int l = 0; l < c.layers; ++l) {
      const std::string b = P + "h." + std::to_string(l) + ".";
      auto w = std::make_unique<BlockWeights>();
      BlockTensors<float>& t = w->tensors;
      t.attn.norm = {w->keep(vec(b + "ln_1.weight", C)), w->keep(vec(b + "ln_1.bias", C))};
      // Conv1D layers store their weights (in, out)
      t.attn.qkv = linear(*w, {matrix(b + "attn.c_attn.weight", 3 * C, C, true)}, vec(b + "attn.c_attn.bias", 3 * C));
      t.attn.proj = linear(*w, {matrix(b + "attn.c_proj.weight", C, C, true)}, vec(b + "attn.c_proj.bias", C));
      t.mlp.norm = {w->keep(vec(b + "ln_2.weight", C)), w->keep(vec(b + "ln_2.bias", C))};
      t.mlp.fc1 = linear(*w, {matrix(b + "mlp.c_fc.weight", I, C, true)}, vec(b + "mlp.c_fc.bias", I));
      t.mlp.fc2 = linear(*w, {matrix(b + "mlp.c_proj.weight", C, I, true)}, vec(b + "mlp.c_proj.bias", C));
      blocks_.push_back(std::move(w));
    }
    final_norm_weight_ = vec(P + "ln_f.weight", C);
    final_norm_bias_ = vec(P + "ln_f.bias", C);
  } else {
    const std::vector<std::string> prefixes = hc.multimodal_wrapper
                                                  ? std::vector<std::string>{"model.language_model.", "language_model.model."}
                                                  : std::vector<std::string>{"model.", ""};
    std::string P;
    bool found = false;
    for (const std::string& p : prefixes)
      if (ws.contains(p + "embed_tokens.weight")) {
        P = p;
        found = true;
        break;
      }
    if (!found)
      throw Error(ws.source().string() + ": no token embedding: expected \"" + prefixes[0] + "embed_tokens.weight\"");
    embed_ = get(P + "embed_tokens.weight", {V, C});
    auto optional_vec = [&](bool present, const std::string& name, int64_t n) {
      return present ? vec(name, n) : std::vector<float>{};
    };
    for (int l = 0; l < c.layers; ++l) {
      const std::string b = P + "layers." + std::to_string(l) + ".";
      auto w = std::make_unique<BlockWeights>();
      BlockTensors<float>& t = w->tensors;
      t.attn.norm.weight = w->keep(vec(b + "input_layernorm.weight", C));
      t.attn.q = linear(*w, {matrix(b + "self_attn.q_proj.weight", Q, C, false)},
                        optional_vec(c.qkv_bias, b + "self_attn.q_proj.bias", Q));
      t.attn.k = linear(*w, {matrix(b + "self_attn.k_proj.weight", K, C, false)},
                        optional_vec(c.qkv_bias, b + "self_attn.k_proj.bias", K));
      t.attn.v = linear(*w, {matrix(b + "self_attn.v_proj.weight", K, C, false)},
                        optional_vec(c.qkv_bias, b + "self_attn.v_proj.bias", K));
      t.attn.proj = linear(*w, {matrix(b + "self_attn.o_proj.weight", C, Q, false)},
                           optional_vec(c.proj_bias, b + "self_attn.o_proj.bias", C));
      if (c.qk_norm) {
        t.attn.q_norm.weight = w->keep(vec(b + "self_attn.q_norm.weight", D));
        t.attn.k_norm.weight = w->keep(vec(b + "self_attn.k_norm.weight", D));
      }
      t.mlp.norm.weight = w->keep(vec(b + "post_attention_layernorm.weight", C));
      // The block engine's gated MLP reads one (2I, C) layer whose rows are [value | gate]: [up | gate].
      std::vector<float> fc1_bias;
      if (c.mlp_bias) {
        fc1_bias = vec(b + "mlp.up_proj.bias", I);
        const std::vector<float> gate = vec(b + "mlp.gate_proj.bias", I);
        fc1_bias.insert(fc1_bias.end(), gate.begin(), gate.end());
      }
      t.mlp.fc1 = linear(*w, {matrix(b + "mlp.up_proj.weight", I, C, false), matrix(b + "mlp.gate_proj.weight", I, C, false)},
                         std::move(fc1_bias));
      t.mlp.fc2 = linear(*w, {matrix(b + "mlp.down_proj.weight", C, I, false)},
                         optional_vec(c.mlp_bias, b + "mlp.down_proj.bias", C));
      blocks_.push_back(std::move(w));
    }
    final_norm_weight_ = vec(P + "norm.weight", C);
  }

  if (c.tie_head) {
    lm_head_ = embed_;
  } else {
    const std::vector<std::string> heads = hc.multimodal_wrapper
                                               ? std::vector<std::string>{"lm_head.weight", "language_model.lm_head.weight"}
                                               : std::vector<std::string>{"lm_head.weight"};
    const std::string head = first_present(heads);
    if (head.empty())
      throw Error(ws.source().string() + ": missing tensor \"" + heads[0] +
                  "\" (tie_word_embeddings is false, so the output head is a separate matrix)");
    lm_head_ = get(head, {V, C});
  }
  final_norm_.weight = final_norm_weight_.data();
  if (!final_norm_bias_.empty()) final_norm_.bias = final_norm_bias_.data();
  for (const std::string& n : ws.names())
    if (!used.count(n)) unused_.push_back(n);
  used_dtypes_.assign(dtypes.begin(), dtypes.end());
}

std::string Model::dtype_summary() const {
  std::string s;
  for (const std::string& d : used_dtypes_) {
    if (!s.empty()) s += '+';
    s += d;
  }
  return s;
}

double Model::forward_bytes(int tokens, LogitsFor logits) const {
  const blocklab::ModelConfig& c = config_.model;
  if (tokens <= 0) return 0;
  const BlockDims dims = BlockDims::of(c, 1, tokens);
  BlockActs<float> acts;
  const double block = static_cast<double>(carve_block_acts<float>(acts, nullptr, c, dims, 0));
  const double scratch = static_cast<double>(block_attention_scratch_size(c, dims));
  const double T = tokens, C = c.width;
  const double rows = logits == LogitsFor::All ? T : logits == LogitsFor::Last ? 1 : 0;
  const double tiles = 16.0 * 1024 * 1024;  // LinearSource's converted tiles and partial products
  return sizeof(float) * (block + scratch + 2 * T * C + 2 * T + T * c.head_size() + rows * c.vocab) + tiles;
}

ForwardResult Model::forward(std::span<const int32_t> tokens, const ForwardOptions& options) const {
  const blocklab::ModelConfig& c = config_.model;
  const int Tn = static_cast<int>(tokens.size());
  const int C = c.width, V = c.vocab, D = c.head_size();
  const bool gpt2 = config_.family == Family::GPT2;
  if (Tn == 0) throw Error("no tokens to run");
  for (int t = 0; t < Tn; ++t)
    if (tokens[t] < 0 || tokens[t] >= V)
      throw Error("token id " + std::to_string(tokens[t]) + " at position " + std::to_string(t) +
                  " is outside the vocabulary [0, " + std::to_string(V) + ")");
  if (gpt2 && Tn > config_.max_positions)
    throw Error(std::to_string(Tn) + " tokens exceed the model's " + std::to_string(config_.max_positions) +
                " learned positions (n_positions)");

  // One sequence; one set of block activations serves every block in turn (nothing is kept for a backward).
  const BlockDims dims = BlockDims::of(c, 1, Tn);
  BlockActs<float> acts;
  std::vector<float> act_arena(static_cast<size_t>(carve_block_acts<float>(acts, nullptr, c, dims, 0)));
  carve_block_acts(acts, act_arena.data(), c, dims, 0);  // every block is Pre-LN: the same layout
  std::vector<float> attention_scratch(block_attention_scratch_size(c, dims));
  std::vector<float> rope_cos, rope_sin;
  BlockInputs<float> in;
  in.config = &c;
  in.dims = dims;
  in.attention_scratch = attention_scratch.data();
  LinearSource::Work linear_work;
  in.linear_work = &linear_work;
  if (!gpt2) {
    const std::vector<double> inv = rope_inv_freq(config_);
    rope_cos.resize(static_cast<long>(Tn) * (D / 2));
    rope_sin.resize(rope_cos.size());
    kernels::rope_tables(rope_cos.data(), rope_sin.data(), inv.data(), Tn, D / 2);
    in.rope_cos = rope_cos.data();
    in.rope_sin = rope_sin.data();
  }

  const long TC = static_cast<long>(Tn) * C;
  std::vector<float> x(TC), mean(Tn), rstd(Tn);
  auto report = [&](int layer, const float* h) {
    if (options.on_hidden) options.on_hidden(layer, std::span<const float>(h, TC));
  };

  // Embeddings: converted row by row from the stored table.
  for (int t = 0; t < Tn; ++t) convert_rows(x.data() + static_cast<long>(t) * C, embed_, tokens[t], 1);
  if (gpt2) {
    std::vector<float> pos(C);
    for (int t = 0; t < Tn; ++t) {
      convert_rows(pos.data(), positions_, t, 1);
      for (int i = 0; i < C; ++i) x[static_cast<long>(t) * C + i] += pos[i];
    }
  }
  if (options.stream_weights) {
    WeightStore::release(embed_);
    if (gpt2) WeightStore::release(positions_);
  }
  report(0, x.data());

  const float* h = x.data();
  for (int l = 0; l < c.layers; ++l) {
    if (options.stream_weights && l + 1 < c.layers)
      for (const WeightRef* w : blocks_[l + 1]->refs()) WeightStore::prefetch(*w);
    block_forward(acts, h, blocks_[l]->tensors, in, l);
    h = acts.output;
    if (options.on_attention)
      options.on_attention(l + 1, std::span<const float>(acts.attn.att, static_cast<size_t>(c.heads) * Tn * Tn));
    if (options.stream_weights)
      for (const WeightRef* w : blocks_[l]->refs()) WeightStore::release(*w);
    report(l + 1, h);
  }

  ForwardResult r;
  r.tokens = Tn;
  r.final_hidden.resize(TC);
  NormActs<float> final_norm{r.final_hidden.data(), mean.data(), rstd.data()};
  norm_forward(final_norm, h, final_norm_, c, Tn);  // the block engine's norm, as the stack's final norm
  if (options.logits != LogitsFor::None) {
    const int rows = options.logits == LogitsFor::All ? Tn : 1;
    const float* last = r.final_hidden.data() + static_cast<long>(Tn - rows) * C;
    r.logits.resize(static_cast<long>(rows) * V);
    StoredMatrix head{lm_head_, V, C, false};
    stored_linear(r.logits.data(), last, head, nullptr, rows, linear_work.scratch);
    if (options.stream_weights) WeightStore::release(lm_head_);
  }
  return r;
}

}  // namespace blocklab::hf
