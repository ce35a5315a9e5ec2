#include "receipt/receipt.h"

#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <fstream>

#include <gtest/gtest.h>

#include "receipt/compare.h"
#include "receipt/signing.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera::receipt {
namespace {

using json = nlohmann::json;

Request SampleRequest() {
  Request r;
  r.prompt_token_ids = {1, 2, 3};
  r.params.max_tokens = 8;
  r.params.temperature = 0.7f;
  r.params.top_k = 40;
  r.params.stop = {"\n\n"};
  r.params.logit_bias = {{5, -1.5f}};
  return r;
}

Receipt SampleReceipt() {
  Receipt r;
  r.server = {std::string(64, 'a'), std::string(64, 'b'), std::string(64, 'c'), std::string(64, 'd')};
  GenerationRecord g;
  g.request = DigestHex(CanonicalDump(CanonicalRequest(SampleRequest(), 42, true, false)));
  g.seed = 42;
  g.choices.push_back(MakeChoice(0, {7, 8, 9}, nullptr));
  const json lp = json::array({json::array({4, -0.25, json::array()})});
  g.choices.push_back(MakeChoice(1, {4}, &lp));
  r.generations.push_back(g);
  return r;
}

TEST(Receipt, CanonicalJsonIsStable) {
  const json a = CanonicalRequest(SampleRequest(), 42, true, false);
  // Keys sorted, no whitespace, floats as the f32 value widened.
  const std::string s = CanonicalDump(a);
  EXPECT_EQ(s.find(' '), std::string::npos);
  EXPECT_LT(s.find("\"frequency_penalty\""), s.find("\"ignore_eos\""));
  EXPECT_NE(s.find("\"seed\":\"42\""), std::string::npos) << s;
  EXPECT_NE(s.find("\"temperature\":0.699999988079071"), std::string::npos) << s;
  // Field order of construction does not matter; the same record, the same bytes.
  json b = json::parse(s);
  EXPECT_EQ(CanonicalDump(b), s);
  EXPECT_EQ(Encode(SampleReceipt()), Encode(SampleReceipt()));
}

TEST(Receipt, RequestDigestChangesWithEachField) {
  const std::string base = DigestHex(CanonicalDump(CanonicalRequest(SampleRequest(), 42, true, false)));
  std::vector<std::function<void(Request&)>> edits = {
      [](Request& r) { r.prompt_token_ids.push_back(4); },
      [](Request& r) { r.params.max_tokens = 9; },
      [](Request& r) { r.params.min_tokens = 1; },
      [](Request& r) { r.params.temperature = 0.8f; },
      [](Request& r) { r.params.top_p = 0.9f; },
      [](Request& r) { r.params.top_k = 41; },
      [](Request& r) { r.params.min_p = 0.1f; },
      [](Request& r) { r.params.presence_penalty = 0.5f; },
      [](Request& r) { r.params.frequency_penalty = 0.5f; },
      [](Request& r) { r.params.repetition_penalty = 1.1f; },
      [](Request& r) { r.params.logit_bias[6] = 1.0f; },
      [](Request& r) { r.params.stop.push_back("x"); },
      [](Request& r) { r.params.stop_token_ids.push_back(2); },
      [](Request& r) { r.params.ignore_eos = true; },
      [](Request& r) { r.params.n = 2; },
      [](Request& r) { r.params.logprobs = true; },
      [](Request& r) { r.params.top_logprobs = 2; },
      [](Request& r) { r.params.prompt_logprobs = 0; },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    Request r = SampleRequest();
    edits[i](r);
    EXPECT_NE(DigestHex(CanonicalDump(CanonicalRequest(r, 42, true, false))), base) << "edit " << i;
  }
  EXPECT_NE(DigestHex(CanonicalDump(CanonicalRequest(SampleRequest(), 43, true, false))), base);
  EXPECT_NE(DigestHex(CanonicalDump(CanonicalRequest(SampleRequest(), 42, false, false))), base);
  EXPECT_NE(DigestHex(CanonicalDump(CanonicalRequest(SampleRequest(), 42, true, true))), base);
}

TEST(Receipt, SignedBytesChangeWithEachField) {
  const std::string base = SignedBytes(SampleReceipt());
  std::vector<std::function<void(Receipt&)>> edits = {
      [](Receipt& r) { r.server.weights[0] = 'e'; },
      [](Receipt& r) { r.server.tokenizer[0] = 'e'; },
      [](Receipt& r) { r.server.engine[0] = 'e'; },
      [](Receipt& r) { r.server.flags[0] = 'e'; },
      [](Receipt& r) { r.generations[0].request[0] = 'e'; },
      [](Receipt& r) { r.generations[0].seed = 43; },
      [](Receipt& r) { r.generations[0].seed_drawn = true; },
      [](Receipt& r) { r.generations[0].choices[0].output[0] = 'e'; },
      [](Receipt& r) { r.generations[0].choices[1].logprobs[0] = 'e'; },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    Receipt r = SampleReceipt();
    edits[i](r);
    EXPECT_NE(SignedBytes(r), base) << "edit " << i;
  }
}

TEST(Receipt, TheCompactFormDropsTokenIdsAndKeepsTheSignedBytes) {
  const Receipt r = SampleReceipt();
  const Receipt c = Compact(r);
  EXPECT_EQ(SignedBytes(c), SignedBytes(r));  // the output digest binds the ids
  EXPECT_EQ(ToJson(c)["generations"][0]["choices"][0].count("token_ids"), 0u);
  StatusOr<Receipt> back = Decode(Encode(c));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(back->generations[0].choices[0].has_token_ids);
  EXPECT_EQ(Encode(*back), Encode(c));
  // Digests only: equal when the re-execution's digests are, else the digest is named.
  EXPECT_TRUE(CompareOutputs(c, r).equal);
  Receipt other = r;
  other.generations[0].choices[0] = MakeChoice(0, {7, 7}, nullptr);
  const Comparison diff = CompareOutputs(c, other);
  EXPECT_FALSE(diff.equal);
  EXPECT_EQ(diff.what, "output_digest");
  EXPECT_EQ(diff.token_index, -1);
}

TEST(Receipt, EncodeDecodeRoundTripsAndRefusesBadInput) {
  const Receipt r = SampleReceipt();
  StatusOr<Receipt> back = Decode(Encode(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(Encode(*back), Encode(r));
  EXPECT_FALSE(Decode("not base64!").ok());
  json j = ToJson(r);
  j["extra"] = 1;
  EXPECT_NE(FromJson(j).status().message().find("'extra'"), std::string::npos);
  j = ToJson(r);
  j["version"] = 2;
  EXPECT_NE(FromJson(j).status().message().find("'version'"), std::string::npos);
  j = ToJson(r);
  j["generations"][0]["seed"] = "-1";
  EXPECT_NE(FromJson(j).status().message().find("generations[0].seed"), std::string::npos);
  j = ToJson(r);
  j["generations"][0]["choices"][0]["output"] = "xyz";
  EXPECT_NE(FromJson(j).status().message().find("generations[0].choices[0].output"), std::string::npos);
}

TEST(Receipt, SignAndVerifyAndTamper) {
  testing::TempDir dir;
  StatusOr<ReceiptSigner> s = ReceiptSigner::Generate(dir.path() + "/key");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  StatusOr<ReceiptSigner> loaded = ReceiptSigner::Load(dir.path() + "/key");
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->public_key(), s->public_key());
  Receipt r = SampleReceipt();
  s->Sign(&r);
  ASSERT_TRUE(r.signature.has_value());
  StatusOr<Receipt> back = Decode(Encode(r));  // the signature survives the header form
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(VerifySignature(*back, s->public_key()).ok());

  Receipt tampered = *back;
  tampered.generations[0].choices[0].output[0] = tampered.generations[0].choices[0].output[0] == 'a' ? 'b' : 'a';
  Status st = VerifySignature(tampered, s->public_key());
  EXPECT_NE(st.message().find("does not verify"), std::string::npos) << st.ToString();

  StatusOr<ReceiptSigner> other = ReceiptSigner::Generate(dir.path() + "/other");
  ASSERT_TRUE(other.ok());
  st = VerifySignature(*back, other->public_key());
  EXPECT_NE(st.message().find("not by this server's key"), std::string::npos) << st.ToString();
  // A receipt re-signed by another key but claiming ours.
  Receipt forged = *back;
  other->Sign(&forged);
  forged.signature->public_key = s->public_key();
  EXPECT_FALSE(VerifySignature(forged, s->public_key()).ok());
  Receipt unsigned_r = SampleReceipt();
  EXPECT_NE(VerifySignature(unsigned_r, s->public_key()).message().find("not signed"), std::string::npos);
}

TEST(Receipt, KeyFileFormatAndPermissions) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/key";
  EXPECT_FALSE(ReceiptSigner::Generate(dir.path() + "/missing/key").ok());
  ASSERT_TRUE(ReceiptSigner::Generate(path).ok());
  EXPECT_FALSE(ReceiptSigner::Generate(path).ok());  // never overwrites
  ::chmod(path.c_str(), 0644);
  EXPECT_NE(ReceiptSigner::Load(path).status().message().find("chmod 600"), std::string::npos);
  {
    std::ofstream(dir.path() + "/bad") << "zz\n";
  }
  ::chmod((dir.path() + "/bad").c_str(), 0600);
  EXPECT_NE(ReceiptSigner::Load(dir.path() + "/bad").status().message().find("64 hex digits"), std::string::npos);
}

TEST(Receipt, CompareNamesTheFirstDifferingToken) {
  const Receipt a = SampleReceipt();
  EXPECT_TRUE(CompareOutputs(a, a).equal);
  Receipt b = a;
  b.generations[0].choices[0] = MakeChoice(0, {7, 5, 9}, nullptr);
  Comparison c = CompareOutputs(b, a);
  EXPECT_FALSE(c.equal);
  EXPECT_EQ(c.what, "token");
  EXPECT_EQ(c.choice, 0);
  EXPECT_EQ(c.token_index, 1);
  EXPECT_EQ(c.receipt_token, 5);
  EXPECT_EQ(c.replay_token, 8);
  b = a;
  b.generations[0].choices[0] = MakeChoice(0, {7, 8}, nullptr);  // shorter
  c = CompareOutputs(b, a);
  EXPECT_EQ(c.what, "length");
  EXPECT_EQ(c.token_index, 2);
  EXPECT_FALSE(c.receipt_token.has_value());
  b = a;
  b.generations[0].choices[0].output = std::string(64, '0');  // digest not of its tokens
  EXPECT_EQ(CompareOutputs(b, a).what, "output_digest");
  b = a;
  b.generations[0].choices[1].logprobs = std::string(64, '0');
  EXPECT_EQ(CompareOutputs(b, a).what, "logprobs");
  EXPECT_EQ(ToJson(CompareOutputs(b, a))["result"], "different");
}

}  // namespace
}  // namespace tessera::receipt
