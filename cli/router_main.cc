// tessera-router: the disaggregated front alone (docs/architecture.md,
// "Router"), exactly `tessera serve --role router` (same flags for the same
// settings, same defaults, same behaviour) in a binary that links no engine,
// Jinja or grammar library. `tessera-router --help` lists its flags.
#include <cstdlib>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/router_flags.h"
#include "common/log.h"
#include "common/internal_key.h"
#include "server/router/router.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera-router: the prefill/decode router of Tessera (tessera serve --role router, without a model)"};
  app.set_version_flag("--version", "tessera-router 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  tessera::RouterServeOptions options;
  options.grpc_port = 50051;  // as `tessera serve`
  tessera::AddRouterServeFlags(&app, &options);
  app.parse_complete_callback([&] { spdlog::set_level(spdlog::level::from_str(log_level)); });
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_default_logger(spdlog::stderr_color_mt("tessera"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (const char* key = std::getenv("TESSERA_API_KEY"); key != nullptr && *key != '\0') {
    options.api_keys.push_back(key);
  }
  if (tessera::Status s = tessera::ValidateRouterServeOptions(options); !s.ok()) {
    tessera::LogError("{}", s.ToString());
    return 1;
  }
  if (!options.internal_api_key_file.empty()) {  // readable: checked above
    options.internal_api_key = tessera::ReadInternalKeyFile(options.internal_api_key_file).value();
  }
  return tessera::RunRouter(options);
}
