// The text task's data (data/text_data.h): UTF-8 checks, the tokenizer choice, token files, the split and
// the window stream.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "cli_runner.h"
#include "data/text_data.h"
#include "text/tokenizer.h"
#include "util/error.h"

using namespace blocklab;
namespace fs = std::filesystem;

namespace {

const fs::path kText = fs::path(BLOCKLAB_TEST_DATA) / "web_ruth_jonah.txt";
const fs::path kTokenizer = fs::path(BLOCKLAB_TEST_DATA) / "hf" / "qwen3" / "tokenizer.json";

std::span<const std::byte> as_bytes(const std::string& s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string read_all(const fs::path& p) { return blocklab::testing::read_text(p); }

std::shared_ptr<const TokenIds> ids_of(std::vector<int32_t> ids) { return TokenIds::in_memory(std::move(ids), {}); }

}  // namespace

TEST(Utf8, AcceptsValidTextAndNamesTheOffsetOfTheFirstBadByte) {
  EXPECT_NO_THROW(check_utf8(as_bytes("plain ASCII, Naomi’s house, \xF0\x9F\x98\x80"), "t"));
  EXPECT_NO_THROW(check_utf8({}, "t"));
  const std::pair<std::string, size_t> bad[] = {
      {"ab\xFF", 2},            // never valid in UTF-8
      {"abc\x80", 3},           // a continuation byte with no lead
      {"a\xC0\xAF", 1},         // overlong '/'
      {"xy\xED\xA0\x80", 2},    // a surrogate (U+D800)
      {"\xF4\x90\x80\x80", 0},  // above U+10FFFF
      {"hello \xE2\x80", 6},    // truncated at the end
      {"\xE2(\xA1", 0},         // a lead byte followed by ASCII
  };
  for (const auto& [text, offset] : bad) {
    // An init-capture: clang before 16 cannot capture a structured binding.
    const std::string message = error_of([&text = text] { check_utf8(as_bytes(text), "f.txt"); });
    EXPECT_NE(message.find("f.txt: invalid UTF-8 at byte offset " + std::to_string(offset)), std::string::npos) << message;
  }
}

TEST(TextTokenizer, BytesAreTheUtf8BytesWithAVocabOf256) {
  const TextTokenizer t = TextTokenizer::from_key("bytes");
  EXPECT_TRUE(t.is_bytes());
  EXPECT_EQ(t.vocab_size(), 256);
  EXPECT_EQ(t.checksum(), 0u);
  const std::string text = "Ruth’s";  // ’ is three bytes
  const std::vector<int32_t> ids = t.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], static_cast<unsigned char>(text[i]));
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_THROW(t.decode(std::vector<int32_t>{256}), Error);
}

TEST(TextTokenizer, TokenizerJsonGivesTheHuggingFaceIdsAndItsOwnVocabSize) {
  const TextTokenizer t = TextTokenizer::from_key(kTokenizer.string());
  const text::Tokenizer reference = text::Tokenizer::load(kTokenizer);
  EXPECT_FALSE(t.is_bytes());
  EXPECT_EQ(t.vocab_size(), reference.vocab_size());
  EXPECT_NE(t.vocab_size(), 256);
  EXPECT_NE(t.checksum(), 0u);
  EXPECT_EQ(t.json_text(), read_all(kTokenizer));
  const std::string text = "In the days when the judges judged, there was a famine in the land.";
  EXPECT_EQ(t.encode(text), reference.encode(text, /*add_special_tokens=*/false));
  EXPECT_EQ(t.decode(t.encode(text)), text);
  // A directory holding tokenizer.json is the same tokenizer.
  EXPECT_EQ(TextTokenizer::load(kTokenizer.parent_path()).checksum(), t.checksum());
  EXPECT_NE(error_of([] { TextTokenizer::from_key("/nonexistent/tokenizer.json"); }).find("/nonexistent/tokenizer.json"),
            std::string::npos);
}

