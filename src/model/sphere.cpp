#include "model/sphere.h"

#include <cmath>
#include <string>
#include <vector>

#include "util/error.h"

namespace blocklab {

SphereFactors SphereFactors::of(const ModelConfig& config) {
  const double root_c = std::sqrt(static_cast<double>(config.width));
  return {.alpha = 0.05 * root_c, .s_qk = root_c, .s_uv = root_c, .s_z = root_c};
}

void check_sphere_config(const ModelConfig& c) {
  const std::string p = "norm_placement = " + to_string(c.norm_placement) + " ";
  if (c.cross_attention) throw Error(p + "does not support cross_attention (nGPT defines self-attention and MLP only)");
  if (c.qk_norm) throw Error(p + "does not combine with qk_norm (it normalises every q and k head itself)");
  if (c.tie_head) throw Error(p + "needs an untied head (tie_head = false): nGPT's E_out is its own unit-norm matrix");
  if (c.kv_head_count() != c.heads) throw Error(p + "needs kv_heads = heads (s_qk scales q and k heads alike)");
  if (c.precision == Precision::Bf16) throw Error(p + "supports precision = fp32 only");
  if (c.norm != NormKind::LayerNorm) throw Error(p + "has no norm layers (leave norm at layernorm)");
}

template <typename T>
bool sphere_init(T* p, const ParamSpec& s, const ModelConfig& config, Rng& rng) {
  const double std = 1.0 / std::sqrt(static_cast<double>(config.width));
  switch (s.role) {
    case ParamRole::LinearWeight:
    case ParamRole::Embedding: {
      const bool output = s.part == LinearPart::Output || s.part == LinearPart::Fc2;
      const double sd = output ? std / std::sqrt(2.0 * config.layers) : std;
      for (long i = 0; i < s.numel; ++i) p[i] = static_cast<T>(sd * rng.normal());
      return true;
    }
    case ParamRole::SphereScale: {
      const bool uv = s.part == LinearPart::Fc1;  // s_uv, on fc1's outputs
      std::fill(p, p + s.numel, static_cast<T>(uv ? 1.0 : std));
      return true;
    }
    default:
      return false;
  }
}

namespace {

// Rows of (rows, cols) to unit norm; an all-zero row stays zero. Each row on its own: any thread count.
template <typename T>
void normalize_rows(T* p, long rows, long cols) {
#pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; ++r) {
    T* row = p + r * cols;
    double ss = 0;
    for (long i = 0; i < cols; ++i) ss += static_cast<double>(row[i]) * row[i];
    if (ss == 0) continue;
    const double inv = 1.0 / std::sqrt(ss);
    for (long i = 0; i < cols; ++i) row[i] = static_cast<T>(row[i] * inv);
  }
}

// Columns of (rows, cols) to unit norm; an all-zero column stays zero.
template <typename T>
void normalize_columns(T* p, long rows, long cols) {
  std::vector<double> ss(static_cast<size_t>(cols), 0.0);
  for (long r = 0; r < rows; ++r)
    for (long i = 0; i < cols; ++i) ss[i] += static_cast<double>(p[r * cols + i]) * p[r * cols + i];
  for (double& v : ss) v = v == 0 ? 1.0 : 1.0 / std::sqrt(v);
  for (long r = 0; r < rows; ++r)
    for (long i = 0; i < cols; ++i) p[r * cols + i] = static_cast<T>(p[r * cols + i] * ss[i]);
}

}  // namespace

template <typename T>
void normalize_onto_sphere(T* params, const ParameterTable& table) {
  for (const ParamSpec& s : table.specs()) {
    if (s.role != ParamRole::LinearWeight && s.part != LinearPart::TokenEmbedding) continue;
    T* p = params + s.offset;
    const long rows = s.shape[0], cols = s.shape[1];
    switch (s.part) {
      case LinearPart::Query:
      case LinearPart::Key:
      case LinearPart::Value:
      case LinearPart::QKV:
      case LinearPart::Fc1:
      case LinearPart::Head:
      case LinearPart::TokenEmbedding:
        normalize_rows(p, rows, cols);
        break;
      case LinearPart::Output:
      case LinearPart::Fc2:
        normalize_columns(p, rows, cols);
        break;
      default:  // the attention gate (attn_gate) is not one of nGPT's matrices: left as it is
        break;
    }
  }
}

template bool sphere_init<float>(float*, const ParamSpec&, const ModelConfig&, Rng&);
template bool sphere_init<double>(double*, const ParamSpec&, const ModelConfig&, Rng&);
template void normalize_onto_sphere<float>(float*, const ParameterTable&);
template void normalize_onto_sphere<double>(double*, const ParameterTable&);

}  // namespace blocklab
