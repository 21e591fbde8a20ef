#include "hf/model.h"

#include <algorithm>
#include <set>

#include "model/block.h"
#include "model/parameters.h"
#include "model/rope_scaling.h"
#include "model/stored_linear.h"
#include "util/error.h"

namespace blocklab::hf {

namespace {

std::string dims_text(const blocklab::ModelConfig& c) {
  return "hidden_size " + std::to_string(c.width) + ", num_attention_heads " + std::to_string(c.heads) +
         ", num_key_value_heads " + std::to_string(c.kv_heads) + ", head_dim " + std::to_string(c.head_size()) +
         ", intermediate_size " + std::to_string(c.mlp_hidden()) + ", vocab_size " + std::to_string(c.vocab);
}

}  // namespace

namespace {

// A linear layer's weight as the shards hold it: logically (out, in) as nn.Linear; `transposed` when
// stored (in, out) (GPT-2's Conv1D).
struct MappedMatrix {
  WeightRef weight;
  int out = 0, in = 0;
  bool transposed = false;
};

}  // namespace

struct BlockWeights {
  std::vector<std::unique_ptr<std::vector<float>>> vectors;  // norm weights and biases, as float
  std::vector<std::unique_ptr<StoredLinearSource>> linears;
  std::vector<WeightRef> mapped;  // the linear weights the sources read in place (for page hints)
  BlockTensors<float> tensors;

