// `blocklab export`: trained qwen3 and gpt2 runs written as Hugging Face model directories give, through the
// Hugging Face loader and forward pass (hf::Model), the same logits and copy-task loss as blocklab's own
// model; seed and sd runs keep blocklab's format; architectures a format cannot express are refused naming
// the key; the output directory is written atomically. Then the command end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "data/copy_task.h"
#include "train/export_run.h"
#include "hf/model.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "util/threads.h"
#include "train/run.h"
#include "train/trainer.h"
#include "util/error.h"

using namespace blocklab;
using blocklab::testing::fresh_dir;
using blocklab::testing::read_text;
using blocklab::testing::run_cli;
namespace fs = std::filesystem;

namespace {

// A small run of `block` with extra keys (as the CLI's --key value), trained for 30 steps and checkpointed
// at the end, in dir.
RunConfig small_run(const std::string& block, const fs::path& dir,
                    const std::vector<std::pair<std::string, std::string>>& keys = {}, int checkpoint_every = 30) {
  RunConfig c;
  set_config_value(c, "block", block);
  c.model.layers = 2;
  c.model.width = 32;
  c.model.heads = 4;
  c.model.vocab = 16;
  c.copy_len = 8;
  c.batch = 8;
  c.steps = 30;
  c.lr = 3e-3;
  c.seed = 7;
  c.threads = 1;
  c.checkpoint_every = checkpoint_every;
  c.keep_checkpoints = 0;
  c.out = dir.string();
  for (const auto& [key, value] : keys) set_config_value(c, key, value);
  resolve(c);
  return c;
}

RunConfig train(const std::string& block, const std::string& name,
                const std::vector<std::pair<std::string, std::string>>& keys = {}, int checkpoint_every = 30) {
  RunConfig c = small_run(block, fresh_dir("export_run_" + name), keys, checkpoint_every);
  train_run(c, true);
  return c;
}

struct Agreement {
  double our_loss = 0, hf_loss = 0;
  double loss_rel = 0;          // |hf - ours| / ours
  double max_logit_diff = 0;    // largest |hf - ours| over every logit of the batch
  double max_logit = 0;         // largest |logit|, for scale
};

// Our Model<float> with the run's checkpoint weights, and the exported directory through hf::Model, on one
// copy-task batch: the masked mean cross-entropy (hf: from its logits, one sequence at a time, in double)
// and every logit.
Agreement compare(const RunConfig& run, const fs::path& checkpoint, const fs::path& hf_dir) {
  set_num_threads(1);
  Trainer trainer(run);
  trainer.load_checkpoint(checkpoint);
  const Model<float>& model = trainer.model();
  const int B = 6, T = run.model.seq_len, V = run.model.vocab;
  CopyTask task(V, run.copy_len, 12345);
  Batch batch;
  task.next(batch, B);
  Activations<float> acts = model.make_activations(B, T);
  Agreement a;
  a.our_loss = model.forward(acts, batch.inputs.data(), batch.targets.data(), batch.loss_mask.data());
  const std::vector<float> ours = model.forward_logits(acts, batch.inputs.data());

  const hf::Model hf_model = hf::Model::load(hf_dir);
  double sum = 0;
  long count = 0;
  for (int b = 0; b < B; ++b) {
    const std::span<const int32_t> tokens(batch.inputs.data() + static_cast<long>(b) * T, T);
    const hf::ForwardResult r = hf_model.forward(tokens);
    EXPECT_EQ(r.logits.size(), static_cast<size_t>(T) * V);
    for (int t = 0; t < T; ++t) {
      const float* row = r.logits.data() + static_cast<long>(t) * V;
      const float* our_row = ours.data() + (static_cast<long>(b) * T + t) * V;
      for (int v = 0; v < V; ++v) {
        a.max_logit_diff = std::max(a.max_logit_diff, std::abs(static_cast<double>(row[v]) - our_row[v]));
        a.max_logit = std::max(a.max_logit, std::abs(static_cast<double>(our_row[v])));
      }
      const long i = static_cast<long>(b) * T + t;
      if (!batch.loss_mask[i]) continue;
      double mx = row[0];
      for (int v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      double z = 0;
      for (int v = 0; v < V; ++v) z += std::exp(row[v] - mx);
      sum += mx + std::log(z) - row[batch.targets[i]];
      ++count;
    }
  }
  a.hf_loss = sum / count;
  a.loss_rel = std::abs(a.hf_loss - a.our_loss) / a.our_loss;
  return a;
}

void expect_agreement(const Agreement& a, const std::string& what) {
  std::printf("[ %s ] loss ours %.9f  hf %.9f  relative difference %.3g; "
              "largest logit difference %.3g (|logit| <= %.3g)\n",
              what.c_str(), a.our_loss, a.hf_loss, a.loss_rel, a.max_logit_diff, a.max_logit);
  EXPECT_LT(a.loss_rel, 1e-5) << what;
  EXPECT_LT(a.max_logit_diff, 1e-4 * std::max(1.0, a.max_logit)) << what;
}

fs::path newest_checkpoint(const RunConfig& run) { return io::list_checkpoints(run.out).back().path; }

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_text(p)); }

