#include "io/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

#include "io/atomic_file.h"
#include "io/checksum.h"
#include "io/read_file.h"
#include "io/safetensors.h"
#include "util/bit_cast.h"
#include "util/error.h"
#include "util/shape.h"

namespace blocklab::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kStateFile = "state.safetensors";
constexpr const char* kCompleteFile = "COMPLETE";
constexpr const char* kFormat = "blocklab-checkpoint";
// Hidden names: a directory being written, and one being deleted.
constexpr std::string_view kTempPrefix = ".tmp_";
constexpr std::string_view kTrashPrefix = ".trash_";

// Counters of state.safetensors, as I64 scalars.
constexpr const char* kStep = "step";
constexpr const char* kAdamStep = "adam.step";
constexpr const char* kSkippedSteps = "skipped_steps";
constexpr const char* kBatchesDrawn = "data.batches_drawn";
constexpr const char* kDataRng = "rng.data";

// Parses "step_0000120" (digits only, the canonical width); false for any other name.
bool parse_checkpoint_name(const std::string& name, int64_t& step) {
  constexpr std::string_view prefix = "step_";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  auto [ptr, ec] = std::from_chars(first, last, step);
  return ec == std::errc() && ptr == last && step >= 0 && checkpoint_name(step) == name;
}

// Removes a directory tree without throwing (best effort: what remains is hidden and retried later).
void remove_quietly(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
}

// Moves a checkpoint out of sight in one rename, then deletes it.
void discard(const fs::path& root, const fs::path& dir) {
  const fs::path trash = root / (std::string(kTrashPrefix) + dir.filename().string() + "." + std::to_string(::getpid()));
  remove_quietly(trash);
  std::error_code ec;
  fs::rename(dir, trash, ec);
  if (ec) throw Error(dir.string() + ": cannot remove old checkpoint: " + ec.message());
  remove_quietly(trash);
}

void remove_stale_temporaries(const fs::path& root) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(kTempPrefix) || name.starts_with(kTrashPrefix)) stale.push_back(entry.path());
  }
  for (const auto& p : stale) remove_quietly(p);
}

void check_layout(const TrainingState& s) {
  for (const auto& t : s.layout)
    BLOCKLAB_CHECK(t.offset >= 0 && t.numel >= 0 && static_cast<size_t>(t.offset + t.numel) <= s.params.size(),
                   "checkpoint layout exceeds the parameter arena");
  for (const auto& a : s.optimizer_state)
    BLOCKLAB_CHECK(a.values.size() == s.params.size(), "optimizer state " + a.name + " and parameters differ in size");
}

// COMPLETE: "step N", then one line per file: "<name> <bytes> xxh3_64:<16 hex digits>".
void write_complete_marker(const fs::path& dir, int64_t step, const FileChecksum& model, const FileChecksum& state) {
  std::string text = "step " + std::to_string(step) + "\n";
  for (const auto& [name, sum] : {std::pair{kModelFile, model}, std::pair{kStateFile, state}})
    text += std::string(name) + " " + std::to_string(sum.bytes) + " " + std::string(kChecksumAlgorithm) + ":" +
            checksum_hex(sum.checksum) + "\n";
  write_file_atomic((dir / kCompleteFile).string(), text);
}

struct RecordedFile {
  uint64_t bytes = 0, checksum = 0;
};

// Reads COMPLETE. Markers of the first format hold only "step N" (no files); anything else that is not
// the format above means the marker itself is damaged.
std::map<std::string, RecordedFile> read_complete_marker(const fs::path& dir) {
  const fs::path path = dir / kCompleteFile;
  const std::string text = read_file(path);
  auto damaged = [&](const std::string& why) -> Error { return Error(path.string() + ": damaged marker: " + why); };
  if (text.size() > 4096) throw damaged("longer than any marker blocklab writes");
  std::istringstream lines(text);
  std::string line;
  std::map<std::string, RecordedFile> files;
  bool first = true;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string a, b, c, extra;
    words >> a >> b >> c >> extra;
    if (first) {
      int64_t step = 0;
      if (a != "step" || !c.empty() || b.empty() || std::from_chars(b.data(), b.data() + b.size(), step).ptr != b.data() + b.size())
        throw damaged("the first line is not 'step N'");
      first = false;
      continue;
    }
    const std::string prefix = std::string(kChecksumAlgorithm) + ":";
    RecordedFile f;
    if ((a != kModelFile && a != kStateFile) || !extra.empty() || files.count(a) ||
        std::from_chars(b.data(), b.data() + b.size(), f.bytes).ptr != b.data() + b.size() || b.empty() ||
        !c.starts_with(prefix) || !parse_checksum_hex(std::string_view(c).substr(prefix.size()), f.checksum))
      throw damaged("unexpected line '" + line.substr(0, 80) + "'");
    files[a] = f;
  }
  if (first) throw damaged("empty");
  if (!files.empty() && files.size() != 2) throw damaged("records " + std::to_string(files.size()) + " of the 2 files");
  return files;
}

