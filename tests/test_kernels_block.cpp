// The kernels of a configurable transformer block: RoPE, gated MLP activations (SwiGLU, GeGLU), tanh GELU,
// grouped-query / cross attention and per-head q/k RMSNorm. Backward passes against double-precision
// central differences at several input scales (loss L = sum(w * out) with a fixed random w, so
// dL/dout = w); the attention kernel against the fused-qkv kernel, for causality, thread-count
// independence and float-vs-double agreement.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kernels/attention.h"
#include "kernels/attention_gqa.h"
#include "kernels/gelu_tanh.h"
#include "kernels/glu.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "util/threads.h"

using namespace blocklab;
using namespace blocklab::kernels;
using blocklab::testing::dot;
using blocklab::testing::expect_gradient_matches;
using blocklab::testing::random_vector;

namespace {

template <typename To>
std::vector<To> cast(const std::vector<double>& v) {
  return std::vector<To>(v.begin(), v.end());
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// |got - want| <= rtol * max(|want|, floor * max|want|) elementwise: relative, with a floor at a fraction of
// the largest entry for entries that are small through cancellation.
template <typename T>
void expect_close(const std::vector<T>& got, const std::vector<double>& want, double rtol, double floor,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double big = max_abs(want);
  ASSERT_GT(big, 0.0) << what;
  double worst = 0;
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]) / std::max(std::abs(want[i]), floor * big);
    worst = std::max(worst, err);
    if (err > rtol && failures++ < 5) ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << want[i];
  }
  EXPECT_LE(worst, rtol) << what << ": worst relative error " << worst;
}

std::vector<double> inverse_frequencies(int half_dim, double theta) {
  std::vector<double> inv(half_dim);
  for (int i = 0; i < half_dim; ++i) inv[i] = std::pow(theta, -static_cast<double>(i) / half_dim);
  return inv;
}

}  // namespace

class KernelBlockGrad : public ::testing::TestWithParam<double> {
 protected:
  double scale() const { return GetParam(); }
  double step() const { return 1e-4 * scale(); }
  Rng rng{4321};
};

// ---------------------------------------------------------------- RoPE

TEST_P(KernelBlockGrad, Rope) {
  // Two sequences, strided rows with 3 padding columns that neither pass may touch.
  const int B = 2, Tn = 5, heads = 3, half = 4, D = 2 * half;
  const long stride = heads * D + 3;
  std::vector<double> cos(Tn * half), sin(Tn * half);
  rope_tables<double>(cos.data(), sin.data(), inverse_frequencies(half, 100.0).data(), Tn, half);
  auto x = random_vector(rng, B * Tn * stride, scale());
  auto w = random_vector(rng, B * Tn * stride, 1.0);
  std::vector<double> out;
  auto loss = [&] {
    out = x;
    rope_forward<double>(out.data(), cos.data(), sin.data(), B, Tn, heads, half, stride);
    return dot(w, out.data());
  };
  loss();
  for (int r = 0; r < B * Tn; ++r)
    for (long c = heads * D; c < stride; ++c) EXPECT_EQ(out[r * stride + c], x[r * stride + c]);
  std::vector<double> dx = w;  // in place: dout in, dx out; padding keeps w, which is its gradient too
  rope_backward<double>(dx.data(), cos.data(), sin.data(), B, Tn, heads, half, stride);
  expect_gradient_matches("dx", x, dx, loss, step());
}

