#pragma once
// Fixed-width vectors through GCC's (and Clang's) vector extensions: written once, compiled for whatever the
// enclosing function targets. 64 bytes (the default) are one AVX-512 register, two AVX2 registers or four SSE
// ones; a kernel that tiles registers takes the width of its level instead (kVectorBytes<I>, kernels/isa.h).
// Unlike arrays of scalars, which the compiler often keeps on the stack, local vectors of these types stay
// in registers, as long as every index into an array of them is a constant after unrolling.
#include <cstring>

// Everything here is forced inline into the kernel entry point of a level (on_isa, kernels/isa.h), so that
// it compiles for that level's instruction set; an out-of-line copy would be built for baseline x86-64, pass
// 64-byte vectors through memory, and emulate them with SSE. (GCC warns about that ABI for any function
// taking or returning such a vector; with forced inlining no such call remains.)
#pragma GCC diagnostic ignored "-Wpsabi"
#define BLOCKLAB_ALWAYS_INLINE inline __attribute__((always_inline))

namespace blocklab::kernels::simd {

// Bytes bytes of T: 64 = one AVX-512 register (16 floats), two AVX2 registers or four SSE ones.
template <int Bytes, typename T>
struct VecOf {
  typedef T type __attribute__((vector_size(Bytes)));
};
template <typename T, int Bytes = 64>
using Vec = typename VecOf<Bytes, T>::type;
template <typename T, int Bytes = 64>
inline constexpr int kWidth = static_cast<int>(Bytes / sizeof(T));

template <typename T, int Bytes = 64>
BLOCKLAB_ALWAYS_INLINE Vec<T, Bytes> load(const T* p) {
  Vec<T, Bytes> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T, int Bytes = 64>
BLOCKLAB_ALWAYS_INLINE void store(T* p, const Vec<T, Bytes>& v) {
  std::memcpy(p, &v, sizeof v);
}
template <typename T, int Bytes = 64>
BLOCKLAB_ALWAYS_INLINE Vec<T, Bytes> broadcast(T x) {
  return Vec<T, Bytes>{} + x;
}
// *p in every lane: one broadcast load. (broadcast(*p) compiles to a scalar add of zero, which turns -0 into +0,
// and a register broadcast; the portable forms of an exact broadcast of a value, `x - 0` or {x, x, ...}, GCC 12
// simplifies while this header's functions are still compiled for baseline x86-64, without 32- or 64-byte
// registers, and then builds the vector from inserted lanes. A value loaded from memory it broadcasts there.)
template <typename T, int Bytes = 64>
BLOCKLAB_ALWAYS_INLINE Vec<T, Bytes> broadcast_from(const T* p) {
  Vec<T, Bytes> v = {};
  v = *p - v;
  return v;
}

}  // namespace blocklab::kernels::simd
