#pragma once
// Element types of stored tensors (the safetensors dtype names) and the conversions between the
// floating-point ones and float/double. Every reader of stored floats (safetensors files, the memory-
// mapped weights of a Hugging Face model) converts through here.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace blocklab::io {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

std::size_t dtype_size(DType);
const char* dtype_name(DType);  // "F64", "F32", "F16", "BF16", "I64", ..., "BOOL"
// Parses a dtype name as written in safetensors headers; false when unknown.
bool parse_dtype(std::string_view name, DType& out);
bool dtype_is_float(DType);    // F64, F32, F16, BF16
bool dtype_is_integer(DType);  // I64, I32, I16, I8, U8, BOOL

// fp16 / bf16 conversions. float -> half rounds to nearest, ties to even; overflow gives inf;
// NaN stays NaN (quieted, sign and top payload bits kept).
// Little-endian load of an unsigned integer from possibly unaligned memory.
template <class U>
U load_le(const std::byte* p) {
  U v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) {
    U r = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i) r = static_cast<U>((r << 8) | ((v >> (8 * i)) & 0xFF));
    v = r;
  }
  return v;
}

float bf16_to_float(uint16_t);
uint16_t float_to_bf16(float);
float f16_to_float(uint16_t);
uint16_t float_to_f16(float);

// n values of a float dtype (F64, F32, F16, BF16), stored little-endian at `src` (any alignment),
// converted to out[0, n): exactly for widening conversions, rounded to nearest for F64 -> float.
// Large conversions run in parallel (each value on its own, so the result does not depend on it).
// Throws Error for a dtype that is not a float dtype.
void convert_to_float(DType dtype, const std::byte* src, float* out, std::size_t n);
void convert_to_double(DType dtype, const std::byte* src, double* out, std::size_t n);

}  // namespace blocklab::io
