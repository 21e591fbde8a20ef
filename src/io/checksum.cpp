#include "io/checksum.h"

#include <xxhash.h>

#include <new>

namespace blocklab::io {

struct ChecksumStream::State {
  XXH3_state_t* xxh = nullptr;
};

uint64_t checksum(std::span<const std::byte> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::string checksum_hex(uint64_t value) {
  static const char* digits = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) out[i] = digits[value & 15];
  return out;
}

bool parse_checksum_hex(std::string_view text, uint64_t& value) {
  if (text.size() != 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  value = v;
  return true;
}

ChecksumStream::ChecksumStream() : state_(std::make_unique<State>()) {
  state_->xxh = XXH3_createState();
  if (state_->xxh == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state_->xxh);
}

ChecksumStream::~ChecksumStream() {
  if (state_) XXH3_freeState(state_->xxh);
}

void ChecksumStream::update(std::span<const std::byte> bytes) {
  if (!bytes.empty()) XXH3_64bits_update(state_->xxh, bytes.data(), bytes.size());
}

uint64_t ChecksumStream::digest() const { return XXH3_64bits_digest(state_->xxh); }

}  // namespace blocklab::io
