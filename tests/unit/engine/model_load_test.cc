// Model::Load on broken checkpoints: every failure is a Status naming the file
// and the tensor or field at fault, never a crash.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model.h"
#include "engine/safetensors.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::MakeTinyModel;
using testing::TempDir;

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

void WriteJson(const std::string& path, const json& j) { std::ofstream(path) << j.dump(); }

class ModelLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeTinyModel(dir_.path(), "qwen3", DType::kBF16);
    backend_ = MakeCpuBackend({1});
  }
  Status Load() {
    auto m = Model::Load(dir_.path(), backend_.get());
    return m.ok() ? Status::Ok() : m.status();
  }
  std::string config_path() const { return dir_.path() + "/config.json"; }
  TempDir dir_;
  std::unique_ptr<Backend> backend_;
};

void ExpectMentions(const Status& s, StatusCode code, const std::vector<std::string>& words) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (const auto& w : words) EXPECT_NE(s.message().find(w), std::string::npos) << s.message() << " lacks " << w;
}

TEST_F(ModelLoadTest, LoadsValidCheckpoint) { EXPECT_TRUE(Load().ok()); }

TEST_F(ModelLoadTest, ShapeMismatchNamesTensorAndFile) {
  json c = ReadJson(config_path());
  c["intermediate_size"] = 256;
  WriteJson(config_path(), c);
  ExpectMentions(Load(), StatusCode::kInvalidArgument,
                 {"model.safetensors", "model.layers.0.mlp.gate_proj.weight", "[128, 64]", "[256, 64]"});
}

TEST_F(ModelLoadTest, MissingTensorNamesTensor) {
  json c = ReadJson(config_path());
  c["tie_word_embeddings"] = false;  // now lm_head.weight is required and absent
  WriteJson(config_path(), c);
  ExpectMentions(Load(), StatusCode::kNotFound, {"lm_head.weight"});
}

TEST_F(ModelLoadTest, ExtraLayerMissing) {
  json c = ReadJson(config_path());
  c["num_hidden_layers"] = 3;
  WriteJson(config_path(), c);
  ExpectMentions(Load(), StatusCode::kNotFound, {"model.layers.2."});
}

TEST_F(ModelLoadTest, TruncatedSafetensorsIsDataLoss) {
  const std::string st = dir_.path() + "/model.safetensors";
  fs::resize_file(st, fs::file_size(st) - 1000);
  ExpectMentions(Load(), StatusCode::kDataLoss, {"model.safetensors"});
}

TEST_F(ModelLoadTest, TruncatedHeaderIsDataLoss) {
  const std::string st = dir_.path() + "/model.safetensors";
  fs::resize_file(st, 20);
  ExpectMentions(Load(), StatusCode::kDataLoss, {"model.safetensors"});
}

TEST_F(ModelLoadTest, MissingWeightsAndConfig) {
  fs::remove(dir_.path() + "/model.safetensors");
  ExpectMentions(Load(), StatusCode::kNotFound, {dir_.path()});
  fs::remove(config_path());
  ExpectMentions(Load(), StatusCode::kNotFound, {"config.json"});
}

TEST_F(ModelLoadTest, UnknownArchitectureNamesIt) {
  json c = ReadJson(config_path());
  c["architectures"] = {"GPTNeoXForCausalLM"};
  WriteJson(config_path(), c);
  ExpectMentions(Load(), StatusCode::kUnimplemented, {"config.json", "GPTNeoXForCausalLM"});
}

TEST_F(ModelLoadTest, MalformedConfigNamesField) {
  json c = ReadJson(config_path());
  c["hidden_size"] = "big";
  WriteJson(config_path(), c);
  ExpectMentions(Load(), StatusCode::kInvalidArgument, {"config.json", "hidden_size"});
  std::ofstream(config_path()) << "{\"architectures\": [";
  ExpectMentions(Load(), StatusCode::kInvalidArgument, {"config.json"});
}

