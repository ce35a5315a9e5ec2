// CUDA paged attention (decode split-K + combine, tiled prefill) against the CPU
// kernel, which reads an f32 copy of the same (rounded) cache values.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/paged_attention.cuh"
#include "tests/cuda/cuda_test_util.h"

namespace tessera::kernels {
namespace {

using cuda::ElemType;
using cuda_test::DeviceBuffer;

struct Shape {
  int64_t q_heads, kv_heads, head_dim, block_size;
  ElemType type;
};

// One attention problem: a paged cache of `seqs` sequences (non-contiguous,
// shuffled physical blocks, tables padded with -1) and a list of query tokens.
struct Problem {
  Shape s;
  int64_t window = 0;
  int64_t max_blocks = 0;
  std::vector<float> k, v;          // f32 cache, values already rounded to s.type
  std::vector<uint16_t> k16, v16;   // the same values as f16/bf16 bits
  std::vector<int32_t> tables;      // [seqs, max_blocks]
  std::vector<int32_t> seq_len;
  // Query tokens.
  std::vector<int32_t> pos, seq;
  std::vector<float> q;  // [tokens] rows of q_stride floats, filled by Finish()
  int64_t q_stride = 0;  // 0: dense (q_heads * head_dim)
  bool misaligned_cache = false;  // K/V start one element past an aligned address
  float softcap = 0.0f;           // attention logit soft-capping (0: off)
};

float Round(float x, ElemType t) {
  switch (t) {
    case ElemType::kF32: return x;
    case ElemType::kF16: return F16ToF32(F32ToF16(x));
    default: return Bf16ToF32(F32ToBf16(x));
  }
}

Problem MakeCache(const Shape& s, const std::vector<int32_t>& lens, int64_t window, uint32_t seed) {
  Problem pr;
  pr.s = s;
  pr.window = window;
  pr.seq_len = lens;
  std::mt19937 rng(seed);
  int64_t total = 0;
  for (int32_t len : lens) {
    pr.max_blocks = std::max<int64_t>(pr.max_blocks, (len + s.block_size - 1) / s.block_size);
    total += (len + s.block_size - 1) / s.block_size;
  }
  pr.max_blocks += 1;             // every table ends in -1 padding
  const int64_t num_blocks = total + 3;  // a few blocks nobody owns
  std::vector<int32_t> phys(num_blocks);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  pr.tables.assign(lens.size() * pr.max_blocks, -1);
  int64_t next = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    for (int64_t b = 0; b < (lens[i] + s.block_size - 1) / s.block_size; ++b) {
      pr.tables[i * pr.max_blocks + b] = phys[next++];
    }
  }
  const size_t n = num_blocks * s.block_size * s.kv_heads * s.head_dim;
  pr.k = cuda_test::RandomNormal(n, seed + 1);
  pr.v = cuda_test::RandomNormal(n, seed + 2);
  for (auto* c : {&pr.k, &pr.v}) {
    for (auto& x : *c) x = Round(x, s.type);
  }
  if (s.type != ElemType::kF32) {
    for (auto [src, dst] : {std::pair{&pr.k, &pr.k16}, std::pair{&pr.v, &pr.v16}}) {
      dst->resize(src->size());
      for (size_t i = 0; i < src->size(); ++i) {
        (*dst)[i] = s.type == ElemType::kF16 ? F32ToF16((*src)[i]) : F32ToBf16((*src)[i]);
      }
    }
  }
  return pr;
}

void AddDecode(Problem* pr, int32_t seq) {  // the sequence's last token
  pr->pos.push_back(pr->seq_len[seq] - 1);
  pr->seq.push_back(seq);
}
void AddChunk(Problem* pr, int32_t seq, int32_t from) {  // tokens [from, len)
  for (int32_t p = from; p < pr->seq_len[seq]; ++p) {
    pr->pos.push_back(p);
    pr->seq.push_back(seq);
  }
}
void AddPadding(Problem* pr, int32_t seq = 0) {
  pr->pos.push_back(-1);
  pr->seq.push_back(seq);
}
void Finish(Problem* pr, uint32_t seed) {
  if (pr->q_stride == 0) pr->q_stride = pr->s.q_heads * pr->s.head_dim;
  pr->q = cuda_test::RandomNormal(pr->pos.size() * pr->q_stride, seed, 1.5f);
}

int64_t Tokens(const Problem& pr) { return static_cast<int64_t>(pr.pos.size()); }
int64_t OutSize(const Problem& pr) { return Tokens(pr) * pr.s.q_heads * pr.s.head_dim; }
float Scale(const Problem& pr) { return 1.0f / std::sqrt(static_cast<float>(pr.s.head_dim)); }

std::vector<float> RunCpu(const Problem& pr) {
  std::vector<float> out(OutSize(pr), -7.f);
  cpu::PagedAttentionArgs a;
  a.q = pr.q.data();
  a.q_stride = pr.q_stride;
  a.k_cache = pr.k.data();
  a.v_cache = pr.v.data();
  a.num_tokens = Tokens(pr);
  a.num_q_heads = pr.s.q_heads;
  a.num_kv_heads = pr.s.kv_heads;
  a.head_dim = pr.s.head_dim;
  a.block_size = pr.s.block_size;
  a.positions = pr.pos.data();
  a.token_to_seq = pr.seq.data();
  a.block_tables = pr.tables.data();
  a.max_blocks_per_seq = pr.max_blocks;
  a.sliding_window = pr.window;
  a.scale = Scale(pr);
  a.softcap = pr.softcap;
  a.out = out.data();
  cpu::PagedAttention(a, nullptr);
  return out;
}

// Device copies of a problem's inputs.
std::vector<char> CacheBytes(const Problem& pr, bool values) {
  const void* src = pr.s.type == ElemType::kF32 ? static_cast<const void*>(values ? pr.v.data() : pr.k.data())
                                                : static_cast<const void*>(values ? pr.v16.data() : pr.k16.data());
  const size_t shift = pr.misaligned_cache ? cuda::ElemSize(pr.s.type) : 0;
  std::vector<char> bytes(shift + pr.k.size() * cuda::ElemSize(pr.s.type));
  std::memcpy(bytes.data() + shift, src, bytes.size() - shift);
  return bytes;
}

// Device copies of a problem's inputs.
struct DeviceProblem {
  explicit DeviceProblem(const Problem& pr)
      : q(pr.q), pos(pr.pos), seq(pr.seq), tables(pr.tables), out(static_cast<size_t>(OutSize(pr))),
        kc(CacheBytes(pr, false)), vc(CacheBytes(pr, true)) {}
  cuda::PagedAttentionArgs Args(const Problem& pr) const {
    cuda::PagedAttentionArgs a;
    a.q = q.get();
    a.q_stride = pr.q_stride;
    const size_t shift = pr.misaligned_cache ? cuda::ElemSize(pr.s.type) : 0;
    a.k_cache = kc.get() + shift;
    a.v_cache = vc.get() + shift;
    a.cache_type = pr.s.type;
    a.num_tokens = Tokens(pr);
    a.num_q_heads = pr.s.q_heads;
    a.num_kv_heads = pr.s.kv_heads;
    a.head_dim = pr.s.head_dim;
    a.block_size = pr.s.block_size;
    a.positions = pos.get();
    a.token_to_seq = seq.get();
    a.block_tables = tables.get();
    a.max_blocks_per_seq = pr.max_blocks;
    a.sliding_window = pr.window;
    a.scale = Scale(pr);
    a.softcap = pr.softcap;
    a.out = out.get();
    int32_t mx = 0;
    for (int32_t p : pr.pos) mx = std::max(mx, p + 1);
    a.max_context = mx;
    return a;
  }
  DeviceBuffer<float> q;
  DeviceBuffer<int32_t> pos, seq, tables;
  DeviceBuffer<float> out;
  DeviceBuffer<char> kc, vc;  // cache in s.type
};

std::vector<float> RunDecode(const Problem& pr, int64_t extra_context = 0) {
  DeviceProblem d(pr);
  cuda::PagedAttentionArgs a = d.Args(pr);
  a.max_context += extra_context;
  const int64_t ws = cuda::PagedAttentionWorkspaceBytes(a.num_tokens, a.num_q_heads, a.head_dim, a.max_context);
  DeviceBuffer<char> work(static_cast<size_t>(ws));
  a.workspace = work.get();
  a.workspace_bytes = ws;
  cudaMemset(d.out.get(), 0xff, d.out.size() * 4);  // NaN: every output must be written
  EXPECT_EQ(cuda::PagedAttentionDecode(a, nullptr), cudaSuccess);
  return d.out.Download();
}

// Tiles: runs of consecutive tokens of one sequence, cut every kPrefillTileQ;
// padding tokens (sequence 0) join whatever tile is open.
std::vector<cuda::PrefillTile> MakeTiles(const Problem& pr) {
  std::vector<cuda::PrefillTile> tiles;
  int32_t tile_seq = -1;  // sequence of the open tile's real tokens (-1: none yet)
  for (int32_t t = 0; t < Tokens(pr); ++t) {
    const bool pad = pr.pos[t] < 0;
    if (!tiles.empty() && tiles.back().num_tokens < cuda::kPrefillTileQ &&
        (pad || tile_seq < 0 || tile_seq == pr.seq[t])) {
      ++tiles.back().num_tokens;
    } else {
      tiles.push_back({t, 1});
      tile_seq = -1;
    }
    if (!pad) tile_seq = pr.seq[t];
  }
  return tiles;
}

std::vector<float> RunPrefill(const Problem& pr) {
  DeviceProblem d(pr);
  const std::vector<cuda::PrefillTile> tiles = MakeTiles(pr);
  DeviceBuffer<cuda::PrefillTile> dt(tiles);
  cudaMemset(d.out.get(), 0xff, d.out.size() * 4);
  EXPECT_EQ(cuda::PagedAttentionPrefill(d.Args(pr), dt.get(), static_cast<int64_t>(tiles.size()), nullptr),
            cudaSuccess);
  return d.out.Download();
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 1e-5f * (1.f + std::fabs(want[i])))) {
      ++bad;
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i];
    }
  }
}

