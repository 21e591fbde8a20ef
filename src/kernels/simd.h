#pragma once
// Fixed-width vectors through GCC's vector extensions: written once, compiled for whatever the enclosing
// function targets (one AVX-512 register, two AVX2 registers, or four SSE ones). Unlike arrays of
// scalars, which the compiler often keeps on the stack, local vectors of these types stay in registers.
#include <cstring>

// Everything here is forced inline into the (target_clones) kernel that uses it, so that it compiles for
// that kernel's instruction set; an out-of-line copy would be built for baseline x86-64, pass 64-byte
// vectors through memory, and emulate them with SSE. (GCC warns about that ABI for any function taking
// or returning such a vector; with forced inlining no such call remains.)
#pragma GCC diagnostic ignored "-Wpsabi"
#define BLOCKLAB_ALWAYS_INLINE inline __attribute__((always_inline))

namespace blocklab::kernels::simd {

template <typename T>
struct Vec64 {
  typedef T type __attribute__((vector_size(64)));
};
// 64 bytes of T: 16 floats or 8 doubles.
template <typename T>
using Vec = typename Vec64<T>::type;
template <typename T>
inline constexpr int kWidth = static_cast<int>(64 / sizeof(T));

template <typename T>
BLOCKLAB_ALWAYS_INLINE Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
BLOCKLAB_ALWAYS_INLINE void store(T* p, Vec<T> v) {
  std::memcpy(p, &v, sizeof v);
}
template <typename T>
BLOCKLAB_ALWAYS_INLINE Vec<T> broadcast(T x) {
  return Vec<T>{} + x;
}

}  // namespace blocklab::kernels::simd
