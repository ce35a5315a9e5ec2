// Reasoning + tool calls through the chat response builders: the exact JSON
// of non-streamed messages and of OpenAI's streamed tool-call deltas, and
// that accumulating the stream gives the non-streamed message.
#include "server/openai/tool_calls/chat_output.h"

#include <gtest/gtest.h>

#include "server/openai/chat_response.h"
#include "text/chat_template.h"
#include "tests/unit/server/openai/response_test_util.h"

namespace tessera::openai {
namespace {

using nlohmann::json;
using testing::D;
using testing::U;

std::function<std::string()> Ids() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call_" + std::to_string((*n)++); };
}

ChatOptions Opts(tools::ChatOutputOptions output, std::string echo = "") {
  ChatOptions o;
  o.echo_prefix = std::move(echo);
  o.output = output;
  o.make_tool_call_id = Ids();
  return o;
}

tools::ChatOutputOptions Hermes(bool parallel = true) {
  tools::ChatOutputOptions o;
  o.tool_choice.mode = tools::ToolChoiceMode::kAuto;
  o.tool_parser = tools::ToolParserKind::kHermes;
  o.parallel_tool_calls = parallel;
  return o;
}

const char* kOutput =
    "I will look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";

json Message(const tools::ChatOutputOptions& output, const std::string& text, FinishReason finish,
             json* finish_reason = nullptr, const std::string& echo = "") {
  ChatAccumulator acc(1, Opts(output, echo));
  acc.Add(U({D(0, text, {}, finish)}, 3, 5, true));
  json body = acc.Build("x", 1, "m");
  if (finish_reason) *finish_reason = body["choices"][0]["finish_reason"];
  return body["choices"][0]["message"];
}

TEST(ChatOutputTest, NonStreamedToolCalls) {
  json finish;
  EXPECT_EQ(Message(Hermes(), kOutput, FinishReason::kStop, &finish), json::parse(R"({"role":"assistant",
      "content":"I will look.","tool_calls":[
        {"id":"call_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
        {"id":"call_1","type":"function","function":{"name":"now","arguments":"{}"}}]})"));
  EXPECT_EQ(finish, "tool_calls");
  // parallel_tool_calls=false: the first call only.
  EXPECT_EQ(Message(Hermes(false), kOutput, FinishReason::kStop)["tool_calls"].size(), 1u);
  // Only calls: content null. Cut by max_tokens: finish_reason stays "length".
  EXPECT_EQ(Message(Hermes(), "<tool_call>{\"name\":\"f\"}</tool_call>", FinishReason::kLength, &finish)["content"],
            nullptr);
  EXPECT_EQ(finish, "length");
  // No calls: the text as it was, finish_reason as it was.
  EXPECT_EQ(Message(Hermes(), "plain <b>text</b>", FinishReason::kStop, &finish),
            json::parse(R"({"role":"assistant","content":"plain <b>text</b>"})"));
  EXPECT_EQ(finish, "stop");
  // tool_choice none: nothing parsed.
  tools::ChatOutputOptions none = Hermes();
  none.tool_choice.mode = tools::ToolChoiceMode::kNone;
  EXPECT_EQ(Message(none, kOutput, FinishReason::kStop)["content"], kOutput);
}

TEST(ChatOutputTest, EchoedPrefixIsPartOfTheMessage) {
  EXPECT_EQ(Message(Hermes(), "", FinishReason::kStop, nullptr, "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>"),
            json::parse(R"({"role":"assistant","content":null,
               "tool_calls":[{"id":"call_0","type":"function","function":{"name":"f","arguments":"{}"}}]})"));
}

TEST(ChatOutputTest, ReasoningThenToolCalls) {
  tools::ChatOutputOptions o = Hermes();
  o.reasoning_parser = tools::ReasoningParserKind::kQwen3;
  const std::string text = std::string("<think>\nNeed weather.\n</think>\n\n") + kOutput;
  json m = Message(o, text, FinishReason::kStop);
  EXPECT_EQ(m["reasoning_content"], "\nNeed weather.\n");
  EXPECT_EQ(m["content"], "I will look.");
  EXPECT_EQ(m["tool_calls"].size(), 2u);
  // Reasoning only (cut in the middle of thinking): content null.
  tools::ChatOutputOptions r;
  r.reasoning_parser = tools::ReasoningParserKind::kQwen3;
  EXPECT_EQ(Message(r, "<think>hmm", FinishReason::kLength),
            json::parse(R"({"role":"assistant","content":null,"reasoning_content":"hmm"})"));
  EXPECT_EQ(Message(r, "hello", FinishReason::kStop),
            json::parse(R"({"role":"assistant","content":"hello","reasoning_content":null})"));
}

TEST(ChatOutputTest, HarmonyIsOneParserForReasoningContentAndCalls) {
  tools::ChatOutputOptions o;
  o.tool_choice.mode = tools::ToolChoiceMode::kAuto;
  o.tool_parser = tools::ToolParserKind::kOpenAI;
  o.reasoning_parser = tools::ReasoningParserKind::kOpenAIGptOss;
  o.harmony_open_header = "<|start|>assistant";
  const std::string calls =
      "<|channel|>analysis<|message|>Two lookups.<|end|><|start|>assistant to=functions.a<|channel|>commentary "
      "json<|message|>{\"x\": 1}<|call|><|start|>assistant to=functions.b<|channel|>commentary json<|message|>{}";
  json finish;
  EXPECT_EQ(Message(o, calls, FinishReason::kStop, &finish), json::parse(R"({"role":"assistant","content":null,
      "reasoning_content":"Two lookups.","tool_calls":[
        {"id":"call_0","type":"function","function":{"name":"a","arguments":"{\"x\":1}"}},
        {"id":"call_1","type":"function","function":{"name":"b","arguments":"{}"}}]})"));
  EXPECT_EQ(finish, "tool_calls");
  o.parallel_tool_calls = false;
  EXPECT_EQ(Message(o, calls, FinishReason::kStop)["tool_calls"].size(), 1u);
  // tool_choice none: the calls stay in the content, verbatim; reasoning is still split.
  o.tool_choice.mode = tools::ToolChoiceMode::kNone;
  json m = Message(o, calls, FinishReason::kStop);
  EXPECT_EQ(m["reasoning_content"], "Two lookups.");
  EXPECT_EQ(m["content"], calls.substr(calls.find("<|start|>assistant to=functions.a")));
  // Forced calls are plain JSON under the grammar: no channels to read.
  o.tool_choice = {tools::ToolChoiceMode::kNamed, "f"};
  EXPECT_EQ(Message(o, "{\"k\": 2}", FinishReason::kStop)["tool_calls"][0]["function"]["arguments"], "{\"k\":2}");
}

TEST(ChatOutputTest, DeepSeekR1ReasoningComposesWithDeepSeekV3Calls) {
  tools::ChatOutputOptions o;
  o.tool_choice.mode = tools::ToolChoiceMode::kAuto;
  o.tool_parser = tools::ToolParserKind::kDeepSeekV3;
  o.reasoning_parser = tools::ReasoningParserKind::kDeepSeekR1;
  const std::string text =
      "Need the weather.\n</think>\n\nLooking it up.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  EXPECT_EQ(Message(o, text, FinishReason::kStop), json::parse(R"({"role":"assistant","content":"Looking it up.",
      "reasoning_content":"Need the weather.\n","tool_calls":[
        {"id":"call_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]})"));
}

TEST(ChatOutputConfigTest, HarmonyFlagsSelectBothParsersAndRefuseAMix) {
  using tools::ReasoningParserKind;
  using tools::ToolParserKind;
  auto harmony_template = text::ChatTemplate::FromSource("{{ '<|start|>assistant<|channel|>final<|message|>' }}");
  auto hermes_template = text::ChatTemplate::FromSource("{{ '<tool_call>' }}");
  auto c = tools::ResolveChatOutputConfig(std::nullopt, std::nullopt, &*harmony_template);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->tool_parser, ToolParserKind::kOpenAI);
  EXPECT_EQ(c->reasoning_parser, ReasoningParserKind::kOpenAIGptOss);
  c = tools::ResolveChatOutputConfig(std::nullopt, ReasoningParserKind::kOpenAIGptOss, &*hermes_template);
  ASSERT_TRUE(c.ok());  // the flag wins over the template's guess
  EXPECT_EQ(c->tool_parser, ToolParserKind::kOpenAI);
  c = tools::ResolveChatOutputConfig(ToolParserKind::kOpenAI, std::nullopt, nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->reasoning_parser, ReasoningParserKind::kOpenAIGptOss);
  EXPECT_FALSE(tools::ResolveChatOutputConfig(ToolParserKind::kHermes, ReasoningParserKind::kOpenAIGptOss, nullptr).ok());
  EXPECT_FALSE(tools::ResolveChatOutputConfig(ToolParserKind::kOpenAI, ReasoningParserKind::kQwen3, nullptr).ok());
  c = tools::ResolveChatOutputConfig(std::nullopt, ReasoningParserKind::kQwen3, &*hermes_template);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->tool_parser, ToolParserKind::kHermes);
  EXPECT_EQ(c->reasoning_parser, ReasoningParserKind::kQwen3);
}

// Streams `text` one byte per update; returns every chunk.
std::vector<json> StreamBytes(const ChatOptions& opts, const std::string& text, FinishReason finish) {
  ChatStream s("c", 1, "m", 1, opts, false);
  std::vector<json> chunks = s.Start();
  for (size_t i = 0; i < text.size(); ++i) {
    const bool last = i + 1 == text.size();
    for (json& c : s.OnUpdate(U({D(0, text.substr(i, 1), {}, last ? finish : FinishReason::kNone)}, 3,
                                static_cast<int64_t>(i + 1), last))) {
      chunks.push_back(std::move(c));
    }
  }
  return chunks;
}

TEST(ChatStreamToolsTest, OpenAiDeltaShapeAndAccumulation) {
  tools::ChatOutputOptions o = Hermes();
  o.reasoning_parser = tools::ReasoningParserKind::kQwen3;
  const std::string text = std::string("<think>why</think>") + kOutput;
  std::vector<json> chunks = StreamBytes(Opts(o), text, FinishReason::kStop);
  // Accumulate as OpenAI clients do.
  std::string reasoning, content;
  json calls = json::array();
  std::vector<json> call_deltas;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const json& ch = chunks[i]["choices"][0];
    const json& d = ch["delta"];
    EXPECT_EQ(ch["finish_reason"], i + 1 == chunks.size() ? json("tool_calls") : json(nullptr)) << i;
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) {
      content += d["content"].get<std::string>();
      EXPECT_EQ(d["content"].get<std::string>().find('<'), std::string::npos) << "markup leaked: " << d.dump();
    }
    if (d.contains("tool_calls")) {
      call_deltas.push_back(d["tool_calls"][0]);
      const json& tc = d["tool_calls"][0];
      const size_t index = tc["index"].get<size_t>();
      if (index == calls.size()) calls.push_back({{"id", tc["id"]}, {"name", tc["function"]["name"]}, {"arguments", ""}});
      calls[index]["arguments"] = calls[index]["arguments"].get<std::string>() + tc["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(reasoning, "why");
  EXPECT_EQ(content, "I will look.");
  EXPECT_EQ(calls, json::parse(R"([{"id":"call_0","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
                                   {"id":"call_1","name":"now","arguments":"{}"}])"));
  ASSERT_EQ(call_deltas.size(), 4u);
  EXPECT_EQ(call_deltas[0], json::parse(R"({"index":0,"id":"call_0","type":"function",
                                            "function":{"name":"get_weather","arguments":""}})"));
  EXPECT_EQ(call_deltas[1], json::parse(R"({"index":0,"function":{"arguments":"{\"city\":\"Paris\"}"}})"));
  EXPECT_EQ(call_deltas[2]["index"], 1);
  EXPECT_EQ(call_deltas[3], json::parse(R"({"index":1,"function":{"arguments":"{}"}})"));
}

TEST(ChatStreamToolsTest, EachChoiceHasItsOwnParser) {
  ChatStream s("c", 1, "m", 2, Opts(Hermes()), false);
  s.Start();
  std::vector<json> chunks = s.OnUpdate(U({D(0, "<tool_call>{\"name\":\"a\"}"), D(1, "plain <tool")}, 3, 2));
  for (json& c : s.OnUpdate(U({D(0, "</tool_call>", {}, FinishReason::kStop), D(1, "s>", {}, FinishReason::kStop)}, 3, 4,
                              true))) {
    chunks.push_back(std::move(c));
  }
  std::string content1;
  json finish = json::array({nullptr, nullptr});
  int calls0 = 0;
  for (const json& c : chunks) {
    const json& ch = c["choices"][0];
    if (ch["index"] == 1) content1 += ch["delta"].value("content", "");
    if (ch["index"] == 0 && ch["delta"].contains("tool_calls")) ++calls0;
    if (!ch["finish_reason"].is_null()) finish[ch["index"].get<size_t>()] = ch["finish_reason"];
  }
  EXPECT_EQ(content1, "plain <tools>");
  EXPECT_EQ(calls0, 2);  // the naming delta and the arguments delta
  EXPECT_EQ(finish, json::parse(R"(["tool_calls","stop"])"));
}

TEST(ChatStreamToolsTest, InactiveParsingKeepsTheOldChunks) {
  std::vector<json> chunks = StreamBytes(ChatOptions{}, "<tool_call>", FinishReason::kStop);
  std::string content;
  for (const json& c : chunks) content += c["choices"][0]["delta"].value("content", "");
  EXPECT_EQ(content, "<tool_call>");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "stop");
}

}  // namespace
}  // namespace tessera::openai
