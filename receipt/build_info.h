// What names the engine build in a receipt: Tessera's version, the git
// commit it was configured from, the compiler, build type and the ISA-relevant
// compile flags. The commit is read when CMake configures (a build from a later
// commit without reconfiguring still names the older one; scripts/test and the
// build script reconfigure). Thread-safe: constants.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tessera::receipt {

nlohmann::json EngineBuildInfo();
// DigestHex(CanonicalDump(EngineBuildInfo())).
std::string EngineDigest();

}  // namespace tessera::receipt
