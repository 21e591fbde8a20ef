#include "hf/model.h"

#include <algorithm>
#include <map>
#include <set>

#include "hf/names.h"
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

  WeightRef get(const std::string& name, std::vector<int64_t> shape) {
    WeightRef w = ws_.get(name, shape, "config: " + dims_);
    used_.insert(name);
    dtypes_.insert(io::dtype_name(w.dtype));
    parameter_count_ += w.numel();
    return w;
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

// The block engine's place for one of a block's linear layers or norms, by blocklab's name for it within the
// block (model/parameters.h less "blocks.N." and ".weight"/".bias").
LinearTensors<float>& linear_slot(BlockTensors<float>& t, const std::string& layer) {
  if (layer == "attn.qkv") return t.attn.qkv;
  if (layer == "attn.q") return t.attn.q;
  if (layer == "attn.k") return t.attn.k;
  if (layer == "attn.v") return t.attn.v;
  if (layer == "attn.proj") return t.attn.proj;
  if (layer == "mlp.fc1") return t.mlp.fc1;
  if (layer == "mlp.fc2") return t.mlp.fc2;
  throw Error("the block engine has no linear layer " + layer + " for a Hugging Face model");
}

NormTensors<float>& norm_slot(BlockTensors<float>& t, const std::string& norm) {
  if (norm == "norm1") return t.attn.norm;
  if (norm == "norm2") return t.mlp.norm;
  if (norm == "attn.q_norm") return t.attn.q_norm;
  if (norm == "attn.k_norm") return t.attn.k_norm;
  throw Error("the block engine has no norm " + norm + " for a Hugging Face model");
}

// Row parts in the order of their part index, joined: fc1's [up | gate] from the two in either order.
template <typename T>
std::vector<T> joined(std::vector<std::pair<int, std::vector<T>>> parts) {
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<T> out;
  for (auto& [part, values] : parts) out.insert(out.end(), values.begin(), values.end());
  return out;
}

// One block's tensors as the name table lists them, gathered by blocklab's layer until the block is complete:
// a layer's weight may come in row parts (fc1 from up_proj and gate_proj), its bias likewise.
class BlockParts {
 public:
  void add(TensorFinder& find, const NamedTensor& t, const ParamSpec& spec) {
    // "blocks.N.mlp.fc1.weight" -> layer "mlp.fc1", tensor "weight"
    const size_t after_block = t.blocklab.find('.', std::string("blocks.").size()) + 1;
    const size_t last_dot = t.blocklab.rfind('.');
    const std::string name = t.blocklab.substr(after_block, last_dot - after_block);
    const std::string tensor = t.blocklab.substr(last_dot + 1);
    Layer& layer = layers_[name];
    const WeightRef w = find.get(t.hf, hf_shape(*t.row, spec));
    if (spec.role == ParamRole::LinearWeight) {
      layer.linear = true;
      const int out = static_cast<int>(spec.shape[0] / t.row->parts), in = static_cast<int>(spec.shape[1]);
      layer.matrices.push_back({t.row->part, {MappedMatrix{w, out, in, t.row->transposed}}});
      return;
    }
    BLOCKLAB_CHECK(spec.role == ParamRole::LinearBias || spec.role == ParamRole::NormWeight ||
                       spec.role == ParamRole::NormBias,
                   "a Hugging Face block tensor is a linear layer's or a norm's");
    if (spec.role == ParamRole::LinearBias) layer.linear = true;
    layer.vectors[tensor].push_back({t.row->part, to_float(w)});
  }

  std::unique_ptr<BlockWeights> build() {
    auto w = std::make_unique<BlockWeights>();
    for (auto& [name, layer] : layers_) {
      if (layer.linear) {
        linear_slot(w->tensors, name) =
            linear(*w, joined(std::move(layer.matrices)), joined(std::move(layer.vectors["bias"])));
      } else {
        NormTensors<float>& norm = norm_slot(w->tensors, name);
        norm.weight = w->keep(joined(std::move(layer.vectors["weight"])));
        if (layer.vectors.count("bias")) norm.bias = w->keep(joined(std::move(layer.vectors["bias"])));
      }
    }
    return w;
  }

 private:
  struct Layer {
    bool linear = false;
    std::vector<std::pair<int, std::vector<MappedMatrix>>> matrices;               // by row part
    std::map<std::string, std::vector<std::pair<int, std::vector<float>>>> vectors;  // "weight", "bias": by row part
  };
  std::map<std::string, Layer> layers_;
};

}  // namespace

