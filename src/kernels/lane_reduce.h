#pragma once
// Reductions over a contiguous row in a fixed order that vectorises: lane l of kReduceLanes partial
// results takes the elements l, l + kReduceLanes, l + 2 kReduceLanes, ..., and the lanes are then
// combined by a fixed pairwise tree. A plain `sum += x[i]` loop is a single dependency chain the
// compiler may not reorder (float addition is not associative), so it runs one element per FMA latency;
// this order is just as deterministic (the same for every thread count and every run) and runs 16
// elements per instruction.
namespace blocklab::kernels {

inline constexpr int kReduceLanes = 16;

namespace detail {
template <typename T>
inline T combine_lanes_sum(T* acc) {
  for (int w = kReduceLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}
}  // namespace detail

// sum over i < n of term(i), term inlined (a lambda reading the row)
template <typename T, typename Term>
inline T lane_sum_of(int n, Term term) {
  T acc[kReduceLanes] = {};
  int i = 0;
  for (; i + kReduceLanes <= n; i += kReduceLanes)
    for (int l = 0; l < kReduceLanes; ++l) acc[l] += term(i + l);
  for (int l = 0; i + l < n; ++l) acc[l] += term(i + l);
  return detail::combine_lanes_sum(acc);
}

// sum of x[0:n]
template <typename T>
inline T lane_sum(const T* x, int n) {
  return lane_sum_of<T>(n, [x](int i) { return x[i]; });
}

// sum of a[i] * b[i] over i < n
template <typename T>
inline T lane_dot(const T* a, const T* b, int n) {
  return lane_sum_of<T>(n, [a, b](int i) { return a[i] * b[i]; });
}

// max of x[0:n], n >= 1 (exact: the order does not matter for max)
template <typename T>
inline T lane_max(const T* x, int n) {
  T acc[kReduceLanes];
  for (int l = 0; l < kReduceLanes; ++l) acc[l] = x[0];
  int i = 0;
  for (; i + kReduceLanes <= n; i += kReduceLanes)
    for (int l = 0; l < kReduceLanes; ++l) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  for (int l = 0; i + l < n; ++l) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  for (int w = kReduceLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] = acc[l + w] > acc[l] ? acc[l + w] : acc[l];
  return acc[0];
}

}  // namespace blocklab::kernels
