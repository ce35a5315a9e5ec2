#include "server/kv_events/kv_event_codec.h"

#include <msgpack.h>

#include <cstring>
#include <limits>
#include <memory>

namespace tessera::kv_events {
namespace {

void PutBigEndian(uint64_t v, std::string* out) {
  for (int i = 7; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// The packer writes into an std::string.
int WriteToString(void* data, const char* buf, size_t len) {
  static_cast<std::string*>(data)->append(buf, len);
  return 0;
}

class Packer {
 public:
  explicit Packer(std::string* out) { msgpack_packer_init(&pk_, out, WriteToString); }
  void Array(size_t n) { msgpack_pack_array(&pk_, n); }
  void Str(std::string_view s) {
    msgpack_pack_str(&pk_, s.size());
    msgpack_pack_str_body(&pk_, s.data(), s.size());
  }
  void Bin(std::string_view b) {
    msgpack_pack_bin(&pk_, b.size());
    msgpack_pack_bin_body(&pk_, b.data(), b.size());
  }
  void Int(int64_t v) { msgpack_pack_int64(&pk_, v); }
  void Double(double v) { msgpack_pack_double(&pk_, v); }
  void Nil() { msgpack_pack_nil(&pk_); }
  void Hash(const HashKey& h) {
    if (h.size() == 9 && h[0] == 'i') {  // an int hash (KeyOfInt)
      uint64_t v = 0;
      for (int i = 1; i < 9; ++i) v = (v << 8) | static_cast<unsigned char>(h[i]);
      Int(static_cast<int64_t>(v));
    } else {
      Bin(h);
    }
  }
  void Hashes(const std::vector<HashKey>& hs) {
    Array(hs.size());
    for (const HashKey& h : hs) Hash(h);
  }
  void OptStr(const std::optional<std::string>& s) { s ? Str(*s) : Nil(); }

 private:
  msgpack_packer pk_;
};

Status Bad(const std::string& what) { return InvalidArgument("KV event batch: " + what); }

// True when `s` is exactly one structurally valid msgpack value whose
// containers never claim more elements than there are bytes left. msgpack-c
// allocates a container's elements before reading them, so without this a
// 10-byte batch claiming 2^32 elements would ask for ~100 GB. O(bytes).
bool Plausible(std::string_view s) {
  const size_t n = s.size();
  size_t i = 0;
  uint64_t pending = 1;  // values still to read
  auto be = [&](size_t bytes, uint64_t* v) {
    if (bytes > n - i) return false;
    *v = 0;
    for (size_t k = 0; k < bytes; ++k) *v = (*v << 8) | static_cast<unsigned char>(s[i + k]);
    i += bytes;
    return true;
  };
  while (pending > 0) {
    if (i >= n) return false;
    --pending;
    const auto b = static_cast<unsigned char>(s[i++]);
    uint64_t skip = 0, add = 0, len = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
    } else if ((b & 0xf0) == 0x80) {
      add = 2u * (b & 0x0f);
    } else if ((b & 0xf0) == 0x90) {
      add = b & 0x0f;
    } else if ((b & 0xe0) == 0xa0) {
      skip = b & 0x1f;
    } else {
      switch (b) {
        case 0xc4: case 0xd9: if (!be(1, &len)) return false; skip = len; break;
        case 0xc5: case 0xda: if (!be(2, &len)) return false; skip = len; break;
        case 0xc6: case 0xdb: if (!be(4, &len)) return false; skip = len; break;
        case 0xc7: if (!be(1, &len)) return false; skip = len + 1; break;
        case 0xc8: if (!be(2, &len)) return false; skip = len + 1; break;
        case 0xc9: if (!be(4, &len)) return false; skip = len + 1; break;
        case 0xca: skip = 4; break;
        case 0xcb: skip = 8; break;
        case 0xcc: case 0xd0: skip = 1; break;
        case 0xcd: case 0xd1: skip = 2; break;
        case 0xce: case 0xd2: skip = 4; break;
        case 0xcf: case 0xd3: skip = 8; break;
        case 0xd4: skip = 2; break;
        case 0xd5: skip = 3; break;
        case 0xd6: skip = 5; break;
        case 0xd7: skip = 9; break;
        case 0xd8: skip = 17; break;
        case 0xdc: if (!be(2, &add)) return false; break;
        case 0xdd: if (!be(4, &add)) return false; break;
        case 0xde: if (!be(2, &add)) return false; add *= 2; break;
        case 0xdf: if (!be(4, &add)) return false; add *= 2; break;
        default: return false;  // 0xc1: never used
      }
    }
    if (skip > n - i) return false;
    i += skip;
    pending += add;
    if (pending > n - i) return false;  // every value takes at least one byte
  }
  return i == n;
}

std::string_view StrOf(const msgpack_object& o) { return {o.via.str.ptr, o.via.str.size}; }

StatusOr<HashKey> ReadHash(const msgpack_object& o) {
  switch (o.type) {
    case MSGPACK_OBJECT_BIN:
      return HashKey(o.via.bin.ptr, o.via.bin.size);
    case MSGPACK_OBJECT_STR:
      return HashKey(o.via.str.ptr, o.via.str.size);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
      return KeyOfInt(static_cast<int64_t>(o.via.u64));
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
      return KeyOfInt(o.via.i64);
    default:
      return Bad("a block hash must be bytes or an int");
  }
}

StatusOr<std::vector<HashKey>> ReadHashes(const msgpack_object& o) {
  if (o.type != MSGPACK_OBJECT_ARRAY) return Bad("block_hashes must be an array");
  std::vector<HashKey> out;
  out.reserve(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    ASSIGN_OR_RETURN(HashKey h, ReadHash(o.via.array.ptr[i]));
    out.push_back(std::move(h));
  }
  return out;
}

StatusOr<std::optional<int64_t>> ReadOptInt(const msgpack_object* o, const char* field) {
  if (!o || o->type == MSGPACK_OBJECT_NIL) return std::optional<int64_t>();
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= static_cast<uint64_t>(INT64_MAX)) {
    return std::optional<int64_t>(static_cast<int64_t>(o->via.u64));
  }
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) return std::optional<int64_t>(o->via.i64);
  return Bad(std::string(field) + " must be an int or nil");
}

StatusOr<std::optional<std::string>> ReadOptStr(const msgpack_object* o, const char* field) {
  if (!o || o->type == MSGPACK_OBJECT_NIL) return std::optional<std::string>();
  if (o->type != MSGPACK_OBJECT_STR) return Bad(std::string(field) + " must be a string or nil");
  return std::optional<std::string>(std::string(StrOf(*o)));
}

StatusOr<KvEvent> ReadEvent(const msgpack_object& o) {
  if (o.type != MSGPACK_OBJECT_ARRAY || o.via.array.size == 0 || o.via.array.ptr[0].type != MSGPACK_OBJECT_STR) {
    return Bad("an event must be an array starting with its tag");
  }
  const msgpack_object* f = o.via.array.ptr;
  const uint32_t n = o.via.array.size;
  auto at = [&](uint32_t i) -> const msgpack_object* { return i < n ? &f[i] : nullptr; };
  const std::string_view tag = StrOf(f[0]);
  if (tag == "BlockStored") {
    if (n < 5) return Bad("BlockStored needs block_hashes, parent_block_hash, token_ids, block_size");
    BlockStored e;
    ASSIGN_OR_RETURN(e.block_hashes, ReadHashes(f[1]));
    if (f[2].type != MSGPACK_OBJECT_NIL) {
      ASSIGN_OR_RETURN(HashKey p, ReadHash(f[2]));
      e.parent_block_hash = std::move(p);
    }
    if (f[3].type != MSGPACK_OBJECT_ARRAY) return Bad("token_ids must be an array");
    e.token_ids.reserve(f[3].via.array.size);
    for (uint32_t i = 0; i < f[3].via.array.size; ++i) {
      const msgpack_object& t = f[3].via.array.ptr[i];
      if (t.type != MSGPACK_OBJECT_POSITIVE_INTEGER || t.via.u64 > static_cast<uint64_t>(INT32_MAX)) {
        return Bad("a token id must be a non-negative int32");
      }
      e.token_ids.push_back(static_cast<int32_t>(t.via.u64));
    }
    if (f[4].type != MSGPACK_OBJECT_POSITIVE_INTEGER || f[4].via.u64 == 0 || f[4].via.u64 > (1u << 20)) {
      return Bad("block_size must be a positive int");
    }
    e.block_size = static_cast<int32_t>(f[4].via.u64);
    ASSIGN_OR_RETURN(e.lora_id, ReadOptInt(at(5), "lora_id"));
    ASSIGN_OR_RETURN(e.medium, ReadOptStr(at(6), "medium"));
    return KvEvent(std::move(e));
  }
  if (tag == "BlockRemoved") {
    if (n < 2) return Bad("BlockRemoved needs block_hashes");
    BlockRemoved e;
    ASSIGN_OR_RETURN(e.block_hashes, ReadHashes(f[1]));
    ASSIGN_OR_RETURN(e.medium, ReadOptStr(at(2), "medium"));
    return KvEvent(std::move(e));
  }
  if (tag == "AllBlocksCleared") return KvEvent(AllBlocksCleared{});
  return Bad("unknown event '" + std::string(tag.substr(0, 64)) + "'");
}

}  // namespace

