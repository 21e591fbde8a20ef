#include "train/export_run.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/parameters.h"
#include "train/run_config.h"
#include "util/error.h"
#include "util/shape.h"

namespace blocklab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

bool is_within(const fs::path& inner, const fs::path& outer) {
  const fs::path rel = inner.lexically_relative(outer);
  return !rel.empty() && *rel.begin() != "..";
}

fs::path canonical_or_self(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? p.lexically_normal() : c;
}

// Where the weights come from: a checkpoint directory (weights + config in its state file) or the run's
// final weights (run_dir/model.safetensors + run_dir/config.json).
struct WeightsSource {
  fs::path origin;        // the checkpoint directory or the final model file (reported as ExportResult::checkpoint)
  fs::path weights;       // the model.safetensors to read
  std::string config;     // the config the weights were written with (JSON text)
  std::string config_at;  // where that config came from, for errors
  int64_t step = -1;      // the checkpoint's step (-1: from the file's metadata)
};

WeightsSource from_checkpoint(const io::CheckpointRef& ref) {
  return {ref.path, ref.path / "model.safetensors", io::read_checkpoint_config(ref.path),
          (ref.path / "state.safetensors").string() + ": config in __metadata__", ref.step};
}

// The step recorded in a final model's metadata, -1 when absent or not a number.
int64_t metadata_step(const io::SafetensorsReader& reader) {
  const auto it = reader.metadata().find("step");
  if (it == reader.metadata().end()) return -1;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    return -1;
  }
}

// The weights to read: options.checkpoint as a path, or as a name in run_dir/checkpoints; else the newer of
// the run's final weights (model.safetensors, written at the end of every run not trained with --no-weights)
// and its newest complete checkpoint.
WeightsSource pick_weights(const fs::path& run_dir, const fs::path& requested) {
  std::error_code ec;
  if (!requested.empty()) {
    fs::path dir = requested;
    if (!fs::exists(dir, ec) && requested.is_relative() && fs::exists(io::checkpoints_dir(run_dir) / requested, ec))
      dir = io::checkpoints_dir(run_dir) / requested;
    if (!fs::is_directory(dir, ec)) throw Error(requested.string() + ": no such checkpoint directory");
    if (!fs::is_regular_file(dir / "COMPLETE", ec))
      throw Error(dir.string() + ": not a complete checkpoint (no COMPLETE file)");
    return from_checkpoint({-1, dir});
  }
  const auto all = io::list_checkpoints(run_dir);
  const fs::path final_file = run_dir / "model.safetensors";
  if (fs::is_regular_file(final_file, ec)) {
    const io::SafetensorsReader reader(final_file.string());
    reader.verify_checksums();  // Error naming a damaged tensor
    const int64_t step = metadata_step(reader);
    if (all.empty() || step > all.back().step) {  // a checkpoint of the same step is preferred
      const fs::path config_path = run_dir / "config.json";
      if (!fs::is_regular_file(config_path, ec))
        throw Error(config_path.string() + ": missing (the config of the run's final weights)");
      std::ifstream in(config_path);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      return {final_file, final_file, std::move(text), config_path.string(), step};
    }
  }
  if (all.empty())
    throw Error(run_dir.string() + ": no model.safetensors and no complete checkpoint: the run kept no weights "
                "(it was trained with --no-weights, or has not finished)");
  return from_checkpoint(all.back());
}

int64_t summary_steps(const fs::path& run_dir) {
  std::ifstream in(run_dir / "summary.json");
  if (!in) return -1;
  try {
    const json j = json::parse(in);
    if (j.contains("steps") && j["steps"].is_number_integer()) return j["steps"].get<int64_t>();
  } catch (const json::exception&) {
  }
  return -1;
}

}  // namespace

