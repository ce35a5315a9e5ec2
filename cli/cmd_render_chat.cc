// `tessera render-chat`: renders conversations with a model's chat template, in
// batch (JSON lines in, JSON lines out) so oracle tests run in one process.
//
// Input line:  {"id": any, "messages": [...], "tools": [...]|null,
//               "add_generation_prompt": bool, "kwargs": {...}}
// Output line: {"id": any, "ok": true, "text": "..."} or
//              {"id": any, "ok": false, "error": "..."}
// With --tokenizer DIR, as the server renders a chat: "ids" too, and the
// client's special-token text kept as plain text (RenderChatPromptTokens).
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/log.h"
#include "server/serving/input_processor.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace tessera {
namespace {

using ojson = nlohmann::ordered_json;

struct RenderChatArgs {
  std::string tokenizer_config;
  std::string template_file;
  std::string tokenizer_dir;  // with it: ids, as the server tokenizes a chat
  std::string input;
  std::string output;
  int64_t now = -1;
};

Status RunRenderChat(const RenderChatArgs& args) {
  StatusOr<text::ChatTemplate> ct = Internal("unset");
  if (!args.template_file.empty()) {
    std::ifstream tf(args.template_file, std::ios::binary);
    if (!tf) return NotFound(args.template_file + ": cannot open");
    std::string src((std::istreambuf_iterator<char>(tf)), std::istreambuf_iterator<char>());
    std::map<std::string, std::string> tokens;
    if (!args.tokenizer_config.empty()) {
      std::ifstream cf(args.tokenizer_config);
      ojson cfg = ojson::parse(cf, nullptr, false);
      if (cfg.is_discarded() || !cfg.is_object()) return InvalidArgument(args.tokenizer_config + ": not a JSON object");
      cfg["chat_template"] = src;
      ct = text::ChatTemplate::FromTokenizerConfig(cfg, args.template_file);
    } else {
      ct = text::ChatTemplate::FromSource(src, tokens);
    }
  } else {
    ct = text::ChatTemplate::FromTokenizerConfigFile(args.tokenizer_config);
  }
  if (!ct.ok()) return ct.status();
  std::shared_ptr<const text::Tokenizer> tokenizer;
  if (!args.tokenizer_dir.empty()) {
    ASSIGN_OR_RETURN(tokenizer, text::Tokenizer::FromDirectory(args.tokenizer_dir));
  }

  std::ifstream in(args.input, std::ios::binary);
  if (!in) return NotFound(args.input + ": cannot open");
  std::ofstream out_file;
  std::ostream* out = &std::cout;
  if (!args.output.empty() && args.output != "-") {
    out_file.open(args.output, std::ios::binary);
    if (!out_file) return Internal(args.output + ": cannot write");
    out = &out_file;
  }
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    ojson req = ojson::parse(line, nullptr, false);
    if (req.is_discarded() || !req.is_object())
      return InvalidArgument(args.input + ":" + std::to_string(line_no) + ": not a JSON object");
    ojson resp = ojson::object();
    resp["id"] = req.value("id", ojson());
    ojson messages = req.value("messages", ojson());
    ojson tools = req.value("tools", ojson());
    ojson kwargs = req.value("kwargs", ojson::object());
    bool agp = req.value("add_generation_prompt", false);
    text::ChatRenderOptions opts;
    opts.now_unix_seconds = args.now;
    opts.template_name = req.value("template_name", std::string());
    if (tokenizer) {
      StatusOr<ChatPrompt> p = RenderChatPromptTokens(
          *tokenizer, {.chat_template = &*ct, .model_name = "render-chat", .messages = messages, .tools = tools,
                       .add_generation_prompt = agp, .template_kwargs = kwargs, .now_unix_seconds = args.now});
      resp["ok"] = p.ok();
      if (p.ok()) {
        resp["text"] = p->text;
        resp["ids"] = p->ids;
      } else {
        resp["error"] = p.status().message();
      }
      *out << resp.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
      continue;
    }
    StatusOr<std::string> text = ct->Render(messages, tools, agp, kwargs, opts);
    resp["ok"] = text.ok();
    if (text.ok()) resp["text"] = *text;
    else resp["error"] = text.status().message();
    *out << resp.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
  }
  out->flush();
  return Status::Ok();
}

}  // namespace

void AddRenderChatCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("render-chat", "Render conversations (JSON lines) with a model's chat template");
  auto args = std::make_shared<RenderChatArgs>();
  cmd->add_option("--tokenizer-config", args->tokenizer_config, "tokenizer_config.json with chat_template");
  cmd->add_option("--template-file", args->template_file,
                  "raw Jinja template file (overrides the config's chat_template)");
  cmd->add_option("--input", args->input, "JSON lines: {id, messages, tools, add_generation_prompt, kwargs}")
      ->required();
  cmd->add_option("--output", args->output, "JSON lines output (default stdout)");
  cmd->add_option("--now", args->now, "UNIX time for strftime_now (default: the clock)");
  cmd->add_option("--tokenizer", args->tokenizer_dir,
                  "directory with tokenizer.json: also output the ids, as the server tokenizes a chat (special-token "
                  "text in the messages as plain text)");
  cmd->callback([=] {
    if (args->tokenizer_config.empty() && args->template_file.empty()) {
      LogError("render-chat needs --tokenizer-config or --template-file");
      *exit_code = 2;
      return;
    }
    Status s = RunRenderChat(*args);
    if (!s.ok()) {
      LogError("{}", s.ToString());
      *exit_code = 1;
    }
  });
}

}  // namespace tessera
