// libFuzzer target: ParseSafetensorsHeader on arbitrary bytes. Checks that
// accepted headers satisfy the documented invariants and that every tensor's
// bytes lie inside the input (ASan flags any pointer outside it).
#include <cstddef>
#include <cstdint>

#include "engine/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = tessera::ParseSafetensorsHeader(data, size, "fuzz");
  if (!h.ok()) {
    if (h.status().message().rfind("fuzz: ", 0) != 0) __builtin_trap();
    return 0;
  }
  if (h->data_offset != 8 + h->header_bytes || h->data_offset + h->data_bytes != size) __builtin_trap();
  uint64_t covered = 0;
  volatile uint8_t sink = 0;
  for (const tessera::SafetensorsTensor& t : h->tensors) {
    if (t.begin != covered || t.end < t.begin || t.end > h->data_bytes) __builtin_trap();
    covered = t.end;
    const int64_t elem = tessera::SafetensorsDTypeSize(t.dtype_name);
    if (elem == 0 || static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(elem) != t.nbytes())
      __builtin_trap();
    if (t.data != data + h->data_offset + t.begin) __builtin_trap();
    if (t.nbytes() > 0) sink = sink ^ t.data[0] ^ t.data[t.nbytes() - 1];
    for (int64_t d : t.shape) {
      if (d < 0) __builtin_trap();
    }
  }
  if (covered != h->data_bytes) __builtin_trap();
  for (const auto& [k, v] : h->metadata) sink = sink ^ static_cast<uint8_t>(k.size() + v.size());
  (void)sink;
  return 0;
}
