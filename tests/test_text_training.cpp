// Training on a text (task = text): the run's files, determinism across thread counts and micro-shards,
// bit-exact resume, a changed data file refused on resume, and a small model that learns more than the
// text's unigram statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "data/text_data.h"
#include "io/checkpoint.h"
#include "io/metrics.h"
#include "train/run.h"
#include "train/sample.h"
#include "util/error.h"

using namespace blocklab;
namespace fs = std::filesystem;

namespace {

const fs::path kText = fs::path(BLOCKLAB_TEST_DATA) / "web_ruth_jonah.txt";
const fs::path kTokenizer = fs::path(BLOCKLAB_TEST_DATA) / "hf" / "qwen3" / "tokenizer.json";

RunConfig text_run(const fs::path& out, int steps) {
  RunConfig c;
  c.task = "text";
  c.data = kText.string();
  c.model.layers = 1;
  c.model.width = 16;
  c.model.heads = 2;
  c.model.seq_len = 16;
  c.model.norm_placement = NormPlacement::Pre;
  c.batch = 4;
  c.steps = steps;
  c.eval_every = 4;
  c.threads = 1;
  c.out = out.string();
  return c;
}

std::string read(const fs::path& p) { return blocklab::testing::read_text(p); }

}  // namespace

TEST(TextRun, WritesValLossAtTheEvaluatedStepsAndTheRunsFiles) {
  const fs::path dir = blocklab::testing::fresh_dir("text_run_files");
  RunConfig c = text_run(dir / "run", 10);
  const RunSummary s = train_run(c, false);
  const io::MetricsTable m = io::read_metrics((dir / "run" / "metrics.csv").string());
  EXPECT_EQ(m.columns, (std::vector<std::string>{"step", "loss", "lr", "grad_norm", "skipped", "val_loss"}));
  ASSERT_EQ(m.rows.size(), 10u);
  for (const auto& row : m.rows) {
    const int step = static_cast<int>(row[0]);
    const bool evaluated = step % 4 == 0 || step == 10;
    EXPECT_EQ(std::isfinite(row[5]), evaluated) << "step " << step;  // empty cells elsewhere
    if (evaluated) {
      EXPECT_GT(row[5], 0);
    }
  }
  ASSERT_TRUE(s.val_loss.has_value());
  EXPECT_EQ(s.val_loss_step, 10);
  EXPECT_NEAR(*s.val_loss, m.rows[9][5], 1e-7);  // the CSV keeps 9 digits
  const auto summary = nlohmann::json::parse(read(dir / "run" / "summary.json"));
  EXPECT_DOUBLE_EQ(summary["val_loss"].get<double>(), *s.val_loss);
  EXPECT_EQ(summary["min_val_loss_step"].get<int>(), s.min_val_loss_step);
  const auto config = nlohmann::json::parse(read(dir / "run" / "config.json"));
  EXPECT_EQ(config["task"], "text");
  EXPECT_EQ(config["vocab"], 256);  // the byte tokenizer's size
  EXPECT_EQ(config["tokenizer"], "bytes");
  EXPECT_EQ(config["data"], kText.string());
  // tokens.bin holds the text's bytes; a text with a byte tokenizer needs no tokenizer.json.
  const auto tokens = TokenIds::open(dir / "run" / "tokens.bin");
  EXPECT_EQ(tokens->size(), fs::file_size(kText));
  EXPECT_FALSE(fs::exists(dir / "run" / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir / "run" / "model.safetensors"));
}

TEST(TextRun, ATokenizerJsonIsCopiedAndSetsTheVocab) {
  const fs::path dir = blocklab::testing::fresh_dir("text_run_tokenizer");
  RunConfig c = text_run(dir / "run", 2);
  c.tokenizer = kTokenizer.string();
  train_run(c, false);
  EXPECT_EQ(read(dir / "run" / "tokenizer.json"), read(kTokenizer));
  const auto config = nlohmann::json::parse(read(dir / "run" / "config.json"));
  EXPECT_EQ(config["vocab"].get<int>(), text::Tokenizer::load(kTokenizer).vocab_size());
  RunModel run = load_run_model(dir / "run");
  ASSERT_TRUE(run.tokenizer);
  EXPECT_FALSE(run.tokenizer->is_bytes());
  // The copy, not the original path: the run directory is self-contained.
  EXPECT_EQ(run.tokenizer->checksum(), TextTokenizer::load(kTokenizer).checksum());
}

