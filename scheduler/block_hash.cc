#include "scheduler/block_hash.h"

#include <optional>

namespace tessera {
namespace {

// The bytes of Python's pickle.dumps(obj, protocol=5) (pickle.HIGHEST_PROTOCOL
// of the Pythons vLLM supports) for the few types a block tuple holds: bytes,
// int, str, None and tuples of them. Frames and memo opcodes are written where
// CPython's pickler writes them: a frame opens at the first opcode after PROTO,
// is committed (FRAME + 8-byte length, or dropped below 4 bytes) at the start
// of saving an object once it holds >= 64 KiB, and at STOP.
class PickleWriter {
 public:
  PickleWriter() { out_ = "\x80\x05"; }

  void Bytes(std::span<const uint8_t> b) {
    BeginSave();
    if (b.size() < 256) {
      Op(0x43);  // SHORT_BINBYTES
      Raw(static_cast<char>(b.size()));
    } else {
      Op(0x42);  // BINBYTES
      Le(b.size(), 4);
    }
    out_.append(reinterpret_cast<const char*>(b.data()), b.size());
    Memoize();
  }
  void Str(std::string_view s) {
    BeginSave();
    if (s.size() < 256) {
      Op(0x8c);  // SHORT_BINUNICODE
      Raw(static_cast<char>(s.size()));
    } else {
      Op(0x58);  // BINUNICODE
      Le(s.size(), 4);
    }
    out_.append(s);
    Memoize();
  }
  void Int(uint64_t v) {
    BeginSave();
    if (v <= 0xff) {
      Op(0x4b);  // BININT1
      Le(v, 1);
    } else if (v <= 0xffff) {
      Op(0x4d);  // BININT2
      Le(v, 2);
    } else if (v <= 0x7fffffff) {
      Op(0x4a);  // BININT
      Le(v, 4);
    } else {  // LONG1: little-endian two's complement, (bit length / 8) + 1 bytes
      int bits = 64 - __builtin_clzll(v);
      const int n = bits / 8 + 1;
      Op(0x8a);
      Raw(static_cast<char>(n));
      Le(v, n > 8 ? 8 : n);
      if (n > 8) Raw('\0');
    }
  }
  void None() {
    BeginSave();
    Op('N');
  }
  // A tuple's elements are saved between BeginTuple and EndTuple(n).
  void BeginTuple(size_t n) {
    BeginSave();
    if (n > 3) Op('(');  // MARK
  }
  void EndTuple(size_t n) {
    if (n == 0) {
      Op(')');  // EMPTY_TUPLE, never memoized
      return;
    }
    Op(n == 1 ? 0x85 : n == 2 ? 0x86 : n == 3 ? 0x87 : 't');
    Memoize();
  }
  std::string Finish() {
    Op('.');
    CommitFrame();
    return std::move(out_);
  }

 private:
  static constexpr size_t kFrameHeader = 9;
  static constexpr size_t kFrameTarget = 64 * 1024;

  void BeginSave() {
    if (frame_start_ && out_.size() - *frame_start_ - kFrameHeader >= kFrameTarget) CommitFrame();
  }
  void Op(uint8_t op) {
    if (!frame_start_) {
      frame_start_ = out_.size();
      out_.append(kFrameHeader, '\0');
    }
    out_.push_back(static_cast<char>(op));
  }
  void Raw(char c) { out_.push_back(c); }
  void Le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void Memoize() { out_.push_back(static_cast<char>(0x94)); }
  void CommitFrame() {
    if (!frame_start_) return;
    const size_t len = out_.size() - *frame_start_ - kFrameHeader;
    if (len >= 4) {
      out_[*frame_start_] = static_cast<char>(0x95);
      for (int i = 0; i < 8; ++i) out_[*frame_start_ + 1 + i] = static_cast<char>((len >> (8 * i)) & 0xff);
    } else {
      out_.erase(*frame_start_, kFrameHeader);
    }
    frame_start_.reset();
  }

