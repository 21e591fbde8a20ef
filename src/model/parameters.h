#pragma once
// The parameter table: ONE list of {name, shape, role} from which the parameter, gradient and Adam
// moment arenas are all carved at the same offsets. Names follow PyTorch conventions
// (e.g. "blocks.3.mlp.fc2.weight") so weights map 1:1 to state_dicts and safetensors files.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/config.h"

namespace blocklab {

enum class ParamRole { LinearWeight, LinearBias, NormWeight, NormBias, Embedding };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  ParamRole role;
  long offset = 0;  // element offset in every arena
  long numel = 0;
  int block = -1;   // block index for blocks.N.*, -1 otherwise
};

class ParameterTable {
 public:
  explicit ParameterTable(const ModelConfig& config);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  long total() const { return total_; }
  // nullptr when absent.
  const ParamSpec* find(std::string_view name) const;
  // Throws Error when absent.
  const ParamSpec& at(std::string_view name) const;

 private:
  void add(std::string name, std::vector<int64_t> shape, ParamRole role, int block);
  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, size_t> index_;
  long total_ = 0;
};

// Typed pointers into one arena (parameters or gradients or a moment), resolved once by name.
template <typename T>
struct BlockTensors {
  T* norm1_weight;
  T* norm1_bias;  // nullptr for RMSNorm
  T* qkv_weight;  // (3C, C)
  T* qkv_bias;    // (3C)
  T* proj_weight; // (C, C)
  T* proj_bias;   // (C)
  T* norm2_weight;
  T* norm2_bias;  // nullptr for RMSNorm
  T* fc1_weight;  // (4C, C)
  T* fc1_bias;    // (4C)
  T* fc2_weight;  // (C, 4C)
  T* fc2_bias;    // (C)
};

template <typename T>
struct ModelTensors {
  T* tok_emb;  // (V, C)
  T* pos_emb;  // (T, C)
  std::vector<BlockTensors<T>> blocks;
  T* final_norm_weight;  // Pre-LN only, else nullptr
  T* final_norm_bias;    // Pre-LN LayerNorm only, else nullptr
  T* head_weight;        // (V, C)
};

template <typename T>
ModelTensors<T> bind_tensors(const ParameterTable& table, const ModelConfig& config, T* arena);

}  // namespace blocklab
