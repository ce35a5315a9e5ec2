#include "runtime/scheduler_limits.h"
#include "common/log.h"

#include <algorithm>


namespace tessera {

bool ApplyModelLimits(const ModelConfig& mc, SchedulerOptions* so) {
  if (so->limits.vocab_size == 0) so->limits.vocab_size = mc.vocab_size;
  const bool auto_len = so->limits.max_model_len <= 0;
  if (auto_len) {
    so->limits.max_model_len = mc.max_position_embeddings > 0 ? mc.max_position_embeddings : 4096;
  } else if (mc.max_position_embeddings > 0) {
    so->limits.max_model_len = std::min(so->limits.max_model_len, mc.max_position_embeddings);
  }
  if (so->eos_token_ids.empty()) {
    for (int64_t id : mc.eos_token_ids) so->eos_token_ids.push_back(static_cast<int32_t>(id));
  }
  return auto_len;
}

void CapModelLenAtKvCache(bool auto_len, SchedulerOptions* so) {
  const int64_t kv_tokens = int64_t{so->kv.num_blocks} * so->kv.block_size;
  if (so->limits.max_model_len <= kv_tokens) return;
  if (auto_len) {
    LogInfo("max model length: {} (what the KV cache holds; the model allows {}); raise the KV cache "
            "size for longer sequences", kv_tokens, so->limits.max_model_len);
    so->limits.max_model_len = kv_tokens;
  } else {
    LogWarn("max model length {} exceeds the KV cache ({} tokens); longer requests will be refused",
            so->limits.max_model_len, kv_tokens);
  }
}

}  // namespace tessera