  float* keep(std::vector<float> v) {
    vectors.push_back(std::make_unique<std::vector<float>>(std::move(v)));
    return vectors.back()->data();
  }
  const LinearSource* keep(const std::vector<MappedMatrix>& parts) {
    std::vector<StoredMatrix> stored;
    for (const MappedMatrix& m : parts) {
      mapped.push_back(m.weight);
      stored.push_back({m.weight.bytes, m.weight.dtype, m.out, m.in, m.transposed});
    }
    linears.push_back(std::make_unique<StoredLinearSource>(std::move(stored)));
    return linears.back().get();
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

// Finds a model's tensors by name and shape in its shards, counting the parameters and dtypes it hands out.
class TensorFinder {
 public:
  TensorFinder(const WeightStore& ws, const blocklab::ModelConfig& c, int64_t& parameter_count)
      : ws_(ws), dims_(dims_text(c)), parameter_count_(parameter_count) {}

  const WeightStore& store() const { return ws_; }
  WeightRef get(const std::string& name, std::vector<int64_t> shape) {
    WeightRef w = ws_.get(name, shape, "config: " + dims_);
    used_.insert(name);
    dtypes_.insert(io::dtype_name(w.dtype));
    parameter_count_ += w.numel();
    return w;
  }
  std::vector<float> vec(const std::string& name, int64_t n) { return to_float(get(name, {n})); }
  std::vector<float> optional_vec(bool present, const std::string& name, int64_t n) {
    return present ? vec(name, n) : std::vector<float>{};
  }
  // A linear weight, logically (out, in); `transposed` when stored (in, out) (GPT-2's Conv1D).
  MappedMatrix matrix(const std::string& name, int64_t out, int64_t in, bool transposed) {
    MappedMatrix m;
    m.weight = transposed ? get(name, {in, out}) : get(name, {out, in});
    m.out = static_cast<int>(out);
    m.in = static_cast<int>(in);
    m.transposed = transposed;
    return m;
  }
  std::string first_present(const std::vector<std::string>& candidates) const {
    for (const std::string& n : candidates)
      if (ws_.contains(n)) return n;
    return {};
  }
  const std::set<std::string>& used() const { return used_; }
  const std::set<std::string>& dtypes() const { return dtypes_; }

 private:
  const WeightStore& ws_;
  std::string dims_;
  int64_t& parameter_count_;
  std::set<std::string> used_, dtypes_;
};

namespace {

// One linear layer of a block: stored parts (concatenated along the outputs) and an optional bias.
LinearTensors<float> linear(BlockWeights& b, const std::vector<MappedMatrix>& parts, std::vector<float> bias) {
  LinearTensors<float> l;
  l.source = b.keep(parts);
  if (!bias.empty()) l.bias = b.keep(std::move(bias));
  return l;
}

}  // namespace

void Model::resolve() {
  const Config& hc = config_;
  const blocklab::ModelConfig& c = config_.model;
  TensorFinder find(weights_, c, parameter_count_);
  if (hc.family == Family::GPT2)
    resolve_gpt2(find);
  else
    resolve_llama(find);
  if (c.tie_head) {
    lm_head_ = embed_;
  } else {
    const std::vector<std::string> heads = hc.multimodal_wrapper
                                               ? std::vector<std::string>{"lm_head.weight", "language_model.lm_head.weight"}
                                               : std::vector<std::string>{"lm_head.weight"};
    const std::string head = find.first_present(heads);
    if (head.empty())
      throw Error(weights_.source().string() + ": missing tensor \"" + heads[0] +
                  "\" (tie_word_embeddings is false, so the output head is a separate matrix)");
    lm_head_ = find.get(head, {c.vocab, c.width});
  }
  final_norm_.weight = final_norm_weight_.data();
  if (!final_norm_bias_.empty()) final_norm_.bias = final_norm_bias_.data();
  for (const std::string& n : weights_.names())
    if (!find.used().count(n)) unused_.push_back(n);
  used_dtypes_.assign(find.dtypes().begin(), find.dtypes().end());
}

void Model::resolve_gpt2(TensorFinder& find) {
  const blocklab::ModelConfig& c = config_.model;
  const int64_t C = c.width, I = c.mlp_hidden(), V = c.vocab;
  const std::string wte = find.first_present({"wte.weight", "transformer.wte.weight"});
  if (wte.empty())
    throw Error(weights_.source().string() +
                ": no GPT-2 token embedding (expected \"wte.weight\" or \"transformer.wte.weight\")");
  const std::string P = wte.substr(0, wte.size() - std::string("wte.weight").size());
  embed_ = find.get(P + "wte.weight", {V, C});
  positions_ = find.get(P + "wpe.weight", {config_.max_positions, C});
  for (int l = 0; l < c.layers; ++l) {
    const std::string b = P + "h." + std::to_string(l) + ".";
    auto w = std::make_unique<BlockWeights>();
    BlockTensors<float>& t = w->tensors;
    t.attn.norm = {w->keep(find.vec(b + "ln_1.weight", C)), w->keep(find.vec(b + "ln_1.bias", C))};
    // Conv1D layers store their weights (in, out)
    t.attn.qkv = linear(*w, {find.matrix(b + "attn.c_attn.weight", 3 * C, C, true)}, find.vec(b + "attn.c_attn.bias", 3 * C));
    t.attn.proj = linear(*w, {find.matrix(b + "attn.c_proj.weight", C, C, true)}, find.vec(b + "attn.c_proj.bias", C));
    t.mlp.norm = {w->keep(find.vec(b + "ln_2.weight", C)), w->keep(find.vec(b + "ln_2.bias", C))};
    t.mlp.fc1 = linear(*w, {find.matrix(b + "mlp.c_fc.weight", I, C, true)}, find.vec(b + "mlp.c_fc.bias", I));
    t.mlp.fc2 = linear(*w, {find.matrix(b + "mlp.c_proj.weight", C, I, true)}, find.vec(b + "mlp.c_proj.bias", C));
    blocks_.push_back(std::move(w));
  }
  final_norm_weight_ = find.vec(P + "ln_f.weight", C);
  final_norm_bias_ = find.vec(P + "ln_f.bias", C);
}

void Model::resolve_llama(TensorFinder& find) {
  const blocklab::ModelConfig& c = config_.model;
  const int64_t C = c.width, I = c.mlp_hidden(), V = c.vocab, Q = c.q_dim(), K = c.kv_dim(), D = c.head_size();
  const std::vector<std::string> prefixes = config_.multimodal_wrapper
                                                ? std::vector<std::string>{"model.language_model.", "language_model.model."}
                                                : std::vector<std::string>{"model.", ""};
  std::string P;
  bool found = false;
  for (const std::string& p : prefixes)
    if (find.store().contains(p + "embed_tokens.weight")) {
      P = p;
      found = true;
      break;
    }
  if (!found)
    throw Error(weights_.source().string() + ": no token embedding: expected \"" + prefixes[0] + "embed_tokens.weight\"");
  embed_ = find.get(P + "embed_tokens.weight", {V, C});
  for (int l = 0; l < c.layers; ++l) {
    const std::string b = P + "layers." + std::to_string(l) + ".", a = b + "self_attn.";
    auto w = std::make_unique<BlockWeights>();
    BlockTensors<float>& t = w->tensors;
    t.attn.norm.weight = w->keep(find.vec(b + "input_layernorm.weight", C));
    t.attn.q = linear(*w, {find.matrix(a + "q_proj.weight", Q, C, false)}, find.optional_vec(c.qkv_bias, a + "q_proj.bias", Q));
    t.attn.k = linear(*w, {find.matrix(a + "k_proj.weight", K, C, false)}, find.optional_vec(c.qkv_bias, a + "k_proj.bias", K));
    t.attn.v = linear(*w, {find.matrix(a + "v_proj.weight", K, C, false)}, find.optional_vec(c.qkv_bias, a + "v_proj.bias", K));
    t.attn.proj =
        linear(*w, {find.matrix(a + "o_proj.weight", C, Q, false)}, find.optional_vec(c.proj_bias, a + "o_proj.bias", C));
    if (c.qk_norm) {
      t.attn.q_norm.weight = w->keep(find.vec(a + "q_norm.weight", D));
      t.attn.k_norm.weight = w->keep(find.vec(a + "k_norm.weight", D));
    }
    t.mlp.norm.weight = w->keep(find.vec(b + "post_attention_layernorm.weight", C));
    // The block engine's gated MLP reads one (2I, C) layer whose rows are [value | gate]: [up | gate].
    std::vector<float> fc1_bias;
    if (c.mlp_bias) {
      fc1_bias = find.vec(b + "mlp.up_proj.bias", I);
      const std::vector<float> gate = find.vec(b + "mlp.gate_proj.bias", I);
      fc1_bias.insert(fc1_bias.end(), gate.begin(), gate.end());
    }
    t.mlp.fc1 = linear(*w, {find.matrix(b + "mlp.up_proj.weight", I, C, false), find.matrix(b + "mlp.gate_proj.weight", I, C, false)},
                       std::move(fc1_bias));
    t.mlp.fc2 =
        linear(*w, {find.matrix(b + "mlp.down_proj.weight", C, I, false)}, find.optional_vec(c.mlp_bias, b + "mlp.down_proj.bias", C));
    blocks_.push_back(std::move(w));
  }
  final_norm_weight_ = find.vec(P + "norm.weight", C);
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
    rope_position_tables(rope_cos, rope_sin, c.rope_theta, D, config_.rope_scaling, Tn);
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
      for (const WeightRef& w : blocks_[l + 1]->mapped) WeightStore::prefetch(w);
    block_forward(acts, h, blocks_[l]->tensors, in, l);
    h = acts.output;
    if (options.on_attention)
      options.on_attention(l + 1, std::span<const float>(acts.attn.att, static_cast<size_t>(c.heads) * Tn * Tn));
    if (options.stream_weights)
      for (const WeightRef& w : blocks_[l]->mapped) WeightStore::release(w);
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
    const StoredMatrix head{lm_head_.bytes, lm_head_.dtype, V, C, false};
    stored_linear(r.logits.data(), last, head, nullptr, rows, linear_work.scratch);
    if (options.stream_weights) WeightStore::release(lm_head_);
  }
  return r;
}

}  // namespace blocklab::hf