TEST(KernelBlock, RopeIsARotationAndBackwardIsItsTranspose) {
  Rng rng(3);
  const int B = 3, Tn = 7, heads = 2, half = 8, D = 2 * half;
  const long stride = heads * D;
  std::vector<double> cos(Tn * half), sin(Tn * half);
  rope_tables<double>(cos.data(), sin.data(), inverse_frequencies(half, 10000.0).data(), Tn, half);
  const auto x = random_vector(rng, B * Tn * stride, 1.0), y = random_vector(rng, B * Tn * stride, 1.0);
  std::vector<double> rx = x, rty = y;
  rope_forward<double>(rx.data(), cos.data(), sin.data(), B, Tn, heads, half, stride);
  rope_backward<double>(rty.data(), cos.data(), sin.data(), B, Tn, heads, half, stride);
  // |R x| = |x| for every head vector
  for (int r = 0; r < B * Tn; ++r)
    for (int h = 0; h < heads; ++h) {
      double n0 = 0, n1 = 0;
      for (int d = 0; d < D; ++d) {
        n0 += x[r * stride + h * D + d] * x[r * stride + h * D + d];
        n1 += rx[r * stride + h * D + d] * rx[r * stride + h * D + d];
      }
      EXPECT_NEAR(n1, n0, 1e-13 * n0);
    }
  // <R x, y> = <x, R^T y>
  EXPECT_NEAR(dot(y, rx.data()), dot(x, rty.data()), 1e-12 * std::sqrt(dot(x, x.data()) * dot(y, y.data())));
  // R^T R x = x, and position r % Tn: every sequence of the batch is rotated like the first
  std::vector<double> back = rx;
  rope_backward<double>(back.data(), cos.data(), sin.data(), B, Tn, heads, half, stride);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], 1e-13);
  for (int b = 0; b < B; ++b) {
    std::vector<double> one(x.begin() + b * Tn * stride, x.begin() + (b + 1) * Tn * stride);
    rope_forward<double>(one.data(), cos.data(), sin.data(), 1, Tn, heads, half, stride);
    for (long i = 0; i < Tn * stride; ++i) EXPECT_EQ(one[i], rx[b * Tn * stride + i]);
  }
  // float tables and data agree with double
  std::vector<float> cosf = cast<float>(cos), sinf = cast<float>(sin), tf(cos.size()), sf(sin.size());
  rope_tables<float>(tf.data(), sf.data(), inverse_frequencies(half, 10000.0).data(), Tn, half);
  EXPECT_EQ(tf, cosf);
  EXPECT_EQ(sf, sinf);
  std::vector<float> xf = cast<float>(x);
  rope_forward<float>(xf.data(), cosf.data(), sinf.data(), B, Tn, heads, half, stride);
  expect_close(xf, rx, 1e-6, 1e-2, "float rope");
}

// ---------------------------------------------------------------- gated activations

namespace {
double silu_reference(double x) { return x / (1 + std::exp(-x)); }
double gelu_reference(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
}  // namespace

namespace blocklab::kernels {
// readable parameter names in gtest's output
inline void PrintTo(GluKind kind, std::ostream* os) { *os << (kind == GluKind::SwiGLU ? "SwiGLU" : "GeGLU"); }
}  // namespace blocklab::kernels

class KernelBlockGlu : public ::testing::TestWithParam<std::tuple<double, GluKind>> {};

TEST_P(KernelBlockGlu, Gradient) {
  const double scale = std::get<0>(GetParam());
  const GluKind kind = std::get<1>(GetParam());
  Rng rng(77);
  const int N = 5, I = 6;
  auto inp = random_vector(rng, N * 2 * I, scale);
  auto w = random_vector(rng, N * I, 1.0);
  std::vector<double> out(N * I);
  auto loss = [&] {
    glu_forward(out.data(), inp.data(), N, I, kind);
    return dot(w, out.data());
  };
  loss();
  // the definition: row [value | gate], out = value * act(gate)
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < I; ++i) {
      const double value = inp[n * 2 * I + i], gate = inp[n * 2 * I + I + i];
      const double act = kind == GluKind::SwiGLU ? silu_reference(gate) : gelu_reference(gate);
      EXPECT_NEAR(out[n * I + i], value * act, 1e-14 * std::max(1.0, std::abs(value * act)));
    }
  std::vector<double> dinp(N * 2 * I, 7.0);  // overwritten, not accumulated
  glu_backward(dinp.data(), w.data(), inp.data(), N, I, kind);
  expect_gradient_matches("dinp", inp, dinp, loss, 1e-4 * scale);
}

INSTANTIATE_TEST_SUITE_P(ScalesKinds, KernelBlockGlu,
                         ::testing::Combine(::testing::Values(0.1, 1.0, 10.0),
                                            ::testing::Values(GluKind::SwiGLU, GluKind::GeGLU)),
                         [](const auto& info) {
                           const double s = std::get<0>(info.param);
                           return std::string(std::get<1>(info.param) == GluKind::SwiGLU ? "swiglu" : "geglu") +
                                  (s < 1 ? "_scale_0_1" : "_scale_" + std::to_string(static_cast<int>(s)));
                         });

