#include "engine/kv_tiers/kv_block_record.h"

#include <cstring>

namespace tessera::kv_tiers {
namespace {

constexpr char kMagic[8] = {'T', 'S', 'K', 'V', 'B', 'L', 'K', '\0'};

void PutLe(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLe(std::string_view s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

void PutField(std::string_view f, std::string* out) {
  PutLe(f.size(), 4, out);
  out->append(f);
}

std::string Hex64(uint64_t v) {
  static const char* kDigits = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[i] = kDigits[v & 0xf];
  return out;
}

}  // namespace

uint64_t Fnv1a64(const void* data, size_t bytes, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string SerializeKey(const KvBlockKey& key) {
  std::string out = "kv1";
  PutField(key.model_fingerprint, &out);
  PutField(key.layout, &out);
  PutLe(key.hash_hi, 8, &out);
  PutLe(key.hash_lo, 8, &out);
  PutField(key.tenant, &out);
  return out;
}

std::string KeyId(const KvBlockKey& key) {
  const std::string s = SerializeKey(key);
  return Hex64(Fnv1a64(s.data(), s.size())) + Hex64(Fnv1a64(s.data(), s.size(), 0x84222325cbf29ce4ULL));
}

std::string EncodeKvRecord(const KvBlockKey& key, std::string_view payload) {
  const std::string k = SerializeKey(key);
  std::string out(kMagic, sizeof(kMagic));
  out.reserve(kKvRecordHeaderBytes + k.size() + payload.size());
  PutLe(kKvRecordVersion, 4, &out);
  PutLe(k.size(), 4, &out);
  PutLe(payload.size(), 8, &out);
  PutLe(Fnv1a64(payload.data(), payload.size()), 8, &out);
  const uint64_t header_sum = Fnv1a64(k.data(), k.size(), Fnv1a64(out.data(), out.size()));
  PutLe(header_sum, 8, &out);
  out += k;
  out.append(payload);
  return out;
}

StatusOr<KvRecordHeader> DecodeKvRecordHeader(std::string_view b) {
  if (b.size() < kKvRecordHeaderBytes) return DataLoss("KV record: shorter than its header");
  if (std::memcmp(b.data(), kMagic, sizeof(kMagic)) != 0) return DataLoss("KV record: bad magic");
  if (GetLe(b, 8, 4) != kKvRecordVersion) return DataLoss("KV record: unknown version " + std::to_string(GetLe(b, 8, 4)));
  const uint64_t key_len = GetLe(b, 12, 4);
  if (key_len > kMaxKeyBytes || b.size() < kKvRecordHeaderBytes + key_len) return DataLoss("KV record: bad key length");
  const uint64_t header_sum = Fnv1a64(b.data() + kKvRecordHeaderBytes, key_len, Fnv1a64(b.data(), 32));
  if (header_sum != GetLe(b, 32, 8)) return DataLoss("KV record: header checksum mismatch");
  KvRecordHeader h;
  h.payload_size = GetLe(b, 16, 8);
  h.key.assign(b.data() + kKvRecordHeaderBytes, key_len);
  return h;
}

StatusOr<std::string> DecodeKvRecord(std::string_view record, const KvBlockKey& expected) {
  ASSIGN_OR_RETURN(KvRecordHeader h, DecodeKvRecordHeader(record));
  const size_t start = kKvRecordHeaderBytes + h.key.size();
  if (record.size() - start != h.payload_size) {
    return DataLoss("KV record: payload is " + std::to_string(record.size() - start) + " bytes, header says " +
                    std::to_string(h.payload_size));
  }
  if (h.key != SerializeKey(expected)) {
    return FailedPrecondition("KV record: holds another block (model fingerprint, layout, hash or tenant differ)");
  }
  const std::string_view payload = record.substr(start);
  if (Fnv1a64(payload.data(), payload.size()) != GetLe(record, 24, 8)) {
    return DataLoss("KV record: payload checksum mismatch");
  }
  return std::string(payload);
}

}  // namespace tessera::kv_tiers
