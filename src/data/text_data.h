#pragma once
// The text task's data: a UTF-8 text file, its tokenizer, the token ids (tokenized once into a file that is
// memory-mapped), the split into training and validation tokens, and the deterministic stream of training
// windows.
//
// Token file (RUN/tokens.bin), little-endian:
//   bytes 0..63  header: magic "BLTOKENS", u32 header size (64), u32 bytes per id (4), u64 token count,
//                u64 source size, u64 XXH3-64 of the source bytes, u64 XXH3-64 of tokenizer.json
//                (0: the byte tokenizer), u64 XXH3-64 of the id bytes, u32 tokenizer kind (0 bytes, 1 tokenizer.json),
//                u32 zero
//   then         count ids as u32
// The header says which text and which tokenizer made the ids, so that a resumed run reuses them only when
// both are unchanged.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/copy_task.h"
#include "io/read_file.h"
#include "text/tokenizer.h"
#include "util/rng.h"

namespace blocklab {

// Throws Error("<what>: invalid UTF-8 at byte offset N") at the first malformed sequence (strict: no
// overlong forms, surrogates or code points above U+10FFFF).
void check_utf8(std::span<const std::byte> bytes, const std::string& what);

// The text task's tokenizer: bytes (ids 0..255, the UTF-8 bytes) or a Hugging Face tokenizer.json.
class TextTokenizer {
 public:
  static TextTokenizer bytes();
  // Reads and parses tokenizer.json (or a directory holding one). Throws Error naming the file.
  static TextTokenizer load(const std::filesystem::path& path);
  // "bytes" -> bytes(), anything else is a path -> load().
  static TextTokenizer from_key(const std::string& key);

  bool is_bytes() const { return !hf_; }
  int32_t vocab_size() const { return hf_ ? hf_->vocab_size() : 256; }
  // XXH3-64 of the tokenizer.json bytes; 0 for the byte tokenizer.
  uint64_t checksum() const { return checksum_; }
  // "bytes" or "tokenizer.json (xxh3_64 <16 hex digits>)", for messages.
  std::string describe() const;
  // The tokenizer.json text (empty for bytes), to copy into a run directory.
  const std::string& json_text() const { return json_; }

  // text must be valid UTF-8. No special tokens are added.
  std::vector<int32_t> encode(std::string_view text) const;
  // The bytes of the ids (for bytes: the ids as bytes; not necessarily valid UTF-8 when cut mid-character).
  std::string decode(std::span<const int32_t> ids) const;

 private:
  TextTokenizer() = default;
  std::shared_ptr<const text::Tokenizer> hf_;
  std::string json_;
  uint64_t checksum_ = 0;
};

// What a token file's header records.
struct TokenFileHeader {
  uint64_t count = 0;
  uint64_t source_bytes = 0, source_checksum = 0;
  uint64_t tokenizer_checksum = 0;  // 0: bytes
  uint32_t tokenizer_kind = 0;      // 0 bytes, 1 tokenizer.json
  uint64_t ids_checksum = 0;
};

// Token ids, memory-mapped from a token file or held in memory. Immutable once made.
class TokenIds {
 public:
  // Memory-maps a token file and checks its header, size and id checksum. Throws Error naming the file.
  static std::shared_ptr<const TokenIds> open(const std::filesystem::path& path);
  static std::shared_ptr<const TokenIds> in_memory(std::vector<int32_t> ids, TokenFileHeader header);
  TokenIds(const TokenIds&) = delete;
  TokenIds& operator=(const TokenIds&) = delete;

  std::span<const int32_t> ids() const { return {data_, static_cast<size_t>(header_.count)}; }
  size_t size() const { return static_cast<size_t>(header_.count); }
  const TokenFileHeader& header() const { return header_; }
  bool mapped() const { return file_.size() > 0; }

 private:
  TokenIds() = default;
  TokenFileHeader header_;
  const int32_t* data_ = nullptr;
  std::vector<int32_t> owned_;
  io::MappedFile file_;  // the token file, when the ids are read from it
};

// Reads the text file (memory-mapped), checks that it is non-empty valid UTF-8 and tokenizes it. Throws Error
// naming the file: missing, a directory, empty, invalid UTF-8 (with the byte offset).
std::shared_ptr<const TokenIds> tokenize_text_file(const std::filesystem::path& source, const TextTokenizer& tokenizer);
// The same, written as a token file at `path` (atomically: a temporary file renamed into place), then
// memory-mapped. The byte tokenizer streams the text; tokenizer.json tokenizes it in memory once.
std::shared_ptr<const TokenIds> write_token_file(const std::filesystem::path& path, const std::filesystem::path& source,
                                                 const TextTokenizer& tokenizer);
// The size and XXH3-64 of a file's bytes (memory-mapped). Throws Error naming the file.
struct SourceId {
  uint64_t bytes = 0, checksum = 0;
};
SourceId identify_source(const std::filesystem::path& source);

// Training tokens [0, train_end), validation tokens [train_end, count): the last floor(count * val_fraction)
// ids are held out. Every window of seq_len + 1 tokens (inputs and their next-token targets) lies inside one
// split. Throws Error when either split is shorter than one window.
struct TextSplit {
  size_t train_end = 0, count = 0;
  size_t train_tokens() const { return train_end; }
  size_t val_tokens() const { return count - train_end; }
};
TextSplit split_tokens(size_t count, double val_fraction, int seq_len, const std::string& what);

// Validation windows are the non-overlapping windows from the start of the validation split, at most this many.
inline constexpr size_t kMaxValidationWindows = 128;

// Next-token prediction on windows of seq_len tokens of the training split: a step's batch is batch_size
// windows whose starts are uniform over the split, drawn from one seeded stream (as the copy task's
// tokens are), so a batch depends on (seed, step) only; micro-shards take consecutive rows of it. The loss
// counts every position.
class TextTask {
 public:
  TextTask(std::shared_ptr<const TokenIds> ids, TextSplit split, int seq_len, uint64_t seed);

  int seq_len() const { return seq_len_; }
  const TextSplit& split() const { return split_; }
  const TokenIds& tokens() const { return *ids_; }
  std::shared_ptr<const TokenIds> shared_tokens() const { return ids_; }

  void next(Batch& batch, int batch_size);

  // The fixed validation windows: window w starts at train_end + w * seq_len.
  size_t validation_windows() const;
  // Rows first .. first+rows-1 of the validation windows into batch (rows past the last window repeat the
  // last one with a zero loss mask, so a batch of a fixed size serves every chunk).
  void validation_batch(Batch& batch, size_t first, int rows) const;

  const Rng& rng() const { return rng_; }
  void set_rng(const Rng& rng) { rng_ = rng; }
  uint64_t batches_drawn() const { return batches_drawn_; }
  void set_batches_drawn(uint64_t n) { batches_drawn_ = n; }

 private:
  void fill_window(Batch& batch, int row, size_t start, uint8_t mask) const;
  std::shared_ptr<const TokenIds> ids_;
  TextSplit split_;
  int seq_len_;
  Rng rng_;
  uint64_t batches_drawn_ = 0;
};

// The unigram entropy (nats) of ids: -sum p log p over the ids' frequencies. The loss of a model that knows
// each token's frequency and nothing else.
double unigram_entropy(std::span<const int32_t> ids);

}  // namespace blocklab
