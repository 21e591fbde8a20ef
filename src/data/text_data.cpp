#include "data/text_data.h"

#include <unistd.h>  // getpid, fsync

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "io/atomic_file.h"
#include "io/checksum.h"
#include "io/read_file.h"
#include "util/error.h"

namespace blocklab {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'B', 'L', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr size_t kHeaderBytes = 64;

template <typename T>
void put(std::byte* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::byte>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
}
template <typename T>
T get(const std::byte* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(v);
}

std::array<std::byte, kHeaderBytes> encode_header(const TokenFileHeader& h) {
  std::array<std::byte, kHeaderBytes> b{};
  std::memcpy(b.data(), kMagic, 8);
  put<uint32_t>(b.data() + 8, kHeaderBytes);
  put<uint32_t>(b.data() + 12, 4);
  put<uint64_t>(b.data() + 16, h.count);
  put<uint64_t>(b.data() + 24, h.source_bytes);
  put<uint64_t>(b.data() + 32, h.source_checksum);
  put<uint64_t>(b.data() + 40, h.tokenizer_checksum);
  put<uint64_t>(b.data() + 48, h.ids_checksum);
  put<uint32_t>(b.data() + 56, h.tokenizer_kind);
  return b;
}

std::span<const std::byte> id_bytes(std::span<const int32_t> ids) {
  return {reinterpret_cast<const std::byte*>(ids.data()), ids.size() * sizeof(int32_t)};
}

void check_text(std::span<const std::byte> bytes, const std::string& what) {
  if (bytes.empty()) throw Error(what + ": the file is empty (the text task needs text to train on)");
  check_utf8(bytes, what);
}

TokenFileHeader header_for(const TextTokenizer& tokenizer, std::span<const std::byte> source) {
  TokenFileHeader h;
  h.source_bytes = source.size();
  h.source_checksum = io::checksum(source);
  h.tokenizer_checksum = tokenizer.checksum();
  h.tokenizer_kind = tokenizer.is_bytes() ? 0 : 1;
  return h;
}

}  // namespace

void check_utf8(std::span<const std::byte> bytes, const std::string& what) {
  const size_t n = bytes.size();
  auto at = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  for (size_t i = 0; i < n;) {
    const unsigned char c = at(i);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07, min = 0x10000;
    else throw Error(what + ": invalid UTF-8 at byte offset " + std::to_string(i));
    if (i + len > n) throw Error(what + ": invalid UTF-8 at byte offset " + std::to_string(i) + " (truncated sequence)");
    for (int k = 1; k < len; ++k) {
      if ((at(i + k) & 0xc0) != 0x80) throw Error(what + ": invalid UTF-8 at byte offset " + std::to_string(i));
      cp = (cp << 6) | (at(i + k) & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      throw Error(what + ": invalid UTF-8 at byte offset " + std::to_string(i));
    i += len;
  }
}

TextTokenizer TextTokenizer::bytes() { return TextTokenizer(); }

TextTokenizer TextTokenizer::load(const fs::path& given) {
  fs::path path = given;
  std::error_code ec;
  if (fs::is_directory(path, ec)) path /= "tokenizer.json";
  TextTokenizer t;
  t.json_ = io::read_file(path);
  t.hf_ = std::make_shared<const text::Tokenizer>(text::Tokenizer::parse(t.json_, path.string()));
  t.checksum_ = io::checksum({reinterpret_cast<const std::byte*>(t.json_.data()), t.json_.size()});
  return t;
}

TextTokenizer TextTokenizer::from_key(const std::string& key) { return key == "bytes" ? bytes() : load(key); }

std::string TextTokenizer::describe() const {
  return hf_ ? "tokenizer.json (xxh3_64 " + io::checksum_hex(checksum_) + ")" : "bytes";
}

std::vector<int32_t> TextTokenizer::encode(std::string_view text) const {
  if (hf_) return hf_->encode(text, /*add_special_tokens=*/false);
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string TextTokenizer::decode(std::span<const int32_t> ids) const {
  if (hf_) return hf_->decode(ids);
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] > 255) throw Error("token id " + std::to_string(ids[i]) + " is not a byte (0-255)");
    out[i] = static_cast<char>(ids[i]);
  }
  return out;
}

