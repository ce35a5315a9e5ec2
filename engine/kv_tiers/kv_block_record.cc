#include "engine/kv_tiers/kv_block_record.h"

#include <chrono>

#include <cstring>

#include "common/sha256.h"

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
  out.append(reinterpret_cast<const char*>(key.hash.data()), key.hash.size());
  PutField(key.tenant, &out);
  return out;
}

int64_t KvPinClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string KeyId(const KvBlockKey& key) {
  const std::string s = SerializeKey(key);
  return Hex64(Fnv1a64(s.data(), s.size())) + Hex64(Fnv1a64(s.data(), s.size(), 0x84222325cbf29ce4ULL));
}

Sha256Digest RecordMac(std::string_view secret, std::string_view fixed, std::string_view key,
                       std::string_view payload) {
  return HmacSha256(secret, {fixed, key, payload});
}

std::string EncodeKvRecord(const KvBlockKey& key, std::string_view payload, std::string_view secret) {
  const std::string k = SerializeKey(key);
  std::string out(kMagic, sizeof(kMagic));
  out.reserve(kKvRecordHeaderBytes + k.size() + payload.size());
  PutLe(kKvRecordVersion, 4, &out);
  PutLe(k.size(), 4, &out);
  PutLe(payload.size(), 8, &out);
  PutLe(Fnv1a64(payload.data(), payload.size()), 8, &out);
  const uint64_t header_sum = Fnv1a64(k.data(), k.size(), Fnv1a64(out.data(), out.size()));
  PutLe(header_sum, 8, &out);
  Sha256Digest mac{};
  if (!secret.empty()) mac = RecordMac(secret, out, k, payload);
  out.append(reinterpret_cast<const char*>(mac.data()), mac.size());
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

StatusOr<std::string> DecodeKvRecord(std::string_view record, const KvBlockKey& expected, std::string_view secret,
                                     KvRecordFault* fault) {
  KvRecordFault ignored;
  KvRecordFault& why = fault != nullptr ? *fault : ignored;
  why = KvRecordFault::kCorrupt;
  ASSIGN_OR_RETURN(KvRecordHeader h, DecodeKvRecordHeader(record));
  const size_t start = kKvRecordHeaderBytes + h.key.size();
  if (record.size() - start != h.payload_size) {
    return DataLoss("KV record: payload is " + std::to_string(record.size() - start) + " bytes, header says " +
                    std::to_string(h.payload_size));
  }
  const std::string_view payload = record.substr(start);
  if (Fnv1a64(payload.data(), payload.size()) != GetLe(record, 24, 8)) {
    return DataLoss("KV record: payload checksum mismatch");
  }
  if (h.key != SerializeKey(expected)) {
    why = KvRecordFault::kOtherKey;
    return FailedPrecondition("KV record: holds another block (model fingerprint, layout, hash or tenant differ)");
  }
  if (!secret.empty()) {
    Sha256Digest mac;
    std::memcpy(mac.data(), record.data() + 40, mac.size());
    if (!DigestsEqualConstTime(mac, RecordMac(secret, record.substr(0, 40), h.key, payload))) {
      why = KvRecordFault::kUnauthenticated;
      return FailedPrecondition("KV record: not authenticated under the deployment secret (planted or altered)");
    }
  }
  why = KvRecordFault::kNone;
  return std::string(payload);
}

}  // namespace tessera::kv_tiers