ExportResult export_run(const fs::path& run_dir, const fs::path& out, const ExportOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) throw Error(run_dir.string() + ": no such run directory");
  fs::path target = out.lexically_normal();
  if (!target.empty() && target.filename().empty()) target = target.parent_path();  // "dir/" -> "dir"
  if (target.empty() || target.filename() == "." || target.filename() == "..")
    throw Error("--out '" + out.string() + "': name a directory to create");

  // --- the checkpoint and the config its weights were written with --------------------------------------
  ExportResult result;
  const WeightsSource source = pick_weights(run_dir, options.checkpoint);
  result.checkpoint = source.origin;
  RunConfig run;
  try {
    apply_json(run, json::parse(source.config));
    resolve(run);
  } catch (const json::exception& e) {
    throw Error(source.config_at + " is not valid JSON: " + e.what());
  } catch (const Error& e) {
    throw Error(source.config_at + ": " + e.what());
  }
  const ModelConfig& model = run.model;

  // --- the format ----------------------------------------------------------------------------------------
  result.format = options.format;
  result.reason = "--format " + std::string(hf::export_format_name(options.format));
  if (options.format == hf::ExportFormat::Auto) {
    result.format = hf::default_export_format(model);
    result.reason = "block = " + model.block;
  }
  hf::check_exportable(model, result.format, result.reason);
  if (result.format == hf::ExportFormat::Blocklab) result.also_expressible = hf::also_expressible(model);

  // --- the output directory --------------------------------------------------------------------------------
  const fs::path out_abs = canonical_or_self(target);
  const fs::path run_abs = canonical_or_self(run_dir), ckpt_abs = canonical_or_self(source.origin);
  if (is_within(run_abs, out_abs) || is_within(ckpt_abs, out_abs) || is_within(out_abs, io::checkpoints_dir(run_abs)))
    throw Error(out.string() + ": overlaps the run directory or its checkpoints; choose another --out");
  target = hf::output_directory(out, options.force);

  // --- the weights: every parameter present, F32, with the config's shape, and nothing else ---------------
  const ParameterTable table(model);
  const io::SafetensorsReader reader(source.weights.string());
  std::map<std::string, std::vector<float>, std::less<>> weights;
  for (const ParamSpec& s : table.specs()) {
    const io::TensorEntry* e = reader.find(s.name);
    if (e == nullptr) throw Error(reader.path() + ": missing tensor " + s.name);
    if (e->dtype != io::DType::F32 || e->shape != s.shape)
      throw Error(reader.path() + ": tensor " + s.name + " has dtype " + io::dtype_name(e->dtype) + " and shape " +
                  format_shape(e->shape) + ", expected F32 " + format_shape(s.shape) + " (from the run's config)");
    std::vector<float> data(static_cast<size_t>(s.numel));
    reader.read(*e, std::span<float>(data));
    weights.emplace(s.name, std::move(data));
  }
  for (const io::TensorEntry& e : reader.tensors())
    if (table.find(e.name) == nullptr)
      throw Error(reader.path() + ": unexpected tensor " + e.name + " (not a parameter of the run's model)");
  if (const auto it = reader.metadata().find("step"); it != reader.metadata().end()) {
    try {
      result.step = std::stoll(it->second);
    } catch (const std::exception&) {
      throw Error(reader.path() + ": __metadata__ step '" + it->second + "' is not a number");
    }
  } else {
    result.step = source.step;
  }
  result.run_steps = summary_steps(run_dir);

  const auto lookup = [&weights](const std::string& name) -> std::span<const float> {
    const auto it = weights.find(name);
    if (it == weights.end()) throw Error("no parameter named '" + name + "'");
    return it->second;
  };
  json config;
  if (result.format == hf::ExportFormat::Blocklab) {
    config = to_json(run);
    config.erase("out");  // where the run ran is not part of the model (the checkpoint does not keep it)
    config.erase("threads");
  }
  const hf::WrittenModel written = hf::write_model_directory(target, model, result.format, lookup, config, result.step);
  result.directory = written.directory;
  result.files = written.files;
  result.tensors = written.tensors;
  result.parameters = written.parameters;
  return result;
}

}  // namespace blocklab
