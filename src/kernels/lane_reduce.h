#pragma once
// Reductions over a contiguous row in a fixed order that vectorises: lane l of kReduceLanes partial
// results takes the elements l, l + kReduceLanes, l + 2 kReduceLanes, ..., and the lanes are then
// combined by a fixed pairwise tree. A plain `sum += x[i]` loop is a single dependency chain the
// compiler may not reorder (float addition is not associative), so it runs one element per FMA latency;
// this order is just as deterministic (the same for every thread count and every run) and runs 16
// elements per instruction.
namespace blocklab::kernels {

inline constexpr int kReduceLanes = 16;

// The lane scheme itself: init in every lane, lane l folds in term(l), term(l + 16), ... with combine,
// then lanes w + l fold into lanes l for w = 8, 4, 2, 1.
template <typename T, typename Term, typename Combine>
inline T lane_reduce(int n, T init, Term term, Combine combine) {
  T acc[kReduceLanes];
  for (int l = 0; l < kReduceLanes; ++l) acc[l] = init;
  int i = 0;
  for (; i + kReduceLanes <= n; i += kReduceLanes)
    for (int l = 0; l < kReduceLanes; ++l) acc[l] = combine(acc[l], term(i + l));
  for (int l = 0; i + l < n; ++l) acc[l] = combine(acc[l], term(i + l));
  for (int w = kReduceLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] = combine(acc[l], acc[l + w]);
  return acc[0];
}

// sum over i < n of term(i), term inlined (a lambda reading the row)
template <typename T, typename Term>
inline T lane_sum_of(int n, Term term) {
  return lane_reduce<T>(n, T(0), term, [](T a, T b) { return a + b; });
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
  return lane_reduce<T>(n, x[0], [x](int i) { return x[i]; }, [](T a, T b) { return b > a ? b : a; });
}

}  // namespace blocklab::kernels