std::string Name(const Shape& s, int64_t window) {
  return "q" + std::to_string(s.q_heads) + " kv" + std::to_string(s.kv_heads) + " hd" +
         std::to_string(s.head_dim) + " bs" + std::to_string(s.block_size) + " type" +
         std::to_string(static_cast<int>(s.type)) + " window" + std::to_string(window);
}

// GQA ratios 1/2/4/8/12, head dims 32..256 (odd multiples of 32 too), block sizes 1/16/32, all cache types.
const Shape kShapes[] = {
    {2, 2, 64, 16, ElemType::kF32},   {4, 2, 128, 32, ElemType::kBF16}, {8, 2, 32, 1, ElemType::kF16},
    {8, 1, 64, 16, ElemType::kBF16},  {12, 1, 32, 16, ElemType::kF32},  {2, 1, 96, 16, ElemType::kF32},
    {4, 4, 256, 16, ElemType::kBF16}, {4, 2, 160, 32, ElemType::kF16},  {2, 1, 224, 16, ElemType::kBF16},
};

TEST(CudaPagedAttentionTest, DecodeBatchMatchesCpu) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  uint32_t seed = 10;
  for (size_t i = 0; i < std::size(kShapes); ++i) {
    const Shape& s = kShapes[i];
    const int64_t window = i % 2 == 0 ? 0 : 100;
    // Contexts 1 .. several kSplitKeys chunks, a padding token in between.
    Problem pr = MakeCache(s, {1, 37, 256, 257, 700}, window, seed++);
    for (int32_t seq = 0; seq < 5; ++seq) {
      AddDecode(&pr, seq);
      if (seq == 2) AddPadding(&pr);
    }
    Finish(&pr, seed++);
    const std::vector<float> want = RunCpu(pr);
    ExpectClose(RunDecode(pr), want, "decode " + Name(s, window));
    ExpectClose(RunPrefill(pr), want, "prefill(decode batch) " + Name(s, window));
  }
}

