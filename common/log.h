// Logging for every room: fmt-style messages ("{}" placeholders, checked at
// compile time), formatted here and written by spdlog's default logger in log.cc.
//
// Why not spdlog's templates at the call site: the first formatted spdlog call in
// a translation unit instantiates fmt's whole formatting engine into it (~4 s of
// -O2 compile per file, measured with g++ 12; the build paid it in ~45 files, twice
// in CI). Here each call site instantiates only fmt's argument packing; the
// formatting runs in libfmt (vformat) and the writing in log.cc.
//
// Thread-safe (spdlog's default logger is). Arguments are formatted only when the
// level is enabled. Configuring the logger (level, pattern, sinks) stays with
// spdlog's API in the binaries' main functions.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace tessera {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

// Whether the default logger writes `level`.
bool LogEnabled(LogLevel level);
// Writes an already formatted message at `level`.
void LogWrite(LogLevel level, std::string_view message);
// Flushes the default logger's sinks (before an exit that skips destructors).
void LogFlush();

template <typename... Args>
void LogAt(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (!LogEnabled(level)) return;
  LogWrite(level, fmt::vformat(format, fmt::make_format_args(args...)));
}

template <typename... Args>
void LogDebug(fmt::format_string<Args...> format, Args&&... args) {
  LogAt(LogLevel::kDebug, format, std::forward<Args>(args)...);
}
template <typename... Args>
void LogInfo(fmt::format_string<Args...> format, Args&&... args) {
  LogAt(LogLevel::kInfo, format, std::forward<Args>(args)...);
}
template <typename... Args>
void LogWarn(fmt::format_string<Args...> format, Args&&... args) {
  LogAt(LogLevel::kWarn, format, std::forward<Args>(args)...);
}
template <typename... Args>
void LogError(fmt::format_string<Args...> format, Args&&... args) {
  LogAt(LogLevel::kError, format, std::forward<Args>(args)...);
}

}  // namespace tessera
