#include "server/serving/receipts.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/sha256.h"
#include "server/serving/serving_engine.h"

namespace tessera {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

void PutField(Sha256& h, std::string_view s) {
  const uint64_t n = s.size();
  h.Update(&n, sizeof(n));
  h.Update(s);
}

}  // namespace

std::string TokenizerDigest(const std::string& model_dir, const text::Tokenizer& tokenizer,
                            const text::ChatTemplate* chat_template) {
  Sha256 h;
  h.Update("tessera-tokenizer-v1");
  static const char* const kFiles[] = {"tokenizer.json",     "tokenizer_config.json", "special_tokens_map.json",
                                       "chat_template.jinja", "chat_template.json",   "generation_config.json"};
  std::error_code ec;
  const bool is_dir = fs::is_directory(model_dir, ec);
  for (const char* name : kFiles) {
    const fs::path p = fs::path(model_dir) / name;
    if (!is_dir || !fs::is_regular_file(p, ec)) continue;
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    PutField(h, name);
    PutField(h, ss.str());
  }
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string* t = tokenizer.IdToToken(id);
    PutField(h, t != nullptr ? *t : std::string());
    h.Update(tokenizer.IsSpecial(id) ? "s" : "n");
  }
  if (chat_template != nullptr) {
    for (const std::string& src : chat_template->sources()) PutField(h, src);
  }
  return ToHex(h.Finish());
}

void AppendCanonicalLogprobs(const std::vector<int32_t>& token_ids, const std::vector<LogprobEntry>& logprobs,
                             json* out) {
  if (out->is_null()) *out = json::array();
  for (size_t i = 0; i < logprobs.size() && i < token_ids.size(); ++i) {
    json top = json::array();
    for (const LogprobEntry& t : logprobs[i].top) top.push_back({t.token_id, t.logprob});
    out->push_back({logprobs[i].token_id, logprobs[i].logprob, top});
  }
}

void ReceiptRecorder::Begin(size_t prompt_index, const GenerateInput& input) {
  if (gens_.size() <= prompt_index) gens_.resize(prompt_index + 1);
  Gen& g = gens_[prompt_index];
  g.request = receipt::CanonicalRequest(input.request, 0, input.skip_special_tokens, input.include_stop_str_in_output);
  g.tokens.assign(static_cast<size_t>(input.request.params.n), {});
  g.logprobs.assign(static_cast<size_t>(input.request.params.n), json());
}

void ReceiptRecorder::SetSeed(size_t prompt_index, uint64_t seed, bool drawn) {
  Gen& g = gens_[prompt_index];
  g.seed = seed;
  g.seed_drawn = drawn;
  g.request["seed"] = std::to_string(seed);  // as CanonicalRequest writes it
}

void ReceiptRecorder::Add(size_t prompt_index, const GenerationUpdate& update) {
  Gen& g = gens_[prompt_index];
  for (const ChoiceDelta& d : update.choices) {
    const size_t c = static_cast<size_t>(d.index);
    if (c >= g.tokens.size()) continue;
    g.tokens[c].insert(g.tokens[c].end(), d.token_ids.begin(), d.token_ids.end());
    if (!d.logprobs.empty()) AppendCanonicalLogprobs(d.token_ids, d.logprobs, &g.logprobs[c]);
  }
}

nlohmann::json ReceiptRecorder::CanonicalRequests() const {
  nlohmann::json out = nlohmann::json::array();
  for (const Gen& g : gens_) out.push_back(g.request);
  return out;
}

receipt::Receipt ReceiptRecorder::Finish(const ReceiptContext& context) const {
  receipt::Receipt r;
  r.server = context.digests;
  for (const Gen& g : gens_) {
    receipt::GenerationRecord rec;
    rec.request = receipt::DigestHex(receipt::CanonicalDump(g.request));
    rec.seed = g.seed;
    rec.seed_drawn = g.seed_drawn;
    for (size_t c = 0; c < g.tokens.size(); ++c) {
      rec.choices.push_back(receipt::MakeChoice(static_cast<int32_t>(c), g.tokens[c],
                                                g.logprobs[c].is_null() ? nullptr : &g.logprobs[c]));
    }
    r.generations.push_back(std::move(rec));
  }
  if (context.signer) context.signer->Sign(&r);
  return r;
}

}  // namespace tessera
