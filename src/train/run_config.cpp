#include "train/run_config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#if BLOCKLAB_HAVE_TOML
#include <toml++/toml.h>
#endif

#include "data/text_data.h"
#include "io/read_file.h"
#include "model/designs.h"
#include "text/unicode.h"
#include "util/error.h"

namespace blocklab {

namespace {

int64_t parse_int(const std::string& key, const std::string& text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty())
    throw Error(key + ": expected an integer, got '" + text + "'");
  return value;
}

int parse_int32(const std::string& key, const std::string& text) {
  const int64_t v = parse_int(key, text);
  if (v < INT32_MIN || v > INT32_MAX) throw Error(key + ": " + text + " is out of range");
  return static_cast<int>(v);
}

bool parse_bool(const std::string& key, const std::string& text) {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  throw Error(key + ": expected true or false, got '" + text + "'");
}

double parse_float(const std::string& key, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    throw Error(key + ": expected a finite number, got '" + text + "'");
  return v;
}

std::string format_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// "post, pre, ... or <the last row>": the designs' config values, as the norm_placement key's help lists them.
std::string design_names() {
  std::string text;
  const auto& all = designs();
  for (size_t i = 0; i < all.size(); ++i) text += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + std::string(all[i].name);
  return text;
}

std::vector<ConfigKey> make_keys() {
  std::vector<ConfigKey> k;
  auto add_int = [&](std::string name, std::string help, auto member) {
    k.push_back({name, KeyType::Int, help,
                 [member, name](RunConfig& c, const std::string& s) { member(c) = parse_int32(name, s); },
                 [member](const RunConfig& c) { return nlohmann::json(member(const_cast<RunConfig&>(c))); }});
  };
  auto add_float = [&](std::string name, std::string help, auto member) {
    k.push_back({name, KeyType::Float, help,
                 [member, name](RunConfig& c, const std::string& s) { member(c) = parse_float(name, s); },
                 [member](const RunConfig& c) { return nlohmann::json(member(const_cast<RunConfig&>(c))); }});
  };
  auto add_enum = [&](std::string name, std::string help, auto parse, auto show) {
    k.push_back({name, KeyType::String, help, parse, [show](const RunConfig& c) { return nlohmann::json(show(c)); }});
  };
  auto add_bool = [&](std::string name, std::string help, auto member) {
    k.push_back({name, KeyType::Bool, help,
                 [member, name](RunConfig& c, const std::string& s) { member(c) = parse_bool(name, s); },
                 [member](const RunConfig& c) { return nlohmann::json(member(const_cast<RunConfig&>(c))); }});
  };
  auto add_model_enum = [&](std::string name, std::string help, auto parse, auto member) {
    add_enum(name, help, [parse, member](RunConfig& c, const std::string& s) { member(c) = parse(s); },
             [member](const RunConfig& c) { return to_string(member(const_cast<RunConfig&>(c))); });
  };

  add_enum("task", "training task: copy, reverse (the second half is the first reversed) or text (--data FILE)",
           [](RunConfig& c, const std::string& s) {
             if (s != "copy" && s != "reverse" && s != "text")
               throw Error("unknown task '" + s + "' (expected copy, reverse or text)");
             c.task = s;
           },
           [](const RunConfig& c) { return c.task; });
  add_enum("data", "text task: the UTF-8 text file to train on", [](RunConfig& c, const std::string& s) { c.data = s; },
           [](const RunConfig& c) { return c.data; });
  add_enum("tokenizer", "text task: bytes (ids 0-255) or the path of a Hugging Face tokenizer.json",
           [](RunConfig& c, const std::string& s) {
             if (s.empty()) throw Error("tokenizer must be bytes or a path, got ''");
             c.tokenizer = s;
           },
           [](const RunConfig& c) { return c.tokenizer; });
  add_float("val_fraction", "text task: the last fraction of the token ids held out for the validation loss",
            [](RunConfig& c) -> double& { return c.val_fraction; });
  add_int("eval_every", "text task: validation loss every N steps and at the last step",
          [](RunConfig& c) -> int& { return c.eval_every; });
  add_enum(kBlockKey,
           "block preset (seed, gpt2, qwen3, sd): sets the architecture keys; keys given with it override them",
           [](RunConfig& c, const std::string& s) { apply_block_preset(c.model, s); },
           [](const RunConfig& c) { return c.model.block; });
  add_enum("norm_placement", "the residual design: where the norms sit, a residual scale, an init or a residual topology: " + design_names() + " (docs/placements.md)",
           [](RunConfig& c, const std::string& s) { c.model.norm_placement = parse_norm_placement(s); },
           [](const RunConfig& c) { return to_string(c.model.norm_placement); });
  add_enum("norm", "normalisation wherever the placement puts one: layernorm, rmsnorm, dyt or derf",
           [](RunConfig& c, const std::string& s) { c.model.norm = parse_norm_kind(s); },
           [](const RunConfig& c) { return to_string(c.model.norm); });
  add_int("layers", "number of transformer blocks", [](RunConfig& c) -> int& { return c.model.layers; });
  add_int("width", "model width C", [](RunConfig& c) -> int& { return c.model.width; });
  add_int("heads", "attention heads (must divide width)", [](RunConfig& c) -> int& { return c.model.heads; });
  add_int("kv_heads", "key/value heads for grouped-query attention (0: as many as heads)",
          [](RunConfig& c) -> int& { return c.model.kv_heads; });
  add_int("head_dim", "size of one attention head (0: width / heads)", [](RunConfig& c) -> int& { return c.model.head_dim; });
  add_int("mlp_ratio", "MLP hidden width / model width", [](RunConfig& c) -> int& { return c.model.mlp_ratio; });
  add_model_enum("mlp", "MLP kind: gelu (exact), gelu_tanh, swiglu or geglu", parse_mlp_kind,
                 [](RunConfig& c) -> MlpKind& { return c.model.mlp; });
  add_model_enum("qkv", "q/k/v projections: fused (one matrix) or separate", parse_qkv_layout,
                 [](RunConfig& c) -> QkvLayout& { return c.model.qkv; });
  add_bool("qkv_bias", "biases on the q/k/v projections", [](RunConfig& c) -> bool& { return c.model.qkv_bias; });
  add_bool("proj_bias", "bias on the attention output projection",
           [](RunConfig& c) -> bool& { return c.model.proj_bias; });
  add_bool("mlp_bias", "biases on the MLP layers", [](RunConfig& c) -> bool& { return c.model.mlp_bias; });
  add_bool("qk_norm", "RMSNorm on every q and k head (needs qkv = separate)",
           [](RunConfig& c) -> bool& { return c.model.qk_norm; });
  add_bool("attn_gate", "gated attention: each head's output times sigmoid(u W_g) before the output projection",
           [](RunConfig& c) -> bool& { return c.model.attn_gate; });
  add_bool("value_residual", "value residual: blocks 2..L mix their values with block 1's, lambda1 V + lambda2 V_1 (0.5 each at init)",
           [](RunConfig& c) -> bool& { return c.model.value_residual; });
  add_int("residual_streams", "hc, mhc: the number n of residual streams (the expansion rate)",
          [](RunConfig& c) -> int& { return c.model.residual_streams; });
  add_bool("hc_dynamic", "hc, mhc: mixing weights that depend on the token (false: learned constants only)",
           [](RunConfig& c) -> bool& { return c.model.hc_dynamic; });
  add_model_enum("positions", "position information: learned (a table) or rope", parse_positions,
                 [](RunConfig& c) -> Positions& { return c.model.positions; });
  add_float("rope_theta", "RoPE base theta", [](RunConfig& c) -> double& { return c.model.rope_theta; });
  add_bool("cross_attention", "a cross-attention sub-layer over a context (copy task: the embedded first half)",
           [](RunConfig& c) -> bool& { return c.model.cross_attention; });
  add_bool("tie_head", "output head = token embedding (no head.weight)",
           [](RunConfig& c) -> bool& { return c.model.tie_head; });
  k.push_back({"vocab", KeyType::Int, "vocabulary size V (text task: the tokenizer's size unless given)",
               [](RunConfig& c, const std::string& s) {
                 c.model.vocab = parse_int32("vocab", s);
                 c.vocab_given = true;
               },
               [](const RunConfig& c) { return nlohmann::json(c.model.vocab); }});
  add_int("copy_len", "copy task: n random tokens, then the same n again",
          [](RunConfig& c) -> int& { return c.copy_len; });
  add_int("seq_len", "position table length T (0: derived from the task, 2n-1 for copy and reverse, 128 for text)",
          [](RunConfig& c) -> int& { return c.model.seq_len; });
  // Shown (and written to config.json) as the scheme that runs: auto resolved for the config's placement.
  add_enum("init",
           "weight init: auto (the placement's own scheme, else the block preset's), xavier, gpt2, deepnorm, tfixup",
           [](RunConfig& c, const std::string& s) { c.model.init = parse_init_scheme(s); },
           [](const RunConfig& c) { return to_string(c.model.effective_init()); });
  add_float("embed_init_std", "token/position embedding init std (1.0 = nn.Embedding's N(0,1))",
            [](RunConfig& c) -> double& { return c.model.embed_init_std; });
  add_float("norm_eps", "epsilon of LayerNorm/RMSNorm", [](RunConfig& c) -> double& { return c.model.norm_eps; });
  add_model_enum("precision",
                 "linear layers' products: fp32, or bf16 mixed precision (bf16 operands, float accumulation, "
                 "float weights, gradients, optimizer, norms, softmax, loss); bf16 needs AVX512-BF16, else runs fp32",
                 parse_precision, [](RunConfig& c) -> Precision& { return c.model.precision; });
  add_int("batch", "sequences per step", [](RunConfig& c) -> int& { return c.batch; });
  add_int("steps", "optimizer steps", [](RunConfig& c) -> int& { return c.steps; });
  add_int("micro_shards",
          "split every batch into this many equal micro-shards whose gradients are summed in one fixed tree order; "
          "under mpirun each of K ranks (K dividing it) computes micro_shards/K of them, with the same numbers",
          [](RunConfig& c) -> int& { return c.micro_shards; });
  add_float("lr", "peak learning rate", [](RunConfig& c) -> double& { return c.lr; });
  add_int("warmup", "linear warm-up steps from 0 to lr (0: none)", [](RunConfig& c) -> int& { return c.warmup; });
  add_enum("schedule", "after warm-up: constant or cosine (to min_lr at the last step)",
           [](RunConfig& c, const std::string& s) { c.schedule = parse_schedule_kind(s); },
           [](const RunConfig& c) { return to_string(c.schedule); });
  add_float("min_lr", "final learning rate of the cosine schedule", [](RunConfig& c) -> double& { return c.min_lr; });
  add_enum("optimizer",
           "adam, adamw (decoupled weight decay), radam (rectified Adam), sgd (momentum), lion or muon (Newton-Schulz "
           "orthogonalised momentum on the blocks' weight matrices, AdamW on the rest); docs/cli.md: Optimizers",
           [](RunConfig& c, const std::string& s) { c.optimizer.kind = parse_optimizer_kind(s); },
           [](const RunConfig& c) { return to_string(c.optimizer.kind); });
  add_float("beta1", "Adam beta1 (adam, adamw, radam, muon's AdamW)",
            [](RunConfig& c) -> double& { return c.optimizer.beta1; });
  add_float("beta2", "Adam beta2 (adam, adamw, radam, muon's AdamW)",
            [](RunConfig& c) -> double& { return c.optimizer.beta2; });
  add_float("adam_eps", "Adam epsilon (adam, adamw, radam, muon's AdamW)",
            [](RunConfig& c) -> double& { return c.optimizer.eps; });
  add_enum("adam_v0",
           "Adam's second moment at the start (adam, adamw, radam): zero, or grad (GI-Adam: v_0 = g_1^2, the first "
           "gradient squared; bias correction kept)",
           [](RunConfig& c, const std::string& s) { c.optimizer.adam_v0 = parse_adam_v0(s); },
           [](const RunConfig& c) { return to_string(c.optimizer.adam_v0); });
  add_float("weight_decay",
            "weight decay: decoupled for adamw, lion and muon's AdamW, added to the gradient (L2) for radam and sgd; "
            "adam takes none",
            [](RunConfig& c) -> double& { return c.optimizer.weight_decay; });
  add_float("momentum", "sgd: momentum (0: plain gradient descent)",
            [](RunConfig& c) -> double& { return c.optimizer.momentum; });
  add_bool("nesterov", "sgd: Nesterov momentum", [](RunConfig& c) -> bool& { return c.optimizer.nesterov; });
  add_float("lion_beta1", "lion: beta1, the weight of the momentum in the update's sign",
            [](RunConfig& c) -> double& { return c.optimizer.lion_beta1; });
  add_float("lion_beta2", "lion: beta2, the momentum's decay",
            [](RunConfig& c) -> double& { return c.optimizer.lion_beta2; });
  add_float("muon_lr", "muon: peak learning rate of the hidden weight matrices (follows lr's warm-up and schedule)",
            [](RunConfig& c) -> double& { return c.optimizer.muon_lr; });
  add_float("muon_momentum", "muon: momentum of the hidden weight matrices",
            [](RunConfig& c) -> double& { return c.optimizer.muon_momentum; });
  add_bool("muon_nesterov", "muon: Nesterov momentum (--no-muon-nesterov: plain)",
           [](RunConfig& c) -> bool& { return c.optimizer.muon_nesterov; });
  add_int("muon_ns_steps", "muon: Newton-Schulz iterations",
          [](RunConfig& c) -> int& { return c.optimizer.muon_ns_steps; });
  add_float("muon_weight_decay", "muon: decoupled weight decay of the hidden weight matrices",
            [](RunConfig& c) -> double& { return c.optimizer.muon_weight_decay; });
  add_float("clip_grad_norm", "clip the global gradient norm to this value (0: off)",
            [](RunConfig& c) -> double& { return c.clip_grad_norm; });
  k.push_back({"seed", KeyType::Int, "seed of the weight init and of the data stream",
               [](RunConfig& c, const std::string& s) {
                 const int64_t v = parse_int("seed", s);
                 if (v < 0) throw Error("seed must be >= 0, got " + s);
                 c.seed = static_cast<uint64_t>(v);
               },
               [](const RunConfig& c) { return nlohmann::json(c.seed); }});
  add_int("threads", "worker threads (0: all cores); results do not depend on it",
          [](RunConfig& c) -> int& { return c.threads; });
  add_int("log_every", "progress line every N steps when not on a terminal (0: auto)",
          [](RunConfig& c) -> int& { return c.log_every; });
  add_enum("out", "output directory", [](RunConfig& c, const std::string& s) { c.out = s; },
           [](const RunConfig& c) { return c.out; });
  add_int("checkpoint_every", "write OUT/checkpoints/step_N every N steps and at the end (0: only on SIGINT/SIGTERM)",
          [](RunConfig& c) -> int& { return c.checkpoint_every; });
  add_int("keep_checkpoints", "keep the newest K checkpoints (0: all)",
          [](RunConfig& c) -> int& { return c.keep_checkpoints; });
  add_enum("on_nonfinite", "a non-finite loss or gradient: abort (stop, exit 1) or skip (no update)",
           [](RunConfig& c, const std::string& s) { c.on_nonfinite = parse_nonfinite_policy(s); },
           [](const RunConfig& c) { return to_string(c.on_nonfinite); });
  add_bool("tensorboard", "write a TensorBoard event file OUT/events.out.tfevents.* beside metrics.csv (--no-tensorboard: off)",
           [](RunConfig& c) -> bool& { return c.tensorboard; });
  add_bool("weights",
           "write the final weights OUT/model.safetensors at the end of the run, for export, sample and curvature "
           "(--no-weights: off)",
           [](RunConfig& c) -> bool& { return c.weights; });
  add_int("stream_every",
          "every N steps (and at step 0 and the last step) append per-block residual-stream statistics (RMS, max "
          "|h| and its channel, attention-sink share) to OUT/stream.csv; the run's numbers do not change (0: off)",
          [](RunConfig& c) -> int& { return c.stream_every; });
  add_int("probe_every",
          "every N steps (and at the first and last) append residual-stream norms after each block to OUT/residual.csv "
          "(step,layer,mean_vector_norm,mean_token_norm); the run's numbers do not change (0: off)",
          [](RunConfig& c) -> int& { return c.probe_every; });
  add_int("curvature_every",
          "every N steps (and at the first and last) append the sharpness, Adam's preconditioned sharpness, their "
          "thresholds 2/lr and 38/lr, the Hessian trace and each block's sharpness to OUT/curvature.csv (see blocklab "
          "curvature --help); the run's numbers do not change (0: off)",
          [](RunConfig& c) -> int& { return c.curvature_every; });
  add_bool("curvature_per_block",
           "with curvature_every: record each block's sharpness too, the costliest part (--no-curvature-per-block: "
           "leave it out)",
           [](RunConfig& c) -> bool& { return c.curvature_per_block; });
  add_int("update_probe_every",
          "every N steps (and at the last) append, per block, the spread of Adam's per-parameter step size "
          "lr / (sqrt(v_hat) + eps), the update-to-weight ratio |dW|/|W| and the critical sharpness along the update "
          "to OUT/updates.csv (see docs/cli.md); the run's numbers do not change (0: off)",
          [](RunConfig& c) -> int& { return c.update_probe_every; });
  add_int("update_probe_passes",
          "with update_probe_every: the critical sharpness's line search takes at most this many forward passes "
          "(>= 2)",
          [](RunConfig& c) -> int& { return c.update_probe_passes; });
  // How and where a run executes, or what it records beside it, not what it computes.
  for (ConfigKey& key : k)
    for (const char* name : {"out", "threads", "log_every", "checkpoint_every", "keep_checkpoints", "tensorboard",
                             "weights", "stream_every", "probe_every", "curvature_every", "curvature_per_block",
                             "update_probe_every", "update_probe_passes"})
      if (key.name == name) key.changes_results = false;
  return k;
}

// Keys of a source in the order they apply: the block preset first (it sets many keys at once), then
// the rest in the source's own order.
template <typename Items, typename Name>
std::vector<typename Items::value_type> block_key_first(const Items& items, Name name_of) {
  std::vector<typename Items::value_type> ordered;
  for (const auto& item : items)
    if (name_of(item) == kBlockKey) ordered.push_back(item);
  for (const auto& item : items)
    if (name_of(item) != kBlockKey) ordered.push_back(item);
  return ordered;
}

#if BLOCKLAB_HAVE_TOML
std::string toml_position(const toml::source_region& src) {
  return std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
}

void apply_toml_table(RunConfig& config, const toml::table& table, const std::string& path);

// toml++ 3.3 (the Debian package) reaches __builtin_unreachable() for many non-ASCII code points wherever it
// tests a character for whitespace (marzer/tomlplusplus#190, #295; fixed upstream later): in keys, between
// tokens, while scanning bare values, after a backslash in a multi-line string. Which characters it tests
// depends on its parser state, so a document with any non-ASCII byte is accepted only when every line is
// blank, a comment, or `key = value` with a single-line string or a bare ASCII value (optionally followed
// by a comment): there the parser is provably inside a string or comment whenever it meets such a byte.
// Config files are exactly of that form; ASCII-only documents go to the parser unchanged.
bool is_simple_toml_line(std::string_view line) {
  const size_t n = line.size();
  auto skip_blanks = [&](size_t i) {
    while (i < n && (line[i] == ' ' || line[i] == '\t')) ++i;
    return i;
  };
  auto bare = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; };
  size_t i = skip_blanks(0);
  if (i == n || line[i] == '#') return true;
  const size_t key = i;
  while (i < n && bare(line[i])) ++i;
  if (i == key) return false;
  i = skip_blanks(i);
  if (i == n || line[i] != '=') return false;
  i = skip_blanks(i + 1);
  if (i == n) return false;
  if (line[i] == '"' || line[i] == '\'') {
    const char quote = line[i++];
    while (i < n && line[i] != quote) i += (quote == '"' && line[i] == '\\') ? 2 : 1;
    if (i >= n) return false;
    ++i;
  } else {
    const size_t value = i;
    while (i < n && (bare(line[i]) || line[i] == '.' || line[i] == ':' || line[i] == '+')) ++i;
    if (i == value) return false;
  }
  i = skip_blanks(i);
  return i == n || line[i] == '#';
}

