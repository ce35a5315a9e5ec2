// Every collective of a Communicator against a serial oracle, run identically by
// each rank (threads of the in-process test, processes of the Gloo test). Inputs
// are a pure function of (rank, index, salt), so every rank can compute every
// other rank's input and the expected result on its own. The oracle sums in rank
// order with plain loops (independent of engine/parallel/reduce.cc); values span
// 2^-10..2^10, so any other addition order would change the bits.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/parallel/communicator.h"

namespace tessera::parallel::testing {

inline float TestValue(int rank, int64_t i, uint64_t salt) {
  uint64_t z = (static_cast<uint64_t>(rank) << 40) ^ (static_cast<uint64_t>(i) << 8) ^ salt;
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float unit = static_cast<float>(z >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
  const int exp = static_cast<int>(z % 21) - 10;
  return unit * static_cast<float>(exp >= 0 ? (1 << exp) : 1.0 / (1 << -exp));
}

// bf16 by truncating the mantissa to 7 bits with round-to-nearest-even (test-local).
inline uint16_t OracleBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}
inline float OracleF32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#define TESSERA_CHECK_OK(expr)                                                       \
  do {                                                                               \
    ::tessera::Status _s = (expr);                                                   \
    if (!_s.ok()) return "rank " + std::to_string(me) + ": " #expr ": " + _s.ToString(); \
  } while (0)

// Returns "" when every collective matched the oracle bit for bit, else what differed.
inline std::string CheckAllCollectives(Communicator& c, uint64_t salt) {
  const int n = c.world_size(), me = c.rank();
  auto fail = [&](const std::string& what, int64_t i) {
    return "rank " + std::to_string(me) + " of " + std::to_string(n) + ": " + what + " differs at " + std::to_string(i);
  };
  // AllReduce f32, out of place and in place, count not divisible by n.
  {
    const int64_t count = 1027;
    std::vector<float> in(count), out(count, -1.f);
    for (int64_t i = 0; i < count; ++i) in[i] = TestValue(me, i, salt);
    TESSERA_CHECK_OK(c.AllReduce(in.data(), out.data(), count, DType::kF32));
    for (int64_t i = 0; i < count; ++i) {
      float acc = TestValue(0, i, salt);
      for (int r = 1; r < n; ++r) acc += TestValue(r, i, salt);
      if (std::memcmp(&acc, &out[i], 4) != 0) return fail("all_reduce f32", i);
    }
    TESSERA_CHECK_OK(c.AllReduce(in.data(), in.data(), count, DType::kF32));
    if (std::memcmp(in.data(), out.data(), count * 4) != 0) return fail("in-place all_reduce f32", 0);
  }
  // AllReduce bf16: widened, summed in rank order in f32, rounded once.
  {
    const int64_t count = 515;
    std::vector<uint16_t> in(count), out(count);
    for (int64_t i = 0; i < count; ++i) in[i] = OracleBf16(TestValue(me, i, salt + 1));
    TESSERA_CHECK_OK(c.AllReduce(in.data(), out.data(), count, DType::kBF16));
    for (int64_t i = 0; i < count; ++i) {
      float acc = OracleF32(OracleBf16(TestValue(0, i, salt + 1)));
      for (int r = 1; r < n; ++r) acc += OracleF32(OracleBf16(TestValue(r, i, salt + 1)));
      if (OracleBf16(acc) != out[i]) return fail("all_reduce bf16", i);
    }
  }
  // AllGather (f32 and i32).
  {
    const int64_t count = 33;
    std::vector<float> in(count), out(count * n);
    for (int64_t i = 0; i < count; ++i) in[i] = TestValue(me, i, salt + 2);
    TESSERA_CHECK_OK(c.AllGather(in.data(), out.data(), count, DType::kF32));
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < count; ++i) {
        const float want = TestValue(r, i, salt + 2);
        if (std::memcmp(&want, &out[r * count + i], 4) != 0) return fail("all_gather f32", r * count + i);
      }
    std::vector<int32_t> ii = {me * 10, me * 10 + 1}, io(2 * n);
    TESSERA_CHECK_OK(c.AllGather(ii.data(), io.data(), 2, DType::kI32));
    for (int r = 0; r < n; ++r)
      if (io[2 * r] != r * 10 || io[2 * r + 1] != r * 10 + 1) return fail("all_gather i32", r);
  }
  // ReduceScatter f32 and bf16.
  {
    const int64_t count = 129;
    std::vector<float> in(count * n), out(count);
    for (int64_t i = 0; i < count * n; ++i) in[i] = TestValue(me, i, salt + 3);
    TESSERA_CHECK_OK(c.ReduceScatter(in.data(), out.data(), count, DType::kF32));
    for (int64_t i = 0; i < count; ++i) {
      const int64_t g = me * count + i;
      float acc = TestValue(0, g, salt + 3);
      for (int r = 1; r < n; ++r) acc += TestValue(r, g, salt + 3);
      if (std::memcmp(&acc, &out[i], 4) != 0) return fail("reduce_scatter f32", i);
    }
    std::vector<uint16_t> bin(count * n), bout(count);
    for (int64_t i = 0; i < count * n; ++i) bin[i] = OracleBf16(TestValue(me, i, salt + 4));
    TESSERA_CHECK_OK(c.ReduceScatter(bin.data(), bout.data(), count, DType::kBF16));
    for (int64_t i = 0; i < count; ++i) {
      const int64_t g = me * count + i;
      float acc = OracleF32(OracleBf16(TestValue(0, g, salt + 4)));
      for (int r = 1; r < n; ++r) acc += OracleF32(OracleBf16(TestValue(r, g, salt + 4)));
      if (OracleBf16(acc) != bout[i]) return fail("reduce_scatter bf16", i);
    }
  }
  // AllToAllV: rank s sends (s + 2d) % 4 elements to rank d (some zero); element j
  // of that block encodes (s, d, j).
  {
    auto sends = [](int s, int d) { return static_cast<int64_t>((s + 2 * d) % 4); };
    std::vector<int64_t> sc(n), rc(n);
    std::vector<float> in, out;
    for (int d = 0; d < n; ++d) {
      sc[d] = sends(me, d);
      rc[d] = sends(d, me);
      for (int64_t j = 0; j < sc[d]; ++j) in.push_back(static_cast<float>(me * 10000 + d * 100 + j));
    }
    int64_t total = 0;
    for (int64_t x : rc) total += x;
    out.assign(total + 1, -1.f);
    TESSERA_CHECK_OK(c.AllToAllV(in.data(), sc, out.data(), rc, DType::kF32));
    int64_t k = 0;
    for (int s = 0; s < n; ++s)
      for (int64_t j = 0; j < rc[s]; ++j, ++k)
        if (out[k] != static_cast<float>(s * 10000 + me * 100 + j)) return fail("all_to_all_v", k);
    if (out[total] != -1.f) return fail("all_to_all_v wrote past its output", total);
  }
  // Broadcast from the last rank.
  {
    const int root = n - 1;
    std::vector<int32_t> buf(100);
    for (int i = 0; i < 100; ++i) buf[i] = me == root ? 7 * i + 3 : -1;
    TESSERA_CHECK_OK(c.Broadcast(buf.data(), 100, DType::kI32, root));
    for (int i = 0; i < 100; ++i)
      if (buf[i] != 7 * i + 3) return fail("broadcast", i);
  }
  // Send/Recv around a ring: rank 0 sends first, the others receive first
  // (sends are synchronous), twice to check ordering.
  if (n > 1) {
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    for (int round = 0; round < 2; ++round) {
      std::vector<float> out(17), in(17, 0.f);
      for (int i = 0; i < 17; ++i) out[i] = TestValue(me, i, salt + 10 + round);
      if (me == 0) TESSERA_CHECK_OK(c.Send(out.data(), 17, DType::kF32, next));
      TESSERA_CHECK_OK(c.Recv(in.data(), 17, DType::kF32, prev));
      if (me != 0) TESSERA_CHECK_OK(c.Send(out.data(), 17, DType::kF32, next));
      for (int i = 0; i < 17; ++i) {
        const float want = TestValue(prev, i, salt + 10 + round);
        if (std::memcmp(&want, &in[i], 4) != 0) return fail("send/recv", i);
      }
    }
  }
  TESSERA_CHECK_OK(c.Barrier());
  return "";
}

#undef TESSERA_CHECK_OK

}  // namespace tessera::parallel::testing