TEST(KernelBlock, GluFloatMatchesDouble) {
  // Float runs on fast_math's exp (~2 ulp) and erf (1.5e-7 absolute), so each result is compared with a bound
  // built from those errors: act(x) to ~1e-7 max(1, |x|), act'(x) to ~1e-7.
  Rng rng(8);
  const int N = 40, I = 37;
  const auto inp = random_vector(rng, N * 2 * I, 3.0), dout = random_vector(rng, N * I, 1.0);
  for (GluKind kind : {GluKind::SwiGLU, GluKind::GeGLU}) {
    std::vector<double> out(N * I), dinp(N * 2 * I);
    std::vector<float> outf(N * I), dinpf(N * 2 * I);
    glu_forward(out.data(), inp.data(), N, I, kind);
    glu_forward(outf.data(), cast<float>(inp).data(), N, I, kind);
    glu_backward(dinp.data(), dout.data(), inp.data(), N, I, kind);
    glu_backward(dinpf.data(), cast<float>(dout).data(), cast<float>(inp).data(), N, I, kind);
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < I; ++i) {
        const long o = static_cast<long>(n) * I + i, vi = 2L * n * I + i, gi = vi + I;
        const double value = inp[vi], gate = inp[gi], g = dout[o], big = std::max(1.0, std::abs(gate));
        EXPECT_NEAR(outf[o], out[o], 1e-6 * std::abs(value) * big) << o;
        EXPECT_NEAR(dinpf[vi], dinp[vi], 1e-6 * std::abs(g) * big) << vi;
        EXPECT_NEAR(dinpf[gi], dinp[gi], 1e-6 * std::abs(g * value)) << gi;
      }
  }
}

TEST(KernelBlock, SwiGluFloatTails) {
  // Far out on both sides in float: x sigmoid(x) is x far right (the ratio 1 / (1 + exp(-x)) rounds to 1) and
  // 0 within 1e-20 far left, where exp(-x) is capped at exp(64) (fast_math.h's exp_for_ratio) so that the ratio,
  // 1.6e-28 there, is never subnormal; the gradients are likewise exact or tiny, and never NaN or infinite.
  const std::vector<float> gates = {-1e30f, -3e3f, -200.f, -100.f, -70.f, -64.5f, -63.5f, -40.f,
                                    40.f,   63.5f, 64.5f,  70.f,   100.f, 3e3f,   1e30f};
  const int I = static_cast<int>(gates.size());
  std::vector<float> inp(2 * I), out(I), dout(I, 1.f), dinp(2 * I);
  for (int i = 0; i < I; ++i) inp[i] = 1.5f, inp[I + i] = gates[i];
  glu_forward(out.data(), inp.data(), 1, I, GluKind::SwiGLU);
  glu_backward(dinp.data(), dout.data(), inp.data(), 1, I, GluKind::SwiGLU);
  for (int i = 0; i < I; ++i) {
    const float x = gates[i];
    ASSERT_TRUE(std::isfinite(out[i]) && std::isfinite(dinp[i]) && std::isfinite(dinp[I + i])) << x;
    if (x > 0) {
      EXPECT_EQ(out[i], 1.5f * x) << x;
      EXPECT_EQ(dinp[i], x) << x;         // d value = x sigmoid(x)
      EXPECT_EQ(dinp[I + i], 1.5f) << x;  // d gate = value (sigmoid + x sigmoid (1 - sigmoid))
    } else if (x > -1e3f) {
      const double xd = x, sd = 1 / (1 + std::exp(-xd)), silu = xd * sd, dgate = 1.5 * sd * (1 + xd * (1 - sd));
      // within the cap, to exp's relative error; past it, 0 within 1e-20 |x| (the exact values are below 1e-26)
      const double tol = x > -64.f ? 1e-5 : 0, floor = x > -64.f ? 0 : 1e-20 * std::abs(xd);
      EXPECT_NEAR(out[i], 1.5 * silu, tol * std::abs(1.5 * silu) + floor) << x;
      EXPECT_NEAR(dinp[i], silu, tol * std::abs(silu) + floor) << x;
      EXPECT_NEAR(dinp[I + i], dgate, tol * std::abs(dgate) + floor) << x;
    } else {  // x times the capped ratio is no longer tiny here (-240 at x = -1e30, exact 0; exp_approx's cap gave
              // -6e-9 there): finite and of the sign of x, for gates that only a diverged run has
      EXPECT_LE(out[i], 0.f) << x;
    }
  }
}

// ---------------------------------------------------------------- tanh GELU

TEST_P(KernelBlockGrad, GeluTanh) {
  const int N = 40;
  auto inp = random_vector(rng, N, scale());
  auto w = random_vector(rng, N, 1.0);
  std::vector<double> out(N);
  auto loss = [&] {
    gelu_tanh_forward(out.data(), inp.data(), N);
    return dot(w, out.data());
  };
  std::vector<double> dinp(N, 7.0);  // overwritten, not accumulated
  gelu_tanh_backward(dinp.data(), w.data(), inp.data(), N);
  expect_gradient_matches("dinp", inp, dinp, loss, step());
  std::vector<double> in_place = w;  // dinp may alias dout
  gelu_tanh_backward(in_place.data(), in_place.data(), inp.data(), N);
  EXPECT_EQ(in_place, dinp);
}

// ---------------------------------------------------------------- per-head q/k RMSNorm