// Checksum of a whole file, read in 1 MiB pieces.
uint64_t checksum_of_file(const fs::path& path, uint64_t& bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot read");
  ChecksumStream sum;
  std::vector<char> buffer(1 << 20);
  bytes = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    sum.update(std::as_bytes(std::span<const char>(buffer.data(), got)));
    bytes += got;
  }
  if (in.bad()) throw Error(path.string() + ": read failed");
  return sum.digest();
}

// One file of a checkpoint against what COMPLETE recorded (or, for a marker without checksums, its tensor
// checksums alone).
void verify_file(const fs::path& path, const RecordedFile* recorded, std::vector<std::string>& notes) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw Error(path.string() + ": missing");
  if (recorded != nullptr) {
    const uint64_t size = fs::file_size(path, ec);
    if (ec) throw Error(path.string() + ": cannot stat: " + ec.message());
    if (size != recorded->bytes)
      throw Error(path.string() + ": " + (size < recorded->bytes ? "truncated" : "grown") + ": " + std::to_string(size) +
                  " bytes, written with " + std::to_string(recorded->bytes));
    uint64_t read = 0;
    const uint64_t actual = checksum_of_file(path, read);
    if (actual == recorded->checksum && read == recorded->bytes) return;
    // Damaged: say where. The parser names a damaged header, the tensor checksums a damaged tensor.
    const SafetensorsReader reader(path.string());
    reader.verify_checksums();
    throw Error(path.string() + ": header damaged: the file's checksum is " + checksum_hex(actual) + ", written as " +
                checksum_hex(recorded->checksum) + " (every tensor's data is intact)");
  }
  const SafetensorsReader reader(path.string());
  if (!reader.verify_checksums())
    notes.push_back(path.string() + ": no checksums (written by another tool or an older blocklab); not verified");
}


}  // namespace

fs::path checkpoints_dir(const fs::path& run_dir) { return run_dir / "checkpoints"; }

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%07lld", static_cast<long long>(step));
  return buf;
}

std::vector<CheckpointRef> list_checkpoint_dirs(const fs::path& run_dir) {
  std::vector<CheckpointRef> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoints_dir(run_dir), ec)) {
    int64_t step = 0;
    if (!parse_checkpoint_name(entry.path().filename().string(), step)) continue;
    std::error_code ec2;
    if (!entry.is_directory(ec2)) continue;
    found.push_back({step, entry.path(), fs::is_regular_file(entry.path() / kCompleteFile, ec2)});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return found;
}

std::vector<CheckpointRef> list_checkpoints(const fs::path& run_dir) {
  std::vector<CheckpointRef> found = list_checkpoint_dirs(run_dir);
  std::erase_if(found, [](const CheckpointRef& c) { return !c.complete; });
  return found;
}