HashKey KeyOf(const BlockHash& hash) {
  return HashKey(reinterpret_cast<const char*>(hash.digest.data()), hash.digest.size());
}

HashKey KeyOfInt(int64_t hash) {
  HashKey k = "i";
  PutBigEndian(static_cast<uint64_t>(hash), &k);
  return k;
}

std::string EncodeEventBatch(const EventBatch& batch) {
  std::string out;
  Packer p(&out);
  p.Array(batch.data_parallel_rank ? 3 : 2);
  p.Double(batch.ts);
  p.Array(batch.events.size());
  for (const KvEvent& ev : batch.events) {
    if (const auto* s = std::get_if<BlockStored>(&ev)) {
      p.Array(7);
      p.Str("BlockStored");
      p.Hashes(s->block_hashes);
      s->parent_block_hash ? p.Hash(*s->parent_block_hash) : p.Nil();
      p.Array(s->token_ids.size());
      for (int32_t t : s->token_ids) p.Int(t);
      p.Int(s->block_size);
      s->lora_id ? p.Int(*s->lora_id) : p.Nil();
      p.OptStr(s->medium);
    } else if (const auto* r = std::get_if<BlockRemoved>(&ev)) {
      p.Array(3);
      p.Str("BlockRemoved");
      p.Hashes(r->block_hashes);
      p.OptStr(r->medium);
    } else {
      p.Array(1);
      p.Str("AllBlocksCleared");
    }
  }
  if (batch.data_parallel_rank) p.Int(*batch.data_parallel_rank);
  return out;
}

