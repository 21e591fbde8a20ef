// Tests for src/io/dtype: the fp16/bf16 conversions (exhaustive where the input space allows, against
// a reference rounding elsewhere), and whole arrays of each float dtype converted to float and double.
#include "io/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "util/bit_cast.h"
#include "util/error.h"

using namespace blocklab::io;

namespace {

// ---------------------------------------------------------------------------------------------
// fp16 / bf16 conversions

// Reference float -> f16: exhaustive search over the finite halves, ties to even.
uint16_t ref_float_to_f16(float f) {
  if (std::isnan(f)) return 0x7E00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7C00;
  if (a > 65504.0) return sign | 0x7BFF;
  // Halves 0x0000..0x7BFF are monotonic in value; binary search the first one >= a.
  uint16_t lo = 0, hi = 0x7BFF;
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    if (static_cast<double>(f16_to_float(mid)) < a) lo = mid + 1; else hi = mid;
  }
  if (lo == 0) return sign;
  const double up = f16_to_float(lo), down = f16_to_float(static_cast<uint16_t>(lo - 1));
  if (up == a) return sign | lo;
  if (a - down < up - a) return sign | static_cast<uint16_t>(lo - 1);
  if (up - a < a - down) return sign | lo;
  return sign | ((lo & 1) ? static_cast<uint16_t>(lo - 1) : lo);
}

TEST(DtypeConvert, F16KnownValues) {
  EXPECT_EQ(f16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_float(0xC000), -2.0f);
  EXPECT_EQ(f16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_float(0x0400), 6.103515625e-05f);     // smallest normal
  EXPECT_EQ(f16_to_float(0x0001), 5.9604644775390625e-08f);  // smallest subnormal
  EXPECT_EQ(f16_to_float(0x03FF), 6.097555160522461e-05f);   // largest subnormal
  EXPECT_TRUE(std::isinf(f16_to_float(0x7C00)));
  EXPECT_TRUE(std::isinf(f16_to_float(0xFC00)) && f16_to_float(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(f16_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7C01)));  // signalling NaN stays NaN
  EXPECT_TRUE(std::signbit(f16_to_float(0x8000)));
  EXPECT_EQ(float_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65519.99f), 0x7BFF);  // just below the midpoint to 65536
  EXPECT_EQ(float_to_f16(65520.0f), 0x7C00);   // midpoint: ties to even -> inf
  EXPECT_EQ(float_to_f16(1e10f), 0x7C00);
  EXPECT_EQ(float_to_f16(-1e10f), 0xFC00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(float_to_f16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(float_to_f16(2.9802322387695312e-08f), 0x0000);  // 2^-25: tie between 0 and 2^-24 -> 0
  EXPECT_EQ(float_to_f16(2.9802326e-08f), 0x0001);           // just above 2^-25
  EXPECT_EQ(float_to_f16(8.940696716308594e-08f), 0x0002);   // 1.5 * 2^-24: tie -> even (2)
  EXPECT_EQ(float_to_f16(1e-30f), 0x0000);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(float_to_f16(1.00048828125f), 0x3C00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: ties to even (1 + 2^-9).
  EXPECT_EQ(float_to_f16(1.00146484375f), 0x3C02);
  EXPECT_EQ(float_to_f16(1.0005f), 0x3C01);  // above the midpoint rounds up
}

TEST(DtypeConvert, F16NanPreserved) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const uint16_t h = float_to_f16(qnan);
  EXPECT_EQ(h & 0x7C00, 0x7C00);
  EXPECT_NE(h & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(f16_to_float(h)));
  EXPECT_TRUE(float_to_f16(-qnan) & 0x8000);
  // A signalling float NaN whose payload sits only in the low bits still becomes a NaN, not inf.
  const float snan = blocklab::bit_cast<float>(0x7F800001u);
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(snan))));
}