fs::path write_checkpoint(const fs::path& run_dir, const TrainingState& state, int keep) {
  check_layout(state);
  BLOCKLAB_CHECK(state.step >= 0, "negative checkpoint step");
  const fs::path root = checkpoints_dir(run_dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    fs::create_directories(root, ec);
    if (ec) throw Error(root.string() + ": cannot create directory: " + ec.message());
    sync_directory(run_dir.string());
  }
  remove_stale_temporaries(root);

  const std::string name = checkpoint_name(state.step);
  const fs::path tmp = root / (std::string(kTempPrefix) + name + "." + std::to_string(::getpid()));
  const fs::path final_dir = root / name;
  fs::create_directory(tmp, ec);
  if (ec) throw Error(tmp.string() + ": cannot create directory: " + ec.message());
  try {
    const std::string step_text = std::to_string(state.step);
    std::vector<TensorToWrite> model, moments;
    model.reserve(state.layout.size());
    moments.reserve(state.optimizer_state.size() * state.layout.size() + 5);
    for (const auto& t : state.layout)
      model.push_back(tensor_view(t.name, t.shape, std::span<const float>(state.params.subspan(t.offset, t.numel))));
    const FileChecksum model_sum =
        write_safetensors((tmp / kModelFile).string(), model, {{"format", "pt"}, {"step", step_text}});

    for (const auto& a : state.optimizer_state)
      for (const auto& t : state.layout)
        moments.push_back(tensor_view(a.name + "." + t.name, t.shape,
                                      std::span<const float>(a.values.subspan(t.offset, t.numel))));
    const int64_t counters[4] = {state.step, state.optimizer_steps, state.skipped_steps, state.data_batches_drawn};
    const char* counter_names[4] = {kStep, kAdamStep, kSkippedSteps, kBatchesDrawn};
    for (int i = 0; i < 4; ++i)
      moments.push_back(tensor_view(counter_names[i], {}, std::span<const int64_t>(&counters[i], 1)));
    std::array<int64_t, 4> rng;
    for (int i = 0; i < 4; ++i) rng[i] = bit_cast<int64_t>(state.data_rng[i]);
    moments.push_back(tensor_view(kDataRng, {4}, std::span<const int64_t>(rng)));
    std::map<std::string, std::string> metadata = {{"format", kFormat},
                                                   {"format_version", std::to_string(kCheckpointFormatVersion)},
                                                   {"step", step_text},
                                                   {"config", state.config_json}};
    if (!state.data_ids.empty()) metadata["data"] = state.data_ids;
    const FileChecksum state_sum = write_safetensors((tmp / kStateFile).string(), moments, metadata);
    write_complete_marker(tmp, state.step, model_sum, state_sum);  // also fsyncs tmp: the three entries are durable

    if (fs::exists(final_dir, ec)) discard(root, final_dir);
    fs::rename(tmp, final_dir, ec);
    if (ec) throw Error(final_dir.string() + ": cannot rename " + tmp.string() + " into place: " + ec.message());
    sync_directory(root.string());
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }

  if (keep > 0) {
    const auto all = list_checkpoints(run_dir);
    if (all.size() > static_cast<size_t>(keep)) {
      for (size_t i = 0; i + keep < all.size(); ++i)
        if (all[i].path != final_dir) discard(root, all[i].path);
      sync_directory(root.string());
    }
  }
  return final_dir;
}

std::string read_checkpoint_config(const fs::path& checkpoint) {
  const SafetensorsReader state((checkpoint / kStateFile).string());
  const auto it = state.metadata().find("config");
  if (it == state.metadata().end()) throw Error(state.path() + ": no config in __metadata__");
  return it->second;
}

std::vector<std::string> verify_checkpoint(const fs::path& checkpoint) {
  std::error_code ec;
  if (!fs::is_directory(checkpoint, ec)) throw Error(checkpoint.string() + ": no such checkpoint directory");
  if (!fs::is_regular_file(checkpoint / kCompleteFile, ec))
    throw Error(checkpoint.string() + ": not a complete checkpoint (no " + kCompleteFile + " file)");
  const auto recorded = read_complete_marker(checkpoint);
  std::vector<std::string> notes;
  if (recorded.empty())
    notes.push_back((checkpoint / kCompleteFile).string() + ": records no file checksums (an older blocklab)");
  for (const char* name : {kModelFile, kStateFile}) {
    const auto it = recorded.find(name);
    verify_file(checkpoint / name, it == recorded.end() ? nullptr : &it->second, notes);
  }
  return notes;
}

