// HF stacked experts (gpt-oss): one expert read out of gate_up_proj / down_proj in
// bf16 (transposed, gate and up interleaved) and MXFP4 (*_blocks / *_scales, repacked
// to ggml blocks), and the refusals that name the tensor.
#include "engine/stacked_experts.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "common/quant.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

// FP4 e2m1 values of HF's MXFP4 nibbles.
constexpr float kFp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

TEST(StackedExpertsTest, Mxfp4RepackDequantizesToTheHfValuesAndRoundTrips) {
  std::mt19937 rng(3);
  const int64_t nb = 4;
  std::vector<uint8_t> blocks(16 * nb), scales(nb), ggml(17 * nb), b2(16 * nb), s2(nb);
  for (auto& b : blocks) b = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < nb; ++i) scales[i] = static_cast<uint8_t>(118 + 3 * i);
  RepackMxfp4Row(blocks.data(), scales.data(), nb, ggml.data());
  std::vector<float> got(32 * nb);
  DequantizeRow(ggml.data(), DType::kMXFP4, 32 * nb, got.data());
  for (int64_t b = 0; b < nb; ++b) {
    for (int i = 0; i < 32; ++i) {
      const uint8_t byte = blocks[16 * b + i / 2];
      const int nib = i % 2 ? byte >> 4 : byte & 0xF;  // element 2j low, 2j + 1 high
      const float want = kFp4[nib] * std::ldexp(1.0f, scales[b] - 127);
      ASSERT_EQ(got[32 * b + i], want) << "block " << b << " element " << i;
    }
  }
  UnpackMxfp4Row(ggml.data(), nb, b2.data(), s2.data());
  EXPECT_EQ(b2, blocks);
  EXPECT_EQ(s2, scales);
}

class StackedFileTest : public ::testing::Test {
 protected:
  static constexpr int64_t kE = 3, kInter = 4, kHidden = 64;
  testing::TempDir dir_;
  // gate_up [E, hidden, 2 inter] f32 (x @ W, interleaved columns) with value
  // 1000 e + 10 c + j at [e, c, j]; MXFP4 down blocks/scales; a bias [E, 2 inter].
  void Write(int64_t scale_rows) {
    std::vector<SafetensorsTensorToWrite> t;
    t.push_back({"gu", DType::kF32, {kE, kHidden, 2 * kInter}, [](uint8_t* dst) {
                   auto* f = reinterpret_cast<float*>(dst);
                   for (int64_t e = 0; e < kE; ++e)
                     for (int64_t c = 0; c < kHidden; ++c)
                       for (int64_t j = 0; j < 2 * kInter; ++j)
                         f[(e * kHidden + c) * 2 * kInter + j] = static_cast<float>(1000 * e + 10 * c + j);
                 }});
    t.push_back({"gu_bias", DType::kF32, {kE, 2 * kInter}, [](uint8_t* dst) {
                   auto* f = reinterpret_cast<float*>(dst);
                   for (int64_t i = 0; i < kE * 2 * kInter; ++i) f[i] = static_cast<float>(i);
                 }});
    t.push_back({"down_blocks", DType::kF32, {kE, kHidden, 1, 16},
                 [](uint8_t* dst) {
                   for (int64_t i = 0; i < kE * kHidden * 16; ++i) dst[i] = static_cast<uint8_t>(i * 7);
                 },
                 true});
    t.push_back({"down_scales", DType::kF32, {kE, scale_rows, 1},
                 [scale_rows](uint8_t* dst) {
                   for (int64_t i = 0; i < kE * scale_rows; ++i) dst[i] = static_cast<uint8_t>(120 + i % 9);
                 },
                 true});
    ASSERT_TRUE(WriteSafetensors(dir_.path() + "/model.safetensors", t, {}).ok());
  }
  WeightSpec Spec(const std::string& name, std::vector<int64_t> shape, int64_t e, int64_t offset, int64_t stored,
                  int64_t step) {
    WeightSpec s{name, std::move(shape), WeightRole::kExpertGate, 0, e, offset, stored};
    s.stacked = true;
    s.row_step = step;
    return s;
  }
};

TEST_F(StackedFileTest, DenseTransposedInterleavedAndMxfp4) {
  Write(kHidden);
  auto store = WeightStore::Open(dir_.path());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<std::unique_ptr<uint8_t[]>> owned;
  // Expert 2's up rows (odd columns): up[r][c] = gu[2][c][2r + 1].
  auto up = ReadStackedExpert(**store, Spec("gu", {kInter, kHidden}, 2, 1, 2 * kInter, 2), kE, &owned);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  ASSERT_EQ(up->dtype, DType::kF32);
  const auto* f = static_cast<const float*>(up->data);
  for (int64_t r = 0; r < kInter; ++r)
    for (int64_t c = 0; c < kHidden; ++c) ASSERT_EQ(f[r * kHidden + c], 2000 + 10 * c + 2 * r + 1) << r << "," << c;
  auto bias = ReadStackedExpert(**store, Spec("gu_bias", {kInter}, 1, 0, 2 * kInter, 2), kE, &owned);
  ASSERT_TRUE(bias.ok());
  const auto* b = static_cast<const float*>(bias->data);
  for (int64_t r = 0; r < kInter; ++r) EXPECT_EQ(b[r], 8 + 2 * r);  // expert 1's even entries
  auto down = ReadStackedExpert(**store, Spec("down", {kHidden, 32}, 1, 0, kHidden, 1), kE, &owned);
  ASSERT_TRUE(down.ok()) << down.status().ToString();
  ASSERT_EQ(down->dtype, DType::kMXFP4);
  ASSERT_EQ(down->bytes, kHidden * 17);
  const SafetensorsTensor* blocks = (*store)->Find("down_blocks");
  const SafetensorsTensor* scales = (*store)->Find("down_scales");
  std::vector<uint8_t> want(17);
  RepackMxfp4Row(blocks->data + (kHidden + 5) * 16, scales->data + kHidden + 5, 1, want.data());
  EXPECT_EQ(0, std::memcmp(static_cast<const uint8_t*>(down->data) + 5 * 17, want.data(), 17));  // row 5
}

TEST_F(StackedFileTest, RefusalsNameTheTensor) {
  Write(kHidden - 1);  // scales of the wrong shape
  auto store = WeightStore::Open(dir_.path());
  ASSERT_TRUE(store.ok());
  std::vector<std::unique_ptr<uint8_t[]>> owned;
  auto down = ReadStackedExpert(**store, Spec("down", {kHidden, 32}, 0, 0, kHidden, 1), kE, &owned);
  ASSERT_FALSE(down.ok());
  EXPECT_NE(down.status().message().find("'down_scales' has shape [3, 63, 1], expected [3, 64, 1]"), std::string::npos)
      << down.status().ToString();
  auto missing = ReadStackedExpert(**store, Spec("nope", {kHidden, 32}, 0, 0, kHidden, 1), kE, &owned);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'nope_blocks'"), std::string::npos) << missing.status().ToString();
  auto shape = ReadStackedExpert(**store, Spec("gu", {kInter, 32}, 0, 0, 2 * kInter, 2), kE, &owned);
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.status().message().find("'gu' has shape"), std::string::npos) << shape.status().ToString();
}

}  // namespace
}  // namespace tessera