TEST(TextRun, ResultsDoNotDependOnTheThreadCount) {
  const fs::path dir = blocklab::testing::fresh_dir("text_run_threads");
  for (int threads : {1, 2, 3}) {
    RunConfig c = text_run(dir / ("t" + std::to_string(threads)), 8);
    c.threads = threads;
    c.micro_shards = 2;
    train_run(c, false);
  }
  for (const char* name : {"metrics.csv", "model.safetensors"}) {
    EXPECT_EQ(read(dir / "t1" / name), read(dir / "t2" / name)) << name;
    EXPECT_EQ(read(dir / "t1" / name), read(dir / "t3" / name)) << name;
  }
}

TEST(TextRun, ResumeContinuesBitExactlyAndReusesTheTokenFile) {
  const fs::path dir = blocklab::testing::fresh_dir("text_run_resume");
  RunConfig whole = text_run(dir / "whole", 12);
  whole.checkpoint_every = 6;
  train_run(whole, false);
  // The same run stopped after step 6 (as a signal would stop it): its step-6 checkpoint is the newest.
  RunConfig stopped = whole;
  stopped.out = (dir / "part").string();
  train_run(stopped, false);
  fs::remove_all(dir / "part" / "checkpoints" / io::checkpoint_name(12));
  fs::remove(dir / "part" / "model.safetensors");
  const auto tokens_time = fs::last_write_time(dir / "part" / "tokens.bin");
  const ResumePoint from = find_resume_point((dir / "part").string());
  EXPECT_EQ(from.step, 6);
  RunConfig more = from.config;
  const RunSummary s = resume_run(more, from);
  EXPECT_EQ(read(dir / "whole" / "metrics.csv"), read(dir / "part" / "metrics.csv"));
  EXPECT_EQ(read(dir / "whole" / "model.safetensors"), read(dir / "part" / "model.safetensors"));
  EXPECT_EQ(fs::last_write_time(dir / "part" / "tokens.bin"), tokens_time);  // reused, not written again
  ASSERT_TRUE(s.val_loss.has_value());
  EXPECT_EQ(s.val_loss_step, 12);
  const auto whole_summary = nlohmann::json::parse(read(dir / "whole" / "summary.json"));
  EXPECT_DOUBLE_EQ(*s.val_loss, whole_summary["val_loss"].get<double>());
  EXPECT_DOUBLE_EQ(*s.min_val_loss, whole_summary["min_val_loss"].get<double>());
}