TEST_P(KernelBlockGrad, PerHeadRmsNorm) {
  // q (N, H*D) normalised per head: rmsnorm over N*H rows of D, one weight of D shared by the heads.
  const int N = 3, H = 4, D = 8;
  auto q = random_vector(rng, N * H * D, scale());
  auto weight = random_vector(rng, D, 1.0);
  auto w = random_vector(rng, N * H * D, 1.0);
  std::vector<double> out(N * H * D), rstd(N * H);
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), q.data(), weight.data(), N * H, D, 1e-6);
    return dot(w, out.data());
  };
  loss();
  std::vector<double> dq(N * H * D, 0), dweight(D, 0);  // rmsnorm_backward accumulates
  rmsnorm_backward(dq.data(), dweight.data(), w.data(), q.data(), weight.data(), rstd.data(), N * H, D);
  expect_gradient_matches("dq", q, dq, loss, step());
  expect_gradient_matches("dweight", weight, dweight, loss, 1e-4);
}

// ---------------------------------------------------------------- attention

namespace {

struct AttnShape {
  int B, Tq, Tk, H, Hkv, D;
  bool causal;
  bool fused;  // q, k, v (and dq, dk, dv) inside one row of (H + 2 Hkv) D + pad columns
  int pad;     // extra columns at the end of every row (input, output and gradient buffers)
};

// Buffers and strides of one attention problem. Separate layout: q (B*Tq, H*D + pad), k and v
// (B*Tk, Hkv*D + pad). Fused layout (Tq == Tk): one (B*T, (H + 2 Hkv) D + pad) buffer, [q | k | v].
template <typename T>
struct AttnProblem {
  AttnShape s;
  long q_stride, k_stride, v_stride, out_stride;
  long q_off = 0, k_off = 0, v_off = 0;
  std::vector<T> q, k, v;  // fused: everything in q
  std::vector<T> out, att, scratch, dq, dk, dv;

  explicit AttnProblem(AttnShape shape) : s(shape) {
    out_stride = static_cast<long>(s.H) * s.D + s.pad;
    if (s.fused) {
      q_stride = k_stride = v_stride = static_cast<long>(s.H + 2 * s.Hkv) * s.D + s.pad;
      k_off = static_cast<long>(s.H) * s.D;
      v_off = static_cast<long>(s.H + s.Hkv) * s.D;
    } else {
      q_stride = static_cast<long>(s.H) * s.D + s.pad;
      k_stride = v_stride = static_cast<long>(s.Hkv) * s.D + s.pad;
    }
    out.assign(static_cast<size_t>(s.B) * s.Tq * out_stride, T(-3));
    att.assign(static_cast<size_t>(s.B) * s.H * s.Tq * s.Tk, T(-3));
    scratch.assign(attention_gqa_scratch_size(s.B, s.Tq, s.Tk, s.H, s.D), T(-3));
  }
  void randomise(Rng& rng, double scale) {
    q = cast_vec(random_vector(rng, static_cast<size_t>(s.B) * s.Tq * q_stride, scale));
    if (!s.fused) {
      k = cast_vec(random_vector(rng, static_cast<size_t>(s.B) * s.Tk * k_stride, scale));
      v = cast_vec(random_vector(rng, static_cast<size_t>(s.B) * s.Tk * v_stride, scale));
    }
  }
  static std::vector<T> cast_vec(const std::vector<double>& x) { return std::vector<T>(x.begin(), x.end()); }
  std::vector<T>& kbuf() { return s.fused ? q : k; }
  std::vector<T>& vbuf() { return s.fused ? q : v; }
  T attn_scale() const { return static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.D))); }
  void forward(T scale) {
    attention_gqa_forward<T>(out.data(), out_stride, att.data(), scratch.data(), q.data(), q_stride,
                             kbuf().data() + k_off, k_stride, vbuf().data() + v_off, v_stride, s.B, s.Tq, s.Tk, s.H,
                             s.Hkv, s.D, s.causal, scale);
  }
  // Gradient buffers are filled with `fill` first: the kernel must overwrite the head columns and leave
  // the padding alone.
  void backward(const std::vector<T>& dout, T scale, T fill) {
    dq.assign(q.size(), fill);
    T* dkp = dq.data();
    T* dvp = dq.data();
    if (!s.fused) {
      dk.assign(k.size(), fill);
      dv.assign(v.size(), fill);
      dkp = dk.data();
      dvp = dv.data();
    }
    attention_gqa_backward<T>(dq.data(), q_stride, dkp + k_off, k_stride, dvp + v_off, v_stride, scratch.data(),
                              dout.data(), out_stride, q.data(), q_stride, kbuf().data() + k_off, k_stride,
                              vbuf().data() + v_off, v_stride, att.data(), s.B, s.Tq, s.Tk, s.H, s.Hkv, s.D,
                              s.causal, scale);
  }
};

