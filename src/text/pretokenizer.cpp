#include "text/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#if BLOCKLAB_HAVE_TEXT
#include <pcre2.h>
#endif

#include "text/unicode.h"
#include "util/error.h"

namespace blocklab::text {

namespace {

constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

#if BLOCKLAB_HAVE_TEXT
std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// In a Unicode-aware PCRE2 (PCRE2_UCP) \s is \p{Z} plus \h and \v, which adds U+180E (no longer
// White_Space since Unicode 6.3) to what Oniguruma and JavaScript match. Spelling \s as the White_Space
// set keeps the pieces those engines produce: inside a class as its members, outside as a class.
constexpr const char* kWhiteSpace = R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
std::string with_white_space(std::string_view regex) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < regex.size(); ++i) {
    const char c = regex[i];
    if (c == '\\' && i + 1 < regex.size()) {
      const char n = regex[++i];
      if (n == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (n == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += n;
      }
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

#endif  // BLOCKLAB_HAVE_TEXT

}  // namespace

const char* pattern_name(PreTokenizerPattern p) {
  switch (p) {
    case PreTokenizerPattern::GPT2: return "gpt2";
    case PreTokenizerPattern::Qwen2: return "qwen2";
    case PreTokenizerPattern::Llama3: return "llama3";
  }
  return "?";
}

const char* pattern_regex(PreTokenizerPattern p) {
  switch (p) {
    case PreTokenizerPattern::GPT2: return kGpt2Regex;
    case PreTokenizerPattern::Qwen2: return kQwen2Regex;
    case PreTokenizerPattern::Llama3: return kLlama3Regex;
  }
  return "";
}

bool find_pattern(std::string_view regex, PreTokenizerPattern& out) {
  for (PreTokenizerPattern p : {PreTokenizerPattern::GPT2, PreTokenizerPattern::Qwen2, PreTokenizerPattern::Llama3})
    if (regex == pattern_regex(p)) {
      out = p;
      return true;
    }
  return false;
}

#if BLOCKLAB_HAVE_TEXT
struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(PreTokenizerPattern pattern) : pattern_(pattern) {
  const std::string regex = with_white_space(pattern_regex(pattern));
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto compiled = std::make_shared<Compiled>();
  compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(), PCRE2_UTF | PCRE2_UCP,
                                 &error, &offset, nullptr);
  if (compiled->code == nullptr)
    throw Error(std::string("pre-tokenizer regex ") + pattern_regex(pattern) + ": " + pcre2_message(error) +
                " at offset " + std::to_string(offset));
  compiled->jit = pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE) == 0;  // else the interpreter
  code_ = std::move(compiled);
}

std::vector<std::pair<std::size_t, std::size_t>> PreTokenizer::split(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const std::size_t n = text.size();
  std::size_t at = 0, gap = 0;  // where the next search starts; the end of the last piece
  while (at < n) {
    int rc = pcre2_match(code_->code, subject, n, at, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // a very long match: the interpreter keeps its frames on the heap
      rc = pcre2_match(code_->code, subject, n, at, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw Error("pre-tokenizer: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const std::size_t b = ov[0], e = ov[1];
    if (e == b) {  // an empty match is no piece: step over one code point
      at = b + 1;
      while (at < n && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
      continue;
    }
    if (b > gap) out.emplace_back(gap, b);
    out.emplace_back(b, e);
    gap = at = e;
  }
  if (gap < n) out.emplace_back(gap, n);
  return out;
}

#else
struct PreTokenizer::Compiled {};

PreTokenizer::PreTokenizer(PreTokenizerPattern pattern) : pattern_(pattern) { text_not_in_build(); }

std::vector<std::pair<std::size_t, std::size_t>> PreTokenizer::split(std::string_view) const { text_not_in_build(); }
#endif  // BLOCKLAB_HAVE_TEXT

std::vector<std::pair<std::size_t, std::size_t>> split_pretokens(PreTokenizerPattern pattern, std::u32string_view s) {
  const std::string utf8 = encode_utf8(s);
  // Byte offset -> code point index at the starts of code points.
  std::vector<std::size_t> index(utf8.size() + 1, 0);
  std::size_t cp = 0;
  for (std::size_t i = 0; i < utf8.size(); ++i)
    if ((static_cast<unsigned char>(utf8[i]) & 0xC0) != 0x80) index[i] = cp++;
  index[utf8.size()] = cp;
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const auto& [b, e] : PreTokenizer(pattern).split(utf8)) out.emplace_back(index[b], index[e]);
  return out;
}

}  // namespace blocklab::text