void reject_unsafe_non_ascii(std::string_view text, const std::string& source) {
  if (std::none_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) return;
  size_t line_no = 1;
  for (size_t start = 0; start <= text.size(); ++line_no) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!is_simple_toml_line(line))
      throw Error(source + ":" + std::to_string(line_no) +
                  ": a file with non-ASCII characters may hold only comments and single-line `key = value` lines "
                  "(non-ASCII text only inside comments and strings)");
    start = end + 1;
  }
}

#endif  // BLOCKLAB_HAVE_TOML
}  // namespace

std::string to_string(NonFinitePolicy p) { return p == NonFinitePolicy::Abort ? "abort" : "skip"; }

NonFinitePolicy parse_nonfinite_policy(const std::string& s) {
  if (s == "abort") return NonFinitePolicy::Abort;
  if (s == "skip") return NonFinitePolicy::Skip;
  throw Error("unknown on_nonfinite '" + s + "' (expected abort or skip)");
}

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = make_keys();
  return keys;
}

const ConfigKey* find_config_key(const std::string& name) {
  for (const auto& k : config_keys())
    if (k.name == name) return &k;
  return nullptr;
}

const char* key_type_name(KeyType type) {
  switch (type) {
    case KeyType::Int: return "int";
    case KeyType::Float: return "float";
    case KeyType::Bool: return "bool";
    case KeyType::String: break;
  }
  return "str";
}