// Columns of a row of `stride` elements that hold head data (the rest is padding).
bool is_pad(long index, long stride, long used) { return index % stride >= used; }

void check_attention_gradient(const AttnShape& shape, double scale, uint64_t seed) {
  Rng rng(seed);
  AttnProblem<double> p(shape);
  p.randomise(rng, scale);
  // Logits scale like the inputs (std ~ scale, not scale^2), so that at scale 10 the softmax is sharp but
  // its gradients are not all below rounding.
  const double attn_scale = 1.0 / (std::sqrt(static_cast<double>(shape.D)) * scale);
  // dout = w is nonzero in out's padding columns too, which the backward pass must ignore; the loss sums
  // over the head columns only (a constant from the padding would only add rounding error to it).
  const long out_cols = static_cast<long>(shape.H) * shape.D;
  auto w = random_vector(rng, p.out.size(), 1.0);
  auto loss = [&] {
    p.forward(attn_scale);
    double sum = 0;
    for (size_t i = 0; i < w.size(); ++i)
      if (!is_pad(static_cast<long>(i), p.out_stride, out_cols)) sum += w[i] * p.out[i];
    return sum;
  };
  loss();
  for (size_t i = 0; i < p.out.size(); ++i)
    if (is_pad(static_cast<long>(i), p.out_stride, out_cols)) {
      ASSERT_EQ(p.out[i], -3.0) << "out[" << i << "] (padding) was written";
    }
  p.backward(w, attn_scale, 7.0);
  // Padding columns are never written; their gradient is zero.
  auto take_padding = [](std::vector<double>& g, long stride, long used, const char* what) {
    for (size_t i = 0; i < g.size(); ++i)
      if (is_pad(static_cast<long>(i), stride, used)) {
        ASSERT_EQ(g[i], 7.0) << what << "[" << i << "] (padding) was written";
        g[i] = 0;
      }
  };
  // A larger step than the other checks: some gradients (dk of a key that few queries see) are small next
  // to the loss, so its rounding error / h matters more than the O(h^4) truncation error.
  const double step = 1e-3 * scale;
  if (shape.fused) {
    take_padding(p.dq, p.q_stride, static_cast<long>(shape.H + 2 * shape.Hkv) * shape.D, "dqkv");
    expect_gradient_matches("dqkv", p.q, p.dq, loss, step);
  } else {
    take_padding(p.dq, p.q_stride, static_cast<long>(shape.H) * shape.D, "dq");
    take_padding(p.dk, p.k_stride, static_cast<long>(shape.Hkv) * shape.D, "dk");
    take_padding(p.dv, p.v_stride, static_cast<long>(shape.Hkv) * shape.D, "dv");
    expect_gradient_matches("dq", p.q, p.dq, loss, step);
    expect_gradient_matches("dk", p.k, p.dk, loss, step);
    expect_gradient_matches("dv", p.v, p.dv, loss, step);
  }
}

}  // namespace

// Head size 3 / 5 / 4 take the plain loops, 16 the register-tiled ones.
TEST_P(KernelBlockGrad, AttentionMultiHeadCausal) { check_attention_gradient({2, 5, 5, 4, 4, 3, true, false, 0}, scale(), 1); }
TEST_P(KernelBlockGrad, AttentionGroupedQueryCausal) { check_attention_gradient({2, 5, 5, 4, 2, 3, true, false, 2}, scale(), 2); }
TEST_P(KernelBlockGrad, AttentionMultiQueryCausal) { check_attention_gradient({2, 5, 5, 4, 1, 3, true, false, 0}, scale(), 3); }
TEST_P(KernelBlockGrad, AttentionFusedStrided) { check_attention_gradient({2, 6, 6, 4, 2, 4, true, true, 3}, scale(), 4); }
TEST_P(KernelBlockGrad, AttentionCross) { check_attention_gradient({2, 7, 3, 4, 2, 3, false, false, 1}, scale(), 5); }
// Head size unrelated to any model width (H * D = 15).
TEST_P(KernelBlockGrad, AttentionOddHeadSize) { check_attention_gradient({1, 6, 6, 3, 1, 5, true, false, 0}, scale(), 6); }
TEST_P(KernelBlockGrad, AttentionTiledCausal) { check_attention_gradient({2, 19, 19, 2, 1, 16, true, true, 1}, scale(), 7); }
TEST_P(KernelBlockGrad, AttentionTiledCross) { check_attention_gradient({1, 3, 70, 4, 2, 16, false, false, 0}, scale(), 8); }

