#pragma once
// Pre-tokenisation: the Split regex of a tokenizer.json run by PCRE2 (Debian: libpcre2-dev) with UTF and
// Unicode properties (\p{L}, \p{N}, and \s as White_Space), JIT-compiled where PCRE2 has a JIT. The text is
// cut into the regex's consecutive matches (Hugging Face's Split with behavior Isolated): each match is a
// piece, and so is any text between two matches.
//
// Only the three patterns below are accepted: they are the ones whose pieces the tests compare with a
// reference regex engine.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace blocklab::text {

enum class PreTokenizerPattern {
  GPT2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Qwen2,   // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Llama3,  // as Qwen2 with \p{N}{1,3}
};
const char* pattern_name(PreTokenizerPattern);
// The regex text of each pattern, exactly as tokenizer.json writes it.
const char* pattern_regex(PreTokenizerPattern);
// The pattern whose regex is exactly `regex`; false when it is none of them.
bool find_pattern(std::string_view regex, PreTokenizerPattern& out);

// A compiled split regex. Copies share the compiled code; split() may run on several threads at once.
class PreTokenizer {
 public:
  explicit PreTokenizer(PreTokenizerPattern pattern = PreTokenizerPattern::GPT2);
  PreTokenizerPattern pattern() const { return pattern_; }

  // [begin, end) byte offsets of the pieces of valid UTF-8 `text`, covering it in order.
  std::vector<std::pair<std::size_t, std::size_t>> split(std::string_view utf8) const;

 private:
  struct Compiled;
  PreTokenizerPattern pattern_;
  std::shared_ptr<const Compiled> code_;
};

// Splits code points into the regex's pieces: [begin, end) code point indices covering the text.
std::vector<std::pair<std::size_t, std::size_t>> split_pretokens(PreTokenizerPattern pattern, std::u32string_view text);

}  // namespace blocklab::text