// Forwards every required op to the CPU backend but keeps Backend's CheckOp, which
// refuses the optional ops (BackendOp): a backend that lacks them.
class WithoutOptionalOps final : public Backend {
 public:
  explicit WithoutOptionalOps(std::unique_ptr<Backend> b) : b_(std::move(b)) {}
  std::string name() const override { return "no-optional-ops"; }
  StatusOr<WeightView> UploadWeight(const WeightView& w) override { return b_->UploadWeight(w); }
  StatusOr<std::shared_ptr<void>> Allocate(int64_t n) override { return b_->Allocate(n); }
  void CopyFromHost(void* d, const void* s, int64_t n) override { b_->CopyFromHost(d, s, n); }
  void CopyToHost(void* d, const void* s, int64_t n) override { b_->CopyToHost(d, s, n); }
  void CopyWithinDevice(void* d, const void* s, int64_t n) override { b_->CopyWithinDevice(d, s, n); }
  void GatherRows(const float* s, int64_t c, const int32_t* i, int64_t n, float* d) override {
    b_->GatherRows(s, c, i, n, d);
  }
  void Embedding(const WeightView& t, const int32_t* ids, int64_t n, float* o) override { b_->Embedding(t, ids, n, o); }
  void Linear(const float* x, int64_t m, const WeightView& w, const float* bias, float* y, int64_t ldy) override {
    b_->Linear(x, m, w, bias, y, ldy);
  }
  void RmsNorm(const float* x, const float* w, int64_t r, int64_t d, float e, float* o) override {
    b_->RmsNorm(x, w, r, d, e, o);
  }
  void AddRmsNorm(float* res, const float* x, const float* w, int64_t r, int64_t d, float e, float* o) override {
    b_->AddRmsNorm(res, x, w, r, d, e, o);
  }
  void SiluMul(const float* gu, int64_t r, int64_t i, float* o) override { b_->SiluMul(gu, r, i, o); }
  void Rope(float* x, int64_t t, int64_t h, int64_t d, int64_t s, int64_t rot, const int32_t* p,
            const float* cs) override {
    b_->Rope(x, t, h, d, s, rot, p, cs);
  }
  void WriteKv(const float* k, int64_t ks, const float* v, int64_t vs, int64_t t, int64_t h, int64_t d,
               const int64_t* slots, KvLayerView c) override {
    b_->WriteKv(k, ks, v, vs, t, h, d, slots, c);
  }
  void Attention(const float* q, int64_t qs, KvLayerView c, const AttentionParams& p, float* o) override {
    b_->Attention(q, qs, c, p, o);
  }

 private:
  std::unique_ptr<Backend> b_;
};

TEST(GemmaLoadTest, BackendWithoutTheOpsRefusesGemmaByOpName) {
  TempDir dir;
  MakeTinyModel(dir.path(), "gemma2", DType::kF32, {"vocab_size=32768"});  // 262k rows prove nothing here
  WithoutOptionalOps backend(MakeCpuBackend({1}));
  auto m = Model::Load(dir.path(), &backend);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("Gemma2ForCausalLM needs the GeluTanhMul op"), std::string::npos)
      << m.status().ToString();
  // The same backend runs the Llama-style decoder, which needs none of them.
  TempDir llama;
  MakeTinyModel(llama.path(), "qwen3", DType::kF32);
  EXPECT_TRUE(Model::Load(llama.path(), &backend).ok());
}

// gpt-oss on a backend without its ops (as the CUDA backend today): refused at load
// naming the first one it lacks, never run without its sinks.
TEST(GptOssLoadTest, BackendWithoutTheOpsRefusesGptOssByOpName) {
  TempDir dir;
  MakeTinyModel(dir.path(), "gpt_oss", DType::kF32, {"vocab_size=32768"});
  WithoutOptionalOps backend(MakeCpuBackend({1}));
  auto m = Model::Load(dir.path(), &backend);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("GptOssForCausalLM needs the attention sinks op"), std::string::npos)
      << m.status().ToString();
}

