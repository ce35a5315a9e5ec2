// libFuzzer target: ParseGguf on arbitrary bytes, then the model-config and
// tokenizer mappings on whatever parses. Checks that accepted files satisfy
// the documented invariants and that every tensor's bytes lie inside the
// input (ASan flags any pointer outside it).
#include <cstddef>
#include <cstdint>

#include "engine/gguf.h"
#include "engine/gguf_model.h"
#include "text/gguf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto g = tessera::ParseGguf(data, size, "fuzz");
  if (!g.ok()) {
    if (g.status().message().rfind("fuzz: ", 0) != 0) __builtin_trap();
    return 0;
  }
  if (g->alignment == 0 || (g->alignment & (g->alignment - 1)) != 0) __builtin_trap();
  if (g->data_offset % g->alignment != 0) __builtin_trap();
  volatile uint8_t sink = 0;
  for (const tessera::GgufTensor& t : g->tensors) {
    if (t.ne.empty() || t.ne.size() > 4 || t.offset % g->alignment != 0) __builtin_trap();
    for (int64_t d : t.ne) {
      if (d <= 0) __builtin_trap();
    }
    if (t.data != data + g->data_offset + t.offset) __builtin_trap();
    if (static_cast<int64_t>(t.nbytes) != t.rows() * tessera::DTypeRowBytes(t.dtype, t.cols())) __builtin_trap();
    if (t.data + t.nbytes > data + size) __builtin_trap();
    if (t.nbytes > 0) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
  }
  (void)tessera::GgufModelConfig(*g, "fuzz");
  (void)tessera::text::GgufToTokenizerJson(*g, "fuzz");
  (void)sink;
  return 0;
}
