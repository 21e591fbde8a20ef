// Linear layers over weights in their stored dtype (src/model/stored_linear.h): every path of stored_linear
// (fused BF16, tiled GEMM, serial row blocks, transposed) against a double-precision product, and a source
// of several parts concatenating their outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "io/dtype.h"
#include "model/stored_linear.h"

namespace {

using namespace blocklab;

// A BF16 weight (OC, C), stored as is or transposed, times N input rows through stored_linear with
// the default paths (block 0) and forced row blocks of every size, against a double-precision product.
void check_stored_linear(int N, int C, int OC, bool every_block_size) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<uint16_t> w16(OC * C), wt16(C * OC);
  std::vector<float> w(OC * C), inp(N * C), bias(OC), expected(N * OC);
  for (int o = 0; o < OC; ++o)
    for (int c = 0; c < C; ++c) {
      w16[o * C + c] = io::float_to_bf16(nd(rng));
      w[o * C + c] = io::bf16_to_float(w16[o * C + c]);
      wt16[c * OC + o] = w16[o * C + c];
    }
  for (float& x : inp) x = nd(rng);
  for (float& x : bias) x = nd(rng);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double acc = bias[o];
      for (int c = 0; c < C; ++c) acc += static_cast<double>(inp[n * C + c]) * w[o * C + c];
      expected[n * OC + o] = static_cast<float>(acc);
    }
  for (bool transposed : {false, true}) {
    StoredMatrix m;
    m.dtype = io::DType::BF16;
    m.bytes = std::as_bytes(std::span<const uint16_t>(transposed ? wt16 : w16));
    m.out = OC;
    m.in = C;
    m.transposed = transposed;
    std::vector<int64_t> blocks{0};
    if (every_block_size) blocks.insert(blocks.end(), {1, C, C + 1, int64_t{3} * C * OC});
    for (int64_t block : blocks) {
      std::vector<float> out(N * OC), scratch;
      stored_linear(out.data(), inp.data(), m, bias.data(), N, scratch, block);
      for (int i = 0; i < N * OC; ++i)
        ASSERT_NEAR(out[i], expected[i], 1e-5 * std::sqrt(C)) << "N " << N << " transposed " << transposed << " block " << block;
    }
  }
}

TEST(StoredLinear, InAnyLayoutAndBlockSize) {
  check_stored_linear(3, 7, 5, true);        // few rows: fused BF16 kernel
  check_stored_linear(40, 7, 5, true);       // many rows: tiled GEMM
  check_stored_linear(40, 300, 2000, false);  // several tiles per thread
}

// Two F32 parts (the gated MLP's [up | gate]): each output row is [x W_1^T | x W_2^T], bit for bit the
// parts' own products.
TEST(StoredLinear, SourceOfSeveralPartsConcatenatesTheirOutputs) {
  const int N = 3, C = 4, O1 = 2, O2 = 3;
  std::vector<float> w1(O1 * C), w2(O2 * C), inp(N * C);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (float& x : w1) x = nd(rng);
  for (float& x : w2) x = nd(rng);
  for (float& x : inp) x = nd(rng);
  const StoredMatrix m1{std::as_bytes(std::span<const float>(w1)), io::DType::F32, O1, C, false};
  const StoredMatrix m2{std::as_bytes(std::span<const float>(w2)), io::DType::F32, O2, C, false};
  std::vector<float> y1(N * O1), y2(N * O2), out(N * (O1 + O2)), scratch;
  stored_linear(y1.data(), inp.data(), m1, nullptr, N, scratch);
  stored_linear(y2.data(), inp.data(), m2, nullptr, N, scratch);
  const StoredLinearSource source({m1, m2});
  LinearSource::Work work;
  source.forward(out.data(), inp.data(), N, work);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < O1; ++o) EXPECT_EQ(out[n * (O1 + O2) + o], y1[n * O1 + o]);
    for (int o = 0; o < O2; ++o) EXPECT_EQ(out[n * (O1 + O2) + O1 + o], y2[n * O2 + o]);
  }
}

}  // namespace
