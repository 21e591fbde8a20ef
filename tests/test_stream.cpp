// Residual-stream statistics (stream_every): the statistics on hand-made streams and attention, the training
// recorder (a run's numbers unchanged, 1 vs 2 threads, resume), `blocklab train --stream-every`, the stream
// columns of `blocklab probe residual` on the tiny Hugging Face models, and the depth map's stream columns.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "cli_runner.h"
#include "experiments/depthmap.h"
#include "io/metrics.h"
#include "io/safetensors.h"
#include "probe/stream_stats.h"
#include "probe/residual_norms.h"
#include "probe/stream_probe.h"
#include "report/plot.h"
#include "report/stream_plot.h"
#include "train/run.h"
#include "util/error.h"
#include "util/threads.h"

using namespace blocklab;
using namespace blocklab::probe;
namespace bt = blocklab::testing;
namespace fs = std::filesystem;

namespace {

RunConfig tiny_run(const fs::path& out, int stream_every, int threads = 1) {
  RunConfig c;
  c.model.norm_placement = NormPlacement::Pre;
  c.model.layers = 3;
  c.model.width = 16;
  c.model.heads = 2;
  c.model.vocab = 8;
  c.copy_len = 4;
  c.batch = 4;
  c.steps = 7;
  c.lr = 3e-3;
  c.threads = threads;
  c.tensorboard = false;
  c.stream_every = stream_every;
  c.out = out.string();
  resolve(c);
  return c;
}

RunSummary train(const RunConfig& c) {
  set_num_threads(c.threads);
  RunSummary s = train_run(c, /*overwrite=*/true, {}, probe::with_stream_recorder(c, {}));
  set_num_threads(0);
  return s;
}

}  // namespace

TEST(StreamStats, NormsOfTheMeanTokenVectorAndOfEachToken) {
  // Two sequences of two tokens, C = 2. Sequence 0: (3, 4) and (3, -4): mean (3, 0), token norms 5, 5.
  // Sequence 1: (0, 1) and (0, 3): mean (0, 2), token norms 1, 3.
  const std::vector<float> h = {3, 4, 3, -4, 0, 1, 0, 3};
  const StreamNorms both = stream_norms(h.data(), 2, 2, 2);
  EXPECT_DOUBLE_EQ(both.mean_vector_norm, (3.0 + 2.0) / 2);
  EXPECT_DOUBLE_EQ(both.mean_token_norm, (5.0 + 5 + 1 + 3) / 4);
  const StreamNorms first = stream_norms(h.data(), 1, 2, 2);
  EXPECT_DOUBLE_EQ(first.mean_vector_norm, 3.0);
  EXPECT_DOUBLE_EQ(first.mean_token_norm, 5.0);
}

TEST(StreamStats, PeakIsTheLargestMagnitudeAndItsChannel) {
  // 3 rows of 4 channels; the largest |value| (-7) sits in channel 2 of row 1; a tie later keeps the first.
  const std::vector<float> h = {1, -2, 3, 0.5f, 0, 6, -7, 2, 7, 1, 1, 1};
  const StreamPeak p = stream_peak(h.data(), 3, 4);
  EXPECT_EQ(p.max_abs, 7.0);
  EXPECT_EQ(p.channel, 2);
  const std::vector<double> flat = {0, 0, 0};
  EXPECT_EQ(stream_peak(flat.data(), 1, 3).channel, 0);
  std::vector<float> bad = h;
  bad[5] = std::numeric_limits<float>::quiet_NaN();
  const StreamPeak n = stream_peak(bad.data(), 3, 4);
  EXPECT_TRUE(std::isnan(n.max_abs));
  EXPECT_EQ(n.channel, 1);
}