  std::string out_;
  std::optional<size_t> frame_start_;
};

// cbor2.dumps(obj, canonical=True) for the same types (tuples are arrays).
class CborWriter {
 public:
  void Bytes(std::span<const uint8_t> b) {
    Head(2, b.size());
    out_.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  void Str(std::string_view s) {
    Head(3, s.size());
    out_.append(s);
  }
  void Int(uint64_t v) { Head(0, v); }
  void None() { out_.push_back(static_cast<char>(0xf6)); }
  void BeginTuple(size_t n) { Head(4, n); }
  void EndTuple(size_t) {}
  std::string Finish() { return std::move(out_); }

 private:
  void Head(uint8_t major, uint64_t v) {
    const uint8_t m = static_cast<uint8_t>(major << 5);
    auto be = [&](int bytes) {
      for (int i = bytes - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    };
    if (v < 24) {
      out_.push_back(static_cast<char>(m | v));
    } else if (v <= 0xff) {
      out_.push_back(static_cast<char>(m | 24));
      be(1);
    } else if (v <= 0xffff) {
      out_.push_back(static_cast<char>(m | 25));
      be(2);
    } else if (v <= 0xffffffffULL) {
      out_.push_back(static_cast<char>(m | 26));
      be(4);
    } else {
      out_.push_back(static_cast<char>(m | 27));
      be(8);
    }
  }
  std::string out_;
};

// The serialized tuple (parent, tuple(tokens), extra_keys).
template <typename W>
std::string SerializeBlock(const BlockHash& parent, std::span<const int32_t> tokens,
                           std::span<const uint64_t> int_keys, const std::string* salt) {
  W w;
  w.BeginTuple(3);
  w.Bytes(parent.digest);
  w.BeginTuple(tokens.size());
  for (int32_t t : tokens) w.Int(static_cast<uint32_t>(t));  // token ids are non-negative
  w.EndTuple(tokens.size());
  const size_t n_extra = int_keys.size() + (salt != nullptr ? 1 : 0);
  if (n_extra == 0) {
    w.None();
  } else {
    w.BeginTuple(n_extra);
    for (uint64_t k : int_keys) w.Int(k);
    if (salt != nullptr) w.Str(*salt);
    w.EndTuple(n_extra);
  }
  w.EndTuple(3);
  return w.Finish();
}

template <typename W>
std::string SerializeSeed(std::string_view seed) {
  W w;
  w.Str(seed);
  return w.Finish();
}

}  // namespace

std::string_view PrefixHashAlgoName(PrefixHashAlgo algo) {
  return algo == PrefixHashAlgo::kSha256Cbor ? "sha256_cbor" : "sha256";
}

StatusOr<PrefixHashAlgo> ParsePrefixHashAlgo(std::string_view name) {
  if (name == "sha256") return PrefixHashAlgo::kSha256;
  if (name == "sha256_cbor") return PrefixHashAlgo::kSha256Cbor;
  return InvalidArgument("unknown prefix-caching hash algorithm '" + std::string(name.substr(0, 64)) +
                         "' (expected sha256 or sha256_cbor)");
}

BlockHashScheme::BlockHashScheme(PrefixHashAlgo algo, std::string_view seed) : algo_(algo) {
  none_hash_.digest = Sha256Of(algo == PrefixHashAlgo::kSha256Cbor ? SerializeSeed<CborWriter>(seed)
                                                                   : SerializeSeed<PickleWriter>(seed));
}

BlockHash BlockHashScheme::HashBlock(const BlockHash& parent, std::span<const int32_t> tokens,
                                     std::span<const uint64_t> int_keys, const std::string* salt) const {
  const std::string bytes = algo_ == PrefixHashAlgo::kSha256Cbor
                                ? SerializeBlock<CborWriter>(parent, tokens, int_keys, salt)
                                : SerializeBlock<PickleWriter>(parent, tokens, int_keys, salt);
  return BlockHash{Sha256Of(bytes)};
}

void BlockHashScheme::ExtendBlockHashes(std::span<const int32_t> tokens, int32_t block_size,
                                        std::span<const uint64_t> int_keys, const std::string& cache_salt,
                                        std::vector<BlockHash>* hashes) const {
  const size_t full = tokens.size() / static_cast<size_t>(block_size);
  while (hashes->size() < full) {
    const size_t b = hashes->size();
    const BlockHash& parent = b == 0 ? none_hash_ : (*hashes)[b - 1];
    const std::string* salt = b == 0 && !cache_salt.empty() ? &cache_salt : nullptr;
    hashes->push_back(HashBlock(parent, tokens.subspan(b * block_size, block_size), int_keys, salt));
  }
}

std::string ApiKeyTenantId(std::string_view api_key) {
  return ToHex(Sha256Of("tessera api-key tenant\n" + std::string(api_key)));
}

std::string TenantCacheSalt(std::string_view tenant, std::string_view client_salt) {
  if (tenant.empty()) return std::string(client_salt);
  return "tenant:" + std::string(tenant) + ":" + std::string(client_salt);
}

}  // namespace tessera