TEST(TokenFile, MemoryMappedIdsEqualInMemoryTokenization) {
  const fs::path dir = blocklab::testing::fresh_dir("token_file");
  for (const std::string& key : {std::string("bytes"), kTokenizer.string()}) {
    const TextTokenizer tokenizer = TextTokenizer::from_key(key);
    const auto mapped = write_token_file(dir / "tokens.bin", kText, tokenizer);
    const auto in_memory = tokenize_text_file(kText, tokenizer);
    EXPECT_TRUE(mapped->mapped());
    EXPECT_FALSE(in_memory->mapped());
    const std::string text = read_all(kText);
    const std::vector<int32_t> direct = tokenizer.encode(text);
    ASSERT_EQ(mapped->size(), direct.size()) << key;
    EXPECT_TRUE(std::equal(direct.begin(), direct.end(), mapped->ids().begin())) << key;
    EXPECT_TRUE(std::equal(direct.begin(), direct.end(), in_memory->ids().begin())) << key;
    if (key == "bytes") {
      EXPECT_EQ(direct.size(), text.size());
    } else {
      EXPECT_LT(direct.size(), text.size());  // BPE merges bytes into tokens
    }
    // The header names the source and the tokenizer; reopening reads the same.
    const SourceId source = identify_source(kText);
    const auto reopened = TokenIds::open(dir / "tokens.bin");
    for (const auto* h : {&mapped->header(), &in_memory->header(), &reopened->header()}) {
      EXPECT_EQ(h->source_bytes, source.bytes);
      EXPECT_EQ(h->source_checksum, source.checksum);
      EXPECT_EQ(h->tokenizer_checksum, tokenizer.checksum());
      EXPECT_EQ(h->tokenizer_kind, tokenizer.is_bytes() ? 0u : 1u);
      EXPECT_EQ(h->count, direct.size());
    }
    EXPECT_EQ(fs::file_size(dir / "tokens.bin"), 64 + 4 * direct.size());
  }
}

TEST(TokenFile, ADamagedOrTruncatedFileIsRefusedByName) {
  const fs::path dir = blocklab::testing::fresh_dir("token_file_damaged");
  const fs::path path = dir / "tokens.bin";
  write_token_file(path, kText, TextTokenizer::bytes());
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 4 * 100);
    f.put('\x7f');  // one id changed
  }
  EXPECT_NE(error_of([&] { TokenIds::open(path); }).find("token ids damaged"), std::string::npos);
  fs::resize_file(path, 64 + 4 * 10 + 2);
  EXPECT_NE(error_of([&] { TokenIds::open(path); }).find("truncated"), std::string::npos);
  std::ofstream(path) << "not a token file";
  EXPECT_NE(error_of([&] { TokenIds::open(path); }).find("not a blocklab token file"), std::string::npos);
}

TEST(TokenFile, BadTextFilesAreRefusedByNameAndNothingIsWritten) {
  const fs::path dir = blocklab::testing::fresh_dir("token_file_bad");
  std::ofstream(dir / "empty.txt");
  std::ofstream(dir / "latin1.txt") << "caf\xE9 au lait";
  const fs::path out = dir / "tokens.bin";
  EXPECT_NE(error_of([&] { write_token_file(out, dir / "missing.txt", TextTokenizer::bytes()); }).find("missing.txt: cannot read"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_token_file(out, dir / "empty.txt", TextTokenizer::bytes()); }).find("empty.txt: the file is empty"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_token_file(out, dir / "latin1.txt", TextTokenizer::bytes()); })
                .find("latin1.txt: invalid UTF-8 at byte offset 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_token_file(out, dir, TextTokenizer::bytes()); }).find("cannot read: Is a directory"), std::string::npos);
  EXPECT_FALSE(fs::exists(out));
}

TEST(TextSplit, HoldsOutTheLastFractionAndNeedsAWindowOnEachSide) {
  const TextSplit s = split_tokens(1000, 0.1, 16, "t");
  EXPECT_EQ(s.train_end, 900u);
  EXPECT_EQ(s.train_tokens(), 900u);
  EXPECT_EQ(s.val_tokens(), 100u);
  EXPECT_EQ(split_tokens(1005, 0.1, 16, "t").train_end, 905u);  // floor(100.5) held out
  // The smallest text that fits: a window of seq_len + 1 tokens on each side.
  EXPECT_EQ(split_tokens(34, 0.5, 16, "t").train_end, 17u);
  EXPECT_NE(error_of([] { split_tokens(33, 0.5, 16, "x.txt"); }).find("x.txt: 33 tokens are too few for seq_len 16"),
            std::string::npos);
  EXPECT_THROW(split_tokens(1000, 0.01, 16, "t"), Error);  // 10 validation tokens
  EXPECT_THROW(split_tokens(100, 0.9, 16, "t"), Error);    // 10 training tokens
}

