// tessera: LLM inference serving daemon. `tessera --help` lists subcommands.
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "common/log.h"

int main(int argc, char** argv) {
  CLI::App app{"Tessera: an LLM inference serving daemon"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tessera ") + tessera::kTesseraVersion);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  int exit_code = 0;
  tessera::AddSynthCommand(app, &exit_code);
  tessera::AddLogitsCommand(app, &exit_code);
  tessera::AddServeCommand(app, &exit_code);
  tessera::AddTokenizeCommand(app, &exit_code);
  tessera::AddRenderChatCommand(app, &exit_code);
  tessera::AddGenerateCommand(app, &exit_code);
  tessera::AddClientCommand(app, &exit_code);
  tessera::AddKernelCommand(app, &exit_code);
  tessera::AddGgufInfoCommand(app, &exit_code);
  tessera::AddSimulateCommand(app, &exit_code);
  tessera::AddCalibrateCommand(app, &exit_code);
  tessera::AddPlanCommand(app, &exit_code);
  tessera::AddReceiptCommands(app, &exit_code);
  tessera::AddReplayCommand(app, &exit_code);
  app.parse_complete_callback([&] { spdlog::set_level(spdlog::level::from_str(log_level)); });
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_default_logger(spdlog::stderr_color_mt("tessera"));
  // vLLM's short spellings of the parallel sizes (CLI11 takes one-letter short options only).
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "-tp") argv[i] = const_cast<char*>("--tensor-parallel-size");
    if (std::string_view(argv[i]) == "-dp") argv[i] = const_cast<char*>("--data-parallel-size");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the error naming the flag (or --help)
    // `serve --check-config` promises 0 (valid) or 1 (invalid), whatever failed.
    for (int i = 1; rc != 0 && i < argc; ++i) {
      if (std::string_view(argv[i]).starts_with("--check-config")) return 1;
    }
    return rc;
  }
  return exit_code;
}