void Model::resolve() {
  const blocklab::ModelConfig& c = config_.model;
  // The family names the tensors; the config says which of them the model has and their shapes: blocklab's
  // parameter table of the same model, its learned position table as long as the checkpoint's.
  const NameScheme& names = config_.family == Family::GPT2 ? gpt2_names() : llama_names();
  blocklab::ModelConfig shapes = c;
  if (c.positions == Positions::Learned) shapes.seq_len = config_.max_positions;
  const ParameterTable table(shapes);
  TensorFinder find(weights_, c, parameter_count_);
  std::vector<BlockParts> blocks(c.layers);
  for (const NamedTensor& t : named_tensors(names, c, prefix(names), "")) {
    if (t.block >= 0)
      blocks[t.block].add(find, t, table.at(t.blocklab));
    else
      resolve_model_tensor(find, names, t, table.at(t.blocklab));
  }
  for (BlockParts& b : blocks) blocks_.push_back(b.build());
  if (c.tie_head) lm_head_ = embed_;
  final_norm_.weight = final_norm_weight_.data();
  if (!final_norm_bias_.empty()) final_norm_.bias = final_norm_bias_.data();
  for (const std::string& n : weights_.names())
    if (!find.used().count(n)) unused_.push_back(n);
  used_dtypes_.assign(find.dtypes().begin(), find.dtypes().end());
}

std::string Model::prefix(const NameScheme& names) const {
  const std::span<const std::string_view> prefixes =
      config_.multimodal_wrapper ? names.wrapped_prefixes : names.prefixes;
  const std::vector<NamedTensor> all = named_tensors(names, config_.model, "", "");
  const auto embedding =
      std::find_if(all.begin(), all.end(), [](const NamedTensor& t) { return t.blocklab == "tok_emb.weight"; });
  BLOCKLAB_CHECK(embedding != all.end(), "every name scheme has a token embedding");
  std::string expected;
  for (const std::string_view p : prefixes) {
    const std::string name = std::string(p) + embedding->hf;
    if (weights_.contains(name)) return std::string(p);
    expected += (expected.empty() ? "\"" : " or \"") + name + "\"";
  }
  throw Error(weights_.source().string() + ": no " + names.label + " token embedding (expected " + expected + ")");
}

void Model::resolve_model_tensor(TensorFinder& find, const NameScheme& names, const NamedTensor& t,
                                 const ParamSpec& spec) {
  const std::vector<int64_t> shape = hf_shape(*t.row, spec);
  if (t.blocklab == "tok_emb.weight") {
    embed_ = find.get(t.hf, shape);
  } else if (t.blocklab == "pos_emb.weight") {
    positions_ = find.get(t.hf, shape);
  } else if (t.blocklab == "final_norm.weight") {
    final_norm_weight_ = to_float(find.get(t.hf, shape));
  } else if (t.blocklab == "final_norm.bias") {
    final_norm_bias_ = to_float(find.get(t.hf, shape));
  } else if (t.blocklab == "head.weight") {
    // Qwen3-VL's output head may also sit under its language model's name.
    std::vector<std::string> heads{t.hf};
    if (config_.multimodal_wrapper) {
      heads.clear();
      for (const std::string_view p : names.wrapped_top_prefixes) heads.push_back(std::string(p) + t.hf);
    }
    const auto head =
        std::find_if(heads.begin(), heads.end(), [&](const std::string& n) { return weights_.contains(n); });
    if (head == heads.end())
      throw Error(weights_.source().string() + ": missing tensor \"" + heads[0] +
                  "\" (tie_word_embeddings is false, so the output head is a separate matrix)");
    lm_head_ = find.get(*head, shape);
  } else {
    throw Error("a Hugging Face model has no place for blocklab's " + t.blocklab);
  }
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
  const bool learned_positions = c.positions == Positions::Learned;
  if (Tn == 0) throw Error("no tokens to run");
  for (int t = 0; t < Tn; ++t)
    if (tokens[t] < 0 || tokens[t] >= V)
      throw Error("token id " + std::to_string(tokens[t]) + " at position " + std::to_string(t) +
                  " is outside the vocabulary [0, " + std::to_string(V) + ")");
  if (learned_positions && Tn > config_.max_positions)
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
  if (c.positions == Positions::RoPE) {
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
  if (learned_positions) {
    std::vector<float> pos(C);
    for (int t = 0; t < Tn; ++t) {
      convert_rows(pos.data(), positions_, t, 1);
      for (int i = 0; i < C; ++i) x[static_cast<long>(t) * C + i] += pos[i];
    }
  }
  if (options.stream_weights) {
    WeightStore::release(embed_);
    if (learned_positions) WeightStore::release(positions_);
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