TEST(CudaPagedAttentionTest, MixedPrefillChunksAndDecodeMatchCpu) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  uint32_t seed = 100;
  const std::pair<Shape, int64_t> cases[] = {
      {kShapes[0], 300}, {kShapes[1], 7}, {kShapes[3], 0}, {kShapes[5], 300}, {kShapes[2], 100}};
  for (const auto& [s, window] : cases) {
    // A first chunk (positions 0..17), a later chunk crossing a split boundary
    // (positions 248..263), decode tokens, padding at the end (graph-style).
    // q rows are strided as in a fused QKV buffer.
    Problem pr = MakeCache(s, {18, 264, 5, 600}, window, seed++);
    pr.q_stride = (s.q_heads + 2 * s.kv_heads) * s.head_dim;
    pr.misaligned_cache = window == 7;  // vector loads fall back to scalar ones
    AddPadding(&pr, 3);  // opens the first tile, with another sequence's index
    AddChunk(&pr, 0, 0);
    AddDecode(&pr, 2);
    AddChunk(&pr, 1, 248);
    AddDecode(&pr, 3);
    AddPadding(&pr);
    AddPadding(&pr);
    Finish(&pr, seed++);
    const std::vector<float> want = RunCpu(pr);
    const std::vector<float> decode = RunDecode(pr), prefill = RunPrefill(pr);
    ExpectClose(decode, want, "decode " + Name(s, window));
    ExpectClose(prefill, want, "prefill " + Name(s, window));
    ExpectClose(prefill, decode, "prefill vs decode " + Name(s, window));
  }
}