INSTANTIATE_TEST_SUITE_P(Scales, KernelBlockGrad, ::testing::Values(0.1, 1.0, 10.0),
                         [](const auto& info) {
                           return info.param < 1 ? std::string("scale_0_1") : "scale_" + std::to_string(static_cast<int>(info.param));
                         });

namespace {

// attention_gqa with Hkv == H, causal, on a fused (B, T, 3C) qkv buffer against kernels::attention.
template <typename T>
void check_against_fused_kernel(int B, int Tn, int C, int H, double rtol, double floor) {
  Rng rng(11);
  const int D = C / H;
  AttnProblem<T> p({B, Tn, Tn, H, H, D, true, true, 0});
  p.randomise(rng, 1.0);
  const std::vector<T> dout = AttnProblem<T>::cast_vec(random_vector(rng, p.out.size(), 1.0));
  p.forward(p.attn_scale());
  p.backward(dout, p.attn_scale(), T(7));

  std::vector<T> out(static_cast<size_t>(B) * Tn * C), att(static_cast<size_t>(B) * H * Tn * Tn),
      scratch(attention_scratch_size(B, Tn, C, H)), dqkv(p.q.size());
  attention_forward(out.data(), att.data(), scratch.data(), p.q.data(), B, Tn, C, H);
  attention_backward(dqkv.data(), scratch.data(), dout.data(), p.q.data(), att.data(), B, Tn, C, H);
  auto as_double = [](const std::vector<T>& x) { return std::vector<double>(x.begin(), x.end()); };
  expect_close(p.out, as_double(out), rtol, floor, "out");
  expect_close(p.att, as_double(att), rtol, floor, "att");
  expect_close(p.dq, as_double(dqkv), rtol, floor, "dqkv");
}

}  // namespace

TEST(KernelBlock, AttentionMatchesFusedQkvKernel) {
  // Relative per element (floor: a thousandth of the largest entry) in double; in float the two kernels
  // sum softmax rows in different orders (plain loops), so entries that are small through cancellation
  // differ by float rounding of the terms: there the bound is 1e-6 of the largest entry.
  check_against_fused_kernel<double>(2, 19, 6, 2, 1e-12, 1e-3);   // head size 3: plain loops
  check_against_fused_kernel<double>(2, 70, 64, 2, 1e-12, 1e-3);  // head size 32: register tiles, T > 64
  check_against_fused_kernel<float>(2, 19, 6, 2, 1e-6, 1.0);
  check_against_fused_kernel<float>(2, 70, 64, 2, 1e-6, 1.0);
}

TEST(KernelBlock, AttentionIsCausalAndBatchesAreIndependent) {
  for (int D : {3, 16}) {
    Rng rng(12);
    const int B = 2, Tn = 9, H = 4, Hkv = 2;
    AttnProblem<double> p({B, Tn, Tn, H, Hkv, D, true, false, 0});
    p.randomise(rng, 1.0);
    p.forward(p.attn_scale());
    const std::vector<double> out0 = p.out, k0 = p.k, v0 = p.v;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < Tn; ++t) {
          double row = 0;
          for (int s = 0; s < Tn; ++s) {
            const double prob = p.att[((static_cast<size_t>(b) * H + h) * Tn + t) * Tn + s];
            if (s > t) {
              EXPECT_EQ(prob, 0.0);
            }
            row += prob;
          }
          EXPECT_NEAR(row, 1.0, 1e-14);
        }
    for (int t = 0; t < Tn; ++t) {
      // change k and v of batch 1 at every position after t: outputs up to t (and all of batch 0) stay
      p.k = k0;
      p.v = v0;
      for (long i = (static_cast<long>(Tn) + t + 1) * p.k_stride; i < 2L * Tn * p.k_stride; ++i) {
        p.k[i] += 1.5;
        p.v[i] -= 2.0;
      }
      p.forward(p.attn_scale());
      for (long i = 0; i < (static_cast<long>(Tn) + t + 1) * p.out_stride; ++i) ASSERT_EQ(p.out[i], out0[i]) << t;
      if (t + 1 < Tn) {
        bool changed = false;  // and the perturbation does reach the later rows
        for (long i = (static_cast<long>(Tn) + t + 1) * p.out_stride; i < 2L * Tn * p.out_stride; ++i)
          changed = changed || p.out[i] != out0[i];
        EXPECT_TRUE(changed) << t;
      }
    }
  }
}

