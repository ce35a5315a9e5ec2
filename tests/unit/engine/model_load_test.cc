// Model::Load on broken checkpoints: every failure is a Status naming the file
// and the tensor or field at fault, never a crash.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model.h"
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
