#pragma once
// Checksums of the bytes blocklab writes: XXH3-64 (Debian's libxxhash), about 20-30 GB/s on one core, so a
// checkpoint is hashed in a small fraction of the time its write takes. Written as 16 lowercase hex digits
// (checksum_hex): per tensor in the safetensors metadata, and per file, after "xxh3_64:", in a checkpoint's
// COMPLETE marker.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace blocklab::io {

inline constexpr std::string_view kChecksumAlgorithm = "xxh3_64";

uint64_t checksum(std::span<const std::byte> bytes);
std::string checksum_hex(uint64_t value);  // 16 lowercase hex digits
// Exactly 16 hex digits (either case); false for anything else.
bool parse_checksum_hex(std::string_view text, uint64_t& value);

// The checksum of bytes given in pieces (equal to checksum() of the concatenation).
class ChecksumStream {
 public:
  ChecksumStream();
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;
  void update(std::span<const std::byte> bytes);
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace blocklab::io
