// blocklab._core: the Python module over blocklab_core (nanobind). Bindings only: every computation is a
// library call; this file converts arguments and results (numpy arrays, dicts) and errors (Error ->
// blocklab.Error, a ValueError, with the CLI's one-line message; Interrupted -> KeyboardInterrupt).
// The friendly API (keyword configs, progress, Run, state_dict) is python/blocklab/__init__.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/copy_task.h"
#include "experiments/gradnorm.h"
#include "experiments/residual.h"
#include "experiments/sweep.h"
#include "jobs/hf_probe_job.h"
#include "text/tokenizer.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "jobs/build_info.h"
#include "jobs/curvature_job.h"
#include "jobs/train_job.h"
#include "probe/residual_norms.h"
#include "probe/residual_probe.h"
#include "train/run.h"
#include "train/run_config.h"
#include "train/sample.h"
#include "util/error.h"
#include "util/threads.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace blocklab::python {
namespace {

using Items = std::vector<std::pair<std::string, std::string>>;

// A config the way the CLI builds one: over `base` (the defaults, or a resumed run's checkpoint config), the
// TOML file (if any), then `block` (a preset sets the architecture keys the others override), then every
// other key, each from its text form. Not resolved.
RunConfig build_config(const std::string& toml_path, const Items& items, RunConfig base = {}) {
  RunConfig config = std::move(base);
  if (!toml_path.empty()) apply_toml_file(config, toml_path);
  set_config_values(config, items);
  return config;
}

RunConfig resolved_config(const std::string& toml_path, const Items& items) {
  RunConfig config = build_config(toml_path, items);
  resolve(config);
  return config;
}

template <typename T>
using Array = nb::ndarray<nb::numpy, T>;

// A numpy array that owns a copy of `values`.
template <typename T>
Array<T> owned_array(std::vector<T> values, std::vector<size_t> shape) {
  auto* owner = new std::vector<T>(std::move(values));
  nb::capsule free_owner(owner, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return Array<T>(owner->data(), shape.size(), shape.data(), free_owner);
}

template <typename T>
Array<T> vector_array(std::vector<T> values) {
  const size_t n = values.size();
  return owned_array(std::move(values), {n});
}

// (B,T) int32 tokens, C-contiguous, checked against the model's vocabulary and sequence length.
using Tokens = nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Mask = nb::ndarray<const uint8_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

void check_tokens(const Tokens& tokens, const ModelConfig& m, const char* what) {
  if (tokens.shape(0) < 1 || tokens.shape(1) < 1) throw Error(std::string(what) + ": expected a non-empty (batch, seq_len) array");
  if (static_cast<long>(tokens.shape(1)) > m.seq_len)
    throw Error(std::string(what) + ": sequence length " + std::to_string(tokens.shape(1)) +
                " exceeds the model's seq_len " + std::to_string(m.seq_len));
  const int32_t* p = tokens.data();
  for (size_t i = 0; i < tokens.size(); ++i)
    if (p[i] < 0 || p[i] >= m.vocab)
      throw Error(std::string(what) + ": token id " + std::to_string(p[i]) + " at index " + std::to_string(i) +
                  " is outside [0, " + std::to_string(m.vocab) + ")");
}

// A model with its config and the activations of its last forward pass (sized for that pass's (B,T)).
// The activations keep pointers to the inputs, targets and mask, so copies of those live here too.
template <typename T>
class ModelState {
 public:
  explicit ModelState(const RunConfig& config) : config_(config), model_(config.model) {
    model_.init_weights(config.seed);
  }

  const RunConfig& config() const { return config_; }
  Model<T>& model() { return model_; }

  std::vector<T> forward(const Tokens& tokens) {
    check_tokens(tokens, config_.model, "tokens");
    prepare(tokens);
    return model_.forward_logits(*acts_, inputs_.data());
  }

  double loss(const Tokens& tokens, const Tokens& targets, const std::optional<Mask>& mask) {
    check_tokens(tokens, config_.model, "tokens");
    check_tokens(targets, config_.model, "targets");
    if (targets.shape(0) != tokens.shape(0) || targets.shape(1) != tokens.shape(1))
      throw Error("targets: shape must equal the tokens' shape");
    prepare(tokens);
    targets_.assign(targets.data(), targets.data() + targets.size());
    if (mask) {
      if (mask->shape(0) != tokens.shape(0) || mask->shape(1) != tokens.shape(1))
        throw Error("mask: shape must equal the tokens' shape");
      mask_.assign(mask->data(), mask->data() + mask->size());
      bool any = false;
      for (uint8_t v : mask_) any = any || v != 0;
      if (!any) throw Error("mask: selects no position (at least one must count)");
    } else {
      mask_.assign(targets_.size(), 1);
    }
    return static_cast<double>(model_.forward(*acts_, inputs_.data(), targets_.data(), mask_.data()));
  }

  void backward() {
    if (!acts_ || !acts_->has_loss()) throw Error("backward() needs a loss(tokens, targets) first");
    model_.backward(*acts_);
  }

  probe::ResidualNorms residual_norms(const std::optional<Tokens>& tokens) {
    if (tokens) {
      check_tokens(*tokens, config_.model, "tokens");
      prepare(*tokens);
    } else {  // the first batch of the run's data stream, as experiments::residual_norms_at_init
      TaskStream task = make_task_stream(config_, Trainer::data_seed(config_.seed));
      Batch batch;
      task.next(batch, config_.batch);
      resize(batch.batch, batch.seq_len);
      inputs_ = batch.inputs;
    }
    model_.forward_hidden(*acts_, inputs_.data());
    return probe::residual_norms(*acts_, config_.model.width);
  }

  void save(const std::string& path) const {
    std::vector<io::TensorToWrite> tensors;
    for (const ParamSpec& s : model_.table().specs())
      tensors.push_back(io::tensor_view(s.name, s.shape, std::span<const T>(model_.params().subspan(s.offset, s.numel))));
    io::write_safetensors(path, tensors, {{"format", "pt"}});
  }

  // Every tensor is checked (present, shape, float dtype, no extra tensors) before any weight changes.
  void load(const std::string& path) {
    const io::SafetensorsReader reader(path);
    const auto& specs = model_.table().specs();
    for (const ParamSpec& s : specs) {
      const io::TensorEntry* e = reader.find(s.name);
      if (e == nullptr) throw Error(path + ": tensor " + s.name + " is missing");
      if (e->shape != s.shape)
        throw Error(path + ": tensor " + s.name + " has shape " + shape_text(e->shape) + ", the model expects " +
                    shape_text(s.shape));
    }
    for (const io::TensorEntry& e : reader.tensors())
      if (model_.table().find(e.name) == nullptr) throw Error(path + ": tensor " + e.name + " is not a parameter of this model");
    std::vector<T> staged(model_.params().size());
    for (const ParamSpec& s : specs) reader.read(reader.at(s.name), std::span<T>(staged).subspan(s.offset, s.numel));
    std::copy(staged.begin(), staged.end(), model_.params().begin());
  }

 private:
  static std::string shape_text(const std::vector<int64_t>& shape) {
    std::string t = "(";
    for (size_t i = 0; i < shape.size(); ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
    return t + (shape.size() == 1 ? ",)" : ")");
  }
  void resize(int B, int Tn) {
    if (!acts_ || acts_->batch() != B || acts_->seq_len() != Tn) acts_.emplace(model_.make_activations(B, Tn));
  }
  void prepare(const Tokens& tokens) {
    resize(static_cast<int>(tokens.shape(0)), static_cast<int>(tokens.shape(1)));
    inputs_.assign(tokens.data(), tokens.data() + tokens.size());
  }

  RunConfig config_;
  Model<T> model_;
  std::optional<Activations<T>> acts_;
  std::vector<int32_t> inputs_, targets_;
  std::vector<uint8_t> mask_;
};

// The Python-facing model: float32 or float64 (Model<double>, for finite-difference checks).
class PyModel {
 public:
  PyModel(const std::string& toml_path, const Items& items, bool float64) {
    const RunConfig config = resolved_config(toml_path, items);
    set_num_threads(config.threads);
    if (float64)
      f64_.emplace(config);
    else
      f32_.emplace(config);
  }

  bool float64() const { return f64_.has_value(); }
  const RunConfig& config() const { return f64_ ? f64_->config() : f32_->config(); }
  ModelState<float>& f32() { return *f32_; }

  template <typename F>
  decltype(auto) visit(F&& f) {
    return f64_ ? f(*f64_) : f(*f32_);
  }

 private:
  std::optional<ModelState<float>> f32_;
  std::optional<ModelState<double>> f64_;
};

// A numpy view of one tensor of an arena; `owner` (the Python model) stays alive while the view does.
template <typename T>
nb::object tensor_view(T* data, const ParamSpec& s, nb::handle owner) {
  std::vector<size_t> shape(s.shape.begin(), s.shape.end());
  return nb::cast(Array<T>(data + s.offset, shape.size(), shape.data(), owner), nb::rv_policy::reference);
}

nb::dict norms_dict(const probe::ResidualNorms& n) {
  nb::dict d;
  d["mean_vector_norm"] = vector_array(n.mean_vector_norm);
  d["mean_token_norm"] = vector_array(n.mean_token_norm);
  return d;
}

nb::dict summary_dict(const RunSummary& s) {
  nb::dict d;
  d["steps"] = s.steps;
  d["first_loss"] = s.first_loss;
  d["final_loss"] = s.final_loss;
  d["min_loss"] = s.min_loss;
  d["min_loss_step"] = s.min_loss_step;
  d["seconds"] = s.total_seconds();  // as summary.json: every process that ran the run (see RunSummary)
  if (s.start_step > 0) {
    d["seconds_this_process"] = s.seconds;
    if (s.seconds_before < 0) d["seconds_from_step"] = s.start_step;
  }
  d["skipped_steps"] = s.skipped_steps;
  d["nonfinite_error"] = s.nonfinite_error;
  d["start_step"] = s.start_step;
  if (s.val_loss) {  // text task
    d["val_loss"] = *s.val_loss;
    d["val_loss_step"] = s.val_loss_step;
    d["min_val_loss"] = *s.min_val_loss;
    d["min_val_loss_step"] = s.min_val_loss_step;
  }
  if (s.unigram_entropy) {  // text task: the training text's, the "learned" threshold
    d["unigram_entropy"] = *s.unigram_entropy;
  }
  return d;
}

// Where a resumed run starts: the run directory's newest verified checkpoint (find_resume_point) and the
// config to continue with, the checkpoint's with the TOML file and keys applied over it as the CLI applies
// its flags over --resume's, resolved and checked (check_resume_config: only steps, threads, log_every,
// checkpoint_every, keep_checkpoints, on_nonfinite, tensorboard, weights and the recorders' keys may change). Nothing on disk changes here.
struct Resume {
  ResumePoint from;
  RunConfig config;
};

Resume resume_point(const std::string& run_dir, const std::string& toml_path, const Items& items) {
  Resume r{find_resume_point(run_dir), {}};
  Items keys;
  for (const auto& item : items)
    if (item.first != "out") keys.push_back(item);  // the run continues in its own directory
  r.config = build_config(toml_path, keys, r.from.config);
  resolve(r.config);
  check_resume_config(r.from, r.config);
  return r;
}

// Training: jobs::train_job (a new run, or with `resume` the run continued from its checkpoint; the recorders
// its config asks for) with the GIL released; on_step(step, loss, lr, grad_norm, nonfinite, val_loss) is called
// with the GIL held after every step (val_loss: None, except at the text task's evaluated steps). The final
// weights are copied into `into` (a float32 model of the same config) after the last step.
nb::dict train(const std::string& toml_path, const Items& items, bool overwrite, nb::object on_step, PyModel* into,
               const Resume* resume) {
  jobs::TrainJob job;
  job.config = resume != nullptr ? resume->config : resolved_config(toml_path, items);
  const RunConfig& config = job.config;
  if (into != nullptr && (into->float64() || static_cast<long>(into->f32().model().params().size()) != ParameterTable(config.model).total()))
    throw Error("internal: the model to receive the trained weights does not match the config");
  job.resume = resume != nullptr ? &resume->from : nullptr;
  job.overwrite = overwrite;
  job.observer = [&](const StepResult& r) {
    nb::gil_scoped_acquire gil;
    if (on_step.is_valid() && !on_step.is_none()) {
      nb::object val_loss = r.val_loss ? nb::cast(*r.val_loss) : nb::none();
      on_step(r.step, r.loss, r.lr, r.grad_norm, r.nonfinite, val_loss);
    }
  };
  if (into != nullptr)
    job.hook = [&](Trainer& trainer) {
      if (trainer.steps_done() != config.steps) return;
      const auto src = trainer.model().params();
      std::copy(src.begin(), src.end(), into->f32().model().params().begin());
    };
  jobs::TrainJobResult result;
  {
    nb::gil_scoped_release release;
    result = jobs::train_job(job);
  }
  return summary_dict(result.summary);
}

// Curvature of a run's loss at a checkpoint or its final weights (jobs/curvature_job.h) with the GIL released:
// the JSON text `blocklab curvature --json` prints.
std::string curvature(const std::string& run_dir, int checkpoint, const std::optional<uint64_t>& batch_seed,
                      const std::optional<std::string>& tokens, int batch, int top, int max_iter, double tol,
                      int trace_samples, bool per_block, int block_max_iter, int order, uint64_t seed, int threads) {
  jobs::CurvatureJob job;
  job.run_dir = run_dir;
  job.checkpoint = checkpoint;
  job.batch_seed = batch_seed;
  job.tokens = tokens.value_or("");
  if (tokens && tokens->empty()) throw Error("tokens: the path is empty");
  job.batch = batch;
  job.threads = threads;
  job.options.top = top;
  job.options.max_iter = max_iter;
  job.options.tol = tol;
  job.options.trace_samples = trace_samples;
  job.options.per_block = per_block;
  job.options.block_max_iter = block_max_iter;
  job.options.order = order;
  job.options.seed = seed;
  nb::gil_scoped_release release;
  return jobs::to_json(jobs::curvature_job(job)).dump();
}

// Sampling (train/sample.h) from a run directory: the continuation of a text prompt (decoded to text, the run's
// tokenizer) or of prompt ids (a list of ids), with the GIL released while the model runs.
nb::object sample(const std::string& run_dir, const std::optional<std::string>& prompt,
                  const std::optional<std::vector<int32_t>>& prompt_ids, int tokens, double temperature, int top_k,
                  uint64_t seed, int threads) {
  if (prompt.has_value() == prompt_ids.has_value()) throw Error("give either prompt (text) or prompt_ids (a list of ids)");
  if (threads < 0) throw Error("threads must be >= 0");
  set_num_threads(threads);
  RunModel run = load_run_model(run_dir);
  std::vector<int32_t> ids;
  if (prompt) {
    if (!run.tokenizer)
      throw Error(run_dir + " was trained on the " + run.config.task + " task, whose tokens are ids 0.." +
                  std::to_string(run.config.model.vocab - 1) + ", not text: give them as prompt_ids=[1, 2, 3]");
    check_utf8({reinterpret_cast<const std::byte*>(prompt->data()), prompt->size()}, "prompt");
    ids = run.tokenizer->encode(*prompt);
    if (ids.empty()) throw Error("prompt is empty: give at least one character");
  } else {
    ids = *prompt_ids;
  }
  const SampleOptions options{tokens, temperature, top_k, seed};
  std::vector<int32_t> added;
  {
    nb::gil_scoped_release release;
    added = generate(run.model, ids, options);
  }
  if (prompt) {
    const std::string bytes = run.tokenizer->decode(added);
    // Cut mid-character (byte tokens): invalid bytes become U+FFFD rather than an exception.
    return nb::steal(PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace"));
  }
  return nb::cast(added);
}

nb::dict gradnorm(const std::string& toml_path, const Items& items, const std::vector<std::string>& placements,
                  const std::vector<uint64_t>& seeds, int batches) {
  if (placements.empty()) throw Error("placements: the list is empty");
  if (seeds.empty()) throw Error("seeds: the list is empty");
  if (batches < 1) throw Error("batches must be at least 1");
  const RunConfig base = build_config(toml_path, items);
  std::vector<NormPlacement> parsed;
  for (const std::string& p : placements) parsed.push_back(parse_norm_placement(p));
  nb::dict result;
  for (size_t pi = 0; pi < parsed.size(); ++pi) {
    // name -> values per seed; block tensors gathered into (seeds, blocks) per family.
    std::vector<std::string> order;
    std::map<std::string, std::vector<double>> values;
    std::map<std::string, bool> in_block;
    int blocks = 0;
    for (size_t si = 0; si < seeds.size(); ++si) {
      RunConfig config = base;
      config.model.norm_placement = parsed[pi];
      config.seed = seeds[si];
      resolve(config);
      blocks = config.model.layers;
      std::vector<probe::ParameterGradNorm> norms;
      {
        nb::gil_scoped_release release;
        set_num_threads(config.threads);
        norms = experiments::gradnorms_at_init(config, batches);
      }
      for (const auto& n : norms) {
        const std::string key = n.block > 0 ? experiments::parameter_family(n.name) : n.name;
        auto& v = values[key];
        if (v.empty()) {
          order.push_back(key);
          in_block[key] = n.block > 0;
          v.assign(seeds.size() * (n.block > 0 ? config.model.layers : 1), std::nan(""));
        }
        v[si * (n.block > 0 ? config.model.layers : 1) + (n.block > 0 ? n.block - 1 : 0)] = n.norm;
      }
    }
    nb::dict per;
    for (const std::string& key : order)
      per[key.c_str()] = in_block[key] ? owned_array(values[key], {seeds.size(), static_cast<size_t>(blocks)})
                                       : owned_array(values[key], {seeds.size()});
    result[placements[pi].c_str()] = per;
  }
  return result;
}

nb::list sweep(const std::string& toml_path, const Items& items, const std::vector<std::string>& grid_specs,
               const std::vector<uint64_t>& seeds, int jobs, const std::string& out,
               const std::string& worker, nb::object log) {
  experiments::SweepOptions options;
  options.base = build_config(toml_path, items, experiments::sweep_base_config());
  for (const std::string& spec : grid_specs) options.grid.push_back(experiments::parse_grid_axis(spec));
  options.seeds = seeds;
  options.jobs = jobs;
  options.out = out;
  options.worker = worker;
  const experiments::Log log_line = [&](const std::string& line) {
    nb::gil_scoped_acquire gil;
    if (!log.is_none()) log(line);
  };
  experiments::SweepResult result;
  {
    nb::gil_scoped_release release;
    result = experiments::run_sweep(options, log_line);
  }
  nb::list runs;
  for (const auto& r : result.runs) {
    nb::dict d;
    d["name"] = r.run.name;
    d["out"] = r.run.config.out;
    nb::dict cell;
    for (size_t a = 0; a < options.grid.size(); ++a) cell[options.grid[a].key.c_str()] = r.run.cell_values[a];
    d["cell"] = cell;
    d["seed"] = r.run.seed;
    d["steps"] = vector_array(r.steps);
    d["loss"] = vector_array(r.losses);
    d["outcome"] = probe::to_string(r.curve.outcome);
    d["final_loss"] = r.curve.final_loss;
    d["min_loss"] = r.curve.min_loss;
    d["first_step_below"] = r.curve.first_step_below ? nb::cast(*r.curve.first_step_below) : nb::none();
    d["seconds"] = r.seconds;
    if (r.run.config.is_text()) {  // the validation losses and the "learned" threshold
      const auto optional = [](const std::optional<double>& v) { return v ? nb::cast(*v) : nb::none(); };
      d["final_val_loss"] = optional(r.final_val_loss);
      d["min_val_loss"] = optional(r.min_val_loss);
      d["unigram_entropy"] = optional(r.unigram_entropy);
    }
    runs.append(d);
  }
  return runs;
}

nb::dict residual_at_init(const std::string& toml_path, const Items& items) {
  const RunConfig config = resolved_config(toml_path, items);
  probe::ResidualNorms norms;
  {
    nb::gil_scoped_release release;
    set_num_threads(config.threads);
    norms = experiments::residual_norms_at_init(config);
  }
  return norms_dict(norms);
}

nb::dict residual_of_run(const std::string& run_dir) {
  const experiments::RunResidualProbe p = experiments::read_residual_probe(run_dir);
  const size_t S = p.steps.size(), L1 = S > 0 ? p.norms[0].mean_token_norm.size() : 0;
  std::vector<double> vec, tok;
  for (const auto& n : p.norms) {
    if (n.mean_token_norm.size() != L1) throw Error(run_dir + "/residual.csv: the probed steps have different layer counts");
    vec.insert(vec.end(), n.mean_vector_norm.begin(), n.mean_vector_norm.end());
    tok.insert(tok.end(), n.mean_token_norm.begin(), n.mean_token_norm.end());
  }
  nb::dict d;
  d["step"] = vector_array(std::vector<int64_t>(p.steps.begin(), p.steps.end()));
  d["mean_vector_norm"] = owned_array(std::move(vec), {S, L1});
  d["mean_token_norm"] = owned_array(std::move(tok), {S, L1});
  d["label"] = p.label;
  return d;
}

nb::dict residual_of_hf_model(const std::string& model_dir, const std::optional<std::string>& text,
                              const std::optional<std::vector<int32_t>>& token_list) {
  if (text.has_value() == token_list.has_value()) throw Error("give the prompt as text=... or tokens=[...], one of them");
  jobs::ResidualProbeJob job;
  job.prompt.model_dir = model_dir;
  job.prompt.text = text;
  job.prompt.tokens = token_list;
  jobs::ResidualProbeJobResult r;
  {
    nb::gil_scoped_release release;
    r = jobs::residual_probe_job(job);
  }
  const std::vector<int32_t>& tokens = r.tokens;
  const probe::ResidualProbeResult& result = r.result;
  std::vector<double> vec, tok, rel, rms, max_abs, sink;
  std::vector<int32_t> max_channel;
  for (const auto& s : result.layers) {
    vec.push_back(s.mean_vector_norm);
    tok.push_back(s.mean_token_norm);
    rel.push_back(s.relative_update);
    rms.push_back(s.rms);
    max_abs.push_back(s.max_abs);
    max_channel.push_back(s.max_channel);
    sink.push_back(s.sink ? *s.sink : std::nan(""));
  }
  nb::dict d;
  d["tokens"] = vector_array(tokens);
  d["mean_vector_norm"] = vector_array(std::move(vec));
  d["mean_token_norm"] = vector_array(std::move(tok));
  d["relative_update"] = vector_array(std::move(rel));
  d["rms"] = vector_array(std::move(rms));
  d["max_abs"] = vector_array(std::move(max_abs));
  d["max_channel"] = vector_array(std::move(max_channel));
  d["sink"] = vector_array(std::move(sink));
  return d;
}

}  // namespace
}  // namespace blocklab::python

NB_MODULE(_core, m) {
  using namespace blocklab;
  using namespace blocklab::python;
  m.doc() = "blocklab's C++ core (bindings only; use the blocklab package)";

  static nb::exception<Error> error(m, "Error", PyExc_ValueError);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Interrupted& e) {
      PyErr_SetString(PyExc_KeyboardInterrupt, (std::string(e.what()) + "; wrote " + e.checkpoint()).c_str());
    } catch (const experiments::SweepInterrupted& e) {
      PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
    }
  });

  m.def("build_info", [] { return jobs::build_info().dump(); });
  m.def("config_keys", [] {
    const RunConfig defaults;
    nb::list keys;
    for (const ConfigKey& k : config_keys()) {
      keys.append(nb::make_tuple(k.name, key_type_name(k.type), k.help, k.get(defaults).dump()));
    }
    return keys;
  });
  m.def("resolve_config", [](const std::string& toml_path, const Items& items) {
    return to_json(resolved_config(toml_path, items)).dump();
  });
  m.def("read_config_json", [](const std::string& path) { return to_json(read_config_json(path)).dump(); });

  nb::class_<PyModel>(m, "ModelCore")
      .def(nb::init<const std::string&, const Items&, bool>(), "toml_path"_a, "items"_a, "float64"_a)
      .def_prop_ro("float64", &PyModel::float64)
      .def("config_json", [](PyModel& self) { return to_json(self.config()).dump(); })
      .def("tensors", [](PyModel& self) {
        nb::list out;
        return self.visit([&](auto& s) {
          for (const ParamSpec& p : s.model().table().specs()) out.append(nb::make_tuple(p.name, p.shape));
          return out;
        });
      })
      .def("param", [](nb::handle py_self, const std::string& name) {
        PyModel& self = nb::cast<PyModel&>(py_self);
        return self.visit([&](auto& s) { return tensor_view(s.model().params().data(), s.model().table().at(name), py_self); });
      })
      .def("grad", [](nb::handle py_self, const std::string& name) {
        PyModel& self = nb::cast<PyModel&>(py_self);
        return self.visit([&](auto& s) { return tensor_view(s.model().grads().data(), s.model().table().at(name), py_self); });
      })
      .def("forward", [](PyModel& self, const Tokens& tokens) {
        return self.visit([&](auto& s) -> nb::object {
          using T = typename std::remove_reference_t<decltype(s.model().params())>::element_type;
          std::vector<T> logits;
          {
            nb::gil_scoped_release release;
            logits = s.forward(tokens);
          }
          return nb::cast(owned_array(std::move(logits), {tokens.shape(0), tokens.shape(1),
                                                          static_cast<size_t>(s.config().model.vocab)}));
        });
      }, "tokens"_a)
      .def("loss", [](PyModel& self, const Tokens& tokens, const Tokens& targets, const std::optional<Mask>& mask) {
        return self.visit([&](auto& s) {
          nb::gil_scoped_release release;
          return s.loss(tokens, targets, mask);
        });
      }, "tokens"_a, "targets"_a, "mask"_a = nb::none())
      .def("backward", [](PyModel& self) {
        self.visit([&](auto& s) {
          nb::gil_scoped_release release;
          s.backward();
        });
      })
      .def("residual_norms", [](PyModel& self, const std::optional<Tokens>& tokens) {
        return norms_dict(self.visit([&](auto& s) {
          nb::gil_scoped_release release;
          return s.residual_norms(tokens);
        }));
      }, "tokens"_a = nb::none())
      .def("save", [](PyModel& self, const std::string& path) { self.visit([&](auto& s) { s.save(path); }); })
      .def("load", [](PyModel& self, const std::string& path) { self.visit([&](auto& s) { s.load(path); }); });

  nb::class_<Resume>(m, "ResumePoint")
      .def_prop_ro("config_json", [](const Resume& r) { return to_json(r.config).dump(); })
      .def_prop_ro("step", [](const Resume& r) { return r.from.step; })
      .def_prop_ro("checkpoint", [](const Resume& r) { return r.from.checkpoint.string(); })
      .def_prop_ro("skipped", [](const Resume& r) {
        std::vector<std::pair<std::string, std::string>> out;
        for (const SkippedCheckpoint& s : r.from.skipped) out.emplace_back(s.path.string(), s.reason);
        return out;
      })
      .def_prop_ro("notes", [](const Resume& r) { return r.from.notes; });
  m.def("resume_point", &resume_point, "run_dir"_a, "toml_path"_a, "items"_a);
  m.def("train", &train, "toml_path"_a, "items"_a, "overwrite"_a, "on_step"_a, "into"_a.none(),
        "resume"_a.none() = nb::none());
  m.def("curvature", &curvature, "run_dir"_a, "checkpoint"_a = -1, "batch_seed"_a.none() = nb::none(),
        "tokens"_a.none() = nb::none(), "batch"_a = 0, "top"_a = 1, "max_iter"_a = 50, "tol"_a = 1e-5,
        "trace_samples"_a = 8, "per_block"_a = true, "block_max_iter"_a = 30, "order"_a = 2, "seed"_a = 0,
        "threads"_a = 0);
  m.def("gradnorm", &gradnorm);
  m.def("sample", &sample, "run_dir"_a, "prompt"_a.none(), "prompt_ids"_a.none(), "tokens"_a, "temperature"_a,
        "top_k"_a, "seed"_a, "threads"_a);
  m.def("sweep", &sweep);
  m.def("residual_at_init", &residual_at_init);
  m.def("residual_of_run", &residual_of_run);
  m.def("residual_of_hf_model", &residual_of_hf_model, "model_dir"_a, "text"_a.none(), "tokens"_a.none());
}