void set_config_value(RunConfig& config, const std::string& key, const std::string& value) {
  const ConfigKey* k = find_config_key(key);
  if (k == nullptr) throw Error("unknown config key '" + key + "'");
  k->set(config, value);
}

void set_config_values(RunConfig& config, const std::vector<std::pair<std::string, std::string>>& values) {
  for (const auto& [key, value] : block_key_first(values, [](const auto& item) { return item.first; }))
    set_config_value(config, key, value);
}

void apply_toml_file(RunConfig& config, const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(path + ": is a directory, not a TOML file");
  apply_toml_text(config, io::read_file(path), path);
}

#if BLOCKLAB_HAVE_TOML
bool have_toml() { return true; }

void apply_toml_text(RunConfig& config, std::string_view text, const std::string& source_name) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte order mark
  reject_unsafe_non_ascii(text, source_name);
  toml::table table;
  try {
    table = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    throw Error(source_name + ":" + toml_position(e.source()) + ": " + std::string(e.description()));
  }
  apply_toml_table(config, table, source_name);
}

namespace {
void apply_toml_table(RunConfig& config, const toml::table& table, const std::string& path) {
  std::vector<std::pair<const toml::key*, const toml::node*>> items;
  for (const auto& [key_node, node] : table) items.emplace_back(&key_node, &node);
  for (const auto& [key_ptr, node_ptr] : block_key_first(items, [](const auto& item) { return std::string(item.first->str()); })) {
    const toml::key& key_node = *key_ptr;
    const toml::node& node = *node_ptr;
    const std::string key(key_node.str());
    const std::string where = path + ":" + toml_position(key_node.source()) + ": ";
    const ConfigKey* k = find_config_key(key);
    if (k == nullptr) throw Error(where + "unknown config key '" + key + "'");
    std::string text;
    if (k->type == KeyType::Int) {
      if (!node.is_integer()) throw Error(where + key + " must be an integer");
      text = std::to_string(node.as_integer()->get());
    } else if (k->type == KeyType::Bool) {
      if (!node.is_boolean()) throw Error(where + key + " must be true or false");
      text = node.as_boolean()->get() ? "true" : "false";
    } else if (k->type == KeyType::Float) {
      if (node.is_integer())
        text = std::to_string(node.as_integer()->get());
      else if (node.is_floating_point())
        text = format_double(node.as_floating_point()->get());
      else
        throw Error(where + key + " must be a number");
    } else {
      if (!node.is_string()) throw Error(where + key + " must be a string");
      text = node.as_string()->get();
    }
    try {
      k->set(config, text);
    } catch (const Error& e) {
      throw Error(where + e.what());
    }
  }
}
}  // namespace
#else
bool have_toml() { return false; }

