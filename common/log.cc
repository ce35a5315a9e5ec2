#include "common/log.h"

#include <spdlog/spdlog.h>

namespace tessera {
namespace {

spdlog::level::level_enum ToSpdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: break;
  }
  return spdlog::level::err;
}

}  // namespace

bool LogEnabled(LogLevel level) { return spdlog::should_log(ToSpdlog(level)); }

void LogWrite(LogLevel level, std::string_view message) {
  spdlog::log(ToSpdlog(level), spdlog::string_view_t(message.data(), message.size()));
}

void LogFlush() { spdlog::default_logger_raw()->flush(); }

}  // namespace tessera
