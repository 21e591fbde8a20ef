#pragma once
// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (GPT-2, Qwen2/Qwen3, Llama 3):
//
//   text -> split out added tokens (<|im_start|>, <|endoftext|>, ...)
//        -> NFC (when the normalizer asks for it)
//        -> pre-tokenizer regex pieces (GPT-2, Qwen2 or Llama-3 pattern)
//        -> each piece's UTF-8 bytes as byte-level symbols -> BPE merges by rank -> ids
//        -> post-processor special tokens (e.g. Llama 3's <|begin_of_text|>)
//
// The three pre-tokenizer regexes are recognised by their exact text and run by a hand-written
// matcher with the regex's alternation and backtracking semantics; any other pattern, normalizer,
// model type or post-processor is reported as unsupported rather than silently mis-tokenised.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace blocklab::hf {

enum class PreTokenizerPattern {
  GPT2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Qwen2,   // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Llama3,  // as Qwen2 with \p{N}{1,3}
};
const char* pattern_name(PreTokenizerPattern);
// The regex text of each pattern, exactly as tokenizer.json writes it.
const char* pattern_regex(PreTokenizerPattern);

// Splits code points into the regex's consecutive matches: [begin, end) index pairs covering the text.
std::vector<std::pair<std::size_t, std::size_t>> split_pretokens(PreTokenizerPattern pattern, std::u32string_view text);

class Tokenizer {
 public:
  // `path` is tokenizer.json or a directory holding it. Throws Error naming the file.
  static Tokenizer load(const std::filesystem::path& path);
  static Tokenizer parse(std::string_view json_text, const std::string& where);

  // Text must be valid UTF-8 (Error otherwise). add_special_tokens applies the post-processor's
  // template (as Hugging Face's encode() does by default).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Concatenated bytes of the tokens (byte-level symbols mapped back to bytes; added tokens as written).
  std::string decode(std::span<const int32_t> ids) const;
  std::string token_bytes(int32_t id) const;  // one token; Error for an unknown id

  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }  // largest id + 1
  std::size_t merge_count() const { return merges_.size(); }
  PreTokenizerPattern pattern() const { return pattern_; }
  bool normalizes_nfc() const { return nfc_; }

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
  };
  struct Merge {
    int32_t rank, result;
  };
  Tokenizer() = default;
  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
  void bpe(std::vector<int32_t>& symbols) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;     // byte-level symbols ("" for unused ids)
  std::vector<bool> is_added_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, merged id
  int32_t byte_ids_[256] = {};
  std::vector<AddedToken> added_;            // longest first
  std::vector<int32_t> prefix_ids_, suffix_ids_;
  PreTokenizerPattern pattern_ = PreTokenizerPattern::GPT2;
  bool nfc_ = false;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
};

}  // namespace blocklab::hf
