// Pre-tokenisation through PCRE2 (src/text/pretokenizer.h) and the strict UTF-8 of src/text/unicode.h: the
// cases the tokenizer fixtures do not reach (very long runs, White_Space as Oniguruma and JavaScript define
// it, several threads on one compiled regex).
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "text/pretokenizer.h"
#include "text/unicode.h"
#include "util/error.h"

namespace {

using blocklab::Error;
using namespace blocklab::text;

std::vector<std::string> pieces(PreTokenizerPattern p, const std::string& s) {
  std::vector<std::string> out;
  for (const auto& [b, e] : PreTokenizer(p).split(s)) out.push_back(s.substr(b, e - b));
  return out;
}

using V = std::vector<std::string>;

TEST(TextPreTokenizer, PiecesCoverTheTextInOrder) {
  const std::string s = "Hello,  world!\n\n\t 12345 caf\u00e9 \ud55c\uad6d\uc5b4 it's  ";
  for (PreTokenizerPattern p : {PreTokenizerPattern::GPT2, PreTokenizerPattern::Qwen2, PreTokenizerPattern::Llama3}) {
    std::size_t at = 0;
    for (const auto& [b, e] : PreTokenizer(p).split(s)) {
      EXPECT_EQ(b, at) << pattern_name(p);
      EXPECT_LT(b, e) << pattern_name(p);
      at = e;
    }
    EXPECT_EQ(at, s.size()) << pattern_name(p);
  }
}

TEST(TextPreTokenizer, LongWhitespaceRunGivesBackOneSpace) {
  // \s+(?!\S) over a mebibyte of spaces: all but the last, which starts the next word's piece.
  const std::string s = std::string(1 << 20, ' ') + "a";
  for (PreTokenizerPattern p : {PreTokenizerPattern::GPT2, PreTokenizerPattern::Qwen2}) {
    const auto v = PreTokenizer(p).split(s);
    ASSERT_EQ(v.size(), 2u) << pattern_name(p);
    EXPECT_EQ(v[0].second, s.size() - 2) << pattern_name(p);
    EXPECT_EQ(s.substr(v[1].first), " a") << pattern_name(p);
  }
}

TEST(TextPreTokenizer, WhiteSpaceIsTheUnicodeProperty) {
  // U+180E (Mongolian vowel separator) left White_Space in Unicode 6.3: it is punctuation-like here and
  // joins the "!" before it, as in Oniguruma and JavaScript.
  EXPECT_EQ(pieces(PreTokenizerPattern::GPT2, "!\u180e"), (V{"!\u180e"}));
  // U+3000 (ideographic space) and U+0085 (next line) are White_Space: a piece of their own.
  EXPECT_EQ(pieces(PreTokenizerPattern::GPT2, "!\u3000"), (V{"!", "\u3000"}));
  EXPECT_EQ(pieces(PreTokenizerPattern::GPT2, "!\u0085"), (V{"!", "\u0085"}));
  EXPECT_EQ(pieces(PreTokenizerPattern::GPT2, "a\u3000\u3000b"), (V{"a", "\u3000", "\u3000", "b"}));
}

TEST(TextPreTokenizer, OneCompiledRegexOnSeveralThreads) {
  std::string s;
  for (int i = 0; i < 2000; ++i) s += "The " + std::to_string(i) + " caf\u00e9s, \u4e16\u754c! ";
  const PreTokenizer tk(PreTokenizerPattern::Qwen2);
  const auto expected = tk.split(s);
  std::vector<int> same(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { same[t] = tk.split(s) == expected; });
  for (auto& t : threads) t.join();
  EXPECT_EQ(same, (std::vector<int>{1, 1, 1, 1}));
}

TEST(TextUnicode, StrictUtf8NamesTheByte) {
  auto error_of = [](const std::string& s) {
    try {
      check_utf8(s, "t");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of("ab\xc0\xaf"), "t: invalid UTF-8 at byte 2");          // overlong '/'
  EXPECT_EQ(error_of("\xed\xa0\x80"), "t: invalid UTF-8 at byte 0");        // surrogate U+D800
  EXPECT_EQ(error_of("x\xf4\x90\x80\x80"), "t: invalid UTF-8 at byte 1");   // above U+10FFFF
  EXPECT_EQ(error_of("\xe2\x82"), "t: invalid UTF-8 at byte 0");            // truncated
  EXPECT_EQ(error_of("caf\xc3\xa9 \xf0\x9f\x98\x80"), "");
  EXPECT_EQ(decode_utf8("\xc3\xa9\xf0\x9f\x98\x80", "t"), (std::u32string{U'\u00e9', U'\U0001F600'}));
  EXPECT_EQ(encode_utf8(U"\u00e9\U0001F600"), "\xc3\xa9\xf0\x9f\x98\x80");
}

TEST(TextUnicode, NfcOfLatin1IsItself) {
  // The shortcut below U+0300 and the full composition agree.
  const std::string latin1 = "na\u00efve \u00c5ngstr\u00f6m \u00bd";
  EXPECT_EQ(nfc(latin1), latin1);
  EXPECT_EQ(nfc("A\u030a"), "\u00c5");
  EXPECT_EQ(nfc(std::string("a\0e", 3) + "\u0301"), std::string("a\0", 2) + "\u00e9");  // NUL is a character
}

}  // namespace