std::shared_ptr<const TokenIds> TokenIds::in_memory(std::vector<int32_t> ids, TokenFileHeader header) {
  auto t = std::shared_ptr<TokenIds>(new TokenIds());
  header.count = ids.size();
  header.ids_checksum = io::checksum(id_bytes(ids));
  t->owned_ = std::move(ids);
  t->header_ = header;
  t->data_ = t->owned_.data();
  return t;
}

std::shared_ptr<const TokenIds> TokenIds::open(const fs::path& path) {
  const std::string what = path.string();
  io::MappedFile file(path, what);
  const auto b = file.bytes();
  if (b.size() < kHeaderBytes || std::memcmp(b.data(), kMagic, 8) != 0)
    throw Error(what + ": not a blocklab token file");
  if (get<uint32_t>(b.data() + 8) != kHeaderBytes || get<uint32_t>(b.data() + 12) != 4)
    throw Error(what + ": unsupported token file layout");
  TokenFileHeader h;
  h.count = get<uint64_t>(b.data() + 16);
  h.source_bytes = get<uint64_t>(b.data() + 24);
  h.source_checksum = get<uint64_t>(b.data() + 32);
  h.tokenizer_checksum = get<uint64_t>(b.data() + 40);
  h.ids_checksum = get<uint64_t>(b.data() + 48);
  h.tokenizer_kind = get<uint32_t>(b.data() + 56);
  if (h.count > (b.size() - kHeaderBytes) / 4 || kHeaderBytes + h.count * 4 != b.size())
    throw Error(what + ": truncated or oversized token file (header says " + std::to_string(h.count) + " ids, file has " +
                std::to_string(b.size()) + " bytes)");
  const auto ids = b.subspan(kHeaderBytes);
  const uint64_t sum = io::checksum(ids);
  if (sum != h.ids_checksum)
    throw Error(what + ": token ids damaged (checksum " + io::checksum_hex(sum) + ", header says " +
                io::checksum_hex(h.ids_checksum) + ")");
  auto t = std::shared_ptr<TokenIds>(new TokenIds());
  t->header_ = h;
  t->data_ = reinterpret_cast<const int32_t*>(b.data() + kHeaderBytes);  // page-aligned map + 64
  t->file_ = std::move(file);
  return t;
}

SourceId identify_source(const fs::path& source) {
  io::MappedFile file(source, source.string());
  return {file.bytes().size(), io::checksum(file.bytes())};
}

std::shared_ptr<const TokenIds> tokenize_text_file(const fs::path& source, const TextTokenizer& tokenizer) {
  io::MappedFile file(source, source.string());
  const auto bytes = file.bytes();
  check_text(bytes, source.string());
  const TokenFileHeader h = header_for(tokenizer, bytes);
  return TokenIds::in_memory(
      tokenizer.encode(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())), h);
}

