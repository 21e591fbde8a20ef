// Checkpoints in process: save/load restores a trainer exactly, the directory protocol (only complete
// checkpoints count, keep the newest K, stale temporaries go), every malformed or mismatched checkpoint is
// refused with a clear error and changes nothing, the non-finite policy, metrics truncation for resume.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "cli_runner.h"
#include "io/checkpoint.h"
#include "io/checksum.h"
#include "io/metrics.h"
#include "io/safetensors.h"
#include "train/run.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/threads.h"

using namespace blocklab;
using blocklab::testing::fresh_dir;
using blocklab::testing::read_text;
namespace fs = std::filesystem;

namespace {

RunConfig tiny(NormPlacement placement = NormPlacement::Pre) {
  RunConfig c;
  c.model.norm_placement = placement;
  c.model.layers = 2;
  c.model.width = 16;
  c.model.heads = 2;
  c.model.vocab = 6;
  c.copy_len = 4;
  c.batch = 4;
  c.steps = 40;
  c.lr = 3e-3;
  c.warmup = 3;
  c.threads = 1;
  resolve(c);
  return c;
}

std::vector<float> copy_of(std::span<const float> s) { return {s.begin(), s.end()}; }

bool same_bytes(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Rewrites a checkpoint's state.safetensors through `edit` (tensors are copied, so edit may drop,
// add or replace entries and metadata).
template <typename Edit>
void rewrite(const fs::path& file, Edit edit) {
  std::vector<std::vector<std::byte>> storage;
  std::vector<io::TensorToWrite> tensors;
  std::map<std::string, std::string> metadata;
  {
    const io::SafetensorsReader r(file.string());
    metadata = r.metadata();
    storage.reserve(r.tensors().size());
    for (const auto& t : r.tensors()) {
      const auto b = r.bytes(t);
      storage.emplace_back(b.begin(), b.end());
      tensors.push_back({t.name, t.dtype, t.shape, storage.back()});
    }
  }
  edit(tensors, metadata);
  const io::FileChecksum sum = io::write_safetensors(file.string(), tensors, metadata);
  // A consistent but wrong checkpoint: COMPLETE records the rewritten file, so the content checks speak.
  const fs::path marker = file.parent_path() / "COMPLETE";
  std::istringstream lines(read_text(marker));
  std::string line, text;
  while (std::getline(lines, line)) {
    if (line.starts_with(file.filename().string() + " "))
      line = file.filename().string() + " " + std::to_string(sum.bytes) + " xxh3_64:" + io::checksum_hex(sum.checksum);
    text += line + "\n";
  }
  std::ofstream(marker, std::ios::trunc) << text;
}

}  // namespace

TEST(Checkpoint, SaveAndLoadContinueBitIdentically) {
  set_num_threads(1);
  const fs::path dir = fresh_dir("ckpt_roundtrip");
  const RunConfig c = tiny();
  Trainer a(c);
  for (int s = 0; s < 7; ++s) a.step();
  const fs::path written = io::write_checkpoint(dir, a.checkpoint_state(), 0);
  EXPECT_EQ(written, dir / "checkpoints" / "step_0000007");
  EXPECT_TRUE(fs::exists(written / "model.safetensors"));
  EXPECT_TRUE(fs::exists(written / "state.safetensors"));
  EXPECT_TRUE(fs::exists(written / "COMPLETE"));

  Trainer b(c);
  b.load_checkpoint(written);
  EXPECT_EQ(b.steps_done(), 7);
  EXPECT_EQ(b.optimizer().steps_taken(), 7);
  EXPECT_EQ(b.task().rng().state(), a.task().rng().state());
  EXPECT_EQ(b.task().batches_drawn(), 7u);
  EXPECT_TRUE(same_bytes(a.model().params(), b.model().params()));
  EXPECT_TRUE(same_bytes(a.optimizer().state("adam.m"), b.optimizer().state("adam.m")));
  EXPECT_TRUE(same_bytes(a.optimizer().state("adam.v"), b.optimizer().state("adam.v")));
  for (int s = 0; s < 5; ++s) {
    const StepResult ra = a.step(), rb = b.step();
    EXPECT_EQ(ra.step, rb.step);
    EXPECT_EQ(std::memcmp(&ra.loss, &rb.loss, sizeof ra.loss), 0) << "step " << ra.step;
    EXPECT_EQ(std::memcmp(&ra.grad_norm, &rb.grad_norm, sizeof ra.grad_norm), 0);
    EXPECT_EQ(ra.lr, rb.lr);
  }
  EXPECT_TRUE(same_bytes(a.model().params(), b.model().params()));

  // The model file holds exactly the parameters under their PyTorch names, F32, with the config in state.
  const io::SafetensorsReader model((written / "model.safetensors").string());
  ASSERT_EQ(model.tensors().size(), a.model().table().specs().size());
  const auto& qkv = model.at("blocks.1.attn.qkv.weight");
  EXPECT_EQ(qkv.dtype, io::DType::F32);
  EXPECT_EQ(qkv.shape, (std::vector<int64_t>{48, 16}));
  const io::SafetensorsReader state((written / "state.safetensors").string());
  EXPECT_EQ(state.metadata().at("format_version"), "1");
  EXPECT_EQ(nlohmann::json::parse(state.metadata().at("config"))["width"], 16);
  EXPECT_NE(state.find("adam.m.head.weight"), nullptr);
  EXPECT_NE(state.find("adam.v.tok_emb.weight"), nullptr);
  EXPECT_EQ(state.read_i64("rng.data").size(), 4u);
  EXPECT_EQ(state.read_i64("data.batches_drawn")[0], 7);
}

TEST(Checkpoint, OnlyCompleteCanonicalDirectoriesCountAndOldOnesArePruned) {
  set_num_threads(1);
  const fs::path dir = fresh_dir("ckpt_list");
  Trainer t(tiny());
  EXPECT_TRUE(io::list_checkpoints(dir).empty());  // no checkpoints/ at all
  for (int s = 1; s <= 3; ++s) {
    t.step();
    io::write_checkpoint(dir, t.checkpoint_state(), 0);
  }
  const fs::path root = dir / "checkpoints";
  fs::create_directories(root / "step_0000009");                 // no COMPLETE: an unfinished copy
  fs::create_directories(root / "step_12");                      // not the canonical name
  fs::create_directories(root / ".tmp_step_0000004.999");        // a write that was killed
  fs::create_directories(root / ".trash_step_0000001.999");      // a deletion that was killed
  std::ofstream(root / "step_0000010") << "a file";
  auto steps = [&] {
    std::vector<int64_t> s;
    for (const auto& c : io::list_checkpoints(dir)) s.push_back(c.step);
    return s;
  };
  EXPECT_EQ(steps(), (std::vector<int64_t>{1, 2, 3}));

  t.step();
  io::write_checkpoint(dir, t.checkpoint_state(), 2);  // keep the newest two
  EXPECT_EQ(steps(), (std::vector<int64_t>{3, 4}));
  EXPECT_FALSE(fs::exists(root / ".tmp_step_0000004.999"));
  EXPECT_FALSE(fs::exists(root / ".trash_step_0000001.999"));
  EXPECT_TRUE(fs::exists(root / "step_0000009"));  // not ours to delete: never complete, never counted

  // Writing a step that exists replaces it.
  io::write_checkpoint(dir, t.checkpoint_state(), 2);
  EXPECT_EQ(steps(), (std::vector<int64_t>{3, 4}));
}

TEST(Checkpoint, MismatchedModelIsRefusedAndChangesNothing) {
  set_num_threads(1);
  const fs::path dir = fresh_dir("ckpt_mismatch");
  Trainer small(tiny());
  small.step();
  const fs::path written = io::write_checkpoint(dir, small.checkpoint_state(), 0);

  RunConfig wide_config = tiny();
  wide_config.model.width = 32;
  Trainer wide(wide_config);
  const auto before = copy_of(wide.model().params());
  try {
    wide.load_checkpoint(written);
    FAIL() << "loaded a width-16 checkpoint into a width-32 model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has shape [6, 16], expected [6, 32]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(same_bytes(before, wide.model().params()));
  EXPECT_EQ(wide.steps_done(), 0);

  RunConfig post_config = tiny(NormPlacement::Post);  // no final_norm: an unexpected tensor
  Trainer post(post_config);
  EXPECT_THROW(post.load_checkpoint(written), Error);
}

struct Corruption {
  std::string name, expected;
  std::function<void(std::vector<io::TensorToWrite>&, std::map<std::string, std::string>&)> edit;
};

class CheckpointCorruption : public ::testing::TestWithParam<Corruption> {};

TEST_P(CheckpointCorruption, IsRefusedWithAReasonAndChangesNothing) {
  set_num_threads(1);
  const fs::path dir = fresh_dir("ckpt_corrupt_" + GetParam().name);
  Trainer t(tiny());
  for (int s = 0; s < 3; ++s) t.step();
  const fs::path written = io::write_checkpoint(dir, t.checkpoint_state(), 0);
  rewrite(written / "state.safetensors", GetParam().edit);
  Trainer fresh(tiny());
  const auto before = copy_of(fresh.model().params());
  try {
    fresh.load_checkpoint(written);
    FAIL() << "accepted a corrupted checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().expected), std::string::npos) << e.what();
  }
  EXPECT_TRUE(same_bytes(before, fresh.model().params()));
  EXPECT_EQ(fresh.steps_done(), 0);
  EXPECT_EQ(fresh.optimizer().steps_taken(), 0);
}

namespace {
using Tensors = std::vector<io::TensorToWrite>;
using Meta = std::map<std::string, std::string>;
void drop(Tensors& t, const std::string& name) {
  std::erase_if(t, [&](const io::TensorToWrite& x) { return x.name == name; });
}
const int64_t kFive = 5;
const float kOne[1] = {1.0f};
}  // namespace

INSTANTIATE_TEST_SUITE_P(
    Cases, CheckpointCorruption,
    ::testing::Values(
        Corruption{"missing_moment", "missing tensor adam.v.head.weight", [](Tensors& t, Meta&) { drop(t, "adam.v.head.weight"); }},
        Corruption{"missing_rng", "missing tensor rng.data", [](Tensors& t, Meta&) { drop(t, "rng.data"); }},
        Corruption{"extra_tensor", "holds 64 tensors, expected 63",
                   [](Tensors& t, Meta&) { t.push_back(io::tensor_view("extra", {1}, std::span<const float>(kOne))); }},
        Corruption{"version", "format version 2 is not supported", [](Tensors&, Meta& m) { m["format_version"] = "2"; }},
        Corruption{"format", "is not blocklab-checkpoint", [](Tensors&, Meta& m) { m["format"] = "pt"; }},
        Corruption{"no_config", "no 'config' in __metadata__", [](Tensors&, Meta& m) { m.erase("config"); }},
        Corruption{"counters", "adam.step (5) + skipped_steps (0) != step (3)",
                   [](Tensors& t, Meta&) {
                     drop(t, "adam.step");
                     t.push_back(io::tensor_view("adam.step", {}, std::span<const int64_t>(&kFive, 1)));
                   }},
        Corruption{"metadata_step", "__metadata__ step 4 != step tensor 3", [](Tensors&, Meta& m) { m["step"] = "4"; }},
        Corruption{"moment_dtype", "adam.m.tok_emb.weight has dtype F64, expected F32",
                   [](Tensors& t, Meta&) {
                     static std::vector<double> d(96, 0.0);
                     drop(t, "adam.m.tok_emb.weight");
                     t.push_back(io::tensor_view("adam.m.tok_emb.weight", {6, 16}, std::span<const double>(d)));
                   }}),
    [](const auto& info) { return info.param.name; });

TEST(Checkpoint, TruncatedOrIncompleteFilesAreRefused) {
  set_num_threads(1);
  const fs::path dir = fresh_dir("ckpt_truncated");
  Trainer t(tiny());
  t.step();
  const fs::path written = io::write_checkpoint(dir, t.checkpoint_state(), 0);
  Trainer fresh(tiny());
  fs::resize_file(written / "model.safetensors", fs::file_size(written / "model.safetensors") - 3);
  EXPECT_THROW(fresh.load_checkpoint(written), Error);
  fs::remove(written / "COMPLETE");
  try {
    fresh.load_checkpoint(written);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a complete checkpoint"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(io::list_checkpoints(dir).empty());
}

TEST(NonFinite, SkippedStepLeavesWeightsMomentsAndAdamStepUntouched) {
  set_num_threads(1);
  Trainer t(tiny());
  t.inject_nonfinite({3, 4}, "blocks.1.mlp.fc2.bias");
  t.step();
  t.step();
  const auto params = copy_of(t.model().params()), m = copy_of(t.optimizer().state("adam.m")),
             v = copy_of(t.optimizer().state("adam.v"));
  const auto rng_before = t.task().rng().state();
  const StepResult r = t.step();
  EXPECT_TRUE(r.nonfinite);
  EXPECT_TRUE(std::isnan(r.grad_norm));
  EXPECT_EQ(t.first_nonfinite_grad(), "blocks.1.mlp.fc2.bias");
  EXPECT_TRUE(same_bytes(params, t.model().params()));
  EXPECT_TRUE(same_bytes(m, t.optimizer().state("adam.m")));
  EXPECT_TRUE(same_bytes(v, t.optimizer().state("adam.v")));
  EXPECT_EQ(t.optimizer().steps_taken(), 2);
  EXPECT_NE(t.task().rng().state(), rng_before);  // the batch was consumed: the next step sees new data
  EXPECT_TRUE(t.step().nonfinite);
  EXPECT_EQ(t.skipped_steps(), 2);
  EXPECT_EQ(t.steps_done(), 4);
  const StepResult next = t.step();
  EXPECT_FALSE(next.nonfinite);
  EXPECT_EQ(t.first_nonfinite_grad(), "");
  EXPECT_EQ(t.optimizer().steps_taken(), 3);
  EXPECT_FALSE(same_bytes(params, t.model().params()));
  EXPECT_THROW(t.inject_nonfinite({1}, "no.such.tensor"), Error);
}

TEST(ResumeConfig, OnlyRunLengthAndHousekeepingKeysMayChange) {
  ResumePoint from;
  from.config = tiny();
  from.step = 10;
  RunConfig c = from.config;
  c.steps = 80;
  c.threads = 2;
  c.checkpoint_every = 5;
  c.keep_checkpoints = 0;
  c.on_nonfinite = NonFinitePolicy::Skip;
  c.log_every = 3;
  EXPECT_NO_THROW(check_resume_config(from, c));
  c.steps = 9;
  EXPECT_THROW(check_resume_config(from, c), Error);
  for (const std::string key : {"width", "lr", "seed", "norm_placement", "warmup", "batch"}) {
    RunConfig changed = from.config;
    set_config_value(changed, key, key == "norm_placement" ? "post" : "7");
    try {
      check_resume_config(from, changed);
      FAIL() << key << " changed on resume";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

TEST(Metrics, KeepThroughDropsLaterRowsAndAnUnfinishedLine) {
  const fs::path dir = fresh_dir("metrics_keep");
  const std::string path = (dir / "metrics.csv").string();
  const std::vector<std::string> columns = {"step", "loss", "lr", "grad_norm", "skipped"};
  std::ofstream(path) << "step,loss,lr,grad_norm,skipped\n1,2.5,0.1,1,0\n2,2.4,0.1,1,0\n3,2.3,0.1,1,0\n4,2.2,0.1,1,0\n5,2.";
  io::keep_metrics_through(path, columns, 3);
  EXPECT_EQ(read_text(path), "step,loss,lr,grad_norm,skipped\n1,2.5,0.1,1,0\n2,2.4,0.1,1,0\n3,2.3,0.1,1,0\n");
  io::keep_metrics_through(path, columns, 10);  // nothing later: unchanged
  EXPECT_EQ(read_text(path), "step,loss,lr,grad_norm,skipped\n1,2.5,0.1,1,0\n2,2.4,0.1,1,0\n3,2.3,0.1,1,0\n");
  {
    io::MetricsWriter w(path, columns, /*append=*/true);
    w.row(4, {2.0, 0.1, 1.0, 0.0});
  }
  EXPECT_EQ(io::read_metrics(path).rows.size(), 4u);
  std::ofstream(path) << "step,loss\n1,2\n";
  EXPECT_THROW(io::keep_metrics_through(path, columns, 1), Error);
  fs::remove(path);
  io::keep_metrics_through(path, columns, 3);  // missing: a fresh file with the header
  EXPECT_EQ(read_text(path), "step,loss,lr,grad_norm,skipped\n");
}

// ---------------------------------------------------------------------------------------------------------
// Checksums and falling back

namespace {

std::vector<char> bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void put_bytes(const fs::path& p, const std::vector<char>& b) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(b.data(), static_cast<std::streamsize>(b.size()));
}

}  // namespace

// One flipped bit at a sample of offsets of each file (length field, header JSON, header padding, the
// first, middle and last byte of every tensor): every flip is found, a flip in a tensor names it, and
// loading refuses without touching the trainer.
TEST(CheckpointChecksums, EveryFlippedByteIsFoundAndNamed) {
  set_num_threads(1);
  const fs::path dir = fresh_dir("ckpt_flips");
  Trainer t(tiny());
  for (int s = 0; s < 2; ++s) t.step();
  const fs::path written = io::write_checkpoint(dir, t.checkpoint_state(), 0);
  ASSERT_TRUE(io::verify_checkpoint(written).empty());
  Trainer fresh(tiny());
  const auto before = copy_of(fresh.model().params());
  int flips = 0;
  for (const char* name : {"model.safetensors", "state.safetensors"}) {
    const fs::path file = written / name;
    const std::vector<char> original = bytes_of(file);
    std::vector<std::pair<uint64_t, std::string>> offsets;  // offset, tensor name ("" for the header)
    uint64_t data_offset = 0;
    {
      const io::SafetensorsReader r(file.string());
      data_offset = r.data_offset();
      for (const auto& e : r.tensors())
        for (uint64_t at : {e.begin, (e.begin + e.end) / 2, e.end - 1}) offsets.push_back({data_offset + at, e.name});
    }
    for (uint64_t at : {uint64_t{0}, uint64_t{3}, uint64_t{8}, uint64_t{20}, data_offset / 2, data_offset - 1})
      offsets.push_back({at, ""});
    for (const auto& [at, tensor] : offsets) {
      std::vector<char> damaged = original;
      damaged[at] ^= 0x10;
      put_bytes(file, damaged);
      ++flips;
      try {
        io::verify_checkpoint(written);
        ADD_FAILURE() << name << ": flip at byte " << at << " not detected";
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(name), std::string::npos) << what;
        if (!tensor.empty()) {
          EXPECT_NE(what.find("tensor '" + tensor + "'"), std::string::npos) << what;
        }
      }
      if (at % 7 == 0) {  // loading refuses too, and changes nothing
        EXPECT_THROW(fresh.load_checkpoint(written), Error);
        EXPECT_TRUE(same_bytes(before, fresh.model().params()));
        EXPECT_EQ(fresh.steps_done(), 0);
      }
    }
    put_bytes(file, original);
  }
  EXPECT_GT(flips, 100);
  EXPECT_TRUE(io::verify_checkpoint(written).empty());
}

// A checkpoint of the first format (COMPLETE says only "step N") still loads, with a note.
TEST(CheckpointChecksums, MarkerWithoutChecksumsLoadsWithANote) {
  set_num_threads(1);
  const fs::path dir = fresh_dir("ckpt_old_marker");
  Trainer t(tiny());
  t.step();
  const fs::path written = io::write_checkpoint(dir, t.checkpoint_state(), 0);
  std::ofstream(written / "COMPLETE", std::ios::trunc) << "step 1\n";
  const auto notes = io::verify_checkpoint(written);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("records no file checksums"), std::string::npos) << notes[0];
  Trainer fresh(tiny());
  EXPECT_NO_THROW(fresh.load_checkpoint(written));
  EXPECT_EQ(fresh.steps_done(), 1);
}

struct Damage {
  std::string name;
  std::function<void(const fs::path& checkpoint)> apply;
  std::string expected;
};
class ResumeFallback : public ::testing::TestWithParam<Damage> {};

// The newest checkpoint damaged in one way: resume takes the one before and says why it skipped the newest.
TEST_P(ResumeFallback, TakesTheNewestThatVerifies) {
  set_num_threads(1);
  const fs::path dir = fresh_dir("resume_fallback_" + GetParam().name);
  RunConfig c = tiny();
  c.out = dir.string();
  c.steps = 6;
  c.checkpoint_every = 2;
  c.keep_checkpoints = 0;
  train_run(c, false);
  const auto all = io::list_checkpoints(dir);
  ASSERT_EQ(all.size(), 3u);
  GetParam().apply(all.back().path);
  const ResumePoint p = find_resume_point(dir.string());
  EXPECT_EQ(p.step, 4);
  EXPECT_EQ(p.checkpoint, all[1].path);
  ASSERT_EQ(p.skipped.size(), 1u);
  EXPECT_EQ(p.skipped[0].path, all.back().path);
  EXPECT_NE(p.skipped[0].reason.find(GetParam().expected), std::string::npos) << p.skipped[0].reason;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ResumeFallback,
    ::testing::Values(
        Damage{"truncated_model", [](const fs::path& c) { fs::resize_file(c / "model.safetensors", 100); }, "truncated"},
        Damage{"truncated_state", [](const fs::path& c) { fs::resize_file(c / "state.safetensors", 4000); }, "truncated"},
        Damage{"deleted_model", [](const fs::path& c) { fs::remove(c / "model.safetensors"); }, "missing"},
        Damage{"deleted_state", [](const fs::path& c) { fs::remove(c / "state.safetensors"); }, "missing"},
        Damage{"deleted_marker", [](const fs::path& c) { fs::remove(c / "COMPLETE"); }, "no COMPLETE marker"},
        Damage{"damaged_marker", [](const fs::path& c) { std::ofstream(c / "COMPLETE", std::ios::app) << "junk\n"; },
               "damaged marker"},
        Damage{"flipped_state", [](const fs::path& c) {
                 auto b = bytes_of(c / "state.safetensors");
                 b[b.size() - 9] ^= 1;
                 put_bytes(c / "state.safetensors", b);
               }, "tensor 'rng.data': data damaged"}),
    [](const auto& info) { return info.param.name; });

TEST(ResumeFallback, NoneVerifiesIsAnErrorAndChangesNothing) {
  set_num_threads(1);
  const fs::path dir = fresh_dir("resume_fallback_none");
  RunConfig c = tiny();
  c.out = dir.string();
  c.steps = 4;
  c.checkpoint_every = 2;
  c.keep_checkpoints = 0;
  train_run(c, false);
  for (const auto& ref : io::list_checkpoints(dir)) fs::resize_file(ref.path / "model.safetensors", 10);
  const std::string metrics = read_text(dir / "metrics.csv");
  try {
    find_resume_point(dir.string());
    FAIL() << "resumed from a damaged checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint verifies"), std::string::npos) << e.what();
  }
  EXPECT_EQ(io::list_checkpoint_dirs(dir).size(), 2u);
  EXPECT_EQ(fs::file_size(dir / "checkpoints" / "step_0000004" / "model.safetensors"), 10u);
  EXPECT_EQ(read_text(dir / "metrics.csv"), metrics);
}

// A run's training time adds up over the processes that ran it: a resumed run takes the time of the steps before
// its checkpoint from the summary.json its run left at that step (an interruption or the end writes one there),
// and its own summary.json's "seconds" is the whole run's ("seconds_this_process" is what ms_per_step divides).
// Without such a summary (a crash after a periodic checkpoint) the earlier time is not known: "seconds" counts
// this process only, and "seconds_from_step" says so. Checkpoints stay free of wall time (their bytes repeat).
TEST(Resume, TrainingTimeAddsUpOverTheProcesses) {
  set_num_threads(1);
  const fs::path dir = fresh_dir("ckpt_seconds");
  RunConfig c = tiny();
  c.out = (dir / "run").string();
  c.steps = 12;
  c.checkpoint_every = 6;
  c.keep_checkpoints = 0;
  const fs::path summary_file = fs::path(c.out) / "summary.json";
  const RunSummary first = train_run(c, false);
  EXPECT_EQ(first.seconds_before, 0);
  EXPECT_GT(first.seconds, 0);
  EXPECT_NEAR(nlohmann::json::parse(read_text(summary_file))["seconds"].get<double>(), first.seconds, 1e-9);

  RunConfig more = c;
  more.steps = 18;
  const ResumePoint from = find_resume_point(more.out);
  ASSERT_EQ(from.step, 12);
  const RunSummary second = resume_run(more, from);
  EXPECT_NEAR(second.seconds_before, first.seconds, 1e-9);
  EXPECT_GT(second.seconds, 0);
  const auto summary = nlohmann::json::parse(read_text(summary_file));
  EXPECT_NEAR(summary["seconds"].get<double>(), first.seconds + second.seconds, 1e-9);
  EXPECT_NEAR(summary["seconds_this_process"].get<double>(), second.seconds, 1e-9);
  EXPECT_NEAR(summary["ms_per_step"].get<double>(), 1000.0 * second.seconds / 6, 1e-6);
  EXPECT_FALSE(summary.contains("seconds_from_step"));

  // and a third process on top of the second: the time of all three
  RunConfig third_config = more;
  third_config.steps = 20;
  const RunSummary third = resume_run(third_config, find_resume_point(third_config.out));
  EXPECT_NEAR(third.seconds_before, first.seconds + second.seconds, 1e-9);
  EXPECT_NEAR(nlohmann::json::parse(read_text(summary_file))["seconds"].get<double>(),
              first.seconds + second.seconds + third.seconds, 1e-9);

  // no summary at the checkpoint's step (as after a crash): this process's time only, and said so
  fs::remove(summary_file);
  RunConfig last = third_config;
  last.steps = 22;
  const RunSummary fourth = resume_run(last, find_resume_point(last.out));
  EXPECT_LT(fourth.seconds_before, 0);
  const auto summary4 = nlohmann::json::parse(read_text(summary_file));
  EXPECT_NEAR(summary4["seconds"].get<double>(), fourth.seconds, 1e-9);
  EXPECT_EQ(summary4["seconds_from_step"], 20);
  set_num_threads(0);
}