TEST(StreamStats, SinkShareIsTheMeanProbabilityOnTheFirstKeyOverQueriesAfterIt) {
  // B = 1, H = 2, T = 3 (causal rows): query 0 is left out (its share is always 1).
  const std::vector<double> att = {
      1,    0,    0,     // h0 t0
      0.25, 0.75, 0,     // h0 t1
      0.5,  0.25, 0.25,  // h0 t2
      1,    0,    0,     // h1 t0
      1,    0,    0,     // h1 t1
      0,    0.5,  0.5};  // h1 t2
  EXPECT_DOUBLE_EQ(sink_share(att.data(), 1, 2, 3, 3), (0.25 + 0.5 + 1 + 0) / 4);
  // uniform causal attention over T = 4: (1/2 + 1/3 + 1/4) / 3
  std::vector<float> uniform;
  for (int t = 0; t < 4; ++t)
    for (int s = 0; s < 4; ++s) uniform.push_back(s <= t ? 1.0f / (t + 1) : 0.0f);
  EXPECT_NEAR(sink_share(uniform.data(), 1, 1, 4, 4), (1.0 / 2 + 1.0 / 3 + 1.0 / 4) / 3, 1e-7);
  EXPECT_TRUE(std::isnan(sink_share(uniform.data(), 1, 1, 1, 4)));
}