StatusOr<EventBatch> DecodeEventBatch(std::string_view payload) {
  if (payload.size() > kMaxEventBatchBytes) return Bad("payload over " + std::to_string(kMaxEventBatchBytes) + " bytes");
  if (!Plausible(payload)) return Bad("not one well-formed msgpack value");
  msgpack_unpacked msg;
  msgpack_unpacked_init(&msg);
  std::unique_ptr<msgpack_unpacked, void (*)(msgpack_unpacked*)> guard(&msg, msgpack_unpacked_destroy);
  size_t off = 0;
  if (msgpack_unpack_next(&msg, payload.data(), payload.size(), &off) != MSGPACK_UNPACK_SUCCESS) {
    return Bad("not a msgpack value");
  }
  if (off != payload.size()) return Bad("trailing bytes after the batch");
  const msgpack_object& root = msg.data;
  if (root.type != MSGPACK_OBJECT_ARRAY || root.via.array.size < 2 || root.via.array.size > 3) {
    return Bad("a batch must be [ts, events] or [ts, events, data_parallel_rank]");
  }
  const msgpack_object* f = root.via.array.ptr;
  EventBatch batch;
  if (f[0].type == MSGPACK_OBJECT_FLOAT64 || f[0].type == MSGPACK_OBJECT_FLOAT32) {
    batch.ts = f[0].via.f64;
  } else if (f[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
    batch.ts = static_cast<double>(f[0].via.u64);
  } else {
    return Bad("ts must be a number");
  }
  if (f[1].type != MSGPACK_OBJECT_ARRAY) return Bad("events must be an array");
  batch.events.reserve(f[1].via.array.size);
  for (uint32_t i = 0; i < f[1].via.array.size; ++i) {
    ASSIGN_OR_RETURN(KvEvent e, ReadEvent(f[1].via.array.ptr[i]));
    batch.events.push_back(std::move(e));
  }
  if (root.via.array.size == 3) {
    ASSIGN_OR_RETURN(batch.data_parallel_rank, ReadOptInt(&f[2], "data_parallel_rank"));
  }
  return batch;
}

}  // namespace tessera::kv_events
