#pragma once
// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (GPT-2, Qwen2/Qwen3, Llama 3):
//
//   text -> split out added tokens (<|im_start|>, <|endoftext|>, ...)
//        -> NFC (when the normalizer asks for it)
//        -> pre-tokenizer regex pieces (GPT-2, Qwen2 or Llama-3 pattern)
//        -> each piece's UTF-8 bytes as byte-level symbols -> BPE merges by rank -> ids
//        -> post-processor special tokens (e.g. Llama 3's <|begin_of_text|>)
//
// The pre-tokenizer regex is one of the three of text/pretokenizer.h, run by PCRE2; any other pattern,
// normalizer, model type or post-processor is reported as unsupported rather than silently mis-tokenised.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "text/pretokenizer.h"

namespace blocklab::text {

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
  // parse's parts, each reading one section of tokenizer.json (`where` names the file in errors).
  void read_vocabulary(const nlohmann::json& j, const std::string& where);  // model, added_tokens, byte symbols
  void read_merges(const nlohmann::json& model, const std::string& where);
  void read_normalizer(const nlohmann::json& j, const std::string& where);
  void read_pre_tokenizer(const nlohmann::json& j, const std::string& where);
  void read_post_processor(const nlohmann::json& j, const std::string& where);
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
  PreTokenizer splitter_;
  bool nfc_ = false;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
};

}  // namespace blocklab::text
