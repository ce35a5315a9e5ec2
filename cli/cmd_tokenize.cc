// `tessera tokenize`: batch encode/decode of a JSONL file with a tokenizer,
// for oracle tests and debugging. Input lines are {"text": "..."} (encode) or
// {"ids": [...]} (with --decode); output lines are {"ids": [...]} or
// {"text": "..."}, or {"error": "..."} for a line that fails.
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/log.h"
#include "text/gguf_tokenizer.h"
#include "text/tokenizer.h"

namespace tessera {
namespace {

struct TokenizeArgs {
  std::string model_dir, tokenizer_file, config_file, input, output;
  bool no_special = false;
  bool decode = false;
};

int RunTokenize(const TokenizeArgs& a) {
  using nlohmann::json;
  auto tok = !a.model_dir.empty() ? text::LoadModelTokenizer(a.model_dir)
                                  : text::Tokenizer::FromFiles(a.tokenizer_file, a.config_file);
  if (!tok.ok()) {
    LogError("{}", tok.status().ToString());
    return 1;
  }
  std::ifstream in(a.input, std::ios::binary);
  if (!in) {
    LogError("{}: cannot open", a.input);
    return 1;
  }
  std::ofstream out(a.output, std::ios::binary);
  if (!out) {
    LogError("{}: cannot write", a.output);
    return 1;
  }
  std::string line;
  size_t n = 0, errors = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++n;
    json req = json::parse(line, nullptr, false);
    json resp;
    if (req.is_discarded() || !req.is_object()) {
      resp["error"] = "line " + std::to_string(n) + ": not a JSON object";
    } else if (a.decode) {
      std::vector<int32_t> ids;
      const json& j_ids = req.contains("ids") ? req["ids"] : json();
      bool ok = j_ids.is_array();
      for (const json& x : j_ids) {
        if (!x.is_number_integer()) { ok = false; break; }
        ids.push_back(x.get<int32_t>());
      }
      if (!ok) {
        resp["error"] = "line " + std::to_string(n) + ": 'ids' must be a list of integers";
      } else {
        auto text = (*tok)->Decode(ids, {.skip_special_tokens = a.no_special});
        if (text.ok()) resp["text"] = *text;
        else resp["error"] = text.status().message();
      }
    } else if (!req.contains("text") || !req["text"].is_string()) {
      resp["error"] = "line " + std::to_string(n) + ": 'text' must be a string";
    } else {
      resp["ids"] = (*tok)->Encode(req["text"].get_ref<const std::string&>(), !a.no_special);
    }
    if (resp.contains("error")) ++errors;
    out << resp.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
  }
  LogInfo("tokenize: {} lines, {} errors", n, errors);
  return errors == 0 ? 0 : 2;
}

}  // namespace

void AddTokenizeCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode or decode a JSONL file with a tokenizer");
  auto* dir = cmd->add_option("--model-dir", args->model_dir, "Model: directory with tokenizer.json (+ tokenizer_config.json), or a .gguf file");
  auto* file = cmd->add_option("--tokenizer", args->tokenizer_file, "Path to tokenizer.json");
  cmd->add_option("--config", args->config_file, "Path to tokenizer_config.json (with --tokenizer)")->needs(file);
  dir->excludes(file);
  cmd->add_option("--input", args->input, "JSONL input: {\"text\": ...} or {\"ids\": [...]}")->required();
  cmd->add_option("--output", args->output, "JSONL output")->required();
  cmd->add_flag("--no-special", args->no_special,
                "Encode without special tokens; with --decode, skip special tokens");
  cmd->add_flag("--decode", args->decode, "Decode ids instead of encoding text");
  cmd->callback([args, exit_code, dir, file] {
    if (dir->count() == 0 && file->count() == 0) throw CLI::ValidationError("one of --model-dir or --tokenizer is required");
    *exit_code = RunTokenize(*args);
  });
}

}  // namespace tessera