// Exports to `out` and compares; returns the export's result.
ExportResult export_and_compare(const RunConfig& run, const fs::path& out, const std::string& name,
                                    hf::ExportFormat expected, ExportOptions options = {}) {
  const ExportResult r = export_run(run.out, out, options);
  EXPECT_EQ(r.format, expected);
  EXPECT_EQ(r.step, run.steps);
  EXPECT_TRUE(fs::is_regular_file(out / "config.json"));
  EXPECT_TRUE(fs::is_regular_file(out / "model.safetensors"));
  expect_agreement(compare(run, newest_checkpoint(run), out), name);
  return r;
}

// Only the output directory itself in its parent: no temporary directory left behind.
void expect_no_leftovers(const fs::path& parent, const std::string& keep) {
  for (const auto& e : fs::directory_iterator(parent))
    EXPECT_EQ(e.path().filename().string(), keep) << "left behind: " << e.path();
}

}  // namespace

// --- qwen3 ----------------------------------------------------------------------------------------------

TEST(HfExport, Qwen3GqaUntiedMatchesOurModel) {
  const RunConfig run = train("qwen3", "q3", {{"kv_heads", "2"}});
  const fs::path out = fresh_dir("export_hf_q3") / "model";
  const ExportResult r = export_run(run.out, out);
  EXPECT_EQ(r.format, hf::ExportFormat::Qwen3);
  EXPECT_EQ(r.reason, "block = qwen3");
  EXPECT_EQ(r.step, 30);
  EXPECT_EQ(r.run_steps, 30);
  expect_no_leftovers(out.parent_path(), "model");

  const nlohmann::json c = read_json(out / "config.json");
  EXPECT_EQ(c["model_type"], "qwen3");
  EXPECT_EQ(c["architectures"], nlohmann::json::array({"Qwen3ForCausalLM"}));
  EXPECT_EQ(c["hidden_size"], 32);
  EXPECT_EQ(c["intermediate_size"], 128);
  EXPECT_EQ(c["num_attention_heads"], 4);
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["head_dim"], 8);
  EXPECT_EQ(c["num_hidden_layers"], 2);
  EXPECT_EQ(c["vocab_size"], 16);
  EXPECT_EQ(c["max_position_embeddings"], 15);
  EXPECT_EQ(c["rms_norm_eps"], 1e-6);
  EXPECT_EQ(c["rope_theta"], 1e6);
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["attention_bias"], false);
  EXPECT_EQ(c["hidden_act"], "silu");
  EXPECT_EQ(c["torch_dtype"], "float32");

  // The names and the gated MLP's split: up = fc1 rows 0..I-1 (value), gate = rows I..2I-1.
  const io::SafetensorsReader w((out / "model.safetensors").string());
  const io::SafetensorsReader ckpt((newest_checkpoint(run) / "model.safetensors").string());
  EXPECT_EQ(w.metadata().at("format"), "pt");
  EXPECT_EQ(w.tensors().size(), 3u + 2u * 11u);
  const std::vector<float> fc1 = ckpt.read_f32("blocks.1.mlp.fc1.weight");
  const std::vector<float> up = w.read_f32("model.layers.1.mlp.up_proj.weight");
  const std::vector<float> gate = w.read_f32("model.layers.1.mlp.gate_proj.weight");
  ASSERT_EQ(fc1.size(), up.size() + gate.size());
  EXPECT_TRUE(std::equal(up.begin(), up.end(), fc1.begin()));
  EXPECT_TRUE(std::equal(gate.begin(), gate.end(), fc1.begin() + static_cast<long>(up.size())));
  EXPECT_EQ(w.read_f32("lm_head.weight"), ckpt.read_f32("head.weight"));
  EXPECT_EQ(w.read_f32("model.layers.0.self_attn.k_norm.weight"), ckpt.read_f32("blocks.0.attn.k_norm.weight"));
  EXPECT_EQ(w.at("model.layers.0.self_attn.k_proj.weight").shape, (std::vector<int64_t>{16, 32}));

  expect_agreement(compare(run, newest_checkpoint(run), out), "qwen3 GQA 4:2, untied");
}