TEST(TextTask, TrainingWindowsLieInTheTrainingSplitAndTargetsAreTheNextTokens) {
  std::vector<int32_t> ids(400);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);  // id = position
  const int T = 8;
  const TextSplit split = split_tokens(ids.size(), 0.25, T, "t");
  TextTask task(ids_of(ids), split, T, 5);
  Batch batch;
  std::set<int32_t> starts;
  for (int step = 0; step < 200; ++step) {
    task.next(batch, 4);
    ASSERT_EQ(batch.batch, 4);
    ASSERT_EQ(batch.seq_len, T);
    for (int b = 0; b < 4; ++b) {
      const int32_t start = batch.inputs[b * T];
      starts.insert(start);
      for (int t = 0; t < T; ++t) {
        EXPECT_EQ(batch.inputs[b * T + t], start + t);
        EXPECT_EQ(batch.targets[b * T + t], start + t + 1);  // the next token
        EXPECT_EQ(batch.loss_mask[b * T + t], 1);            // every position counts
      }
      EXPECT_LE(static_cast<size_t>(start + T), split.train_end - 1);  // the last target is a training token
    }
  }
  EXPECT_EQ(*starts.begin(), 0);                                         // the first window start is drawn
  EXPECT_EQ(static_cast<size_t>(*starts.rbegin()), split.train_end - T - 1);  // and the last
  EXPECT_EQ(task.batches_drawn(), 200u);
}

TEST(TextTask, ValidationWindowsTileTheHeldOutTokensAndPaddingIsMasked) {
  std::vector<int32_t> ids(400);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  const int T = 8;
  const TextSplit split = split_tokens(ids.size(), 0.25, T, "t");  // validation: ids 300..399
  TextTask task(ids_of(ids), split, T, 5);
  ASSERT_EQ(task.validation_windows(), 12u);  // (100 - 1) / 8
  Batch batch;
  task.validation_batch(batch, 10, 4);  // windows 10, 11 and two padding rows
  for (int r = 0; r < 4; ++r) {
    const size_t w = std::min<size_t>(10 + r, 11);
    EXPECT_EQ(batch.inputs[r * T], static_cast<int32_t>(300 + w * T));
    EXPECT_EQ(batch.targets[r * T + T - 1], static_cast<int32_t>(300 + w * T + T));
    EXPECT_LE(batch.targets[r * T + T - 1], 399);
    EXPECT_EQ(batch.loss_mask[r * T], r < 2 ? 1 : 0);
  }
  // Drawing training batches does not move the validation windows.
  task.next(batch, 3);
  Batch again;
  task.validation_batch(again, 0, 2);
  EXPECT_EQ(again.inputs[0], 300);
  EXPECT_EQ(again.inputs[T], 300 + T);
  // A long validation split is capped at kMaxValidationWindows windows.
  TextTask big(ids_of(std::vector<int32_t>(20000, 1)), split_tokens(20000, 0.5, T, "t"), T, 0);
  EXPECT_EQ(big.validation_windows(), kMaxValidationWindows);
}

TEST(TextTask, TheStreamIsAFunctionOfTheSeedAndResumesFromItsState) {
  const auto tokens = tokenize_text_file(kText, TextTokenizer::bytes());
  const TextSplit split = split_tokens(tokens->size(), 0.1, 32, "t");
  TextTask a(tokens, split, 32, 7), b(tokens, split, 32, 7), other(tokens, split, 32, 8);
  Batch x, y, z;
  for (int i = 0; i < 5; ++i) {
    a.next(x, 6);
    b.next(y, 6);
    other.next(z, 6);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_NE(x.inputs, z.inputs);
  }
  // A stream restored from a saved state continues with the same batches.
  TextTask restored(tokens, split, 32, 0);
  restored.set_rng(a.rng());
  restored.set_batches_drawn(a.batches_drawn());
  a.next(x, 6);
  restored.next(y, 6);
  EXPECT_EQ(x.inputs, y.inputs);
  EXPECT_EQ(x.targets, y.targets);
}

TEST(UnigramEntropy, IsTheEntropyOfTheTokenFrequencies) {
  EXPECT_DOUBLE_EQ(unigram_entropy(std::vector<int32_t>{3, 3, 3}), 0.0);
  EXPECT_NEAR(unigram_entropy(std::vector<int32_t>{0, 1, 2, 3}), std::log(4.0), 1e-12);
  // p = (1/2, 1/4, 1/4): 1.5 bits
  EXPECT_NEAR(unigram_entropy(std::vector<int32_t>{7, 7, 1, 2}), 1.5 * std::log(2.0), 1e-12);
  EXPECT_EQ(unigram_entropy(std::vector<int32_t>{}), 0.0);
  // large ids (a Hugging Face vocabulary): the same entropy as their ranks
  EXPECT_NEAR(unigram_entropy(std::vector<int32_t>{151000, 151000, 5, 90000}), 1.5 * std::log(2.0), 1e-12);
  EXPECT_THROW(unigram_entropy(std::vector<int32_t>{1, -2}), Error);
}
