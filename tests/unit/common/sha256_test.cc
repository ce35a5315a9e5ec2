#include "common/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera {
namespace {

// FIPS 180-2 and RFC 4231 test vectors.
TEST(Sha256Test, KnownAnswers) {
  EXPECT_EQ(ToHex(Sha256Of("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(ToHex(Sha256Of("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 h;
  h.Update("ab");
  h.Update("c");
  EXPECT_EQ(ToHex(h.Finish()), ToHex(Sha256Of("abc")));
  EXPECT_EQ(ToHex(HmacSha256(std::string(20, '\x0b'), {"Hi There"})),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(ToHex(HmacSha256("Jefe", {"what do ya want ", "for nothing?"})),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Sha256Test, ConstTimeEquality) {
  const Sha256Digest a = Sha256Of("a");
  Sha256Digest b = a;
  EXPECT_TRUE(DigestsEqualConstTime(a, b));
  b[31] ^= 1;
  EXPECT_FALSE(DigestsEqualConstTime(a, b));
}

}  // namespace
}  // namespace tessera