void apply_toml_text(RunConfig&, std::string_view, const std::string& source_name) {
  throw Error(source_name + ": TOML config files are not in this build of blocklab (it was built without toml++: "
              "apt-get install libtomlplusplus-dev and rebuild); give the keys as flags or JSON instead");
}
#endif

void apply_json(RunConfig& config, const nlohmann::json& values) {
  if (!values.is_object()) throw Error("config must be a JSON object");
  std::vector<std::pair<std::string, nlohmann::json>> items;
  for (const auto& [key, value] : values.items())
    if (key != kDerivedKey) items.emplace_back(key, value);
  for (const auto& [key, value] : block_key_first(items, [](const auto& item) { return item.first; })) {
    const ConfigKey* k = find_config_key(key);
    if (k == nullptr) throw Error("unknown config key '" + key + "'");
    if (value.is_string())
      k->set(config, value.get<std::string>());
    else if (value.is_boolean())
      k->set(config, value.get<bool>() ? "true" : "false");
    else if (value.is_number_integer() || value.is_number_unsigned())
      k->set(config, value.dump());
    else if (value.is_number_float())
      k->set(config, format_double(value.get<double>()));
    else
      throw Error(key + ": unsupported JSON value " + value.dump());
  }
}

namespace {

void resolve_sequence_task(RunConfig& config) {
  const RunConfig defaults;
  const std::string& task = config.task;
  if (!config.data.empty())
    throw Error("data is set but task is " + task + ": data (--data) needs task = text (--task text)");
  if (config.tokenizer != defaults.tokenizer)
    throw Error("tokenizer is set but task is " + task + ": tokenizer (--tokenizer) needs task = text (--task text)");
  if (config.val_fraction != defaults.val_fraction)
    throw Error("val_fraction is set but task is " + task + ": it needs task = text (--task text)");
  if (config.eval_every != defaults.eval_every)
    throw Error("eval_every is set but task is " + task + ": it needs task = text (--task text)");
  if (config.copy_len <= 0) throw Error("copy_len must be positive, got " + std::to_string(config.copy_len));
  if (config.copy_len < 1 || config.model.vocab < 2)
    throw Error("the " + task + " task needs vocab >= 2 and copy_len >= 1");
  if (config.copy_len > INT32_MAX / 2) throw Error("copy_len " + std::to_string(config.copy_len) + " is too large");
  const int task_len = 2 * config.copy_len - 1;
  if (config.model.seq_len == 0) config.model.seq_len = task_len;
  if (config.model.seq_len != task_len)
    throw Error("seq_len " + std::to_string(config.model.seq_len) + " does not match the " + task +
                " task (2 * copy_len - 1 = " + std::to_string(task_len) + ")");
  // Cross-attention's context on the copy and reverse tasks: the embedded first half (the n tokens to repeat).
  config.model.context_len = config.model.cross_attention ? config.copy_len : 0;
}

void resolve_text_task(RunConfig& config) {
  if (!text::have_text())
    throw Error("task = text: the text task is not in this build of blocklab (it was built without utf8proc and "
                "PCRE2); the copy and reverse tasks are");
  if (config.data.empty()) throw Error("task = text needs data = FILE (--data FILE), the UTF-8 text to train on");
  if (config.model.cross_attention)
    throw Error("cross_attention has no context in the text task (it attends to the copy and reverse tasks' first "
                "half); drop --cross-attention or use --task copy");
  if (!(config.val_fraction > 0 && config.val_fraction < 1))
    throw Error("val_fraction must be in (0, 1), got " + format_double(config.val_fraction));
  if (config.eval_every <= 0) throw Error("eval_every must be positive, got " + std::to_string(config.eval_every));
  // Paths made absolute, so that a resumed run or `blocklab sample` finds them from any directory.
  std::error_code ec;
  const std::filesystem::path data = std::filesystem::absolute(config.data, ec).lexically_normal();
  if (!ec) config.data = data.string();
  if (config.tokenizer != "bytes") {
    const std::filesystem::path tok = std::filesystem::absolute(config.tokenizer, ec).lexically_normal();
    if (!ec) config.tokenizer = tok.string();
  }
  const TextTokenizer tokenizer = TextTokenizer::from_key(config.tokenizer);
  const int tokenizer_vocab = tokenizer.vocab_size();
  if (!config.vocab_given) config.model.vocab = tokenizer_vocab;
  if (config.model.vocab < tokenizer_vocab)
    throw Error("the tokenizer's ids do not fit the vocab: " + tokenizer.describe() + " has ids 0.." +
                std::to_string(tokenizer_vocab - 1) + ", but vocab is " + std::to_string(config.model.vocab) +
                " (drop --vocab to take the tokenizer's size, or give at least " + std::to_string(tokenizer_vocab) + ")");
  if (config.model.seq_len == 0) config.model.seq_len = kTextSeqLen;
  if (config.model.seq_len < 1) throw Error("seq_len must be positive, got " + std::to_string(config.model.seq_len));
  config.model.context_len = 0;
}

// The optimizer's keys: each in range, and none that the chosen optimizer does not read set to another value than
// its default (as the text task's keys are refused for the copy task).
void resolve_optimizer(const RunConfig& config) {
  using K = OptimizerKind;
  const OptimizerOptions& o = config.optimizer;
  const OptimizerOptions d;
  auto unit = [](const char* key, double v) {
    if (!(v >= 0 && v < 1)) throw Error(std::string(key) + " must be in [0, 1), got " + format_double(v));
  };
  unit("beta1", o.beta1);
  unit("beta2", o.beta2);
  unit("momentum", o.momentum);
  unit("lion_beta1", o.lion_beta1);
  unit("lion_beta2", o.lion_beta2);
  unit("muon_momentum", o.muon_momentum);
  if (!(o.eps > 0)) throw Error("adam_eps must be positive, got " + format_double(o.eps));
  if (o.weight_decay < 0) throw Error("weight_decay must be >= 0, got " + format_double(o.weight_decay));
  if (!(o.muon_lr > 0)) throw Error("muon_lr must be positive, got " + format_double(o.muon_lr));
  if (o.muon_weight_decay < 0) throw Error("muon_weight_decay must be >= 0, got " + format_double(o.muon_weight_decay));
  if (o.muon_ns_steps < 1 || o.muon_ns_steps > 99)
    throw Error("muon_ns_steps must be in [1, 99], got " + std::to_string(o.muon_ns_steps));
  struct OwnKey {
    const char* key;
    bool set;
    std::vector<K> readers;
  };
  const std::vector<K> adams = {K::Adam, K::AdamW, K::RAdam, K::Muon};
  const OwnKey own[] = {
      {"weight_decay", o.weight_decay != d.weight_decay, {K::AdamW, K::RAdam, K::Sgd, K::Lion, K::Muon}},
      {"beta1", o.beta1 != d.beta1, adams},
      {"beta2", o.beta2 != d.beta2, adams},
      {"adam_eps", o.eps != d.eps, adams},
      {"adam_v0", o.adam_v0 != d.adam_v0, {K::Adam, K::AdamW, K::RAdam}},
      {"momentum", o.momentum != d.momentum, {K::Sgd}},
      {"nesterov", o.nesterov != d.nesterov, {K::Sgd}},
      {"lion_beta1", o.lion_beta1 != d.lion_beta1, {K::Lion}},
      {"lion_beta2", o.lion_beta2 != d.lion_beta2, {K::Lion}},
      {"muon_lr", o.muon_lr != d.muon_lr, {K::Muon}},
      {"muon_momentum", o.muon_momentum != d.muon_momentum, {K::Muon}},
      {"muon_nesterov", o.muon_nesterov != d.muon_nesterov, {K::Muon}},
      {"muon_ns_steps", o.muon_ns_steps != d.muon_ns_steps, {K::Muon}},
      {"muon_weight_decay", o.muon_weight_decay != d.muon_weight_decay, {K::Muon}},
  };
  for (const OwnKey& k : own) {
    if (!k.set || std::find(k.readers.begin(), k.readers.end(), o.kind) != k.readers.end()) continue;
    std::string names;
    for (size_t i = 0; i < k.readers.size(); ++i)
      names += (i == 0 ? "" : i + 1 == k.readers.size() ? " or " : ", ") + to_string(k.readers[i]);
    throw Error(std::string(k.key) + " is set but optimizer is " + to_string(o.kind) + ": " + k.key +
                " is read by optimizer " + names + " (optimizers: " + optimizer_names() + ")");
  }
  if (o.kind == K::Sgd && o.nesterov && o.momentum == 0) throw Error("nesterov needs momentum > 0");
  if ((o.weight_decay > 0 || o.muon_weight_decay > 0) && config.model.stream() == ResidualStream::Sphere)
    throw Error("norm_placement = " + to_string(config.model.norm_placement) +
                " trains with weight_decay = 0 and muon_weight_decay = 0 (its weights are renormalised after every "
                "step)");
}

}  // namespace

