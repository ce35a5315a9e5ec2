// cuBLAS is opened on first use (kernels/cuda/cublas_loader.cc), not linked. These run without
// a GPU too: the library loads and every entry point resolves whether or not a device exists,
// and a process maps it only once a handle is asked for.
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include <cublas_v2.h>

#include "kernels/cuda/cublas_loader.h"

namespace tessera {
namespace {

[[maybe_unused]] bool MapsContain(const std::string& name) {
  std::ifstream f("/proc/self/maps");
  std::stringstream s;
  s << f.rdbuf();
  return s.str().find(name) != std::string::npos;
}

TEST(CublasLoader, MappedOnlyOnFirstUseAndEveryEntryPointResolves) {
#if defined(TESSERA_CUDA_EMU)
  GTEST_SKIP() << "the emulator links its own reference cuBLAS: nothing is loaded";
#else
  // ctest runs each test in its own process; in a whole-binary run another test may have
  // created a handle first, and only the second half applies.
  if (testing::UnitTest::GetInstance()->test_to_run_count() == 1) {
    EXPECT_FALSE(MapsContain("libcublas")) << "cuBLAS was mapped before any handle was created";
  }
  cublasHandle_t h = nullptr;
  const cublasStatus_t s = cublasCreate(&h);  // no device here: an error status, not a crash
  EXPECT_EQ(kernels::cuda::CublasLoadError(), nullptr) << kernels::cuda::CublasLoadError();
  EXPECT_TRUE(MapsContain("libcublasLt"));
  EXPECT_NE(std::string(cublasGetStatusString(s)), "cuBLAS not loaded");
  if (s == CUBLAS_STATUS_SUCCESS) {
    EXPECT_EQ(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
  }
#endif
}

}  // namespace
}  // namespace tessera