TEST(DtypeConvert, F16ExhaustiveRoundTrip) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = f16_to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(f)))) << b;
      EXPECT_EQ((b & 0x7C00), 0x7C00u);
      continue;
    }
    ASSERT_EQ(float_to_f16(f), h) << std::hex << b;
  }
}

TEST(DtypeConvert, F16RoundingMatchesReference) {
  std::mt19937 rng(7);
  int checked = 0;
  // Random bit patterns concentrated on the half-precision range, plus all midpoints.
  for (int k = 0; k < 200000; ++k) {
    uint32_t bits = rng();
    if (k % 2) bits = (bits & 0x807FFFFFu) | ((90u + rng() % 60u) << 23);  // exponents 2^-37 .. 2^22
    const float f = blocklab::bit_cast<float>(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_f16(f), ref_float_to_f16(f)) << std::hexfloat << f;
    ++checked;
  }
  for (uint32_t h = 0; h < 0x7BFF; ++h) {
    const double mid = (static_cast<double>(f16_to_float(static_cast<uint16_t>(h))) +
                        static_cast<double>(f16_to_float(static_cast<uint16_t>(h + 1)))) / 2;
    const auto f = static_cast<float>(mid);  // exact: midpoints need at most 12 significant bits
    ASSERT_EQ(static_cast<double>(f), mid);
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    ASSERT_EQ(float_to_f16(f), even) << h;
    ASSERT_EQ(float_to_f16(-f), even | 0x8000) << h;
    ASSERT_EQ(float_to_f16(std::nextafter(f, 0.0f)), h) << h;
    ASSERT_EQ(float_to_f16(std::nextafter(f, 1e9f)), h + 1) << h;
  }
  EXPECT_GT(checked, 100000);
}

TEST(DtypeConvert, Bf16KnownValuesAndRounding) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(float_to_bf16(blocklab::bit_cast<float>(0x3F808000u)), 0x3F80);
  // 1 + 3 * 2^-8: halfway, rounds to even (1 + 2^-6 = 0x3F82).
  EXPECT_EQ(float_to_bf16(blocklab::bit_cast<float>(0x3F818000u)), 0x3F82);
  EXPECT_EQ(float_to_bf16(blocklab::bit_cast<float>(0x3F808001u)), 0x3F81);  // above midpoint: up
  EXPECT_EQ(float_to_bf16(blocklab::bit_cast<float>(0x3F807FFFu)), 0x3F80);  // below midpoint: down
  // Overflow: the largest float rounds to inf; the largest bf16 stays.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(float_to_bf16(bf16_to_float(0x7F7F)), 0x7F7F);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // NaN stays NaN, including NaNs whose payload is only in the discarded low bits.
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(blocklab::bit_cast<float>(0x7F800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(blocklab::bit_cast<float>(0xFFFFFFFFu)))));
  EXPECT_TRUE(float_to_bf16(-std::numeric_limits<float>::quiet_NaN()) & 0x8000);
  // Subnormals round like everything else.
  EXPECT_EQ(float_to_bf16(blocklab::bit_cast<float>(0x00008000u)), 0x0000);  // tie -> even 0
  EXPECT_EQ(float_to_bf16(blocklab::bit_cast<float>(0x00018000u)), 0x0002);  // tie -> even 2
}

TEST(DtypeConvert, Bf16ExhaustiveRoundTripAndReference) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = bf16_to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(float_to_bf16(f), h) << std::hex << b;
  }
  // Against a direct reference on random floats: nearest of the two bf16 neighbours, ties to even.
  std::mt19937 rng(11);
  for (int k = 0; k < 200000; ++k) {
    const uint32_t bits = rng();
    const float f = blocklab::bit_cast<float>(bits);
    if (std::isnan(f)) continue;
    const uint32_t down = bits & 0xFFFF0000u, low = bits & 0xFFFFu;
    uint32_t expect = down >> 16;
    if (low > 0x8000u || (low == 0x8000u && (expect & 1))) ++expect;
    ASSERT_EQ(float_to_bf16(f), expect) << std::hex << bits;
  }
}

