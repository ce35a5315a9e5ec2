#include "receipt/compare.h"

#include <algorithm>

namespace tessera::receipt {
namespace {

Comparison Differ(std::string what, int32_t g, int32_t c, std::string message) {
  Comparison r;
  r.equal = false;
  r.what = std::move(what);
  r.generation = g;
  r.choice = c;
  r.message = std::move(message);
  return r;
}

std::string Where(int32_t g, int32_t c) {
  return "generation " + std::to_string(g) + ", choice " + std::to_string(c);
}

}  // namespace

Comparison CompareOutputs(const Receipt& claimed, const Receipt& replayed) {
  if (claimed.generations.size() != replayed.generations.size()) {
    return Differ("generations", -1, -1,
                  "the receipt has " + std::to_string(claimed.generations.size()) + " generations, the request " +
                      std::to_string(replayed.generations.size()));
  }
  for (size_t g = 0; g < claimed.generations.size(); ++g) {
    const auto& a = claimed.generations[g].choices;
    const auto& b = replayed.generations[g].choices;
    const auto gi = static_cast<int32_t>(g);
    if (a.size() != b.size()) {
      return Differ("choices", gi, -1,
                    "generation " + std::to_string(g) + ": the receipt has " + std::to_string(a.size()) +
                        " choices, the re-execution " + std::to_string(b.size()));
    }
    for (size_t c = 0; c < a.size(); ++c) {
      const auto ci = static_cast<int32_t>(c);
      if (!a[c].has_token_ids) {  // the compact form: digests only
        if (a[c].output != b[c].output) {
          return Differ("output_digest", gi, ci,
                        Where(gi, ci) + ": the output differs from the re-execution's (this receipt carries "
                                        "digests only; the full form, from the response body, names the first "
                                        "differing token)");
        }
        if (a[c].logprobs != b[c].logprobs) {
          return Differ("logprobs", gi, ci, Where(gi, ci) + ": same output, different logprobs digest");
        }
        continue;
      }
      const std::vector<int32_t>& x = a[c].token_ids;
      const std::vector<int32_t>& y = b[c].token_ids;
      const auto [ix, iy] = std::mismatch(x.begin(), x.end(), y.begin(), y.end());
      if (ix != x.end() || iy != y.end()) {
        const int64_t k = ix - x.begin();
        Comparison r = Differ(ix != x.end() && iy != y.end() ? "token" : "length", gi, ci, "");
        r.token_index = k;
        if (ix != x.end()) r.receipt_token = *ix;
        if (iy != y.end()) r.replay_token = *iy;
        r.message = Where(gi, ci) + ": output token " + std::to_string(k) + " is " +
                    (r.receipt_token ? std::to_string(*r.receipt_token) : std::string("past the end")) +
                    " in the receipt, " +
                    (r.replay_token ? std::to_string(*r.replay_token) : std::string("past the end")) +
                    " when re-executed";
        return r;
      }
      if (a[c].output != b[c].output) {
        return Differ("output_digest", gi, ci,
                      Where(gi, ci) + ": the receipt's output digest does not match its token ids");
      }
      if (a[c].logprobs != b[c].logprobs) {
        return Differ("logprobs", gi, ci, Where(gi, ci) + ": same tokens, different logprobs digest");
      }
    }
  }
  return Comparison{};
}

nlohmann::json ToJson(const Comparison& c) {
  nlohmann::json j = {{"result", c.equal ? "equal" : "different"}};
  if (c.equal) return j;
  j["differs"] = c.what;
  j["message"] = c.message;
  if (c.generation >= 0) j["generation"] = c.generation;
  if (c.choice >= 0) j["choice"] = c.choice;
  if (c.token_index >= 0) {
    j["first_differing_token"] = c.token_index;
    j["receipt_token"] = c.receipt_token ? nlohmann::json(*c.receipt_token) : nlohmann::json(nullptr);
    j["replay_token"] = c.replay_token ? nlohmann::json(*c.replay_token) : nlohmann::json(nullptr);
  }
  return j;
}

}  // namespace tessera::receipt