// The same token gives bitwise the same output alone (grid sized by its own
// context) and inside a bigger batch with a larger max_context.
TEST(CudaPagedAttentionTest, DecodeIsBatchInvariant) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  uint32_t seed = 200;
  // Windowed cases place chunks from the window start, not from position 0.
  const std::pair<Shape, int64_t> cases[] = {
      {kShapes[1], 0}, {kShapes[1], 300}, {kShapes[2], 300}, {kShapes[4], 0}};
  for (const auto& [s, window] : cases) {
    Problem big = MakeCache(s, {700, 3, 260, 1000}, window, seed++);
    AddDecode(&big, 0);
    AddChunk(&big, 1, 0);
    AddDecode(&big, 2);
    AddDecode(&big, 3);
    Finish(&big, seed++);
    const std::vector<float> all = RunDecode(big, 100);
    const int64_t row = s.q_heads * s.head_dim;
    for (int64_t t : {0, 2, 4, 5}) {  // single-split (t 2) and multi-split tokens
      Problem one = big;
      one.pos = {big.pos[t]};
      one.seq = {big.seq[t]};
      one.q.assign(big.q.begin() + t * row, big.q.begin() + (t + 1) * row);
      const std::vector<float> alone = RunDecode(one);
      EXPECT_TRUE(cuda_test::BitwiseEqual(alone.data(), all.data() + t * row, row))
          << Name(s, window) << " token " << t;
    }
  }
}

// Gemma 2's soft-capping (cap * tanh(s / cap) on every score) in both kernels, with a
// cap small enough to bend most scores (q ~ 1.5 sigma).
TEST(CudaPagedAttentionTest, SoftCapMatchesCpu) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  uint32_t seed = 300;
  for (const auto& [s, window] : {std::pair{kShapes[0], int64_t{0}}, std::pair{kShapes[1], int64_t{100}}}) {
    Problem pr = MakeCache(s, {40, 300}, window, seed++);
    pr.softcap = 0.5f;
    AddChunk(&pr, 0, 0);
    AddDecode(&pr, 1);
    Finish(&pr, seed++);
    const std::vector<float> want = RunCpu(pr);
    ExpectClose(RunDecode(pr), want, "decode softcap " + Name(s, window));
    ExpectClose(RunPrefill(pr), want, "prefill softcap " + Name(s, window));
    Problem plain = pr;
    plain.softcap = 0.0f;
    const std::vector<float> uncapped = RunCpu(plain);
    float diff = 0.f;
    for (size_t i = 0; i < want.size(); ++i) diff = std::max(diff, std::fabs(want[i] - uncapped[i]));
    EXPECT_GT(diff, 1e-2f) << "the cap must change the outputs for this test to mean anything";
  }
}

TEST(CudaPagedAttentionTest, EmptyAndInvalidArguments) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  cuda::PagedAttentionArgs a;
  a.head_dim = 64;
  a.num_q_heads = 2;
  a.num_kv_heads = 1;
  a.block_size = 16;
  EXPECT_EQ(cuda::PagedAttentionDecode(a, nullptr), cudaSuccess);  // no tokens: no launch
  EXPECT_EQ(cuda::PagedAttentionPrefill(a, nullptr, 0, nullptr), cudaSuccess);
  a.num_tokens = 1;
  a.head_dim = 48;  // not a multiple of 32
  EXPECT_EQ(cuda::PagedAttentionDecode(a, nullptr), cudaErrorInvalidValue);
  a.head_dim = 64;
  a.max_context = 10;  // needs a workspace
  EXPECT_EQ(cuda::PagedAttentionDecode(a, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::PagedAttentionWorkspaceBytes(0, 2, 64, 10), 0);
  EXPECT_GE(cuda::PagedAttentionWorkspaceBytes(3, 2, 64, 300), 3 * 2 * 2 * (64 + 2) * 4);
}

}  // namespace
}  // namespace tessera::kernels