TEST(HfExport, Qwen3TiedWithAttentionBiasAndWideHeadsMatchesOurModel) {
  // head_dim 16 with 4 heads on a 32-wide stream (Q = 64 != C), attention biases (attention_bias true), a
  // tied head, another MLP ratio and RoPE base.
  const RunConfig run = train("qwen3", "q3b",
                              {{"head_dim", "16"}, {"tie_head", "true"}, {"qkv_bias", "true"}, {"proj_bias", "true"},
                               {"mlp_ratio", "3"}, {"rope_theta", "10000"}});
  const fs::path out = fresh_dir("export_hf_q3b") / "model";
  export_and_compare(run, out, "qwen3 head_dim 16, biases, tied", hf::ExportFormat::Qwen3);
  const nlohmann::json c = read_json(out / "config.json");
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_EQ(c["attention_bias"], true);
  EXPECT_EQ(c["head_dim"], 16);
  EXPECT_EQ(c["intermediate_size"], 96);
  const io::SafetensorsReader w((out / "model.safetensors").string());
  EXPECT_EQ(w.find("lm_head.weight"), nullptr);
  EXPECT_NE(w.find("model.layers.0.self_attn.o_proj.bias"), nullptr);
}

TEST(HfExport, Qwen3WithoutQkNormIsRefused) {
  // A fused-qkv qwen3 run has no per-head q/k norm (it needs separate q/k/v), which Qwen3ForCausalLM
  // always applies: refused, naming the key, and nothing is written.
  const RunConfig run = train("qwen3", "q3fused", {{"qkv", "fused"}, {"qk_norm", "false"}});
  const fs::path parent = fresh_dir("export_hf_q3fused");
  try {
    export_run(run.out, parent / "model");
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot export as Hugging Face qwen3 (block = qwen3)"), std::string::npos) << m;
    EXPECT_NE(m.find("qk_norm is false"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_TRUE(fs::is_empty(parent));
}

TEST(HfExport, Qwen3WithGeluMlpIsRefused) {
  const RunConfig run = train("qwen3", "q3gelu", {{"mlp", "gelu"}});
  const fs::path parent = fresh_dir("export_hf_q3gelu");
  try {
    export_run(run.out, parent / "model");
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "cannot export as Hugging Face qwen3 (block = qwen3): mlp is gelu; Qwen3ForCausalLM needs swiglu");
  }
  EXPECT_TRUE(fs::is_empty(parent));
  // blocklab's own format takes it.
  ExportOptions own;
  own.format = hf::ExportFormat::Blocklab;
  EXPECT_EQ(export_run(run.out, parent / "model", own).format, hf::ExportFormat::Blocklab);
}

// --- gpt2 -----------------------------------------------------------------------------------------------

TEST(HfExport, Gpt2MatchesOurModel) {
  const RunConfig run = train("gpt2", "g2");
  const fs::path out = fresh_dir("export_hf_g2") / "model";
  const ExportResult r = export_run(run.out, out);
  EXPECT_EQ(r.format, hf::ExportFormat::GPT2);
  EXPECT_EQ(r.reason, "block = gpt2");

  const nlohmann::json c = read_json(out / "config.json");
  EXPECT_EQ(c["model_type"], "gpt2");
  EXPECT_EQ(c["architectures"], nlohmann::json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(c["n_embd"], 32);
  EXPECT_EQ(c["n_head"], 4);
  EXPECT_EQ(c["n_layer"], 2);
  EXPECT_EQ(c["n_positions"], 15);
  EXPECT_EQ(c["n_ctx"], 15);
  EXPECT_EQ(c["n_inner"], 128);
  EXPECT_EQ(c["vocab_size"], 16);
  EXPECT_EQ(c["layer_norm_epsilon"], 1e-5);
  EXPECT_EQ(c["activation_function"], "gelu_new");
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_TRUE(c["bos_token_id"].is_null());  // no special tokens (GPT2Config's 50256 is outside the vocabulary)

  // Conv1D weights stored (in, out): c_attn is our (3C, C) qkv weight transposed.
  const io::SafetensorsReader w((out / "model.safetensors").string());
  const io::SafetensorsReader ckpt((newest_checkpoint(run) / "model.safetensors").string());
  EXPECT_EQ(w.find("lm_head.weight"), nullptr);
  EXPECT_EQ(w.at("transformer.h.0.attn.c_attn.weight").shape, (std::vector<int64_t>{32, 96}));
  EXPECT_EQ(w.at("transformer.h.0.mlp.c_proj.weight").shape, (std::vector<int64_t>{128, 32}));
  const std::vector<float> qkv = ckpt.read_f32("blocks.0.attn.qkv.weight");
  const std::vector<float> c_attn = w.read_f32("transformer.h.0.attn.c_attn.weight");
  for (int o : {0, 17, 95})
    for (int i : {0, 5, 31}) EXPECT_EQ(c_attn[i * 96 + o], qkv[o * 32 + i]);

  expect_agreement(compare(run, newest_checkpoint(run), out), "gpt2 tied, gelu_tanh");
}

TEST(HfExport, SeedRunAsGpt2WithExactGeluAndUntiedHeadMatchesOurModel) {
  // The seed block (Pre-LN) is GPT-2's but for exact GELU and an untied head, both of which GPT2LMHeadModel
  // expresses (activation_function "gelu", tie_word_embeddings false); asked for with --format gpt2.
  const RunConfig run = train("seed", "seedg2");
  ExportOptions as_gpt2;
  as_gpt2.format = hf::ExportFormat::GPT2;
  const fs::path out = fresh_dir("export_hf_seedg2") / "model";
  const ExportResult r =
      export_and_compare(run, out, "seed as gpt2: gelu, untied", hf::ExportFormat::GPT2, as_gpt2);
  EXPECT_EQ(r.reason, "--format gpt2");
  const nlohmann::json c = read_json(out / "config.json");
  EXPECT_EQ(c["activation_function"], "gelu");
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(io::SafetensorsReader((out / "model.safetensors").string()).at("lm_head.weight").shape,
            (std::vector<int64_t>{16, 32}));
}

// --- seed and sd: blocklab's own format --------------------------------------------------------------------

TEST(HfExport, SeedAndSdRunsKeepBlocklabsFormat) {
  for (const std::string block : {"seed", "sd"}) {
    const RunConfig run = train(block, "own_" + block);
    const fs::path out = fresh_dir("export_hf_own_" + block) / "model";
    const ExportResult r = export_run(run.out, out);
    EXPECT_EQ(r.format, hf::ExportFormat::Blocklab) << block;
    EXPECT_EQ(r.reason, "block = " + block);
    // A Pre-LN seed block is GPT-2's with exact GELU and an untied head: --format gpt2 would take it.
    EXPECT_EQ(r.also_expressible, (block == "seed" ? std::vector<hf::ExportFormat>{hf::ExportFormat::GPT2}
                                                   : std::vector<hf::ExportFormat>{}));

    // config.json is the run's resolved config (but where it ran: out and threads, which a checkpoint does not
    // keep); model.safetensors the checkpoint's tensors, same names and bytes.
    RunConfig back;
    apply_json(back, read_json(out / "config.json"));
    resolve(back);
    EXPECT_FALSE(read_json(out / "config.json").contains("out"));
    back.out = run.out;
    back.threads = run.threads;
    EXPECT_EQ(to_json(back), to_json(run)) << block;
    const io::SafetensorsReader w((out / "model.safetensors").string());
    const io::SafetensorsReader ckpt((newest_checkpoint(run) / "model.safetensors").string());
    EXPECT_EQ(w.metadata().at("format"), "pt");
    EXPECT_EQ(w.metadata().at("step"), "30");
    ASSERT_EQ(w.tensors().size(), ckpt.tensors().size());
    for (const io::TensorEntry& t : ckpt.tensors()) {
      ASSERT_NE(w.find(t.name), nullptr) << t.name;
      EXPECT_EQ(w.at(t.name).shape, t.shape);
      EXPECT_EQ(w.read_f32(t.name), ckpt.read_f32(t.name)) << t.name;
    }
    // hf::Model does not take it (no model_type), with a clear error.
    EXPECT_THROW(hf::Model::load(out), Error);
  }
}

// --- what each format cannot express --------------------------------------------------------------------------

TEST(HfExport, RefusalsNameTheKey) {
  struct Case {
    std::string block;
    std::vector<std::pair<std::string, std::string>> keys;
    hf::ExportFormat format;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"qwen3", {{"mlp_bias", "true"}}, hf::ExportFormat::Qwen3, "mlp_bias is true"},
      {"qwen3", {{"qkv_bias", "true"}}, hf::ExportFormat::Qwen3, "qkv_bias is true and proj_bias false"},
      {"qwen3", {{"positions", "learned"}}, hf::ExportFormat::Qwen3, "positions is learned"},
      {"qwen3", {{"norm", "layernorm"}}, hf::ExportFormat::Qwen3, "norm is layernorm"},
      {"qwen3", {{"norm_placement", "post"}}, hf::ExportFormat::Qwen3, "norm_placement is post"},
      {"qwen3", {{"mlp", "geglu"}}, hf::ExportFormat::Qwen3, "mlp is geglu"},
      {"sd", {}, hf::ExportFormat::Qwen3, "cross_attention is true"},
      {"gpt2", {{"qkv", "separate"}}, hf::ExportFormat::GPT2, "qkv is separate"},
      {"gpt2", {{"norm", "rmsnorm"}}, hf::ExportFormat::GPT2, "norm is rmsnorm"},
      {"gpt2", {{"positions", "rope"}}, hf::ExportFormat::GPT2, "positions is rope"},
      {"gpt2", {{"kv_heads", "2"}}, hf::ExportFormat::GPT2, "kv_heads is 2"},
      {"gpt2", {{"head_dim", "16"}}, hf::ExportFormat::GPT2, "head_dim is 16"},
      {"gpt2", {{"mlp_bias", "false"}}, hf::ExportFormat::GPT2, "mlp_bias is false"},
      {"gpt2", {{"qkv_bias", "false"}}, hf::ExportFormat::GPT2, "qkv_bias is false"},
      {"gpt2", {{"proj_bias", "false"}}, hf::ExportFormat::GPT2, "proj_bias is false"},
      {"gpt2", {{"mlp", "swiglu"}}, hf::ExportFormat::GPT2, "mlp is swiglu"},
      {"gpt2", {{"norm_placement", "post"}}, hf::ExportFormat::GPT2, "norm_placement is post"},
      {"seed", {{"norm_placement", "post"}}, hf::ExportFormat::GPT2, "norm_placement is post"},
      {"sd", {}, hf::ExportFormat::GPT2, "cross_attention is true"},
      {"qwen3", {{"attn_gate", "true"}}, hf::ExportFormat::Qwen3, "attn_gate is true"},
      {"gpt2", {{"attn_gate", "true"}}, hf::ExportFormat::GPT2, "attn_gate is true"},
      {"gpt2", {{"norm", "derf"}}, hf::ExportFormat::GPT2, "norm is derf"},
      {"qwen3", {{"value_residual", "true"}}, hf::ExportFormat::Qwen3, "value_residual is true"},
  };
  for (const Case& k : cases) {
    const RunConfig run = small_run(k.block, "unused", k.keys);
    const std::string reason = "block = " + k.block;
    try {
      hf::check_exportable(run.model, k.format, reason);
      ADD_FAILURE() << k.block << " " << k.expected << ": not refused";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind(std::string("cannot export as Hugging Face ") + hf::export_format_name(k.format) + " (" +
                            reason + "): " + k.expected,
                        0),
                0u)
          << m;
    }
  }
  // The presets themselves pass their own format; seed and sd default to blocklab's.
  EXPECT_NO_THROW(hf::check_exportable(small_run("qwen3", "unused").model, hf::ExportFormat::Qwen3, ""));
  EXPECT_NO_THROW(hf::check_exportable(small_run("gpt2", "unused").model, hf::ExportFormat::GPT2, ""));
  EXPECT_EQ(hf::default_export_format(small_run("seed", "unused").model), hf::ExportFormat::Blocklab);
  EXPECT_EQ(hf::default_export_format(small_run("sd", "unused").model), hf::ExportFormat::Blocklab);
  EXPECT_EQ(hf::parse_export_format("gpt2"), hf::ExportFormat::GPT2);
  EXPECT_THROW(hf::parse_export_format("llama"), Error);
}

// --- run directories, checkpoints and the output directory ----------------------------------------------------

TEST(HfExport, RunWithoutWeightsOrDirectoryIsRefused) {
  const fs::path parent = fresh_dir("export_hf_noweights");
  try {
    export_run(parent / "missing", parent / "model");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no such run directory"), std::string::npos) << e.what();
  }
  const RunConfig run = train("qwen3", "noweights", {{"weights", "false"}}, 0);  // no checkpoint, no final weights
  EXPECT_FALSE(fs::exists(fs::path(run.out) / "model.safetensors"));
  try {
    export_run(run.out, parent / "model");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the run kept no weights (it was trained with --no-weights"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::is_empty(parent));
}

// A run without checkpoints exports its final weights (RUN/model.safetensors, written at the end of every run),
// bit for bit the trained parameters; with an older checkpoint beside them, the later final weights win.
TEST(HfExport, ExportsTheFinalWeightsOfARunWithoutCheckpoints) {
  const RunConfig run = train("qwen3", "final", {}, 0);
  const fs::path final_file = fs::path(run.out) / "model.safetensors";
  ASSERT_TRUE(fs::is_regular_file(final_file));
  const fs::path parent = fresh_dir("export_hf_final");
  const ExportResult r = export_run(run.out, parent / "model");
  EXPECT_EQ(r.checkpoint, final_file);
  EXPECT_EQ(r.step, run.steps);
  const io::SafetensorsReader ours(final_file.string()), theirs((parent / "model" / "model.safetensors").string());
  std::vector<float> a(ours.at("tok_emb.weight").numel()), b(a.size());
  ours.read(ours.at("tok_emb.weight"), std::span<float>(a));
  theirs.read(theirs.at("model.embed_tokens.weight"), std::span<float>(b));
  EXPECT_EQ(a, b);

  // A run checkpointed every 10 of its 30 steps, then extended to 40 steps: step_30 and the final weights of
  // step 40; the export takes step 40.
  RunConfig longer = small_run("qwen3", fresh_dir("export_run_final_longer"), {}, 30);
  train_run(longer, true);
  longer.steps += 10;
  longer.checkpoint_every = 0;
  resume_run(longer, find_resume_point(longer.out));
  const ExportResult later = export_run(longer.out, parent / "longer");
  EXPECT_EQ(later.step, longer.steps);
  EXPECT_EQ(later.checkpoint, fs::path(longer.out) / "model.safetensors");

  // A damaged final file is named, not exported.
  {
    std::fstream f(final_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x55');
  }
  try {
    export_run(run.out, parent / "damaged");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("damaged"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(parent / "damaged"));
}

TEST(HfExport, ChoosesACheckpointAndWritesTheOutputDirectoryAtomically) {
  const RunConfig run = train("gpt2", "ckpts", {}, 10);  // step_10, step_20, step_30
  const fs::path parent = fresh_dir("export_hf_ckpts"), out = parent / "model";

  ExportOptions older;
  older.checkpoint = "step_0000010";  // a name in RUN/checkpoints
  ExportResult r = export_run(run.out, out, older);
  EXPECT_EQ(r.step, 10);
  EXPECT_EQ(r.run_steps, 30);
  const fs::path step10 = fs::path(run.out) / "checkpoints" / "step_0000010";
  EXPECT_EQ(r.checkpoint, step10);
  expect_agreement(compare(run, step10, out), "gpt2 at step 10");

  // An existing, non-empty directory: refused without --force and left as it was.
  const std::string before = read_text(out / "config.json");
  try {
    export_run(run.out, out);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exists and is not empty"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_text(out / "config.json"), before);
  {
    std::ofstream(out / "stale.txt") << "old";
  }
  ExportOptions force;
  force.force = true;
  r = export_run(run.out, out, force);  // replaced whole: the newest checkpoint, no stale file
  EXPECT_EQ(r.step, 30);
  EXPECT_FALSE(fs::exists(out / "stale.txt"));
  expect_no_leftovers(parent, "model");
  expect_agreement(compare(run, newest_checkpoint(run), out), "gpt2 at step 30 (--force)");

  // An existing empty directory is fine; a trailing slash names the same directory.
  const fs::path empty = parent / "empty";
  fs::create_directory(empty);
  EXPECT_EQ(export_run(run.out, empty.string() + "/").directory, empty);
  EXPECT_TRUE(fs::is_regular_file(empty / "model.safetensors"));

  // Never over the run itself or its checkpoints, even with --force.
  EXPECT_THROW(export_run(run.out, run.out, force), Error);
  EXPECT_THROW(export_run(run.out, fs::path(run.out) / "checkpoints" / "x", force), Error);
  EXPECT_TRUE(fs::is_regular_file(fs::path(run.out) / "config.json"));
  EXPECT_EQ(io::list_checkpoints(run.out).size(), 3u);

  ExportOptions missing;
  missing.checkpoint = "step_0000099";
  EXPECT_THROW(export_run(run.out, parent / "other", missing), Error);
}

// --- the command ------------------------------------------------------------------------------------------

namespace {

// The path in single quotes for the shell (built by appending: GCC 12 misreports "'" + s + "'" under -Wrestrict).
std::string q(const fs::path& p) {
  std::string s(1, '\'');
  s += p.string();
  s += '\'';
  return s;
}

void expect_clean_error(const blocklab::testing::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.rfind("blocklab: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace

// Every finished run keeps its final weights: a copy-task run trained with no weight or checkpoint flags
// exports and samples; with --no-weights it writes no model.safetensors and export says so in one line.
TEST(CliExport, EveryFinishedRunExportsAndSamplesUnlessNoWeights) {
  const fs::path dir = fresh_dir("export_cli_every_run");
  const std::string model = " --layers 2 --width 32 --heads 4 --vocab 16 --copy-len 4 --batch 4 --steps 6 --threads 1";
  auto r = run_cli("train" + model + " --out " + q(dir / "R"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("model.safetensors"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir / "R" / "checkpoints"));
  const io::SafetensorsReader weights((dir / "R" / "model.safetensors").string());
  EXPECT_TRUE(weights.verify_checksums());  // checksummed like a checkpoint's weights
  EXPECT_EQ(weights.metadata().at("step"), "6");

  r = run_cli("export " + q(dir / "R") + " --out " + q(dir / "HF"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("step 6"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_regular_file(dir / "HF" / "config.json"));
  EXPECT_TRUE(fs::is_regular_file(dir / "HF" / "model.safetensors"));

  r = run_cli("sample " + q(dir / "R") + " --prompt-ids 1,2,3,4 --tokens 4 --temperature 0 --threads 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(r.out.empty());

  r = run_cli("train" + model + " --no-weights --out " + q(dir / "N"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(dir / "N" / "summary.json"));
  EXPECT_FALSE(fs::exists(dir / "N" / "model.safetensors"));
  expect_clean_error(run_cli("export " + q(dir / "N") + " --out " + q(dir / "HF2")), "the run kept no weights");
  EXPECT_FALSE(fs::exists(dir / "HF2"));
}

TEST(CliExport, ExportThenInspectAndProbe) {
  for (const std::string block : {"qwen3", "gpt2"}) {
    const RunConfig run = train(block, "cli_" + block);
    const fs::path parent = fresh_dir("export_cli_" + block), out = parent / "hf";
    auto r = run_cli("export " + q(run.out) + " --out " + q(out));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("step 30 (block = " + block + ")"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(block == "qwen3" ? "Qwen3ForCausalLM" : "GPT2LMHeadModel"), std::string::npos) << r.out;

    r = run_cli("inspect " + q(out));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("model_type       " + block), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("every tensor present with the expected shape"), std::string::npos) << r.out;

    r = run_cli("probe logits --model " + q(out) + " --tokens 1,2,3,4,5 --top 3 --threads 1");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("next token after position 4"), std::string::npos) << r.out;

    r = run_cli("probe residual --model " + q(out) + " --tokens 3,1,4,1,5,9 --no-plot --threads 1 --out " +
                q(parent / "res"));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(fs::is_regular_file(parent / "res" / "residual.csv"));

    // Bad input: one line on stderr, exit 2.
    expect_clean_error(run_cli("export " + q(run.out) + " --out " + q(out)), "exists and is not empty");
    r = run_cli("export " + q(run.out) + " --out " + q(out) + " --force");
    EXPECT_EQ(r.status, 0) << r.err;
  }
  const fs::path parent = fresh_dir("export_cli_bad");
  expect_clean_error(run_cli("export " + q(parent / "nope") + " --out " + q(parent / "hf")), "no such run directory");
  const RunConfig bare = train("gpt2", "cli_bare", {{"weights", "false"}}, 0);
  expect_clean_error(run_cli("export " + q(bare.out) + " --out " + q(parent / "hf")), "--no-weights");
  const RunConfig gelu = train("qwen3", "cli_gelu", {{"mlp", "gelu"}});
  expect_clean_error(run_cli("export " + q(gelu.out) + " --out " + q(parent / "hf")),
                     "cannot export as Hugging Face qwen3 (block = qwen3): mlp is gelu");
  expect_clean_error(run_cli("export " + q(gelu.out) + " --out " + q(parent / "hf") + " --format llama"),
                     "unknown export format 'llama'");
  EXPECT_TRUE(fs::is_empty(parent));
}

TEST(CliExport, SeedRunSaysItKeepsBlocklabsFormat) {
  const RunConfig run = train("seed", "cli_seed");
  const fs::path out = fresh_dir("export_cli_seed") / "hf";
  const auto r = run_cli("export " + q(run.out) + " --out " + q(out));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("format: blocklab's own"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(block = seed)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("also expressible as Hugging Face gpt2: add --format gpt2"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_regular_file(out / "model.safetensors"));
  EXPECT_EQ(run_cli("inspect " + q(out / "model.safetensors")).status, 0);
}