void resolve(RunConfig& config) {
  auto positive = [](const char* name, long v) {
    if (v <= 0) throw Error(std::string(name) + " must be positive, got " + std::to_string(v));
  };
  positive("batch", config.batch);
  positive("steps", config.steps);
  positive("micro_shards", config.micro_shards);
  if (config.batch % config.micro_shards != 0)
    throw Error("batch " + std::to_string(config.batch) + " is not a multiple of micro_shards " +
                std::to_string(config.micro_shards));
  if (config.is_text())
    resolve_text_task(config);
  else
    resolve_sequence_task(config);
  config.model.validate();
  if (!(config.lr > 0)) throw Error("lr must be positive");
  if (config.warmup < 0) throw Error("warmup must be >= 0");
  if (config.min_lr < 0) throw Error("min_lr must be >= 0");
  resolve_optimizer(config);
  if (config.clip_grad_norm < 0) throw Error("clip_grad_norm must be >= 0");
  if (config.threads < 0) throw Error("threads must be >= 0");
  if (config.threads > 4096) throw Error("threads must be at most 4096, got " + std::to_string(config.threads));
  if (config.log_every < 0) throw Error("log_every must be >= 0");
  if (config.out.empty()) throw Error("out must not be empty");
  if (config.checkpoint_every < 0) throw Error("checkpoint_every must be >= 0");
  if (config.keep_checkpoints < 0) throw Error("keep_checkpoints must be >= 0");
  if (config.stream_every < 0) throw Error("stream_every must be >= 0");
  if (config.probe_every < 0) throw Error("probe_every must be >= 0");
  if (config.curvature_every < 0) throw Error("curvature_every must be >= 0");
  if (config.update_probe_every < 0)
    throw Error("update_probe_every must be >= 0 (0: off), got " + std::to_string(config.update_probe_every));
  if (config.update_probe_passes < 2)
    throw Error("update_probe_passes must be >= 2, got " + std::to_string(config.update_probe_passes));
}

