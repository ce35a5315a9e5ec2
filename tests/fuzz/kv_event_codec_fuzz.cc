// libFuzzer target: DecodeEventBatch on arbitrary bytes (what a subscriber
// receives from the network). It must never crash or allocate beyond the
// input's size; a decoded batch must re-encode and decode to the same events.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/kv_events/kv_event_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto batch = tessera::kv_events::DecodeEventBatch(in);
  if (!batch.ok()) return 0;
  auto again = tessera::kv_events::DecodeEventBatch(tessera::kv_events::EncodeEventBatch(*batch));
  if (!again.ok() || again->events != batch->events) __builtin_trap();
  return 0;
}
