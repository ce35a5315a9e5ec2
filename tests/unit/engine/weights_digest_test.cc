#include "engine/weights_digest.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "engine/safetensors.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// One F32 tensor per name, every element `value`.
void Write(const std::string& path, const std::vector<std::pair<std::string, float>>& tensors) {
  std::vector<SafetensorsTensorToWrite> w;
  for (const auto& [name, value] : tensors) {
    const float v = value;
    w.push_back({name, DType::kF32, {2, 2}, [v](uint8_t* dst) {
                   for (int i = 0; i < 4; ++i) std::memcpy(dst + 4 * i, &v, 4);
                 }});
  }
  ASSERT_TRUE(WriteSafetensors(path, w, {}).ok());
}

WeightsDigestOptions NoCache() {
  WeightsDigestOptions o;
  o.use_cache = false;
  return o;
}

WeightsDigestOptions FallbackTo(const std::string& dir) {
  WeightsDigestOptions o;
  o.fallback_cache_dir = dir;
  return o;
}

TEST(WeightsDigest, TensorBytesInNameOrderWhateverTheFileOrder) {
  testing::TempDir a, b;
  Write(a.path() + "/model.safetensors", {{"x", 1.0f}, {"y", 2.0f}});
  Write(b.path() + "/model.safetensors", {{"y", 2.0f}, {"x", 1.0f}});
  auto da = ComputeWeightsDigest(a.path(), NoCache());
  auto db = ComputeWeightsDigest(b.path(), NoCache());
  ASSERT_TRUE(da.ok() && db.ok()) << da.status().ToString();
  EXPECT_EQ(da->digest, db->digest);
  Write(b.path() + "/model.safetensors", {{"y", 2.0f}, {"x", 1.5f}});  // one value changed
  auto dc = ComputeWeightsDigest(b.path(), NoCache());
  ASSERT_TRUE(dc.ok());
  EXPECT_NE(da->digest, dc->digest);
  Write(b.path() + "/model.safetensors", {{"y", 2.0f}, {"z", 1.0f}});  // one name changed
  auto dd = ComputeWeightsDigest(b.path(), NoCache());
  ASSERT_TRUE(dd.ok());
  EXPECT_NE(da->digest, dd->digest);
}

TEST(WeightsDigest, CachedBesideTheModelKeyedBySizeAndMtime) {
  testing::TempDir a;
  Write(a.path() + "/model.safetensors", {{"x", 1.0f}});
  auto first = ComputeWeightsDigest(a.path());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->from_cache);
  EXPECT_EQ(first->cache_path, a.path() + "/.tessera-weights.sha256.json");
  auto second = ComputeWeightsDigest(a.path());
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->digest, first->digest);
  // Rewritten weights (new mtime): the cache no longer applies.
  Write(a.path() + "/model.safetensors", {{"x", 3.0f}});
  struct timespec ts[2] = {{0, UTIME_NOW}, {1, 0}};  // an mtime surely different from the first write's
  ASSERT_EQ(::utimensat(AT_FDCWD, (a.path() + "/model.safetensors").c_str(), ts, 0), 0);
  auto third = ComputeWeightsDigest(a.path());
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->from_cache);
  EXPECT_NE(third->digest, first->digest);
}

TEST(WeightsDigest, UnwritableBesideUsesTheFallback) {
  testing::TempDir a, cache;
  Write(a.path() + "/model.safetensors", {{"x", 1.0f}});
  // A directory where the cache file would go: nobody (root included) can rename a file onto it.
  fs::create_directory(a.path() + "/.tessera-weights.sha256.json");
  auto first = ComputeWeightsDigest(a.path(), FallbackTo(cache.path() + "/d"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->cache_path.rfind(cache.path() + "/d/", 0), 0u) << first->cache_path;
  auto second = ComputeWeightsDigest(a.path(), FallbackTo(cache.path() + "/d"));
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->digest, first->digest);
}

}  // namespace
}  // namespace tessera
