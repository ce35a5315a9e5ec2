#include "receipt/canonical_request.h"

#include <gtest/gtest.h>

#include "receipt/receipt.h"

namespace tessera::receipt {
namespace {

using json = nlohmann::json;

Request Everything() {
  Request r;
  r.prompt_token_ids = {1, 2, 3, 150000};
  SamplingParams& p = r.params;
  p.max_tokens = 9;
  p.min_tokens = 2;
  p.temperature = 0.7f;  // not exact in binary: the f32 must survive the double
  p.top_p = 0.9f;
  p.top_k = 40;
  p.min_p = 0.05f;
  p.presence_penalty = 0.3f;
  p.frequency_penalty = -0.1f;
  p.repetition_penalty = 1.1f;
  p.logit_bias = {{5, -1.5f}, {7, 100.0f}};
  p.stop = {"\n\n", "END"};
  p.stop_token_ids = {11, 12};
  p.ignore_eos = true;
  p.n = 3;
  p.logprobs = true;
  p.top_logprobs = 4;
  p.prompt_logprobs = 1;
  return r;
}

TEST(CanonicalRequest, ReadsBackToTheSameDigest) {
  const uint64_t seed = 18446744073709551615ull;  // the largest: a decimal string, not a double
  for (const Request& r : {Everything(), Request{}}) {
    const json c = CanonicalRequest(r, seed, false, true);
    StatusOr<ExecutedRequest> back = ReadCanonicalRequest(json::parse(c.dump()));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->request.params.seed, seed);
    EXPECT_FALSE(back->skip_special_tokens);
    EXPECT_TRUE(back->include_stop_str_in_output);
    EXPECT_EQ(back->structured_output, "");
    EXPECT_EQ(CanonicalDump(CanonicalRequest(back->request, seed, false, true)), CanonicalDump(c));
  }
  const Request r = Everything();
  StatusOr<ExecutedRequest> back = ReadCanonicalRequest(CanonicalRequest(r, 1, true, false));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->request.params.temperature, r.params.temperature);
  EXPECT_EQ(back->request.params.logit_bias, r.params.logit_bias);
  EXPECT_EQ(back->request.params.prompt_logprobs, r.params.prompt_logprobs);
}

TEST(CanonicalRequest, NamesTheConstraintItCannotRebuild) {
  Request r;
  r.params.constraint_field = "response_format";
  json c = CanonicalRequest(r, 1, true, false);
  c["structured_output"] = "response_format";  // as CanonicalRequest writes it when a constraint is set
  StatusOr<ExecutedRequest> back = ReadCanonicalRequest(c);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->structured_output, "response_format");
}

TEST(CanonicalRequest, RefusesDamageNamingTheField) {
  const json good = CanonicalRequest(Everything(), 7, true, false);
  struct Case {
    const char* field;
    json value;
  };
  const Case cases[] = {{"prompt_token_ids", json::array({1, "x"})},
                        {"prompt_token_ids", json::array({int64_t{1} << 40})},
                        {"max_tokens", "9"},
                        {"temperature", nullptr},
                        {"seed", 7},
                        {"seed", "-1"},
                        {"seed", "99999999999999999999"},
                        {"logit_bias", json::array({json::array({1})})},
                        {"stop", json::array({1})},
                        {"n", 1.5},
                        {"structured_output", 3},
                        {"skip_special_tokens", "yes"}};
  for (const Case& c : cases) {
    json bad = good;
    bad[c.field] = c.value;
    StatusOr<ExecutedRequest> r = ReadCanonicalRequest(bad);
    ASSERT_FALSE(r.ok()) << c.field << " " << c.value.dump();
    EXPECT_NE(r.status().message().find(std::string("request.") + c.field), std::string::npos) << r.status().message();
  }
  json missing = good;
  missing.erase("top_k");
  EXPECT_NE(ReadCanonicalRequest(missing).status().message().find("request.top_k: is missing"), std::string::npos);
  json extra = good;
  extra["priority"] = 1;
  EXPECT_NE(ReadCanonicalRequest(extra).status().message().find("request.priority"), std::string::npos);
  EXPECT_FALSE(ReadCanonicalRequest(json::array()).ok());
}

}  // namespace
}  // namespace tessera::receipt
