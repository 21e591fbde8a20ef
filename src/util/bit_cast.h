#pragma once
// blocklab::bit_cast: std::bit_cast where the standard library has it, the compiler builtin it is built on
// where it does not (the libc++ of Debian's emscripten, for the browser build). Both compilers blocklab builds
// with (GCC 11+, Clang 9+) have __builtin_bit_cast; it is constexpr and has std::bit_cast's requirements. GCC 10
// (Debian 11's compiler, which builds the portable wheels) has neither: there it is a memcpy, not constexpr.
#include <bit>
#include <cstring>
#include <type_traits>

namespace blocklab {

template <class To, class From>
  requires(sizeof(To) == sizeof(From) && std::is_trivially_copyable_v<To> && std::is_trivially_copyable_v<From>)
constexpr To bit_cast(const From& from) noexcept {
#if defined(__cpp_lib_bit_cast)
  return std::bit_cast<To>(from);
#elif defined(__has_builtin)
#if __has_builtin(__builtin_bit_cast)
  return __builtin_bit_cast(To, from);
#else
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
#endif
#else
  return __builtin_bit_cast(To, from);
#endif
}

}  // namespace blocklab