nlohmann::json results_json(const RunConfig& config) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& k : config_keys())
    if (k.changes_results) j[k.name] = k.get(config);
  // One micro-shard is the training step as it always was: configs (and sweep directories) written before the
  // key existed keep comparing equal.
  if (config.micro_shards == 1) j.erase("micro_shards");
  // Likewise the text task's keys for the copy and reverse tasks, which refuse any value but the default.
  if (!config.is_text())
    for (const char* key : {"data", "tokenizer", "val_fraction", "eval_every"}) j.erase(key);
  // Likewise the optimizer keys added after adam and adamw, at their defaults (which they always are for an
  // optimizer that does not read them: resolve refuses other values).
  const RunConfig defaults;
  for (const char* key : {"adam_v0", "momentum", "nesterov", "lion_beta1", "lion_beta2", "muon_lr", "muon_momentum",
                          "muon_nesterov", "muon_ns_steps", "muon_weight_decay"})
    if (j[key] == find_config_key(key)->get(defaults)) j.erase(key);
  return j;
}

nlohmann::json to_json(const RunConfig& config) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& k : config_keys()) j[k.name] = k.get(config);
  // Constants the placement or init scheme derives from the keys, for the reader (apply_json skips them).
  const ModelConfig& m = config.model;
  nlohmann::json derived = nlohmann::json::object();
  if (m.norm_placement == NormPlacement::DeepNorm || m.effective_init() == InitScheme::DeepNorm) {
    derived["deepnorm_alpha"] = m.deepnorm_alpha();  // residual scale a = (2N)^(1/4)
    derived["deepnorm_beta"] = m.deepnorm_beta();    // init gain b = (8N)^(-1/4)
  }
  if (m.effective_init() == InitScheme::TFixup) derived["tfixup_scale"] = m.tfixup_scale();  // (9N)^(-1/4)
  if (m.norm_placement == NormPlacement::Admin) derived["admin_omega_init"] = m.admin_omega_init();
  if (!derived.empty()) j[kDerivedKey] = derived;
  return j;
}

}  // namespace blocklab