TEST(KernelBlock, AttentionLargeLogitsStayFinite) {
  // logits of order 1e4: the row maximum is subtracted before exp
  Rng rng(13);
  AttnProblem<float> p({1, 8, 8, 2, 1, 16, true, false, 0});
  p.randomise(rng, 30.0);
  p.forward(1.0f);
  const std::vector<float> dout(p.out.size(), 1.0f);
  p.backward(dout, 1.0f, 0.0f);
  for (float x : p.out) ASSERT_TRUE(std::isfinite(x));
  for (float x : p.att) ASSERT_TRUE(std::isfinite(x));
  for (const auto* g : {&p.dq, &p.dk, &p.dv})
    for (float x : *g) ASSERT_TRUE(std::isfinite(x));
}

namespace {

template <typename T>
struct AttnResult {
  std::vector<T> out, att, dq, dk, dv;
};

template <typename T>
AttnResult<T> run_attention(const AttnShape& shape, const std::vector<double>& q, const std::vector<double>& k,
                            const std::vector<double>& v, const std::vector<double>& dout) {
  AttnProblem<T> p(shape);
  p.q = AttnProblem<T>::cast_vec(q);
  p.k = AttnProblem<T>::cast_vec(k);
  p.v = AttnProblem<T>::cast_vec(v);
  p.forward(p.attn_scale());
  p.backward(AttnProblem<T>::cast_vec(dout), p.attn_scale(), T(0));
  return {p.out, p.att, p.dq, p.dk, p.dv};
}

}  // namespace

TEST(KernelBlock, AttentionDoesNotDependOnThreadCount) {
  for (const AttnShape& shape : {AttnShape{3, 40, 40, 4, 2, 32, true, false, 0}, AttnShape{3, 40, 40, 4, 2, 6, true, false, 0},
                                 AttnShape{3, 11, 40, 4, 1, 16, false, false, 0}}) {
    Rng rng(14);
    AttnProblem<float> sizes(shape);
    sizes.randomise(rng, 1.0);
    const auto q = random_vector(rng, sizes.q.size(), 1.0), k = random_vector(rng, sizes.k.size(), 1.0),
               v = random_vector(rng, sizes.v.size(), 1.0), dout = random_vector(rng, sizes.out.size(), 1.0);
    set_num_threads(1);
    const AttnResult<float> one = run_attention<float>(shape, q, k, v, dout);
    set_num_threads(2);
    const AttnResult<float> two = run_attention<float>(shape, q, k, v, dout);
    set_num_threads(0);
    EXPECT_EQ(one.out, two.out);
    EXPECT_EQ(one.att, two.att);
    EXPECT_EQ(one.dq, two.dq);
    EXPECT_EQ(one.dk, two.dk);
    EXPECT_EQ(one.dv, two.dv);
  }
}

// Both attention kernels let each thread work in the scratch part of the first head it takes, for all of its
// heads: every head must overwrite what it reads there. Scratch filled with NaN (what an earlier head might
// leave, at worst) gives the same bits as scratch filled with zeros, at one thread (one part for every head) and
// at two, for the fused-qkv kernel and the grouped one, tiled (head size a multiple of 16) or not.
TEST(KernelBlock, AttentionReadsNothingItsScratchHeldBefore) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const int hs : {32, 6}) {  // fused-qkv kernel: B 3, T 19, 4 heads
      const int B = 3, Tn = 19, H = 4, C = H * hs;
      Rng rng(21);
      const auto qkv = cast<float>(random_vector(rng, static_cast<size_t>(B) * Tn * 3 * C, 1.0));
      const auto dout = cast<float>(random_vector(rng, static_cast<size_t>(B) * Tn * C, 1.0));
      std::vector<float> results[2][3];
      for (int poisoned = 0; poisoned < 2; ++poisoned) {
        std::vector<float> out(B * Tn * C), att(static_cast<size_t>(B) * H * Tn * Tn), dqkv(qkv.size(), 5.f);
        std::vector<float> scratch(attention_scratch_size(B, Tn, C, H), poisoned ? nan : 0.f);
        attention_forward(out.data(), att.data(), scratch.data(), qkv.data(), B, Tn, C, H);
        std::fill(scratch.begin(), scratch.end(), poisoned ? nan : 0.f);
        attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, Tn, C, H);
        results[poisoned][0] = out, results[poisoned][1] = att, results[poisoned][2] = dqkv;
      }
      for (int i = 0; i < 3; ++i) EXPECT_EQ(results[0][i], results[1][i]) << "threads " << threads << " hs " << hs;
    }
    for (const AttnShape& shape : {AttnShape{3, 17, 17, 4, 2, 32, true, false, 0},
                                   AttnShape{2, 9, 13, 6, 3, 6, false, false, 0}}) {  // grouped kernel
      Rng rng(22);
      AttnProblem<float> sizes(shape);
      sizes.randomise(rng, 1.0);
      const auto q = random_vector(rng, sizes.q.size(), 1.0), k = random_vector(rng, sizes.k.size(), 1.0),
                 v = random_vector(rng, sizes.v.size(), 1.0), dout = random_vector(rng, sizes.out.size(), 1.0);
      AttnResult<float> results[2];
      for (int poisoned = 0; poisoned < 2; ++poisoned) {
        AttnProblem<float> p(shape);
        p.q = AttnProblem<float>::cast_vec(q);
        p.k = AttnProblem<float>::cast_vec(k);
        p.v = AttnProblem<float>::cast_vec(v);
        std::fill(p.scratch.begin(), p.scratch.end(), poisoned ? nan : 0.f);
        p.forward(p.attn_scale());
        std::fill(p.scratch.begin(), p.scratch.end(), poisoned ? nan : 0.f);
        p.backward(AttnProblem<float>::cast_vec(dout), p.attn_scale(), 0.f);
        results[poisoned] = {p.out, p.att, p.dq, p.dk, p.dv};
      }
      EXPECT_EQ(results[0].out, results[1].out) << "threads " << threads;
      EXPECT_EQ(results[0].att, results[1].att) << "threads " << threads;
      EXPECT_EQ(results[0].dq, results[1].dq) << "threads " << threads;
      EXPECT_EQ(results[0].dk, results[1].dk) << "threads " << threads;
      EXPECT_EQ(results[0].dv, results[1].dv) << "threads " << threads;
    }
  }
  set_num_threads(0);
}

