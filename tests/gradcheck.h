#pragma once
// Central-difference gradient checking in double precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "util/rng.h"

namespace blocklab::testing {

inline std::vector<double> random_vector(Rng& rng, size_t n, double scale) {
  std::vector<double> v(n);
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

inline double dot(const std::vector<double>& a, const double* b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares analytic[i] with the fourth-order central difference
//   (-loss(x + 2h e_i) + 8 loss(x + h e_i) - 8 loss(x - h e_i) + loss(x - 2h e_i)) / 12h
// for every i: its truncation error is O(h^4), so h can be large enough (1e-4) that the rounding
// error of the loss, ~1e-16 |loss| / h, stays far below the tolerance even for small entries.
// Passes when |analytic - numeric| <= rtol * max(|numeric|, max_abs_numeric * 1e-3) + noise for each element:
// relative per element, with a floor at a thousandth of the largest gradient so that entries that are
// zero up to rounding do not demand impossible relative accuracy, and noise = 32 eps |loss| / h, the most the
// loss's own rounding can move the difference quotient: a tensor whose gradients are all tiny (1e-7) is held to
// what double precision can tell, whatever order the products round in (OpenBLAS or the portable GEMM).
inline void expect_gradient_matches(const std::string& what, std::vector<double>& x,
                                    const std::vector<double>& analytic, const std::function<double()>& loss,
                                    double h, double rtol = 1e-6) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const double noise = 32 * std::numeric_limits<double>::epsilon() * std::abs(loss()) / h;
  std::vector<double> numeric(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    const auto loss_at = [&](double offset) {
      x[i] = saved + offset;
      return loss();
    };
    const double up2 = loss_at(2 * h), up = loss_at(h), down = loss_at(-h), down2 = loss_at(-2 * h);
    x[i] = saved;
    numeric[i] = (-up2 + 8 * up - 8 * down + down2) / (12 * h);
  }
  double max_abs = 0;
  for (double v : numeric) max_abs = std::max(max_abs, std::abs(v));
  ASSERT_GT(max_abs, 0.0) << what << ": all numeric gradients are zero, the check would be vacuous";
  int failures = 0;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double err =
        std::max(0.0, std::abs(analytic[i] - numeric[i]) - noise) / std::max(std::abs(numeric[i]), 1e-3 * max_abs);
    worst = std::max(worst, err);
    if (err > rtol && failures++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << " numeric " << numeric[i];
  }
  EXPECT_LE(worst, rtol) << what << ": worst relative error " << worst << " over " << x.size() << " entries";
}

}  // namespace blocklab::testing
