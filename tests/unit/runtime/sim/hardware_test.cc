// The hardware-derived cost model (runtime/sim/hardware.h): coefficients for
// a Llama-3-8B shape on an H100 SXM, worked out by hand (in the comments),
// at TP 1 and 2, the KV capacity, and the refusals.
#include "runtime/sim/hardware.h"

#include <gtest/gtest.h>

namespace tessera::sim {
namespace {

// Llama-3-8B: 32 layers, hidden 4096, 32 q / 8 KV heads of 128, 8.03e9
// parameters; KV per token = 2 (K, V) * 32 * 8 * 128 * 2 bytes = 131072.
ModelShape Llama8B() {
  ModelShape m;
  m.num_layers = 32;
  m.hidden_size = 4096;
  m.num_q_heads = 32;
  m.num_kv_heads = 8;
  m.head_dim = 128;
  m.num_parameters = 8030261248;
  m.num_active_parameters = 8030261248;
  m.kv_bytes_per_token = 131072;
  return m;
}

DeriveOptions Tp(int t) {
  DeriveOptions o;
  o.tensor_parallel_size = t;
  return o;
}

void ExpectRel(double got, double want) { EXPECT_NEAR(got, want, 1e-4 * want) << got << " vs " << want; }

TEST(HardwareCostModelTest, Llama8BOnH100ByHand) {
  const HardwareSpec h100 = FindHardware("h100-sxm").value();
  const LinearCoefficients c = DeriveCoefficients(Llama8B(), h100, Tp(1)).value();
  // 16.0605 GB of BF16 weights / 3350 GB/s = 4.79418 ms a step.
  ExpectRel(c.base_ms, 4.79418);
  // 2 * 8.03e9 FLOP / 989e12 FLOP/s = 16.2392 us a token.
  ExpectRel(c.per_prefill_token_ms, 0.0162392);
  ExpectRel(c.per_decode_token_ms, 0.0162392);
  EXPECT_EQ(c.per_decode_seq_ms, 0);
  // 4 * 32 * 32 * 128 = 524288 FLOP a pair / 989e12 = 5.30119e-10 s.
  ExpectRel(c.per_prefill_attention_ms, 5.30119e-7);
  // 131072 B / 3350e9 B/s = 3.91260e-8 s, plus the pair's 5.30e-10 s.
  ExpectRel(c.per_decode_context_ms, 3.96561e-5);

  const LinearCoefficients c2 = DeriveCoefficients(Llama8B(), h100, Tp(2)).value();
  // Half the weights, plus 2 * 32 all-reduces of 10 us: 2.39709 + 0.64 ms.
  ExpectRel(c2.base_ms, 3.03709);
  // Half the FLOPs, plus 64 ring all-reduces moving (2-1)/2 * 2 * 4096 * 2 B
  // = 8192 B each: 524288 B / 450e9 B/s = 1.16508 us.
  ExpectRel(c2.per_prefill_token_ms, 0.00811960 + 0.00116508);
  // 4 of the 8 KV heads per rank: half the bytes.
  ExpectRel(c2.per_decode_context_ms, 1.95630e-5 + 2.65060e-7);

  // 0.9 * 80 GB - 16.0605 GB = 55.9395 GB of KV = 426784 tokens.
  EXPECT_EQ(DerivedKvTokens(Llama8B(), h100, 1, 0.9), 426784);
  EXPECT_EQ(DerivedKvTokens(Llama8B(), FindHardware("l40s").value(), 1, 0.3), 0);  // 14.4 GB: no room
}

TEST(HardwareCostModelTest, Refusals) {
  EXPECT_FALSE(FindHardware("h100").ok());  // names are exact: h100-sxm
  const HardwareSpec h100 = FindHardware("h100-sxm").value();
  EXPECT_FALSE(DeriveCoefficients(Llama8B(), h100, Tp(3)).ok());  // 32 heads over 3
  EXPECT_TRUE(DeriveCoefficients(Llama8B(), h100, Tp(16)).ok());  // 8 KV heads replicate
  HardwareSpec no_link = h100;
  no_link.interconnect_gbs = 0;
  EXPECT_FALSE(DeriveCoefficients(Llama8B(), no_link, Tp(2)).ok());
  EXPECT_TRUE(DeriveCoefficients(Llama8B(), no_link, Tp(1)).ok());
  ModelShape bad = Llama8B();
  bad.kv_bytes_per_token = 0;
  EXPECT_FALSE(DeriveCoefficients(bad, h100, Tp(1)).ok());
}

}  // namespace
}  // namespace tessera::sim