TEST(StreamStats, OfAForwardPassAgreeWithTheStreamAndTheAttention) {
  set_num_threads(1);
  const RunConfig c = tiny_run(bt::fresh_dir("stream_fwd"), 0);
  Model<double> model(c.model);
  model.init_weights(3);
  const int B = 2, T = 5;
  Activations<double> acts = model.make_activations(B, T);
  std::vector<int32_t> tokens(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (3 * i + 1) % c.model.vocab;
  model.forward_hidden(acts, tokens.data());
  const std::vector<probe::StreamBlockStats> s = probe::stream_stats(acts, c.model);
  ASSERT_EQ(s.size(), 4u);
  const int C = c.model.width;
  for (int l = 0; l <= 3; ++l) {
    const double* h = acts.stream(l);
    double norms = 0, peak = -1;
    int channel = -1;
    for (int n = 0; n < B * T; ++n) {
      double sq = 0;
      for (int k = 0; k < C; ++k) {
        sq += h[n * C + k] * h[n * C + k];
        if (std::fabs(h[n * C + k]) > peak) peak = std::fabs(h[n * C + k]), channel = k;
      }
      norms += std::sqrt(sq);
    }
    EXPECT_EQ(s[l].block, l);
    EXPECT_NEAR(s[l].rms, norms / (B * T) / std::sqrt(C), 1e-12);
    EXPECT_EQ(s[l].max_abs, peak);
    EXPECT_EQ(s[l].max_channel, channel);
    EXPECT_EQ(s[l].sink.has_value(), l > 0);
    if (l == 0) continue;
    // the sink from the block's saved probabilities: each causal row sums to 1, so the share lies in (0, 1)
    const double* att = acts.block_acts(l - 1).attn.att;
    double sum = 0;
    for (int bh = 0; bh < B * c.model.heads; ++bh)
      for (int t = 1; t < T; ++t) sum += att[(bh * T + t) * T];
    EXPECT_NEAR(*s[l].sink, sum / (B * c.model.heads * (T - 1)), 1e-12);
    EXPECT_GT(*s[l].sink, 0.0);
    EXPECT_LT(*s[l].sink, 1.0);
  }
}

TEST(StreamRecorder, LeavesTheRunBitIdenticalAndWritesEveryNSteps) {
  const fs::path dir = bt::fresh_dir("stream_run");
  train(tiny_run(dir / "plain", 0));
  train(tiny_run(dir / "stream", 3));
  EXPECT_EQ(bt::read_text(dir / "plain" / "metrics.csv"), bt::read_text(dir / "stream" / "metrics.csv"));
  EXPECT_EQ(bt::read_text(dir / "plain" / "model.safetensors"), bt::read_text(dir / "stream" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "plain" / "stream.csv"));
  const std::vector<probe::StreamRow> rows = probe::read_stream_csv((dir / "stream" / "stream.csv").string());
  ASSERT_EQ(rows.size(), 4u * 4u);  // steps 0, 3, 6 and the last (7) x blocks 0..3
  std::vector<int> steps;
  for (const probe::StreamRow& r : rows) {
    if (r.stats.block == 0) steps.push_back(r.step);
    EXPECT_GT(r.stats.rms, 0.0);
    EXPECT_GE(r.stats.max_abs, r.stats.rms);  // the largest |h| is at least the RMS
    EXPECT_GE(r.stats.max_channel, 0);
    EXPECT_LT(r.stats.max_channel, 16);
    EXPECT_EQ(r.stats.sink.has_value(), r.stats.block > 0);
  }
  EXPECT_EQ(steps, (std::vector<int>{0, 3, 6, 7}));
  EXPECT_THROW(probe::StreamRecorder("x", 0), Error);
  EXPECT_THROW(train(tiny_run(dir / "bad", -1)), Error);
}

TEST(StreamRecorder, OneAndTwoThreadsWriteTheSameFile) {
  const fs::path dir = bt::fresh_dir("stream_threads");
  train(tiny_run(dir / "t1", 2, 1));
  train(tiny_run(dir / "t2", 2, 2));
  const std::string one = bt::read_text(dir / "t1" / "stream.csv");
  EXPECT_FALSE(one.empty());
  EXPECT_EQ(one, bt::read_text(dir / "t2" / "stream.csv"));
}

TEST(StreamRecorder, AResumedRunContinuesTheFile) {
  const fs::path dir = bt::fresh_dir("stream_resume");
  train(tiny_run(dir / "whole", 2));
  RunConfig first = tiny_run(dir / "parts", 2);
  first.steps = 5;
  first.checkpoint_every = 5;
  train(first);  // rows at steps 0, 2, 4 and 5 (its last step)
  RunConfig rest = tiny_run(dir / "parts", 2);
  const ResumePoint from = find_resume_point(rest.out);
  ASSERT_EQ(from.step, 5);
  set_num_threads(1);
  resume_run(rest, from, {}, probe::with_stream_recorder(rest, {}));
  set_num_threads(0);
  // the resumed file: the rows of steps 0..5 kept (5: the first part's last step), then 6 and 7
  std::vector<int> steps;
  for (const probe::StreamRow& r : probe::read_stream_csv((dir / "parts" / "stream.csv").string()))
    if (r.stats.block == 0) steps.push_back(r.step);
  EXPECT_EQ(steps, (std::vector<int>{0, 2, 4, 5, 6, 7}));
  // and where both files have a step, the same numbers
  const auto whole = probe::read_stream_csv((dir / "whole" / "stream.csv").string());
  const auto parts = probe::read_stream_csv((dir / "parts" / "stream.csv").string());
  int compared = 0;
  for (const auto& a : whole)
    for (const auto& b : parts)
      if (a.step == b.step && a.stats.block == b.stats.block) {
        EXPECT_EQ(a.stats.rms, b.stats.rms) << a.step << " " << a.stats.block;
        EXPECT_EQ(a.stats.max_abs, b.stats.max_abs);
        ++compared;
      }
  EXPECT_EQ(compared, 5 * 4);  // steps 0, 2, 4, 6, 7 (the whole run does not record step 5)
}

TEST(StreamSummary, FirstAndLastStepsAndTheFigure) {
  const fs::path dir = bt::fresh_dir("stream_summary");
  train(tiny_run(dir / "run", 3));
  const probe::StreamSummary s = probe::summarize_stream(probe::read_stream_csv((dir / "run" / "stream.csv").string()));
  EXPECT_EQ(s.first_step, 0);
  EXPECT_EQ(s.last_step, 7);
  ASSERT_EQ(s.rms_first.size(), 4u);
  ASSERT_EQ(s.rms_last.size(), 4u);
  ASSERT_TRUE(s.sink_max_last.has_value());
  EXPECT_GT(*s.sink_max_last, 0.0);
  EXPECT_LE(*s.sink_max_last, 1.0);
  const report::PlotResult plot = report::plot_run_stream(dir / "run", "Pre-LN");
  EXPECT_TRUE(fs::exists(dir / "run" / "stream.gp"));
  if (!report::gnuplot_program().empty()) {
    EXPECT_TRUE(plot.drawn) << plot.message;
  }
}

TEST(CliStream, TrainStreamEveryWritesStreamCsvAndKeepsMetricsIdentical) {
  const fs::path dir = bt::fresh_dir("cli_stream");
  const std::string args =
      "train --layers 2 --width 16 --heads 2 --vocab 8 --copy-len 4 --batch 4 --steps 10 --threads 1 --no-tensorboard";
  const auto a = bt::run_cli(args + " --out " + (dir / "plain").string());
  const auto b = bt::run_cli(args + " --stream-every 4 --out " + (dir / "stream").string());
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(bt::read_text(dir / "plain" / "metrics.csv"), bt::read_text(dir / "stream" / "metrics.csv"));
  EXPECT_EQ(bt::read_text(dir / "plain" / "model.safetensors"), bt::read_text(dir / "stream" / "model.safetensors"));
  const io::MetricsTable t = io::read_metrics((dir / "stream" / "stream.csv").string());
  EXPECT_EQ(t.columns, (std::vector<std::string>{"step", "block", "rms", "max_abs", "max_channel", "sink"}));
  EXPECT_EQ(t.rows.size(), 4u * 3u);  // steps 0, 4, 8, 10 x blocks 0..2
  EXPECT_NE(b.out.find("stream.csv"), std::string::npos) << b.out;
  EXPECT_EQ(bt::read_text(dir / "stream" / "config.json").find("\"stream_every\": 4") != std::string::npos, true);
  if (!report::gnuplot_program().empty()) {
    EXPECT_TRUE(fs::exists(dir / "stream" / "stream.png"));
  }
  EXPECT_EQ(bt::run_cli(args + " --stream-every -1 --out " + (dir / "bad").string()).status, 2);
}

TEST(CliStream, ProbeResidualPrintsTheStreamStatisticsOfAHuggingFaceModel) {
  const fs::path hf = fs::path(BLOCKLAB_TEST_DATA) / "hf";
  for (const std::string model : {"qwen3", "gpt2"}) {
    const fs::path out = bt::fresh_dir("stream_probe_" + model);
    io::SafetensorsReader ref((hf / model / "reference.safetensors").string());
    const std::vector<int64_t> tokens = ref.read_i64("tokens");
    std::string cmd = "probe residual --force --no-plot --tokens ";
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) cmd += ',';
      cmd += std::to_string(tokens[i]);
    }
    cmd += " --model ";  // paths quoted for the shell, appended piece by piece (gcc 12's -Wrestrict)
    cmd += '\'';
    cmd += (hf / model).string();
    cmd += "' --out '";
    cmd += out.string();
    cmd += '\'';
    const auto r = bt::run_cli(cmd);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("max|h|"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("sink"), std::string::npos) << r.out;
    // rms and the largest |h| with its channel, recomputed from the PyTorch reference's hidden states
    const io::TensorEntry& e = ref.at("hidden_states");
    const std::vector<double> h = ref.read_f64("hidden_states");
    const int64_t L1 = e.shape[0], T = e.shape[1], C = e.shape[2];
    const io::MetricsTable csv = io::read_metrics((out / "residual.csv").string());
    const int c_rms = csv.column("rms"), c_max = csv.column("max_abs"), c_ch = csv.column("max_channel"),
              c_sink = csv.column("sink");
    ASSERT_GE(c_rms, 0);
    ASSERT_GE(c_max, 0);
    ASSERT_GE(c_ch, 0);
    ASSERT_GE(c_sink, 0);
    ASSERT_EQ(static_cast<int64_t>(csv.rows.size()), L1);
    for (int64_t l = 0; l < L1; ++l) {
      double norms = 0, peak = -1;
      int64_t channel = -1;
      for (int64_t t = 0; t < T; ++t) {
        double sq = 0;
        for (int64_t c = 0; c < C; ++c) {
          const double x = h[(l * T + t) * C + c];
          sq += x * x;
          if (std::fabs(x) > peak) peak = std::fabs(x), channel = c;
        }
        norms += std::sqrt(sq);
      }
      const auto& row = csv.rows[l];
      EXPECT_NEAR(row[c_rms], norms / T / std::sqrt(static_cast<double>(C)), 1e-5 * norms / T) << model << " " << l;
      EXPECT_NEAR(row[c_max], peak, 1e-4 * peak) << model << " " << l;
      EXPECT_EQ(row[c_ch], channel) << model << " " << l;
      if (l == 0) {
        EXPECT_TRUE(std::isnan(row[c_sink]));
      } else {
        EXPECT_GT(row[c_sink], 0.0);
        EXPECT_LE(row[c_sink], 1.0);
      }
    }
  }
}

