// Weights of Hugging Face model directories (src/hf/weights.h, Model::load): single files and sharded
// indexes, conversion of stored dtypes, and clear errors for every kind of broken directory.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_runner.h"
#include "hf/model.h"
#include "hf/weights.h"
#include "io/safetensors.h"
#include "util/error.h"

namespace {

using blocklab::Error;
using namespace blocklab::hf;
namespace io = blocklab::io;
namespace fs = std::filesystem;

const fs::path kHf = fs::path(BLOCKLAB_TEST_DATA) / "hf";

// A private copy of a fixture model directory.
fs::path copy_model(const std::string& name, const std::string& tag) {
  const fs::path dir = blocklab::testing::fresh_dir("hfw_" + tag);
  fs::copy(kHf / name, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  return dir;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// Rewrites a safetensors file, letting `edit` drop (return false), rename or reshape entries.
void rewrite(const fs::path& file, const std::function<bool(io::TensorToWrite&)>& edit) {
  std::vector<std::byte> bytes;
  {
    const std::string s = read(file);
    bytes.resize(s.size());
    std::memcpy(bytes.data(), s.data(), s.size());
  }
  io::SafetensorsReader r = io::SafetensorsReader::from_bytes(bytes, file.string());
  std::vector<io::TensorToWrite> out;
  for (const io::TensorEntry& e : r.tensors()) {
    io::TensorToWrite t{e.name, e.dtype, e.shape, r.bytes(e)};
    if (edit(t)) out.push_back(t);
  }
  io::write_safetensors(file.string(), out);
}

// Runs `f` and checks that it throws an Error whose message contains every needle.
template <class F>
void expect_error(F f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(HfWeights, ShardedIndexMapsEveryTensor) {
  const WeightStore w = WeightStore::open(kHf / "qwen3_vl_bf16_sharded");
  EXPECT_TRUE(w.sharded());
  EXPECT_EQ(w.files().size(), 2u);
  const WeightRef e = w.get("model.language_model.embed_tokens.weight");
  EXPECT_EQ(e.dtype, io::DType::BF16);
  EXPECT_EQ(e.shape, (std::vector<int64_t>{64, 32}));
  EXPECT_NE(e.file.find("model-0000"), std::string::npos);
  EXPECT_TRUE(w.contains("model.visual.patch_embed.proj.weight"));
  EXPECT_FALSE(w.contains("lm_head.weight"));
  EXPECT_GT(w.total_bytes(), 0u);
}

TEST(HfWeights, ConvertRowsMatchesScalarConversions) {
  for (const char* name : {"qwen3_vl_bf16_sharded", "llama_f16", "qwen3"}) {
    const WeightStore w = WeightStore::open(kHf / name);
    const std::string emb = std::string(name) == "qwen3_vl_bf16_sharded" ? "model.language_model.embed_tokens.weight"
                                                                          : "model.embed_tokens.weight";
    const WeightRef ref = w.get(emb);
    const int64_t cols = ref.cols();
    std::vector<float> rows(3 * cols);
    convert_rows(rows.data(), ref, 5, 3);
    for (int64_t i = 0; i < 3 * cols; ++i) {
      uint16_t h;
      float expected;
      const std::byte* p = ref.bytes.data() + (5 * cols + i) * io::dtype_size(ref.dtype);
      if (ref.dtype == io::DType::BF16) {
        std::memcpy(&h, p, 2);
        expected = io::bf16_to_float(h);
      } else if (ref.dtype == io::DType::F16) {
        std::memcpy(&h, p, 2);
        expected = io::f16_to_float(h);
      } else {
        std::memcpy(&expected, p, 4);
      }
      ASSERT_EQ(rows[i], expected) << name << " element " << i;
    }
    EXPECT_THROW(convert_rows(rows.data(), ref, ref.rows() - 1, 2), Error);
  }
}

TEST(HfWeights, MissingShardIsAnError) {
  const fs::path dir = copy_model("qwen3_vl_bf16_sharded", "missing_shard");
  fs::remove(dir / "model-00002-of-00002.safetensors");
  expect_error([&] { WeightStore::open(dir); }, {"model-00002-of-00002.safetensors", "missing shard"});
  fs::remove_all(dir);
}

TEST(HfWeights, TruncatedShardIsAnError) {
  const fs::path dir = copy_model("qwen3_vl_bf16_sharded", "truncated_shard");
  const fs::path shard = dir / "model-00001-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  expect_error([&] { Model::load(dir); }, {"model-00001-of-00002.safetensors", "truncated"});
  fs::resize_file(shard, 5);  // not even a header length
  expect_error([&] { Model::load(dir); }, {"model-00001-of-00002.safetensors", "too short"});
  fs::remove_all(dir);
}

TEST(HfWeights, BrokenIndexesAreErrors) {
  const fs::path dir = copy_model("qwen3_vl_bf16_sharded", "bad_index");
  const fs::path index = dir / "model.safetensors.index.json";
  const nlohmann::json good = nlohmann::json::parse(read(index));
  auto with = [&](auto edit) {
    nlohmann::json j = good;
    edit(j);
    write(index, j.dump());
  };
  with([](auto& j) { j["weight_map"]["model.language_model.ghost"] = "model-00001-of-00002.safetensors"; });
  expect_error([&] { WeightStore::open(dir); }, {"model.language_model.ghost", "does not contain it"});
  with([](auto& j) { j["weight_map"]["x"] = "../../etc/passwd"; });
  expect_error([&] { WeightStore::open(dir); }, {"not a plain file name"});
  with([](auto& j) { j["weight_map"]["x"] = 3; });
  expect_error([&] { WeightStore::open(dir); }, {"not a file name"});
  with([](auto& j) { j.erase("weight_map"); });
  expect_error([&] { WeightStore::open(dir); }, {"weight_map"});
  write(index, "{\"weight_map\": ");
  expect_error([&] { WeightStore::open(dir); }, {"model.safetensors.index.json", "not valid JSON"});
  fs::remove_all(dir);
}

TEST(HfWeights, DirectoriesWithoutSafetensorsAreErrors) {
  const fs::path dir = blocklab::testing::fresh_dir("hfw_noweights");
  fs::copy_file(kHf / "qwen3" / "config.json", dir / "config.json");
  expect_error([&] { Model::load(dir); }, {"no weights", "model.safetensors"});
  write(dir / "pytorch_model.bin", "x");
  expect_error([&] { Model::load(dir); }, {"pytorch_model.bin", "safetensors"});
  expect_error([&] { Model::load(dir / "nope"); }, {"nope"});
  fs::remove_all(dir);
}

TEST(HfWeights, WrongShapeIsAnError) {
  const fs::path dir = copy_model("qwen3", "wrong_shape");
  rewrite(dir / "model.safetensors", [](io::TensorToWrite& t) {
    if (t.name == "model.layers.1.self_attn.k_proj.weight") t.shape = {16, 64};
    return true;
  });
  expect_error([&] { Model::load(dir); },
               {"model.layers.1.self_attn.k_proj.weight", "[16, 64]", "expected [32, 32]", "num_key_value_heads 2"});
  fs::remove_all(dir);
}

TEST(HfWeights, MissingTensorsAreErrors) {
  const fs::path dir = copy_model("qwen3", "missing_tensor");
  rewrite(dir / "model.safetensors", [](io::TensorToWrite& t) { return t.name != "model.layers.2.mlp.up_proj.weight"; });
  expect_error([&] { Model::load(dir); }, {"missing tensor", "model.layers.2.mlp.up_proj.weight"});
  fs::remove_all(dir);

  // Untied output head (tie_word_embeddings false) without lm_head.weight.
  const fs::path untied = copy_model("qwen3", "missing_head");
  rewrite(untied / "model.safetensors", [](io::TensorToWrite& t) { return t.name != "lm_head.weight"; });
  expect_error([&] { Model::load(untied); }, {"lm_head.weight", "tie_word_embeddings is false"});
  fs::remove_all(untied);

  const fs::path gpt2 = copy_model("gpt2", "gpt2_prefix");
  rewrite(gpt2 / "model.safetensors", [](io::TensorToWrite& t) { return t.name != "wte.weight"; });
  expect_error([&] { Model::load(gpt2); }, {"wte.weight"});
  fs::remove_all(gpt2);
}

TEST(HfWeights, Gpt2TransformerPrefixIsAccepted) {
  // GPT2LMHeadModel.save_pretrained writes "transformer.h.0..." instead of the hub's "h.0...".
  const fs::path dir = copy_model("gpt2", "gpt2_transformer_prefix");
  rewrite(dir / "model.safetensors", [](io::TensorToWrite& t) {
    t.name = "transformer." + t.name;
    return true;
  });
  const Model a = Model::load(dir), b = Model::load(kHf / "gpt2");
  const std::vector<int32_t> tokens{3, 1, 4, 1, 5};
  EXPECT_EQ(a.forward(tokens).logits, b.forward(tokens).logits);
  fs::remove_all(dir);
}

TEST(HfWeights, NonFloatDtypeIsAnError) {
  const fs::path dir = copy_model("qwen2", "int_dtype");
  rewrite(dir / "model.safetensors", [](io::TensorToWrite& t) {
    if (t.name == "model.norm.weight") t.dtype = io::DType::I32;  // same byte size as F32
    return true;
  });
  expect_error([&] { Model::load(dir); }, {"model.norm.weight", "I32", "floating-point"});
  fs::remove_all(dir);
}

}  // namespace
