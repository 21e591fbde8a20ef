#pragma once
// Linear layers whose weights stay where they are stored: in a memory-mapped file (a Hugging Face shard),
// in the file's dtype (F32, F16, BF16, F64), read through the block engine's LinearSource. The HF adapter
// maps its tensors onto these; the arithmetic lives here, beside the engine that calls it.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "io/dtype.h"
#include "model/parameters.h"

namespace blocklab {

// A linear layer's weight as stored: logically (out, in) as nn.Linear; `transposed` when stored (in, out)
// (GPT-2's Conv1D). `bytes` are little-endian, possibly unaligned, in a floating-point `dtype`.
struct StoredMatrix {
  std::span<const std::byte> bytes;
  io::DType dtype = io::DType::F32;
  int out = 0, in = 0;
  bool transposed = false;
};

// out (N, m.out) = inp (N, m.in) @ W^T (+ bias) for a weight in its stored dtype. F32 weights that are
// 4-byte aligned are used in place; BF16 weights with at most 16 rows go through a fused
// convert-and-dot kernel; otherwise row blocks are converted to float in `scratch` (grown as needed)
// and multiplied by GEMM, in parallel tiles. block_floats > 0 forces the plain serial row-block path
// with blocks of at most that many values (for tests).
void stored_linear(float* out, const float* inp, const StoredMatrix& m, const float* bias, int N,
                   std::vector<float>& scratch, int64_t block_floats = 0);

// A linear layer read in place: one stored matrix, or several whose outputs are concatenated (the gated
// MLP's [up | gate], which the block engine reads as one (2I, C) layer).
class StoredLinearSource final : public LinearSource {
 public:
  // The parts, in the order their outputs are concatenated.
  explicit StoredLinearSource(std::vector<StoredMatrix> parts) : parts_(std::move(parts)) {}
  // out (N, sum of the parts' out) = inp (N, in) @ [W_1; W_2; ...]^T.
  void forward(float* out, const float* inp, int N, Work& work) const override;

 private:
  std::vector<StoredMatrix> parts_;
};

}  // namespace blocklab
