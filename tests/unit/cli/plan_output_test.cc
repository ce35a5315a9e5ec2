// What `tessera plan` writes (cli/plan_output.h): its serve.toml read back by
// serve's own --config reader gives the planned settings, and keeps the base
// file's other settings.
#include "cli/plan_output.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "cli/serve_flags.h"

namespace tessera {
namespace {

TEST(PlanOutputTest, ServeTomlRoundTripsThroughServesReader) {
  const std::string base =
      "# a comment\nmodel = \"/models/model\"\nport = 8123\nmax-num-seqs = 64   # base\nmax-step-ms = 250\n";
  const sim::PlanCandidate plan{2, 4, 128, 8192, 50, 0};
  const std::string toml = PlannedServeToml(base, plan, 300, "planned\nsecond line");
  EXPECT_EQ(toml.rfind("# planned\n# second line\n", 0), 0u) << toml;
  const std::string dir = ::testing::TempDir() + "/plan_output_test_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteTextFile(dir + "/serve.toml", toml).ok());
  CLI::App app("serve");
  ServeFlags f;
  AddServeFlags(&app, &f);
  const Status s = ApplyServeConfigFile(&app, dir + "/serve.toml");
  ASSERT_TRUE(s.ok()) << s.ToString() << "\n" << toml;
  EXPECT_EQ(f.model, "/models/model");
  EXPECT_EQ(f.port, 8123);
  EXPECT_EQ(f.max_num_seqs, 128);
  EXPECT_EQ(f.max_num_batched_tokens, 8192);
  EXPECT_EQ(f.max_step_ms, 50);
  EXPECT_EQ(f.tensor_parallel_size, 2);
  EXPECT_EQ(f.max_pending_requests, 300);

  OverlayOptions o;
  o.base_relative = "../../deploy/k8s/overlays/gpu";
  ASSERT_TRUE(WriteKustomizeOverlay(dir + "/k8s", plan, toml, o).ok());
  std::ifstream patch(dir + "/k8s/plan.yaml");
  const std::string text((std::istreambuf_iterator<char>(patch)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("replicas: 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("nvidia.com/gpu: 2\n"), std::string::npos) << text;
  // PD: the disaggregated overlay's two pools, 1 prefill and 3 decode.
  o.gpus = false;
  ASSERT_TRUE(WriteKustomizeOverlay(dir + "/pd", {1, 4, 8, 2048, 0, 1}, toml, o).ok());
  std::ifstream pd(dir + "/pd/plan.yaml");
  const std::string pd_text((std::istreambuf_iterator<char>(pd)), std::istreambuf_iterator<char>());
  EXPECT_NE(pd_text.find("name: tessera-prefill\nspec:\n  replicas: 1\n"), std::string::npos) << pd_text;
  EXPECT_NE(pd_text.find("name: tessera-decode\nspec:\n  replicas: 3\n"), std::string::npos) << pd_text;
  EXPECT_EQ(pd_text.find("nvidia.com/gpu"), std::string::npos) << pd_text;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
