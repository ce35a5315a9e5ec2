// KvCacheLayout: what one token occupies in one layer of the paged KV cache, as
// planes (docs/architecture.md, "Engine"). Every size the cache, the pool sizing and
// the KV tiers compute goes through it, so an attention kind whose cache is not "K
// and V per KV head" changes only this table.
//   MHA: plane 0 = K, plane 1 = V, each num_kv_heads * head_dim values.
//   MLA: plane 0 = [latent c (kv_lora_rank) | rope key (qk_rope_head_dim)]; V is a
//        view of the first kv_lora_rank values of that row (no second plane).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "engine/model_config.h"

namespace tessera {

struct KvCacheLayout {
  AttentionKind attention = AttentionKind::kMha;
  // Values per token of each plane, in storage (and serialisation) order.
  std::vector<int64_t> plane_elems;
  // K and V as the attention kernel reads them: K is plane 0's row; V is plane 1's row
  // (MHA) or the first v_elems values of plane 0's row (v_aliases_k, MLA).
  int64_t k_elems = 0;
  int64_t v_elems = 0;
  bool v_aliases_k = false;

  // Sum of the planes: values one token stores in one layer.
  int64_t ElemsPerToken() const;
  // Bytes one token stores across `layers` layers at `dtype`.
  int64_t BytesPerToken(DType dtype, int64_t layers) const;
  // "mha k=256 v=256" / "mla latent=576 v=first 512": names the kind and the plane
  // widths, so two instances with different layouts never share KV bytes.
  std::string Describe() const;
};

// The layout of one layer of `config` (the rank's local config under TP).
KvCacheLayout MakeKvCacheLayout(const ModelConfig& config);

}  // namespace tessera