// ---------------------------------------------------------------------------------------------
// Arrays

// values stored as `dtype`, little-endian (the host is little-endian, as the writer requires).
template <class Stored>
std::vector<std::byte> stored(const std::vector<Stored>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(Stored));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

TEST(DtypeConvert, ArraysOfEachFloatDtypeToFloatAndDouble) {
  // 100,003 values: above the size at which a conversion runs in parallel, and not a multiple of anything.
  std::vector<float> values(100003);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : values) v = normal(rng);
  values[0] = 0.0f;
  values[1] = -0.0f;
  values[2] = std::numeric_limits<float>::infinity();
  std::vector<uint16_t> bf16, f16;
  std::vector<double> f64;
  for (float v : values) {
    bf16.push_back(float_to_bf16(v));
    f16.push_back(float_to_f16(v));
    f64.push_back(static_cast<double>(v) * (1 + 1e-12));  // not exactly a float
  }
  const auto bytes_f32 = stored(values), bytes_f64 = stored(f64), bytes_bf16 = stored(bf16), bytes_f16 = stored(f16);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, values.size()}) {
    std::vector<float> out(n, -1.0f);
    std::vector<double> dout(n, -1.0);
    // Unaligned sources: one byte in.
    auto unaligned = [](const std::vector<std::byte>& b) {
      std::vector<std::byte> u(b.size() + 1);
      if (!b.empty()) std::memcpy(u.data() + 1, b.data(), b.size());
      return u;
    };
    const auto u_f32 = unaligned(bytes_f32), u_f64 = unaligned(bytes_f64), u_bf16 = unaligned(bytes_bf16),
               u_f16 = unaligned(bytes_f16);
    convert_to_float(DType::F32, u_f32.data() + 1, out.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(blocklab::bit_cast<uint32_t>(out[i]), blocklab::bit_cast<uint32_t>(values[i])) << i;
    convert_to_double(DType::F32, u_f32.data() + 1, dout.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(dout[i], static_cast<double>(values[i])) << i;
    convert_to_float(DType::F64, u_f64.data() + 1, out.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<float>(f64[i])) << i;
    convert_to_double(DType::F64, u_f64.data() + 1, dout.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(dout[i], f64[i]) << i;
    convert_to_float(DType::BF16, u_bf16.data() + 1, out.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], bf16_to_float(bf16[i])) << i;
    convert_to_double(DType::BF16, u_bf16.data() + 1, dout.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(dout[i], static_cast<double>(bf16_to_float(bf16[i]))) << i;
    convert_to_float(DType::F16, u_f16.data() + 1, out.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], f16_to_float(f16[i])) << i;
    convert_to_double(DType::F16, u_f16.data() + 1, dout.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(dout[i], static_cast<double>(f16_to_float(f16[i]))) << i;
  }
}

TEST(DtypeConvert, IntegerDtypesAreNotConverted) {
  const std::vector<std::byte> bytes(8);
  float out[2];
  for (DType t : {DType::I64, DType::I32, DType::I16, DType::I8, DType::U8, DType::BOOL})
    EXPECT_THROW(convert_to_float(t, bytes.data(), out, 1), blocklab::Error) << dtype_name(t);
}

TEST(Dtype, NamesSizesAndKinds) {
  for (DType t : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::I16, DType::I8,
                  DType::U8, DType::BOOL}) {
    DType parsed{};
    ASSERT_TRUE(parse_dtype(dtype_name(t), parsed)) << dtype_name(t);
    EXPECT_EQ(parsed, t);
    EXPECT_NE(dtype_is_float(t), dtype_is_integer(t)) << dtype_name(t);
  }
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_EQ(dtype_size(DType::BOOL), 1u);
  DType unused{};
  EXPECT_FALSE(parse_dtype("bf16", unused));  // names are upper case, as in safetensors headers
  EXPECT_FALSE(parse_dtype("F8_E4M3", unused));
}

}  // namespace
