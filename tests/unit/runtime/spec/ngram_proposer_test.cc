// Prompt lookup: longest suffix n-gram in [min, max], latest earlier match,
// continuation (carried on through a repeating loop).
#include "runtime/spec/ngram_proposer.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

using V = std::vector<int32_t>;

TEST(NgramLookupTest, ProposesWhatFollowedTheLatestLongestMatch) {
  // "1 2 3" occurs at 0 and 5 (followed by 4 then 9); the suffix is "1 2 3".
  const V t = {1, 2, 3, 4, 7, 1, 2, 3, 9, 8, 1, 2, 3};
  EXPECT_EQ(NgramLookup(t, 1, 3, 2), (V{9, 8}));  // latest match wins
  EXPECT_EQ(NgramLookup(t, 3, 3, 1), (V{9}));
  EXPECT_EQ(NgramLookup(t, 4, 5, 2), V{});        // no 4-gram repeats
  EXPECT_EQ(NgramLookup(t, 1, 3, 0), V{});
}

TEST(NgramLookupTest, LongerMatchBeatsMoreRecent) {
  // Suffix "5 6": "5 6" at 0 (then 1), "6" alone at 4 (then 2).
  const V t = {5, 6, 1, 0, 6, 2, 0, 5, 6};
  EXPECT_EQ(NgramLookup(t, 1, 2, 1), (V{1}));
  EXPECT_EQ(NgramLookup(t, 1, 1, 1), (V{2}));  // n = 1 only: latest "6"
}

TEST(NgramLookupTest, ContinuesARepeatingLoop) {
  const V t = {4, 1, 2, 3, 1, 2, 3, 1, 2};
  // Latest "1 2" at 4..5 continues "3 1 2", then the loop goes on.
  EXPECT_EQ(NgramLookup(t, 2, 2, 6), (V{3, 1, 2, 3, 1, 2}));
  const V same = {7, 7, 7};
  EXPECT_EQ(NgramLookup(same, 1, 2, 3), (V{7, 7, 7}));
}

TEST(NgramLookupTest, TooShort) {
  EXPECT_EQ(NgramLookup(V{1}, 1, 3, 4), V{});
  EXPECT_EQ(NgramLookup(V{1, 2}, 2, 3, 4), V{});
}

TEST(NgramProposerTest, OneDraftPerInputOnlyWhereAsked) {
  NgramProposer p(1, 2);
  const V a = {1, 2, 1}, b = {3, 4, 3};
  std::vector<DraftInput> in(2);
  in[0].token_ids = a;
  in[0].k = 2;
  in[1].token_ids = b;
  in[1].k = 0;
  std::vector<Draft> d;
  ASSERT_TRUE(p.Propose(in, &d).ok());
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].token_ids, (V{2, 1}));
  EXPECT_TRUE(d[0].probs.empty());
  EXPECT_TRUE(d[1].token_ids.empty());
}

}  // namespace
}  // namespace tessera
