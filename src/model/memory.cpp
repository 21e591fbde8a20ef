#include "model/memory.h"

#include <algorithm>

#include "model/block.h"
#include "model/model.h"
#include "model/parameters.h"

namespace blocklab {

namespace {

// Bytes a ParameterTable entry costs besides its data: the entry, its name and shape on the heap, the
// name index's node. A lower bound is all the estimate needs from it.
constexpr double kTableBytesPerTensor = sizeof(ParamSpec) + 96;

// A lower bound of every part, in double (no overflow for any int sizes): the terms each block surely
// has (linear weights, saved q/k/v, attention probabilities, MLP activations).
TrainingMemory lower_bound(const ModelConfig& c, int batch, int seq_len) {
  const double L = c.layers, B = batch, T = seq_len, N = B * T, C = c.width, V = c.vocab, H = c.heads;
  const double Q = c.q_dim(), K = c.kv_dim(), I = c.mlp_hidden(), I_in = c.mlp_in_width();
  const double f = sizeof(float);
  TrainingMemory m;
  m.lower_bound = true;
  // Per block at least qkv, proj, fc1, fc2, each aligned to 16 floats.
  const double block_params = std::max(C * (Q + 2 * K) + Q * C + I_in * C + I * C, 4.0 * 16);
  m.parameters = f * (L * block_params + V * C);
  m.gradients = m.parameters;
  m.adam_moments = 2 * m.parameters;
  const double R = Model<float>::head_chunk_rows(static_cast<long>(std::min(N, 1e9)), c.vocab);  // head chunk
  m.activations = f * (L * (B * H * T * T + N * (Q + 2 * K) + N * Q + 2 * N * C + N * I_in + N * I) + R * V);
  m.backward_buffers = f * (N * C);
  m.tables = kTableBytesPerTensor * 4 * L;
  return m;
}

}  // namespace

TrainingMemory estimate_training_memory(const ModelConfig& config, int batch, int seq_len, double stop_above) {
  config.validate();
  const TrainingMemory bound = lower_bound(config, batch, seq_len);
  if (bound.total() > stop_above) return bound;

  TrainingMemory m;
  const ParameterTable::Count count = ParameterTable::count(config);
  m.parameters = count.elements * sizeof(float);
  m.gradients = m.parameters;
  m.adam_moments = 2 * m.parameters;
  if (config.precision == Precision::Bf16 && kernels::bf16_gemm_takes_rounded_operands())
    m.rounded_parameters = count.elements * sizeof(uint16_t);
  const auto sizes = Activations<float>::sizes(config, batch, seq_len);
  m.activations = static_cast<double>(sizes.activation_bytes);
  m.backward_buffers = static_cast<double>(sizes.scratch_bytes);
  // Table entries, the per-block views into the arenas (model, gradients, activations), the batch
  // (inputs, targets: int32; mask: uint8) and RoPE tables.
  m.tables = count.tensors * kTableBytesPerTensor +
             static_cast<double>(config.layers) * (2 * sizeof(BlockTensors<float>) + sizeof(BlockActs<float>)) +
             static_cast<double>(batch) * seq_len * 9 + static_cast<double>(seq_len) * config.head_size() * 4;
  return m;
}

}  // namespace blocklab