std::shared_ptr<const TokenIds> write_token_file(const fs::path& path, const fs::path& source,
                                                 const TextTokenizer& tokenizer) {
  const std::string temp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    io::MappedFile file(source, source.string());
    const auto bytes = file.bytes();
    check_text(bytes, source.string());
    TokenFileHeader h = header_for(tokenizer, bytes);
    std::FILE* out = std::fopen(temp.c_str(), "wb");
    if (out == nullptr) throw Error(temp + ": cannot write: " + std::strerror(errno));
    bool ok = std::fwrite(encode_header(h).data(), 1, kHeaderBytes, out) == kHeaderBytes;
    io::ChecksumStream sum;
    auto write_ids = [&](std::span<const int32_t> ids) {
      sum.update(id_bytes(ids));
      ok = ok && std::fwrite(ids.data(), sizeof(int32_t), ids.size(), out) == ids.size();
    };
    if (tokenizer.is_bytes()) {  // streamed in blocks: memory does not grow with the text
      std::vector<int32_t> block(1 << 16);
      for (size_t start = 0; start < bytes.size(); start += block.size()) {
        const size_t n = std::min(block.size(), bytes.size() - start);
        for (size_t i = 0; i < n; ++i) block[i] = static_cast<int32_t>(bytes[start + i]);
        write_ids({block.data(), n});
      }
      h.count = bytes.size();
    } else {
      const std::vector<int32_t> ids =
          tokenizer.encode(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
      write_ids(ids);
      h.count = ids.size();
    }
    h.ids_checksum = sum.digest();
    ok = ok && std::fseek(out, 0, SEEK_SET) == 0 &&
         std::fwrite(encode_header(h).data(), 1, kHeaderBytes, out) == kHeaderBytes;
    ok = ok && std::fflush(out) == 0 && ::fsync(::fileno(out)) == 0;
    const int err = errno;
    ok = std::fclose(out) == 0 && ok;
    if (!ok) {
      std::remove(temp.c_str());
      throw Error(path.string() + ": cannot write the token file: " + std::strerror(err));
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    std::remove(temp.c_str());
    throw Error(path.string() + ": cannot write the token file: " + ec.message());
  }
  return TokenIds::open(path);
}

TextSplit split_tokens(size_t count, double val_fraction, int seq_len, const std::string& what) {
  TextSplit s;
  s.count = count;
  const size_t held_out = static_cast<size_t>(std::floor(static_cast<double>(count) * val_fraction));
  s.train_end = count - std::min(held_out, count);
  const size_t window = static_cast<size_t>(seq_len) + 1;
  if (s.train_tokens() < window || s.val_tokens() < window) {
    char fraction[32];
    std::snprintf(fraction, sizeof fraction, "%g", val_fraction);
    throw Error(what + ": " + std::to_string(count) + " tokens are too few for seq_len " + std::to_string(seq_len) +
                ": the training split (" + std::to_string(s.train_tokens()) + " tokens) and the validation split (" +
                std::to_string(s.val_tokens()) + " tokens, val_fraction " + fraction + ") each need at least " +
                std::to_string(window) + " (one window and its next token); use a longer text or a smaller seq_len");
  }
  return s;
}

TextTask::TextTask(std::shared_ptr<const TokenIds> ids, TextSplit split, int seq_len, uint64_t seed)
    : ids_(std::move(ids)), split_(split), seq_len_(seq_len), rng_(seed) {
  if (!ids_ || split_.count != ids_->size() || split_.train_end < static_cast<size_t>(seq_len) + 1 ||
      split_.val_tokens() < static_cast<size_t>(seq_len) + 1)
    throw Error("text task: the split does not fit the tokens");
}

void TextTask::fill_window(Batch& batch, int row, size_t start, uint8_t mask) const {
  const int T = seq_len_;
  const int32_t* ids = ids_->ids().data() + start;
  int32_t* in = batch.inputs.data() + static_cast<size_t>(row) * T;
  int32_t* target = batch.targets.data() + static_cast<size_t>(row) * T;
  uint8_t* m = batch.loss_mask.data() + static_cast<size_t>(row) * T;
  std::copy(ids, ids + T, in);
  std::copy(ids + 1, ids + T + 1, target);
  std::fill(m, m + T, mask);
}

void TextTask::next(Batch& batch, int batch_size) {
  batch.resize(batch_size, seq_len_);
  // A window [o, o + T] (T inputs and the token after them) lies in the training split: o <= train_end - T - 1.
  const uint64_t starts = split_.train_end - static_cast<size_t>(seq_len_);
  for (int b = 0; b < batch_size; ++b) fill_window(batch, b, static_cast<size_t>(rng_.below(starts)), 1);
  ++batches_drawn_;
}

size_t TextTask::validation_windows() const {
  return std::min(kMaxValidationWindows, (split_.val_tokens() - 1) / static_cast<size_t>(seq_len_));
}

void TextTask::validation_batch(Batch& batch, size_t first, int rows) const {
  batch.resize(rows, seq_len_);
  const size_t n = validation_windows();
  for (int r = 0; r < rows; ++r) {
    const size_t w = first + r;
    fill_window(batch, r, split_.train_end + std::min(w, n - 1) * seq_len_, w < n ? 1 : 0);
  }
}

double unigram_entropy(std::span<const int32_t> ids) {
  if (ids.empty()) return 0.0;
  const int32_t top = *std::max_element(ids.begin(), ids.end());
  if (*std::min_element(ids.begin(), ids.end()) < 0) throw Error("unigram_entropy: negative token id");
  std::vector<uint64_t> count(static_cast<size_t>(top) + 1, 0);
  for (int32_t id : ids) ++count[static_cast<size_t>(id)];
  double h = 0;
  const double n = static_cast<double>(ids.size());
  for (uint64_t c : count)
    if (c != 0) {
      const double p = static_cast<double>(c) / n;
      h -= p * std::log(p);
    }
  return h;
}

}  // namespace blocklab
