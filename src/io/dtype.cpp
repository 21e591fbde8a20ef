#include "io/dtype.h"

#include <bit>
#include <cstring>
#include <string>
#include <type_traits>

#include "util/bit_cast.h"
#include "util/error.h"

namespace blocklab::io {

namespace {

[[maybe_unused]] constexpr std::int64_t kParallelFrom = 1 << 16;  // values; below this, one thread (OpenMP builds)

template <class Out>
void convert(DType dtype, const std::byte* p, Out* out, std::size_t count) {
  const auto n = static_cast<std::int64_t>(count);
  switch (dtype) {
    case DType::F32:
      if constexpr (std::is_same_v<Out, float> && std::endian::native == std::endian::little) {
        if (n) std::memcpy(out, p, count * sizeof(float));
      } else {
        for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(bit_cast<float>(load_le<uint32_t>(p + 4 * i)));
      }
      return;
    case DType::F64:
      if constexpr (std::is_same_v<Out, double> && std::endian::native == std::endian::little) {
        if (n) std::memcpy(out, p, count * sizeof(double));
      } else {
        for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(bit_cast<double>(load_le<uint64_t>(p + 8 * i)));
      }
      return;
    case DType::F16:
#pragma omp parallel for schedule(static) if (n > kParallelFrom)
      for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(f16_to_float(load_le<uint16_t>(p + 2 * i)));
      return;
    case DType::BF16:
#pragma omp parallel for schedule(static) if (n > kParallelFrom)
      for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(bf16_to_float(load_le<uint16_t>(p + 2 * i)));
      return;
    default:
      throw Error(std::string("dtype ") + dtype_name(dtype) + " is not a floating-point type");
  }
}

}  // namespace

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: return 8;
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I64: return 8;
    case DType::I32: return 4;
    case DType::I16: return 2;
    case DType::I8: return 1;
    case DType::U8: return 1;
    case DType::BOOL: return 1;
  }
  throw Error("dtype_size: invalid dtype " + std::to_string(static_cast<int>(t)));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
  }
  throw Error("dtype_name: invalid dtype " + std::to_string(static_cast<int>(t)));
}

bool parse_dtype(std::string_view name, DType& out) {
  static constexpr DType all[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64,
                                  DType::I32, DType::I16, DType::I8,  DType::U8,   DType::BOOL};
  for (DType t : all) {
    if (name == dtype_name(t)) {
      out = t;
      return true;
    }
  }
  return false;
}

bool dtype_is_float(DType t) { return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16; }
bool dtype_is_integer(DType t) {
  return t == DType::I64 || t == DType::I32 || t == DType::I16 || t == DType::I8 || t == DType::U8 ||
         t == DType::BOOL;
}

// ---------------------------------------------------------------------------------------------
// fp16 / bf16

float bf16_to_float(uint16_t h) { return bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t float_to_bf16(float f) {
  const uint32_t x = bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // NaN: keep, quiet
  const uint32_t rounding = 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);  // overflow past max finite carries into inf
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal: normalize.
    uint32_t e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mant & 0x3FFu) << 13);
  }
  return bit_cast<float>(bits);
}

uint16_t float_to_f16(float f) {
  const uint32_t bits = bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t x = bits & 0x7FFFFFFFu;
  if (x >= 0x7F800000u) {
    if (x > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((x >> 13) & 0x3FFu));  // NaN
    return static_cast<uint16_t>(sign | 0x7C00u);                                              // inf
  }
  if (x >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to inf
  const uint32_t e = x >> 23;
  if (e < 113) {
    // Result is subnormal (or zero): value / 2^-24, rounded to nearest even.
    if (e < 102) return sign;  // < 2^-25: rounds to zero
    const uint32_t m = (x & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t mant = x & 0x7FFFFFu;
  uint32_t r = ((e - 112) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

// ---------------------------------------------------------------------------------------------
// Arrays

void convert_to_float(DType dtype, const std::byte* src, float* out, std::size_t n) { convert(dtype, src, out, n); }
void convert_to_double(DType dtype, const std::byte* src, double* out, std::size_t n) { convert(dtype, src, out, n); }

}  // namespace blocklab::io