std::vector<std::string> read_checkpoint(const fs::path& checkpoint, TrainingState& out) {
  check_layout(out);
  std::vector<std::string> notes = verify_checkpoint(checkpoint);
  const SafetensorsReader model((checkpoint / kModelFile).string());
  const SafetensorsReader state((checkpoint / kStateFile).string());

  // --- metadata ------------------------------------------------------------------------------------
  auto meta = [&](const char* key) -> const std::string& {
    const auto it = state.metadata().find(key);
    if (it == state.metadata().end()) throw Error(state.path() + ": no '" + key + "' in __metadata__");
    return it->second;
  };
  if (meta("format") != kFormat)
    throw Error(state.path() + ": format '" + meta("format") + "' is not " + kFormat);
  if (meta("format_version") != std::to_string(kCheckpointFormatVersion))
    throw Error(state.path() + ": checkpoint format version " + meta("format_version") +
                " is not supported (this build reads version " + std::to_string(kCheckpointFormatVersion) + ")");
  (void)meta("config");
  // A text run resumes on the token ids it trained on (tokens.bin may have been made again from a changed
  // file or with another tokenizer).
  if (const auto it = state.metadata().find("data"); it != state.metadata().end() && it->second != out.data_ids)
    throw Error(checkpoint.string() + ": the run trained on " + it->second + ", but its data now gives " +
                (out.data_ids.empty() ? std::string("no token ids") : out.data_ids) +
                " (the data file or the tokenizer changed); a resumed run must train on the same text: restore "
                "it, or start a new run");

  // --- tensors: every expected name, dtype and shape, and nothing else ----------------------------------
  auto expect = [](const SafetensorsReader& r, const std::string& name, DType dtype,
                   const std::vector<int64_t>& shape) -> const TensorEntry& {
    const TensorEntry* e = r.find(name);
    if (e == nullptr) throw Error(r.path() + ": missing tensor " + name);
    if (e->dtype != dtype)
      throw Error(r.path() + ": tensor " + name + " has dtype " + dtype_name(e->dtype) + ", expected " + dtype_name(dtype));
    if (e->shape != shape)
      throw Error(r.path() + ": tensor " + name + " has shape " + format_shape(e->shape) + ", expected " +
                  format_shape(shape) + " (from the run's config)");
    return *e;
  };
  struct Copy {
    const SafetensorsReader* reader;
    const TensorEntry* entry;
    std::span<float> into;
  };
  std::vector<Copy> copies;
  for (const auto& t : out.layout) {
    copies.push_back({&model, &expect(model, t.name, DType::F32, t.shape), out.params.subspan(t.offset, t.numel)});
    for (const auto& a : out.optimizer_state)
      copies.push_back(
          {&state, &expect(state, a.name + "." + t.name, DType::F32, t.shape), a.values.subspan(t.offset, t.numel)});
  }
  if (model.tensors().size() != out.layout.size()) {
    for (const auto& e : model.tensors())
      if (std::none_of(out.layout.begin(), out.layout.end(), [&](const auto& t) { return t.name == e.name; }))
        throw Error(model.path() + ": unexpected tensor " + e.name + " (not a parameter of the run's model)");
  }
  auto counter = [&](const char* name) {
    int64_t v = 0;
    state.read(expect(state, name, DType::I64, {}), std::span<int64_t>(&v, 1));
    return v;
  };
  const int64_t step = counter(kStep), adam_steps = counter(kAdamStep), skipped = counter(kSkippedSteps),
                batches = counter(kBatchesDrawn);
  std::array<int64_t, 4> rng{};
  state.read(expect(state, kDataRng, DType::I64, {4}), std::span<int64_t>(rng));
  const size_t expected_state_tensors = out.optimizer_state.size() * out.layout.size() + 5;
  if (state.tensors().size() != expected_state_tensors)
    throw Error(state.path() + ": holds " + std::to_string(state.tensors().size()) + " tensors, expected " +
                std::to_string(expected_state_tensors));

  // --- counters ---------------------------------------------------------------------------------------
  auto bad = [&](const std::string& why) { throw Error(state.path() + ": " + why); };
  if (step < 0 || adam_steps < 0 || skipped < 0 || batches < 0) bad("negative step counter");
  if (adam_steps + skipped != step)
    bad("adam.step (" + std::to_string(adam_steps) + ") + skipped_steps (" + std::to_string(skipped) +
        ") != step (" + std::to_string(step) + ")");
  if (meta("step") != std::to_string(step)) bad("__metadata__ step " + meta("step") + " != step tensor " + std::to_string(step));
  int64_t dir_step = 0;
  if (parse_checkpoint_name(checkpoint.filename().string(), dir_step) && dir_step != step)
    bad("holds step " + std::to_string(step) + " but the directory is " + checkpoint.filename().string());
  if (model.metadata().count("step") && model.metadata().at("step") != std::to_string(step))
    throw Error(model.path() + ": step " + model.metadata().at("step") + " differs from " + state.path() + "'s " +
                std::to_string(step));
  if (rng == std::array<int64_t, 4>{}) bad("rng.data is all zero (not a valid generator state)");

  // --- everything checked: copy -------------------------------------------------------------------------
  for (const Copy& c : copies) c.reader->read(*c.entry, c.into);
  out.step = step;
  out.optimizer_steps = adam_steps;
  out.skipped_steps = skipped;
  out.data_batches_drawn = batches;
  out.config_json = meta("config");
  for (int i = 0; i < 4; ++i) out.data_rng[i] = bit_cast<uint64_t>(rng[i]);
  return notes;
}

}  // namespace blocklab::io
