// The backend registry: lookups by device name and the messages --device
// gives for a device this binary was linked without, or none known.
#include "runtime/backend_registry.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(BackendRegistryTest, CpuIsLinkedAndUnknownDevicesAreNamed) {
  EXPECT_TRUE(HaveBackend("cpu"));
  StatusOr<std::unique_ptr<Backend>> b = MakeBackend("tpu", 1, {});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(), "--device: unknown device 'tpu' (expected cpu or cuda)");
  b = MakeBackend("cpu", 1, {});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
}

TEST(BackendRegistryTest, AKnownDeviceNotLinkedSaysHowToGetIt) {
  BackendRegistry empty;  // a binary linked without any backend
  StatusOr<std::unique_ptr<Backend>> b = empty.Make("cuda", {});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(b.status().message(),
            "--device cuda: this tessera was built without CUDA (configure with nvcc available, "
            "-DTESSERA_CUDA=ON); use --device cpu");
  empty.Register("cuda", [](const BackendOptions& o) -> StatusOr<std::unique_ptr<Backend>> {
    return MakeCpuBackend({o.num_threads});  // a stand-in
  });
  EXPECT_TRUE(empty.Has("cuda"));
  EXPECT_TRUE(empty.Make("cuda", {}).ok());
}

}  // namespace
}  // namespace tessera
