// Lexer and parser: whitespace control, literals, and load-time errors with
// line/column for malformed or unsupported templates.
#include <gtest/gtest.h>

#include "text/jinja/lexer.h"
#include "text/jinja/py_str.h"
#include "text/jinja/template.h"

namespace tessera::jinja {
namespace {

std::string Render(const std::string& src) {
  StatusOr<Template> t = Template::Parse(src);
  if (!t.ok()) return "PARSE ERROR: " + t.status().message();
  StatusOr<std::string> out = t->Render({});
  return out.ok() ? *out : "RENDER ERROR: " + out.status().message();
}

TEST(JinjaLexerTest, TokensCarryPositions) {
  std::vector<Token> toks = Tokenize("ab\n{{ x + 1.5 }}", {});
  ASSERT_GE(toks.size(), 6u);
  EXPECT_EQ(toks[0].type, TokenType::kData);
  EXPECT_EQ(toks[1].type, TokenType::kVarBegin);
  EXPECT_EQ(toks[1].line, 2);
  EXPECT_EQ(toks[2].value, "x");
  EXPECT_EQ(toks[2].column, 4);
  EXPECT_EQ(toks[4].type, TokenType::kFloat);
  EXPECT_DOUBLE_EQ(toks[4].float_value, 1.5);
}

TEST(JinjaLexerTest, WhitespaceControlMatchesJinja) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indent before it.
  EXPECT_EQ(Render("  {% if true %}\n    yes\n  {% endif %}\nend"), "    yes\nend");
  EXPECT_EQ(Render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(Render("x {{- ' y ' -}} z"), "x y z");
  EXPECT_EQ(Render("{# c #}\nA\n  {#- c -#}  B"), "AB");
  EXPECT_EQ(Render("{# c #}\nA\n  {# c #}\nB"), "A\nB");
  EXPECT_EQ(Render("  {%+ if true %}k{% endif %}"), "  k");
  EXPECT_EQ(Render("{% if true +%}\nk{% endif %}"), "\nk");
  EXPECT_EQ(Render("line\r\nnext\n"), "line\nnext");  // newlines normalized, one trailing dropped
  EXPECT_EQ(Render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(JinjaLexerTest, StringEscapesFollowPythonUnicodeEscape) {
  EXPECT_EQ(Render("{{ '\\n\\t\\u00e9\\x41\\q\\\\' }}"), "\n\t\xC3\xA9" "A\\q\\");
  EXPECT_EQ(Render("{{ \"a\" 'b' }}"), "ab");
}

TEST(JinjaParserTest, SyntaxErrorsNameLineAndColumn) {
  struct ErrCase {
    const char* src;
    const char* needle;
  };
  for (const ErrCase& c : std::initializer_list<ErrCase>{
           {"hello\n{% if x %}\nno end", "line 3"},
           {"{{ x + }}", "line 1, column 8"},
           {"a\n  {% for x in %}{% endfor %}", "line 2"},
           {"{{ 'unterminated }}", "line 1, column 4"},
           {"{% endif %}", "unknown tag 'endif'"},
           {"{{ (1, 2 }}", "unexpected '}'"},
           {"{# never closed", "Missing end of comment tag"},
           {"{% break %}", "outside of a loop"},
       }) {
    StatusOr<Template> t = Template::Parse(c.src);
    ASSERT_FALSE(t.ok()) << c.src;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << c.src;
    EXPECT_NE(t.status().message().find(c.needle), std::string::npos) << c.src << " -> " << t.status().message();
  }
}

TEST(JinjaParserTest, UnsupportedSyntaxFailsAtLoadWithPosition) {
  struct ErrCase {
    const char* src;
    const char* needle;
  };
  for (const ErrCase& c : std::initializer_list<ErrCase>{
           {"ok\n  {{ x | wordwrap }}", "line 2, column 10: unsupported filter 'wordwrap'"},
           {"{% if x is prime %}{% endif %}", "line 1, column 12: unsupported test 'prime'"},
           {"{% include 'other.j2' %}", "line 1, column 4: unsupported tag 'include'"},
           {"\n\n{{ lipsum(3) }}", "line 3, column 4: unsupported function 'lipsum'"},
           {"{{ s.format(1) }}", "line 1, column 5: unsupported method 'format'"},
           {"{% for x in y recursive %}{% endfor %}", "recursive loops are not supported"},
           {"{{ 1 < 2 < 3 }}", "line 1, column 10: chained comparisons are not supported"},
       }) {
    StatusOr<Template> t = Template::Parse(c.src);
    ASSERT_FALSE(t.ok()) << c.src;
    EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented) << c.src;
    EXPECT_NE(t.status().message().find(c.needle), std::string::npos) << c.src << " -> " << t.status().message();
  }
}

TEST(JinjaParserTest, MacrosDefinedAnywhereMayBeCalled) {
  EXPECT_EQ(Render("{% macro m(a) %}<{{ a }}>{% endmacro %}{{ m(1) }}"), "<1>");
}

TEST(JinjaParserTest, DeepNestingIsRejectedNotOverflowed) {
  std::string deep(5000, '(');
  StatusOr<Template> t = Template::Parse("{{ " + deep + " }}");
  EXPECT_FALSE(t.ok());
  std::string ifs;
  for (int i = 0; i < 2000; ++i) ifs += "{% if true %}";
  EXPECT_FALSE(Template::Parse(ifs).ok());
}

TEST(PyStrTest, FloatReprMatchesPython) {
  EXPECT_EQ(PyReprFloat(1.0), "1.0");
  EXPECT_EQ(PyReprFloat(0.1), "0.1");
  EXPECT_EQ(PyReprFloat(1e16), "1e+16");
  EXPECT_EQ(PyReprFloat(1e15), "1000000000000000.0");
  EXPECT_EQ(PyReprFloat(1e-5), "1e-05");
  EXPECT_EQ(PyReprFloat(0.0001), "0.0001");
  EXPECT_EQ(PyReprFloat(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(PyReprFloat(123456789.125), "123456789.125");
}

TEST(PyStrTest, ReprChoosesQuotesLikePython) {
  EXPECT_EQ(PyReprString("it's"), "\"it's\"");
  EXPECT_EQ(PyReprString("say \"hi\""), "'say \"hi\"'");
  EXPECT_EQ(PyReprString("both ' \""), "'both \\' \"'");
  EXPECT_EQ(PyReprString("nl\n\x01"), "'nl\\n\\x01'");
}

}  // namespace
}  // namespace tessera::jinja
