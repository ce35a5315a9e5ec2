// tokenizer.json decoders: ByteLevel, ByteFallback, Fuse, Strip, Replace,
// Metaspace, Sequence. Each transforms a list of token strings; the final
// text is their concatenation. Invalid UTF-8 produced by byte-level or
// byte-fallback tokens becomes U+FFFD (maximal-subpart rule). Immutable and
// thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "text/json_util.h"

namespace tessera::text {

struct DecodeChain {
  std::vector<std::string> tokens;
  // Parallel to tokens: 1 for added tokens, which ByteLevel leaves verbatim.
  std::vector<uint8_t> added;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void Decode(DecodeChain* chain) const = 0;
};

StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const Json& j, const std::string& path);

}  // namespace tessera::text
