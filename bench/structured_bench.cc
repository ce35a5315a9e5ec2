// Structured-output mask cost: compiles a JSON Schema (a large built-in one,
// or --schema FILE) over a real tokenizer's vocabulary and walks random valid
// documents token by token, timing every FillMask (the per-step work of one
// constrained sequence). Reports vocabulary trie build, compile time and mask
// time p50/p99/max, also split into the first document (position tables
// being built) and the later ones (tables and the per-grammar mask cache
// warm, as for every request after the first). --full-walk also times a walk of
// the whole vocabulary trie for every state (the cost without the position
// tables) and checks that both masks are equal.
//
//   tessera-structured-bench --tokenizer-dir MODEL_DIR [--schema FILE] [--docs 20] [--seed 1]
//                            [--max-tokens 400] [--full-walk] [--json OUT]
// Check it on tiny inputs (--docs 1 --max-tokens 20); real figures come from a quiet machine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "structured/json_schema.h"
#include "structured/structured.h"
#include "text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// An order-like document: nested objects, arrays, enums, formats, patterns, ranges.
Json LargeSchema() {
  Json item = Json::parse(R"({"type":"object","properties":{
    "sku":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},
    "name":{"type":"string","maxLength":40},
    "quantity":{"type":"integer","minimum":1,"maximum":1000},
    "price":{"type":"number","minimum":0},
    "tags":{"type":"array","items":{"enum":["new","sale","gift","fragile","bulk"]},"maxItems":3},
    "dimensions":{"type":"object","properties":{"w":{"type":"number"},"h":{"type":"number"},"d":{"type":"number"}},
                  "required":["w","h","d"]}},
    "required":["sku","name","quantity","price"]})");
  Json address = Json::parse(R"({"type":"object","properties":{
    "street":{"type":"string","maxLength":60},"city":{"type":"string","maxLength":30},
    "zip":{"type":"string","pattern":"^[0-9]{5}$"},"country":{"enum":["US","CA","MX","DE","FR","JP"]}},
    "required":["street","city","zip","country"]})");
  Json schema = {{"type", "object"},
                 {"$defs", {{"item", item}, {"address", address}}},
                 {"properties",
                  {{"order_id", {{"type", "string"}, {"format", "uuid"}}},
                   {"created", {{"type", "string"}, {"format", "date-time"}}},
                   {"customer",
                    {{"type", "object"},
                     {"properties",
                      {{"name", {{"type", "string"}, {"maxLength", 50}}},
                       {"email", {{"type", "string"}, {"format", "email"}}},
                       {"vip", {{"type", "boolean"}}},
                       {"shipping", {{"$ref", "#/$defs/address"}}},
                       {"billing", {{"anyOf", {{{"$ref", "#/$defs/address"}}, {{"type", "null"}}}}}}}},
                     {"required", {"name", "email", "shipping"}}}},
                   {"items", {{"type", "array"}, {"items", {{"$ref", "#/$defs/item"}}}, {"minItems", 1}, {"maxItems", 20}}},
                   {"status", {{"enum", {"pending", "paid", "shipped", "delivered", "cancelled"}}}},
                   {"notes", {{"type", "string"}}},
                   {"discount_percent", {{"type", "integer"}, {"minimum", 0}, {"maximum", 100}}}}},
                 {"required", {"order_id", "created", "customer", "items", "status"}}};
  return schema;
}

struct Stats {
  std::vector<double> ms;
  double Pct(double p) {
    if (ms.empty()) return 0;
    std::sort(ms.begin(), ms.end());
    return ms[std::min(ms.size() - 1, static_cast<size_t>(p * static_cast<double>(ms.size())))];
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Structured-output mask cost per token"};
  std::string dir, schema_path, json_out;
  int docs = 20, max_tokens = 400;
  uint64_t seed = 1;
  app.add_option("--tokenizer-dir", dir, "model directory with tokenizer.json")->required();
  app.add_option("--schema", schema_path, "JSON Schema file (default: a large built-in one)");
  app.add_option("--docs", docs, "random documents to walk");
  app.add_option("--max-tokens", max_tokens, "tokens per document at most");
  app.add_option("--seed", seed, "random walk seed");
  app.add_option("--json", json_out, "write the figures here too");
  bool full_walk = false;
  app.add_flag("--full-walk", full_walk, "also time a full trie walk of every state (and check the masks agree)");
  CLI11_PARSE(app, argc, argv);

  auto tok = tessera::text::Tokenizer::FromDirectory(dir);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer: %s\n", tok.status().ToString().c_str());
    return 1;
  }
  Json schema = LargeSchema();
  if (!schema_path.empty()) {
    std::ifstream in(schema_path);
    std::stringstream ss;
    ss << in.rdbuf();
    schema = Json::parse(ss.str(), nullptr, false);
    if (schema.is_discarded()) {
      std::fprintf(stderr, "--schema: not JSON\n");
      return 1;
    }
  }
  const auto t0 = Clock::now();
  auto vocab = tessera::structured::TokenVocab::FromTokenizer(**tok, (*tok)->vocab_size());
  const double vocab_ms = Ms(Clock::now() - t0);
  tessera::structured::StructuredOutputs so(vocab);
  const auto t1 = Clock::now();
  auto gbnf = tessera::structured::JsonSchemaToGbnf(schema, so.limits());
  if (!gbnf.ok()) {
    std::fprintf(stderr, "schema: %s\n", gbnf.status().ToString().c_str());
    return 1;
  }
  auto compiled = so.CompileGbnf(*gbnf);
  if (!compiled.ok()) {
    std::fprintf(stderr, "compile: %s\n", compiled.status().ToString().c_str());
    return 1;
  }
  const double compile_ms = Ms(Clock::now() - t1);