TEST(DepthMapStream, ColumnsAndFigureOnlyWithStreamStatistics) {
  experiments::DepthMapRun plain;
  plain.placement = NormPlacement::Pre;
  plain.depth = 2;
  const std::string without = experiments::depthmap_csv({plain});
  EXPECT_EQ(without.find("stream_rms_last"), std::string::npos);
  experiments::DepthMapRun recorded = plain;
  probe::StreamSummary s;
  s.last_step = 20;
  s.rms_first = {1.0, 1.5, 2.0};
  s.rms_last = {1.0, 2.0, 8.0};
  s.max_abs_last = 30;
  s.sink_max_last = 0.75;
  recorded.stream = s;
  const std::string with = experiments::depthmap_csv({plain, recorded});
  const std::vector<std::string> lines = experiments::split(with, '\n');
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0], "placement,depth,warmup,seed,outcome,first_step_below,final_loss,min_loss,seconds,"
                      "stream_rms_last,stream_rms_ratio,stream_max_abs,sink_max");
  EXPECT_EQ(lines[1].substr(lines[1].size() - 4), ",,,,");  // the run without a stream.csv
  EXPECT_EQ(lines[2].substr(lines[2].size() - 12), ",8,4,30,0.75");  // 8, 8/2, 30, 0.75

  experiments::DepthMapOptions options = experiments::depthmap_preset(true);
  options.placements = {NormPlacement::Pre};
  options.depths = {2};
  options.warmups = {0};
  EXPECT_FALSE(experiments::depthmap_stream_figure(options, {plain}).has_value());
  const auto figure = experiments::depthmap_stream_figure(options, {recorded});
  ASSERT_TRUE(figure.has_value());
  ASSERT_EQ(figure->panels.size(), 1u);
  EXPECT_EQ(figure->panels[0].series.size(), 2u);  // init dashed, end solid
  EXPECT_EQ(figure->panels[0].series[0].dash, 2);
}

TEST(DepthMapStream, ToyMapWithStreamEveryGainsTheColumns) {
  const fs::path dir = bt::fresh_dir("depthmap_stream") / "map";
  const bt::CliResult r = bt::run_cli(
      "depthmap --width 8 --heads 2 --vocab 8 --copy-len 4 --batch 4 --steps 6 --placements post,pre --depths 1,3 "
      "--warmups 0 --jobs 1 --stream-every 3 --out " + dir.string());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const std::string csv = bt::read_text(dir / "depthmap.csv");
  EXPECT_NE(csv.find("stream_rms_last,stream_rms_ratio,stream_max_abs,sink_max"), std::string::npos) << csv;
  EXPECT_TRUE(fs::exists(dir / "depthmap_stream.gp"));
  EXPECT_NE(bt::read_text(dir / "depthmap.md").find("depthmap_stream.png"), std::string::npos);
  if (!report::gnuplot_program().empty()) {
    EXPECT_TRUE(fs::exists(dir / "depthmap_stream.png"));
  }
}
