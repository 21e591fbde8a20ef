#pragma once
// Branch-free float approximations of exp and erf, written as plain arithmetic so that loops calling
// them vectorise (libm's expf/erff are scalar calls). The double versions are the exact libm
// functions: double precision is what the gradient checks run in.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/isa.h"
#include "kernels/simd.h"

namespace blocklab::kernels {

// exp_approx_of's arithmetic (below) for x already within [-87.3, 88], without its clamps: callers that know
// their range (erf's exp(-x^2)) save the compares and selects, a sixth of the erf GELU's instructions.
template <typename F>
BLOCKLAB_ALWAYS_INLINE F exp_approx_in_range(F x) {
  using Int = std::conditional_t<std::is_same_v<F, float>, int32_t, simd::Vec<int32_t, static_cast<int>(sizeof(F))>>;
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (no rounding-mode dependence, vectorises): 1.5 * 2^23 + n holds
  // n in its low bits
  const float shifter = 12582912.0f;
  const F shifted = x * 1.44269504088896341f + shifter;
  const F n = shifted - shifter;
  // r = x - n ln 2 in two parts (Cody-Waite)
  F r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  // Cephes expf polynomial on |r| <= ln2/2
  F p = F{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n: n is the bits of 1.5 * 2^23 + n less those of 1.5 * 2^23 (exact for |n| < 2^22)
  Int bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  bits = (bits - 0x4B400000 + 127) << 23;
  F scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// exp(x) for x <= ~88; relative error ~2 ulp. Inputs below -87.3 return ~0 (2^-126 scale). F is float, or a
// vector of floats (kernels/simd.h) for kernels that keep their values in registers: the same operations, lane
// by lane.
template <typename F>
BLOCKLAB_ALWAYS_INLINE F exp_approx_of(F x) {
  x = x < -87.3f ? F{} - 87.3f : x;
  x = x > 88.0f ? F{} + 88.0f : x;
  return exp_approx_in_range(x);
}

BLOCKLAB_ALWAYS_INLINE float exp_approx(float x) { return exp_approx_of(x); }

// exp(x) for a ratio 1 / (1 + exp(x)) (a sigmoid; GELU-tanh's 0.5 (1 + tanh u)), x held within [-87.3, 64]. GCC's
// vectorised loops compute the capped lanes' ratio as a constant and multiply every lane by it before selecting; with
// exp_approx's cap of 88 that constant is 6e-39, a subnormal, and even at 84 (3.3e-37) its products with small
// inputs are subnormal: an Intel core does each such product in a microcode assist (SwiGLU's forward and GELU-tanh's
// ran 6-8x slower on a Sapphire Rapids-class Xeon; at full speed with DAZ; AMD cores take subnormals at full speed).
// At 64 the ratio is 1.6e-28, whose products stay normal down to inputs of 1e-10; it differs from exp_approx's
// only where x > 64, and there by less than 1.7e-28.
template <typename F>
BLOCKLAB_ALWAYS_INLINE F exp_for_ratio(F x) {
  x = x < -87.3f ? F{} - 87.3f : x;
  x = x > 64.0f ? F{} + 64.0f : x;
  return exp_approx_in_range(x);
}

// erf(x) by Abramowitz & Stegun 7.1.26: |error| <= 1.5e-7. Also gives the exp(-x^2) it computes on the way
// (GELU's derivative needs it again). |x| is capped at 9.3, where erf is 1 in float and exp(-x^2) ~3e-38 (the cap
// keeps -x^2 within exp_approx_in_range; a NaN becomes the cap, and GELU's factor x carries it on).
BLOCKLAB_ALWAYS_INLINE float erf_approx_with_exp(float x, float& exp_minus_x2) {
  const float fx = std::fabs(x);
  const float ax = fx < 9.3f ? fx : 9.3f;
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float y = 1.061405429f;
  y = y * t - 1.453152027f;
  y = y * t + 1.421413741f;
  y = y * t - 0.284496736f;
  y = y * t + 0.254829592f;
  exp_minus_x2 = exp_approx_in_range(-ax * ax);
  y = 1.0f - y * t * exp_minus_x2;
  return std::copysign(y, x);
}

BLOCKLAB_ALWAYS_INLINE float erf_approx(float x) {
  float unused;
  return erf_approx_with_exp(x, unused);
}

template <typename T>
BLOCKLAB_ALWAYS_INLINE T fast_exp(T x) {
  if constexpr (std::is_same_v<T, float>)
    return exp_approx(x);
  else
    return std::exp(x);
}

template <typename T>
BLOCKLAB_ALWAYS_INLINE T fast_erf(T x) {
  if constexpr (std::is_same_v<T, float>)
    return erf_approx(x);
  else
    return std::erf(x);
}

}  // namespace blocklab::kernels