// Gemma 3 with its vision tower: config under text_config, decoder tensors under
// language_model.model. (as published) or model.language_model. (as transformers >= 4.52
// saves it), vision tensors beside them. The decoder loads (the tower is skipped) and
// computes what the text-only checkpoint computes.
TEST(GemmaLoadTest, VisionCheckpointLoadsItsTextDecoder) {
  TempDir text, published, resaved;
  MakeTinyModel(text.path(), "gemma3", DType::kBF16, {"vocab_size=32768"});
  auto store = WeightStore::Open(text.path());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  json c = ReadJson(text.path() + "/config.json");
  json top = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"eos_token_id", c["eos_token_id"]},
              {"torch_dtype", c["torch_dtype"]}, {"vision_config", {{"hidden_size", 4}}}};
  c.erase("architectures");
  top["text_config"] = c;
  for (const auto& [dir, prefix] : {std::pair{published.path(), std::string("language_model.model.")},
                                    std::pair{resaved.path(), std::string("model.language_model.")}}) {
    std::vector<SafetensorsTensorToWrite> tensors;
    for (const std::string& name : (*store)->Names()) {  // "model.X" -> prefix + "X"
      const SafetensorsTensor* t = (*store)->Find(name);
      tensors.push_back({prefix + name.substr(6), *t->dtype, t->shape,
                         [t](uint8_t* dst) { std::memcpy(dst, t->data, t->nbytes()); }});
    }
    tensors.push_back({"vision_tower.vision_model.embeddings.patch_embedding.weight", DType::kBF16, {4, 3},
                       [](uint8_t* dst) { std::memset(dst, 0, 24); }});
    ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", tensors, {}).ok());
    WriteJson(dir + "/config.json", top);
  }
  auto backend = MakeCpuBackend({1});
  auto logits = [&](const std::string& path) {
    auto m = Model::Load(path, backend.get());
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok()) return std::vector<float>{};
    EXPECT_EQ((*m)->config().has_vision_tower, path != text.path());
    auto cache = (*m)->CreateKvCache(2, 16);
    ForwardBatch b;
    b.token_ids = {2, 100, 7000};
    b.positions = {0, 1, 2};
    b.token_to_seq = {0, 0, 0};
    b.slot_mapping = {0, 1, 2};
    b.block_tables = {0};
    b.num_seqs = 1;
    b.max_blocks_per_seq = 1;
    b.logits_indices = {2};
    std::vector<float> out;
    EXPECT_TRUE((*m)->Forward(b, cache->get(), &out).ok());
    return out;
  };
  const std::vector<float> want = logits(text.path());
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(logits(published.path()) == want);
  EXPECT_TRUE(logits(resaved.path()) == want);
}

TEST_F(ModelLoadTest, ForwardRejectsBadBatch) {
  auto m = Model::Load(dir_.path(), backend_.get());
  ASSERT_TRUE(m.ok());
  auto cache = (*m)->CreateKvCache(4, 16);
  ASSERT_TRUE(cache.ok());
  ForwardBatch b;
  b.token_ids = {1, 2};
  b.positions = {0, 1};
  b.token_to_seq = {0, 0};
  b.slot_mapping = {0, 1};
  b.block_tables = {0};
  b.num_seqs = 1;
  b.max_blocks_per_seq = 1;
  b.logits_indices = {1};
  std::vector<float> logits;
  EXPECT_TRUE((*m)->Forward(b, cache->get(), &logits).ok());
  ForwardBatch bad = b;
  bad.token_ids[0] = 1 << 30;
  ExpectMentions((*m)->Forward(bad, cache->get(), &logits), StatusCode::kInvalidArgument, {"token id"});
  bad = b;
  bad.slot_mapping[1] = 40;
  ExpectMentions((*m)->Forward(bad, cache->get(), &logits), StatusCode::kInvalidArgument, {"slot_mapping"});
  bad = b;
  bad.block_tables = {9};
  ExpectMentions((*m)->Forward(bad, cache->get(), &logits), StatusCode::kInvalidArgument, {"block id"});
  bad = b;
  bad.positions[1] = 16;
  ExpectMentions((*m)->Forward(bad, cache->get(), &logits), StatusCode::kInvalidArgument, {"position"});
  bad = b;
  bad.logits_indices = {2};
  ExpectMentions((*m)->Forward(bad, cache->get(), &logits), StatusCode::kInvalidArgument, {"logits index"});
}

}  // namespace
}  // namespace tessera
