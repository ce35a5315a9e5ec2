#include "receipt/build_info.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "receipt/receipt.h"

// Set by CMake for this file only (CMakeLists.txt), so a new commit rebuilds one object.
#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif
#ifndef TESSERA_GIT_COMMIT
#define TESSERA_GIT_COMMIT "unknown"
#endif
#ifndef TESSERA_BUILD_TYPE
#define TESSERA_BUILD_TYPE "unknown"
#endif
#ifndef TESSERA_CXX_FLAGS
#define TESSERA_CXX_FLAGS ""
#endif

namespace tessera::receipt {

nlohmann::json EngineBuildInfo() {
  nlohmann::json isa = nlohmann::json::array();
#if defined(__x86_64__)
  isa.push_back("x86_64");
#elif defined(__aarch64__)
  isa.push_back("aarch64");
#endif
#ifdef __AVX2__
  isa.push_back("avx2");
#endif
#ifdef __FMA__
  isa.push_back("fma");
#endif
#ifdef __AVX512F__
  isa.push_back("avx512f");
#endif
#ifdef __F16C__
  isa.push_back("f16c");
#endif
  // The CPU kernels pick their AVX2/FMA/F16C paths at run time (kernels/cpu): name what this CPU offers.
  nlohmann::json cpu = nlohmann::json::array();
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) cpu.push_back("avx2");
  if (__builtin_cpu_supports("fma")) cpu.push_back("fma");
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;  // clang 14 lacks "f16c" in __builtin_cpu_supports
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0) cpu.push_back("f16c");
  if (__builtin_cpu_supports("avx512f")) cpu.push_back("avx512f");
#endif
  return nlohmann::json{{"version", TESSERA_VERSION},
                        {"cpu_features", cpu},
                        {"git_commit", TESSERA_GIT_COMMIT},
                        {"compiler", __VERSION__},
                        {"build_type", TESSERA_BUILD_TYPE},
                        {"cxx_flags", TESSERA_CXX_FLAGS},
                        {"isa", isa}};
}

std::string EngineDigest() { return DigestHex(CanonicalDump(EngineBuildInfo())); }

}  // namespace tessera::receipt
