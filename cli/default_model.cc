#include "cli/default_model.h"
#include "common/log.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>


#include "engine/synth.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

constexpr char kTmpMarker[] = ".tmp-";

// Removes `<final>.tmp-<pid>` siblings whose writer process is gone.
void RemoveStaleTemporaries(const fs::path& final_dir) {
  std::error_code ec;
  const std::string prefix = final_dir.filename().string() + kTmpMarker;
  for (const auto& entry : fs::directory_iterator(final_dir.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)) continue;  // still alive
    std::error_code rm_ec;
    fs::remove_all(entry.path(), rm_ec);
    if (!rm_ec) LogInfo("default model: removed partial checkpoint {} (interrupted run)", entry.path().string());
  }
}

}  // namespace

StatusOr<std::string> TesseraHome() {
  if (const char* home = std::getenv("TESSERA_HOME"); home != nullptr && *home != '\0') return std::string(home);
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return (fs::path(home) / ".cache" / "tessera").string();
  }
  return FailedPrecondition("serve: neither TESSERA_HOME nor HOME is set; set TESSERA_HOME or pass --model");
}

StatusOr<std::string> DefaultModelDir(const std::string& size) {
  if (size != "tiny" && size != "0.5b") {
    return InvalidArgument("serve: --default-model-size must be tiny or 0.5b, got '" + size + "'");
  }
  ASSIGN_OR_RETURN(std::string home, TesseraHome());
  return (fs::path(home) / "models" / ("default-qwen3-" + size + "-bf16")).string();
}

StatusOr<std::string> EnsureDefaultModel(const std::string& size) {
  ASSIGN_OR_RETURN(std::string dir, DefaultModelDir(size));
  const fs::path final_dir(dir);
  std::error_code ec;
  if (fs::exists(final_dir / "config.json", ec)) return dir;
  fs::create_directories(final_dir.parent_path(), ec);
  if (ec) return Internal("serve: cannot create " + final_dir.parent_path().string() + ": " + ec.message());
  RemoveStaleTemporaries(final_dir);

  const fs::path tmp = final_dir.string() + kTmpMarker + std::to_string(getpid());
  fs::remove_all(tmp, ec);
  LogInfo("default model: writing a synthetic qwen3 {} checkpoint to {} (first run only)", size, dir);
  SynthOptions o;
  o.arch = "qwen3";
  o.size = size;
  o.dtype = DType::kBF16;
  o.out_dir = tmp.string();
  o.progress = true;
  if (Status s = WriteSyntheticCheckpoint(o); !s.ok()) {
    fs::remove_all(tmp, ec);
    return s;
  }
  fs::rename(tmp, final_dir, ec);
  if (ec) {
    // Another process may have finished first; use its copy.
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    if (fs::exists(final_dir / "config.json", ignored)) return dir;
    return Internal("serve: cannot move " + tmp.string() + " to " + dir + ": " + ec.message());
  }
  return dir;
}

}  // namespace tessera