namespace {
// A 4-step run on dir/text.txt (a copy of the test text) with checkpoints every 2 steps; then a line is
// appended to the text, so that the run's data has changed. Returns the resumed run to 8 steps.
RunConfig run_then_change_its_text(const fs::path& dir) {
  fs::copy_file(kText, dir / "text.txt");
  RunConfig c = text_run(dir / "run", 4);
  c.data = (dir / "text.txt").string();
  c.checkpoint_every = 2;
  train_run(c, false);
  std::ofstream(dir / "text.txt", std::ios::app) << "One more line.\n";
  RunConfig more = find_resume_point((dir / "run").string()).config;
  more.steps = 8;
  return more;
}

// Resuming `more` fails with an error containing each of `expected`, and leaves metrics.csv as it was.
void expect_resume_refused(const RunConfig& more, const fs::path& run, const std::vector<std::string>& expected) {
  const std::string metrics_before = read(run / "metrics.csv");
  try {
    resume_run(more, find_resume_point(run.string()));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    for (const std::string& part : expected) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
  EXPECT_EQ(read(run / "metrics.csv"), metrics_before);  // nothing changed
}
}  // namespace

TEST(TextRun, ResumeRefusesAChangedDataFile) {
  const fs::path dir = blocklab::testing::fresh_dir("text_run_changed");
  const RunConfig more = run_then_change_its_text(dir);
  expect_resume_refused(more, dir / "run", {"text.txt: the data file changed since this run tokenized it"});
  // With the text restored, the run continues.
  fs::copy_file(kText, dir / "text.txt", fs::copy_options::overwrite_existing);
  EXPECT_NO_THROW(resume_run(more, find_resume_point((dir / "run").string())));
}

// Without tokens.bin the text is tokenized again, in memory, and the checkpoint refuses ids other than the ones
// it trained on: a changed file is found, and the run directory is left as it was.
TEST(TextRun, ResumeWithoutTokensBinChecksTheIdsAgainstTheCheckpoint) {
  const fs::path dir = blocklab::testing::fresh_dir("text_run_no_tokens");
  const RunConfig more = run_then_change_its_text(dir);
  fs::remove(dir / "run" / "tokens.bin");
  expect_resume_refused(more, dir / "run",
                        {"step_0000004: the run trained on ", " token ids, xxh3_64 ",
                         "the data file or the tokenizer changed"});
  EXPECT_FALSE(fs::exists(dir / "run" / "tokens.bin"));  // nothing written for the changed text
  // With the text restored, the run continues, and ends as the same run without interruption does.
  fs::copy_file(kText, dir / "text.txt", fs::copy_options::overwrite_existing);
  resume_run(more, find_resume_point((dir / "run").string()));
  RunConfig whole = more;
  whole.out = (dir / "whole").string();
  train_run(whole, false);
  EXPECT_EQ(read(dir / "run" / "metrics.csv"), read(dir / "whole" / "metrics.csv"));
}

// A damaged tokens.bin is not used, nor written again: the ids are made in memory and checked the same way.
TEST(TextRun, ResumeWithADamagedTokensBinChecksTheIdsAgainstTheCheckpoint) {
  const fs::path dir = blocklab::testing::fresh_dir("text_run_damaged_tokens");
  const RunConfig more = run_then_change_its_text(dir);
  fs::resize_file(dir / "run" / "tokens.bin", 100);
  const std::string damaged = read(dir / "run" / "tokens.bin");
  expect_resume_refused(more, dir / "run", {"step_0000004: the run trained on ", "the data file or the tokenizer changed"});
  EXPECT_EQ(read(dir / "run" / "tokens.bin"), damaged);
  fs::copy_file(kText, dir / "text.txt", fs::copy_options::overwrite_existing);
  EXPECT_NO_THROW(resume_run(more, find_resume_point((dir / "run").string())));
}

TEST(TextRun, BadDataWritesNoRun) {
  const fs::path dir = blocklab::testing::fresh_dir("text_run_bad");
  std::ofstream(dir / "short.txt") << "Too short to hold two windows of sixteen bytes.";
  RunConfig c = text_run(dir / "run", 2);
  c.data = (dir / "short.txt").string();
  try {
    train_run(c, false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokens are too few for seq_len 16"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "run" / "config.json"));
  EXPECT_FALSE(fs::exists(dir / "run" / "metrics.csv"));
}

// A small model learns more than which bytes are frequent: its validation loss falls below the unigram entropy
// of the text's tokens (the loss of the best model that ignores context), and greedy sampling is a function of
// the run.
TEST(TextRun, ASmallModelBeatsTheUnigramEntropyAndSamplesText) {
  const fs::path dir = blocklab::testing::fresh_dir("text_run_learn");
  RunConfig c = text_run(dir / "run", 60);
  c.model.layers = 2;
  c.model.width = 48;
  c.model.heads = 4;
  c.model.seq_len = 64;
  c.batch = 8;
  c.lr = 3e-3;
  c.eval_every = 30;
  c.threads = 2;
  const RunSummary s = train_run(c, false);
  const auto tokens = tokenize_text_file(kText, TextTokenizer::bytes());
  const double entropy = unigram_entropy(tokens->ids());
  ASSERT_TRUE(s.val_loss.has_value());
  std::printf("text run: validation loss %.4f at step %d, unigram entropy %.4f, ln 256 = %.4f\n", *s.val_loss,
              s.val_loss_step, entropy, std::log(256.0));
  EXPECT_LT(*s.val_loss, entropy);
  EXPECT_GT(entropy, 2.0);  // English bytes: about 4.3 bits
  EXPECT_LT(entropy, std::log(256.0));
  // The run reports the entropy of its training split (the ids before the held-out tenth), also in summary.json.
  const TextSplit split = split_tokens(tokens->ids().size(), c.val_fraction, c.model.seq_len, "test");
  const double train_entropy = unigram_entropy(tokens->ids().first(split.train_end));
  ASSERT_TRUE(s.unigram_entropy.has_value());
  EXPECT_DOUBLE_EQ(*s.unigram_entropy, train_entropy);
  EXPECT_NE(train_entropy, entropy);  // a different set of ids: the split is really applied
  const auto summary = nlohmann::json::parse(blocklab::testing::read_text(dir / "run" / "summary.json"));
  EXPECT_DOUBLE_EQ(summary["unigram_entropy"].get<double>(), train_entropy);

  RunModel run = load_run_model(dir / "run");
  SampleOptions greedy;
  greedy.temperature = 0;
  greedy.tokens = 40;
  const std::vector<int32_t> prompt = run.tokenizer->encode("Naomi said");
  const std::vector<int32_t> a = generate(run.model, prompt, greedy), b = generate(run.model, prompt, greedy);
  EXPECT_EQ(a, b);
  const std::string text = run.tokenizer->decode(a);
  int letters = 0;
  for (char ch : text) letters += std::isalpha(static_cast<unsigned char>(ch)) || ch == ' ';
  EXPECT_GT(letters, 30) << text;  // mostly letters and spaces, as the text is
}