  std::mt19937_64 rng(seed);
  std::vector<uint32_t> mask(static_cast<size_t>((*compiled)->mask_words())), full(mask.size());
  Stats all, first_doc, later, walk;
  int64_t tokens = 0, complete = 0;
  for (int d = 0; d < docs; ++d) {
    tessera::structured::GrammarMatcher m(*compiled);
    for (int i = 0; i < max_tokens && !m.IsComplete(); ++i) {
      const auto s = Clock::now();
      m.FillMask(mask);
      const double ms = Ms(Clock::now() - s);
      all.ms.push_back(ms);
      (d == 0 ? first_doc : later).ms.push_back(ms);
      if (full_walk) {  // the same state by one walk of the whole trie (no tables, no cache): cost and exactness
        const auto w = Clock::now();
        m.FillMaskFullWalk(full);
        walk.ms.push_back(Ms(Clock::now() - w));
        if (full != mask) {
          std::fprintf(stderr, "bug: the table mask differs from the full-walk mask\n");
          return 1;
        }
      }
      std::vector<int32_t> allowed;
      for (size_t w = 0; w < mask.size(); ++w) {
        for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
          allowed.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits))));
        }
      }
      if (allowed.empty()) break;
      // Prefer short tokens half the time so documents finish (a random walk over long tokens rarely closes).
      int32_t t = allowed[rng() % allowed.size()];
      if (rng() % 2) {
        for (int k = 0; k < 8; ++k) {
          const int32_t c = allowed[rng() % allowed.size()];
          if (vocab->bytes(c)->size() < vocab->bytes(t)->size()) t = c;
        }
      }
      if (!m.AcceptToken(t)) {
        std::fprintf(stderr, "bug: a masked-in token was rejected\n");
        return 1;
      }
      ++tokens;
    }
    complete += m.IsComplete();
  }
  const double p50 = all.Pct(0.5), p99 = all.Pct(0.99), mx = all.Pct(1.0);
  const double d0_p50 = first_doc.Pct(0.5), d0_p99 = first_doc.Pct(0.99), dn_p50 = later.Pct(0.5),
               dn_p99 = later.Pct(0.99), w_p50 = walk.Pct(0.5), w_p99 = walk.Pct(0.99);
  std::printf("vocab %d tokens: trie built in %.1f ms; schema compiled in %.2f ms (%zu bytes of GBNF)\n",
              vocab->size(), vocab_ms, compile_ms, gbnf->size());
  std::printf("%lld tokens over %d documents (%lld complete): mask p50 %.4f ms, p99 %.3f ms, max %.3f ms\n",
              static_cast<long long>(tokens), docs, static_cast<long long>(complete), p50, p99, mx);
  std::printf("  first document (tables being built): p50 %.4f ms, p99 %.3f ms; later documents: p50 %.4f ms, "
              "p99 %.3f ms\n", d0_p50, d0_p99, dn_p50, dn_p99);
  if (full_walk) {
    std::printf("  full trie walk of the same states (no tables, no cache): p50 %.3f ms, p99 %.3f ms; masks equal\n",
                w_p50, w_p99);
  }
  if (!json_out.empty()) {
    Json out = {{"vocab_size", vocab->size()}, {"trie_build_ms", vocab_ms}, {"compile_ms", compile_ms},
                {"tokens", tokens}, {"documents", docs}, {"complete", complete},
                {"mask_ms_p50", p50}, {"mask_ms_p99", p99}, {"mask_ms_max", mx},
                {"first_doc_ms_p50", d0_p50}, {"first_doc_ms_p99", d0_p99}, {"later_docs_ms_p50", dn_p50},
                {"later_docs_ms_p99", dn_p99}};
    if (full_walk) {
      out["full_walk_ms_p50"] = w_p50;
      out["full_walk_ms_p99"] = w_p99;
    }
    std::ofstream(json_out) << out.dump(2) << "\n";
  }
  return 0;
}
