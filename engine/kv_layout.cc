#include "engine/kv_layout.h"

namespace tessera {

KvCacheLayout MakeKvCacheLayout(const ModelConfig& c) {
  KvCacheLayout l;
  l.attention = c.attention;
  if (c.attention == AttentionKind::kMla) {
    l.k_elems = c.mla.kv_lora_rank + c.mla.qk_rope_head_dim;
    l.v_elems = c.mla.kv_lora_rank;
    l.v_aliases_k = true;
    l.plane_elems = {l.k_elems};
  } else {
    l.k_elems = l.v_elems = c.num_kv_heads * c.head_dim;
    l.plane_elems = {l.k_elems, l.v_elems};
  }
  return l;
}

int64_t KvCacheLayout::ElemsPerToken() const {
  int64_t n = 0;
  for (int64_t e : plane_elems) n += e;
  return n;
}

int64_t KvCacheLayout::BytesPerToken(DType dtype, int64_t layers) const {
  return layers * ElemsPerToken() * static_cast<int64_t>(DTypeSize(dtype));
}

std::string KvCacheLayout::Describe() const {
  if (attention == AttentionKind::kMla) {
    return "mla latent=" + std::to_string(k_elems) + " v=first " + std::to_string(v_elems);
  }
  return "mha k=" + std::to_string(k_elems) + " v=" + std::to_string(v_elems);
}

int64_t ModelConfig::KvBytesPerToken(int64_t bytes_per_elem) const {
  return num_layers * MakeKvCacheLayout(*this).ElemsPerToken() * bytes_per_elem;
}

}  // namespace tessera
