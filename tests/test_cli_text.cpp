// `blocklab train --task text|reverse` and `blocklab sample` end to end: the happy paths, and bad data or
// flags (exit 2, one line naming what is wrong, no run written).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/metrics.h"

using namespace blocklab::testing;
namespace fs = std::filesystem;

namespace {

const std::string kText = std::string(BLOCKLAB_TEST_DATA) + "/web_ruth_jonah.txt";
const std::string kTokenizer = std::string(BLOCKLAB_TEST_DATA) + "/hf/qwen3/tokenizer.json";
const std::string kSmallText =
    " --task text --data " + kText + " --layers 1 --width 16 --heads 2 --seq-len 16 --batch 4 --threads 1 ";

}  // namespace

TEST(CliText, TrainsOnATextAndSamplesFromIt) {
  const fs::path dir = fresh_dir("cli_text");
  const auto r = run_cli("train" + kSmallText + " --steps 6 --eval-every 3 --out " + (dir / "run").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("text task"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("validation loss"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find(" val "), std::string::npos) << r.err;  // the progress line shows it
  const auto m = blocklab::io::read_metrics((dir / "run" / "metrics.csv").string());
  ASSERT_EQ(m.columns.back(), "val_loss");
  // Greedy sampling prints the prompt and its continuation, the same every time.
  const std::string sample = "sample " + (dir / "run").string() + " --prompt 'Naomi said' --tokens 20 --temperature 0";
  const auto a = run_cli(sample), b = run_cli(sample);
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.out.rfind("Naomi said", 0), 0u) << a.out;
  EXPECT_GT(a.out.size(), std::string("Naomi said").size() + 1);
  EXPECT_NE(a.err.find("model.safetensors (step 6)"), std::string::npos) << a.err;
  // Seeded sampling: the same seed, the same text.
  const std::string seeded = "sample " + (dir / "run").string() + " --prompt 'Ruth' --tokens 30 --temperature 1 --top-k 5";
  EXPECT_EQ(run_cli(seeded + " --seed 3").out, run_cli(seeded + " --seed 3").out);
  EXPECT_NE(run_cli(seeded + " --seed 3").out, run_cli(seeded + " --seed 4").out);
}

TEST(CliText, TomlKeysSelectTheTaskAndTheData) {
  const fs::path dir = fresh_dir("cli_text_toml");
  std::ofstream(dir / "run.toml") << "task = \"text\"\ndata = \"" << kText << "\"\nval_fraction = 0.2\neval_every = 2\n"
                                  << "tokenizer = \"" << kTokenizer << "\"\n";
  const auto r = run_cli("train --config " + (dir / "run.toml").string() +
                         " --layers 1 --width 16 --heads 2 --seq-len 16 --batch 4 --steps 2 --threads 1 --out " +
                         (dir / "run").string());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto config = nlohmann::json::parse(read_text(dir / "run" / "config.json"));
  EXPECT_EQ(config["task"], "text");
  EXPECT_DOUBLE_EQ(config["val_fraction"].get<double>(), 0.2);
  EXPECT_EQ(config["eval_every"], 2);
  EXPECT_GT(config["vocab"].get<int>(), 256);  // the tokenizer's size
  EXPECT_TRUE(fs::exists(dir / "run" / "tokenizer.json"));
  // A config.json runs the same run again.
  const auto again = run_cli("train --config-json " + (dir / "run" / "config.json").string() + " --out " +
                             (dir / "again").string());
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(read_text(dir / "run" / "metrics.csv"), read_text(dir / "again" / "metrics.csv"));
}

TEST(CliText, AReverseRunSamplesFromIds) {
  const fs::path dir = fresh_dir("cli_reverse");
  const auto r = run_cli("train --task reverse --layers 1 --width 16 --heads 2 --vocab 8 --copy-len 4 --batch 4 "
                         "--steps 3 --threads 1 --out " + (dir / "run").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("reverse task V=8 n=4"), std::string::npos) << r.out;
  const auto s = run_cli("sample " + (dir / "run").string() + " --prompt-ids 1,2,3,4 --tokens 4 --temperature 0");
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_EQ(s.out.rfind("1,2,3,4 -> ", 0), 0u) << s.out;
  EXPECT_EQ(std::count(s.out.begin(), s.out.end(), ','), 3 + 3) << s.out;  // four ids added
  // Text is not a copy or reverse run's input: the error says what to give instead.
  const auto text = run_cli("sample " + (dir / "run").string() + " --prompt hello");
  expect_refused(text, "--prompt-ids");
}

struct BadText {
  std::string name, args, expected;
};

class CliTextBadInput : public ::testing::TestWithParam<BadText> {};

TEST_P(CliTextBadInput, ExitsTwoWithOneLineAndWritesNoRun) {
  const fs::path dir = fresh_dir("bad_text_" + GetParam().name);
  const fs::path out = dir / "out";
  std::ofstream(dir / "empty.txt");
  std::ofstream(dir / "short.txt") << "A few words.";
  std::ofstream(dir / "latin1.txt") << "Ruth and Naomi went to Bethlehem, caf\xE9 and all, in the days of the judges.";
  const std::string args = substitute(GetParam().args, {{"{dir}", dir.string()}, {"{out}", out.string()},
                                                         {"{text}", kText}, {"{tokenizer}", kTokenizer}});
  expect_refused(run_cli("train --layers 1 --width 16 --heads 2 --batch 4 --steps 2 --threads 1 " + args),
                 GetParam().expected);
  expect_no_run_written(out);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliTextBadInput,
    ::testing::Values(
        BadText{"missing", "--task text --data {dir}/missing.txt --out {out}", "missing.txt: cannot read"},
        BadText{"empty", "--task text --data {dir}/empty.txt --out {out}", "empty.txt: the file is empty"},
        BadText{"directory", "--task text --data {dir} --out {out}", "cannot read: Is a directory"},
        BadText{"shorter_than_a_sequence", "--task text --data {dir}/short.txt --out {out}",
                "short.txt: 12 tokens are too few for seq_len 128"},
        BadText{"no_validation_split", "--task text --data {text} --seq-len 64 --val-fraction 0.001 --out {out}",
                "each need at least 65"},
        BadText{"invalid_utf8", "--task text --data {dir}/latin1.txt --seq-len 8 --out {out}",
                "latin1.txt: invalid UTF-8 at byte offset 37"},
        BadText{"vocab_too_small", "--task text --data {text} --vocab 100 --out {out}",
                "the tokenizer's ids do not fit the vocab: bytes has ids 0..255, but vocab is 100"},
        BadText{"tokenizer_vocab", "--task text --data {text} --tokenizer {tokenizer} --vocab 256 --out {out}",
                "the tokenizer's ids do not fit the vocab"},
        BadText{"missing_tokenizer", "--task text --data {text} --tokenizer {dir}/none.json --out {out}", "none.json"},
        BadText{"data_without_text", "--data {text} --out {out}", "data (--data) needs task = text (--task text)"},
        BadText{"tokenizer_without_text", "--tokenizer {tokenizer} --out {out}", "tokenizer (--tokenizer) needs task = text"},
        BadText{"val_fraction_without_text", "--task reverse --val-fraction 0.2 --out {out}", "val_fraction is set but task is reverse"},
        BadText{"text_without_data", "--task text --out {out}", "task = text needs data = FILE (--data FILE)"},
        BadText{"cross_attention", "--task text --data {text} --cross-attention true --out {out}",
                "cross_attention has no context in the text task"},
        BadText{"val_fraction", "--task text --data {text} --val-fraction 1 --out {out}", "val_fraction must be in (0, 1)"},
        BadText{"eval_every", "--task text --data {text} --eval-every 0 --out {out}", "eval_every must be positive"},
        BadText{"unknown_task", "--task poem --out {out}", "unknown task 'poem' (expected copy, reverse or text)"}),
    [](const auto& info) { return info.param.name; });

TEST(CliSample, BadRunsAndOptionsExitTwoWithOneLine) {
  const fs::path dir = fresh_dir("cli_sample_bad");
  ASSERT_EQ(run_cli("train" + kSmallText + " --steps 2 --out " + (dir / "run").string()).status, 0);
  ASSERT_EQ(run_cli("train --layers 1 --width 16 --heads 2 --vocab 6 --copy-len 3 --batch 4 --steps 2 --threads 1 "
                    "--no-weights --out " +
                    (dir / "copy").string())
                .status,
            0);
  const std::string run = (dir / "run").string();
  const std::pair<std::string, std::string> cases[] = {
      {"sample " + run, "give either --prompt TEXT or --prompt-ids"},
      {"sample " + run + " --prompt a --prompt-ids 1", "give either --prompt TEXT or --prompt-ids"},
      {"sample " + run + " --prompt ''", "--prompt is empty"},
      {"sample " + run + " --prompt \"$(printf 'caf\\351')\"", "--prompt: invalid UTF-8 at byte offset 3"},
      {"sample " + run + " --prompt-ids 1,x", "--prompt-ids: \"x\" is not an integer >= 0"},
      {"sample " + run + " --prompt-ids 300", "prompt token id 300 is outside the model's vocab 0..255"},
      {"sample " + run + " --prompt a --top-k 257", "top_k must be in 0..256"},
      {"sample " + run + " --prompt a --temperature -1", "temperature"},
      {"sample " + run + " --prompt a --tokens 0", "tokens"},
      {"sample " + (dir / "copy").string() + " --prompt-ids 1,2,3", "no weights to sample from"},
      {"sample " + (dir / "none").string() + " --prompt a", "no such run directory"},
  };
  for (const auto& [args, expected] : cases) expect_refused(run_cli(args), expected, args);
}
