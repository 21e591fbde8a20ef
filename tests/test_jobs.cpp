// The library layer the front ends call (src/jobs/): a training run with the recorders its config asks for, a
// curvature estimate of a run, the probes of a Hugging Face model. Each job is checked for what it adds over
// the layers below it: the config's recorders installed (and only on request), a resumed run recording with
// the checkpoint's settings, the same numbers as the calls it replaces, and clear errors on bad requests.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "cli_runner.h"
#include "io/csv.h"
#include "jobs/curvature_job.h"
#include "jobs/hf_probe_job.h"
#include "jobs/train_job.h"
#include "probe/curvature_run.h"
#include "util/error.h"

namespace {

using namespace blocklab;
namespace bt = blocklab::testing;
namespace fs = std::filesystem;

const fs::path kHf = fs::path(BLOCKLAB_TEST_DATA) / "hf";

RunConfig tiny_run(const fs::path& out, int steps = 6) {
  RunConfig c;
  c.model.norm_placement = NormPlacement::Pre;
  c.model.layers = 2;
  c.model.width = 16;
  c.model.heads = 2;
  c.model.vocab = 8;
  c.copy_len = 4;
  c.batch = 4;
  c.steps = steps;
  c.lr = 3e-3;
  c.threads = 1;
  c.tensorboard = false;
  c.out = out.string();
  resolve(c);
  return c;
}

// The steps (first column) of a recorder's CSV, once each, in order.
std::vector<int> recorded_steps(const fs::path& csv) {
  std::vector<int> steps;
  for (const io::CsvRecord& r : io::read_csv(csv.string())) {
    if (r.line == 1) continue;
    const int s = std::stoi(r.fields.at(0));
    if (steps.empty() || steps.back() != s) steps.push_back(s);
  }
  return steps;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainJob, InstallsTheRecordersTheConfigNamesAndNothingElse) {
  const fs::path dir = bt::fresh_dir("job_recorders");
  jobs::TrainJob plain;
  plain.config = tiny_run(dir / "plain");
  const jobs::TrainJobResult a = jobs::train_job(plain);
  for (const char* file : {"residual.csv", "curvature.csv", "stream.csv"}) EXPECT_FALSE(fs::exists(dir / "plain" / file)) << file;
  EXPECT_FALSE(a.stream_plot.has_value());

  jobs::TrainJob recorded;
  recorded.config = tiny_run(dir / "recorded");
  recorded.config.probe_every = 3;
  recorded.config.curvature_every = 3;
  recorded.config.curvature_per_block = false;
  recorded.config.stream_every = 2;
  recorded.curvature.options.max_iter = 4;
  recorded.curvature.options.trace_samples = 0;
  int hooked = 0;
  recorded.hook = [&](Trainer&) { ++hooked; };
  const jobs::TrainJobResult b = jobs::train_job(recorded);
  // The recorders never change the run's numbers.
  EXPECT_EQ(bt::read_text(dir / "plain" / "metrics.csv"), bt::read_text(dir / "recorded" / "metrics.csv"));
  EXPECT_EQ(a.summary.final_loss, b.summary.final_loss);
  EXPECT_EQ(recorded_steps(dir / "recorded" / "residual.csv"), (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(recorded_steps(dir / "recorded" / "curvature.csv"), (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(recorded_steps(dir / "recorded" / "stream.csv"), (std::vector<int>{0, 2, 4, 6}));
  // curvature_per_block = false: the per-block columns are there, and empty.
  const auto rows = io::read_csv((dir / "recorded" / "curvature.csv").string());
  ASSERT_GE(rows.size(), 2u);
  EXPECT_EQ(rows[0].fields.back(), "block_2");
  EXPECT_EQ(rows[1].fields.back(), "");
  EXPECT_EQ(hooked, 7);  // the front end's own hook: before the first step and after each of the 6
  ASSERT_TRUE(b.stream_plot.has_value());  // stream_every: the figure is drawn, or says why not
  EXPECT_TRUE(b.stream_plot->drawn || !b.stream_plot->message.empty());
}

TEST(TrainJob, AResumedRunRecordsWithTheCheckpointsSettings) {
  // probe_every is a config key: the checkpoint carries it, so a resumed run goes on recording without being
  // told again, and its residual.csv is the uninterrupted run's.
  const fs::path dir = bt::fresh_dir("job_resume");
  jobs::TrainJob whole;
  whole.config = tiny_run(dir / "whole", 8);
  whole.config.probe_every = 2;
  jobs::train_job(whole);

  jobs::TrainJob first;
  first.config = tiny_run(dir / "parts", 4);
  first.config.probe_every = 2;
  first.config.checkpoint_every = 4;
  jobs::train_job(first);
  const ResumePoint from = find_resume_point((dir / "parts").string());
  EXPECT_EQ(from.config.probe_every, 2);
  jobs::TrainJob rest;
  rest.config = from.config;
  rest.config.steps = 8;
  rest.resume = &from;
  jobs::train_job(rest);
  EXPECT_EQ(bt::read_text(dir / "whole" / "residual.csv"), bt::read_text(dir / "parts" / "residual.csv"));
  EXPECT_EQ(bt::read_text(dir / "whole" / "metrics.csv"), bt::read_text(dir / "parts" / "metrics.csv"));
}

TEST(TrainJob, RecorderKeysAreCheckedByName) {
  RunConfig c = tiny_run(bt::fresh_dir("job_keys") / "run");
  EXPECT_NE(error_of([&] { set_config_value(c, "probe_every", "-2"), resolve(c); }).find("probe_every must be >= 0"),
            std::string::npos);
  c = tiny_run(bt::fresh_dir("job_keys") / "run");
  EXPECT_NE(error_of([&] { set_config_value(c, "curvature_every", "-1"), resolve(c); }).find("curvature_every must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { set_config_value(c, "curvature_per_block", "maybe"); }), "");
}

class CurvatureJobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(bt::fresh_dir("job_curvature"));
    jobs::TrainJob job;
    job.config = tiny_run(*dir_ / "run", 4);
    job.config.checkpoint_every = 2;
    jobs::train_job(job);
  }
  static void TearDownTestSuite() { delete dir_; }
  static jobs::CurvatureJob job() {
    jobs::CurvatureJob j;
    j.run_dir = (*dir_ / "run").string();
    j.threads = 1;
    j.options.max_iter = 8;
    j.options.trace_samples = 2;
    j.options.block_max_iter = 4;
    return j;
  }
  static fs::path* dir_;
};
fs::path* CurvatureJobTest::dir_ = nullptr;

TEST_F(CurvatureJobTest, EqualsTheEstimateOnTheSameWeightsAndBatch) {
  jobs::CurvatureJob j = job();
  j.checkpoint = 2;
  jobs::CurvatureStart start;
  int started = 0;
  j.on_start = [&](const jobs::CurvatureStart& s) {
    start = s;
    ++started;
  };
  const jobs::CurvatureReport r = jobs::curvature_job(j);
  EXPECT_EQ(started, 1);
  EXPECT_EQ(start.step, 2);
  EXPECT_EQ(start.sequences, 4);
  EXPECT_EQ(start.tokens, 8);
  EXPECT_GE(start.gradients_at_most, r.result.gradients);

  // The same estimate assembled from the probe layer by hand.
  const probe::RunWeights w = probe::load_run_weights(j.run_dir, 2);
  const Batch batch = probe::curvature_batch(w.config, probe::curvature_batch_seed(w.config.seed), w.config.batch);
  probe::CurvatureLoss loss(w.config.model, std::span<const float>(w.params), batch);
  const probe::AdamMoments adam{w.adam_v, w.adam_steps, w.config.optimizer.beta1, w.config.optimizer.beta2, w.config.optimizer.eps};
  const probe::CurvatureResult direct = probe::measure_curvature(loss, &adam, j.options);
  EXPECT_EQ(r.result.top, direct.top);
  EXPECT_EQ(r.result.per_block, direct.per_block);
  ASSERT_TRUE(r.result.preconditioned && direct.preconditioned);
  EXPECT_EQ(*r.result.preconditioned, *direct.preconditioned);
  EXPECT_EQ(r.lr, probe::next_learning_rate(w.config, 2));
  EXPECT_DOUBLE_EQ(r.edge_adam, 38 / r.lr);

  const nlohmann::json js = jobs::to_json(r);
  EXPECT_EQ(js["sharpness"].get<double>(), r.result.top[0]);
  EXPECT_EQ(js["batch"]["source"], "task");
  EXPECT_EQ(js["batch"]["seed"].get<uint64_t>(), probe::curvature_batch_seed(w.config.seed));
  EXPECT_EQ(js["step"], 2);
  EXPECT_EQ(js["threads"], 1);
  EXPECT_EQ(js["per_block"].size(), 2u);
}

TEST_F(CurvatureJobTest, NonFiniteNumbersAreNullInJson) {
  jobs::CurvatureReport r;
  r.result.top = {std::numeric_limits<double>::quiet_NaN(), 1.5};
  r.result.per_block = {std::numeric_limits<double>::infinity()};
  r.result.loss = std::numeric_limits<double>::quiet_NaN();
  r.lr = 1e-3;
  r.edge_gd = 2000;
  r.edge_adam = std::numeric_limits<double>::infinity();
  const nlohmann::json js = jobs::to_json(r);
  EXPECT_TRUE(js["sharpness"].is_null());
  EXPECT_TRUE(js["top"][0].is_null());
  EXPECT_EQ(js["top"][1].get<double>(), 1.5);
  EXPECT_TRUE(js["per_block"][0].is_null());
  EXPECT_TRUE(js["loss"].is_null());
  EXPECT_TRUE(js["edge_adam"].is_null());
  EXPECT_TRUE(js["preconditioned_sharpness"].is_null());  // no Adam state
  EXPECT_TRUE(js["preconditioned_converged"].is_null());
  EXPECT_EQ(js["trace_samples"], 0);
}

TEST_F(CurvatureJobTest, RefusesBadRequestsByName) {
  auto refused = [](const std::function<void(jobs::CurvatureJob&)>& edit) {
    jobs::CurvatureJob j = job();
    edit(j);
    return error_of([&] { jobs::curvature_job(j); });
  };
  EXPECT_NE(refused([](auto& j) { j.options.top = 0; }).find("top must be >= 1"), std::string::npos);
  EXPECT_NE(refused([](auto& j) { j.options.max_iter = 0; }).find("max_iter must be >= 1"), std::string::npos);
  EXPECT_NE(refused([](auto& j) { j.options.tol = 0; }).find("tol must be > 0"), std::string::npos);
  EXPECT_NE(refused([](auto& j) { j.options.order = 3; }).find("order must be 2 or 4"), std::string::npos);
  EXPECT_NE(refused([](auto& j) { j.options.trace_samples = -1; }).find("trace_samples must be >= 0"), std::string::npos);
  EXPECT_NE(refused([](auto& j) { j.batch = 70000; }).find("batch must be in 0..65536"), std::string::npos);
  EXPECT_NE(refused([](auto& j) { j.threads = -1; }).find("threads must be >= 0"), std::string::npos);
  EXPECT_NE(refused([](auto& j) {
              j.batch_seed = 1;
              j.tokens = "batch.npy";
            }).find("not both"),
            std::string::npos);
  EXPECT_NE(refused([](auto& j) { j.checkpoint = 3; }).find("no checkpoint at step 3"), std::string::npos);
  EXPECT_NE(refused([](auto& j) { j.run_dir += "-missing"; }).find("no such run directory"), std::string::npos);
}

TEST(HfProbeJob, ResidualFromTextAndFromIdsAgreeAndWriteOnlyWhenAsked) {
  const fs::path model = kHf / "qwen3";
  jobs::ResidualProbeJob from_ids;
  from_ids.prompt.model_dir = model.string();
  from_ids.prompt.tokens = std::vector<int32_t>{1, 5, 9, 2};
  from_ids.prompt.threads = 1;
  int layers_seen = 0;
  from_ids.on_layer = [&](const probe::ResidualLayerStats&) { ++layers_seen; };
  const jobs::ResidualProbeJobResult a = jobs::residual_probe_job(from_ids);
  EXPECT_TRUE(a.written.empty());  // no output directory: nothing written
  EXPECT_EQ(a.tokens, (std::vector<int32_t>{1, 5, 9, 2}));
  EXPECT_EQ(layers_seen, static_cast<int>(a.result.layers.size()));
  EXPECT_GE(a.result.layers.size(), 2u);

  const fs::path out = bt::fresh_dir("job_hf_residual");
  jobs::ResidualProbeJob written = from_ids;
  written.out = out.string();
  written.plot = false;
  const jobs::ResidualProbeJobResult b = jobs::residual_probe_job(written);
  EXPECT_EQ(b.written, (std::vector<std::string>{"residual.csv", "residual.json"}));
  EXPECT_TRUE(fs::exists(out / "residual.csv"));
  ASSERT_EQ(a.result.layers.size(), b.result.layers.size());
  for (size_t l = 0; l < a.result.layers.size(); ++l)
    EXPECT_EQ(a.result.layers[l].mean_vector_norm, b.result.layers[l].mean_vector_norm) << l;
  // Nothing already there is replaced unless asked.
  EXPECT_NE(error_of([&] { jobs::residual_probe_job(written); }).find("already holds residual.csv"), std::string::npos);
  written.overwrite = true;
  EXPECT_EQ(error_of([&] { jobs::residual_probe_job(written); }), "");
}

TEST(HfProbeJob, RefusesAPromptGivenTwiceOrNotAtAllAndTextWithoutATokenizer) {
  jobs::LogitsProbeJob job;
  job.prompt.model_dir = (kHf / "qwen3").string();
  EXPECT_NE(error_of([&] { jobs::logits_probe_job(job); }).find("give the prompt as text or as token ids"),
            std::string::npos);
  job.prompt.text = "hello";
  job.prompt.tokens = std::vector<int32_t>{1};
  EXPECT_NE(error_of([&] { jobs::logits_probe_job(job); }).find("not both"), std::string::npos);
  job.prompt.tokens.reset();
  job.top = 0;
  EXPECT_NE(error_of([&] { jobs::logits_probe_job(job); }).find("top must be at least 1"), std::string::npos);
  job.top = 3;
  job.prompt.tokens = std::vector<int32_t>{};
  job.prompt.text.reset();
  EXPECT_NE(error_of([&] { jobs::logits_probe_job(job); }).find("the prompt has no tokens"), std::string::npos);
  const fs::path bare = bt::fresh_dir("job_hf_bare");  // the model without its tokenizer.json
  for (const auto& entry : fs::directory_iterator(kHf / "qwen3"))
    if (entry.path().filename() != "tokenizer.json") fs::copy(entry.path(), bare / entry.path().filename());
  job.prompt.model_dir = bare.string();
  job.prompt.tokens.reset();
  job.prompt.text = "hello";
  EXPECT_NE(error_of([&] { jobs::logits_probe_job(job); }).find("a text prompt needs the model's tokenizer.json"),
            std::string::npos);
  job.prompt.text.reset();
  job.prompt.tokens = std::vector<int32_t>{1, 2, 3};
  const jobs::LogitsProbeJobResult r = jobs::logits_probe_job(job);  // ids need no tokenizer
  EXPECT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.tokenizer, nullptr);
}

}  // namespace