TEST(KernelBlock, ElementwiseKernelsDoNotDependOnThreadCount) {
  // sizes past the kernels' parallel thresholds
  Rng rng(15);
  const int N = 300, I = 200, heads = 8, half = 16, Tn = 30;
  const auto inp = cast<float>(random_vector(rng, N * 2 * I, 2.0)), dout = cast<float>(random_vector(rng, N * I, 1.0));
  const auto x = cast<float>(random_vector(rng, N * heads * 2 * half, 1.0));
  std::vector<float> cos(Tn * half), sin(Tn * half);
  rope_tables<float>(cos.data(), sin.data(), inverse_frequencies(half, 10000.0).data(), Tn, half);
  std::vector<std::vector<float>> results[2];
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    auto& r = results[threads - 1];
    for (GluKind kind : {GluKind::SwiGLU, GluKind::GeGLU}) {
      std::vector<float> out(N * I), dinp(N * 2 * I);
      glu_forward(out.data(), inp.data(), N, I, kind);
      glu_backward(dinp.data(), dout.data(), inp.data(), N, I, kind);
      r.push_back(out);
      r.push_back(dinp);
    }
    std::vector<float> g(N * 2 * I);
    gelu_tanh_backward(g.data(), inp.data(), inp.data(), static_cast<long>(g.size()));
    r.push_back(g);
    std::vector<float> rx = x;
    rope_forward<float>(rx.data(), cos.data(), sin.data(), N / Tn, Tn, heads, half, heads * 2 * half);
    r.push_back(rx);
    rope_backward<float>(rx.data(), cos.data(), sin.data(), N / Tn, Tn, heads, half, heads * 2 * half);
    r.push_back(rx);
  }
  set_num_threads(0);
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) EXPECT_EQ(results[0][i], results[1][i]) << i;
}

TEST(KernelBlock, AttentionFloatMatchesDouble) {
  for (const AttnShape& shape : {AttnShape{2, 70, 70, 4, 2, 16, true, false, 0}, AttnShape{2, 70, 70, 4, 2, 6, true, false, 0},
                                 AttnShape{2, 9, 70, 4, 1, 32, false, false, 0}}) {
    Rng rng(16);
    AttnProblem<double> sizes(shape);
    sizes.randomise(rng, 1.0);
    const auto q = random_vector(rng, sizes.q.size(), 1.0), k = random_vector(rng, sizes.k.size(), 1.0),
               v = random_vector(rng, sizes.v.size(), 1.0), dout = random_vector(rng, sizes.out.size(), 1.0);
    const AttnResult<double> d = run_attention<double>(shape, q, k, v, dout);
    const AttnResult<float> f = run_attention<float>(shape, q, k, v, dout);
    // relative per element, with a floor at a tenth of the largest entry: entries that are small through
    // cancellation carry the float rounding of their O(1) terms
    const double rtol = 1e-5, floor = 0.1;
    expect_close(f.out, d.out, rtol, floor, "out");
    expect_close(f.att, d.att, rtol, floor, "att");
    expect_close(f.dq, d.dq, rtol, floor, "dq");
    expect_close(f.dk, d.dk, rtol, floor, "dk");
    expect_close(f.dv, d.dv, rtol, floor, "dv");
  }
}
