// ResponseStore: owners see only their own responses; the byte cap evicts
// least recently used first (a Get refreshes); in-flight responses show in
// progress, are cancelled through their handle, and are kept or not by
// `store`.
#include "server/responses/response_store.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::responses {
namespace {

StoredResponse Entry(const std::string& id, const std::string& owner = "k", size_t pad = 0) {
  return {id, owner, Json{{"id", id}, {"status", "completed"}, {"pad", std::string(pad, 'x')}},
          Json::array({Json{{"id", "msg_" + id}}}), Json::array()};
}

TEST(ResponseStoreTest, OwnerOnlyAndDelete) {
  ResponseStore s({});
  s.Complete(Entry("a"));
  ASSERT_NE(s.Get("a", "k"), nullptr);
  EXPECT_EQ(s.Get("a", "k")->response["id"], "a");
  EXPECT_EQ(s.Get("a", "other"), nullptr);
  EXPECT_EQ(s.Get("b", "k"), nullptr);
  EXPECT_FALSE(s.Delete("a", "other"));
  EXPECT_TRUE(s.Delete("a", "k"));
  EXPECT_EQ(s.Get("a", "k"), nullptr);
  EXPECT_EQ(s.bytes(), 0u);
}

TEST(ResponseStoreTest, ByteCapEvictsLeastRecentlyUsed) {
  const size_t one = ResponseStore::EntryBytes(Entry("a", "k", 1000));
  ResponseStoreOptions o;
  o.max_bytes = 3 * one;
  ResponseStore s(o);
  s.Complete(Entry("a", "k", 1000));
  s.Complete(Entry("b", "k", 1000));
  s.Complete(Entry("c", "k", 1000));
  EXPECT_EQ(s.size(), 3u);
  ASSERT_NE(s.Get("a", "k"), nullptr);  // a is now the most recent: b goes first
  s.Complete(Entry("d", "k", 1000));
  EXPECT_EQ(s.size(), 3u);
  EXPECT_LE(s.bytes(), 3 * one);
  EXPECT_EQ(s.Get("b", "k"), nullptr);
  EXPECT_NE(s.Get("a", "k"), nullptr);
  EXPECT_NE(s.Get("c", "k"), nullptr);
  EXPECT_NE(s.Get("d", "k"), nullptr);
  s.Complete(Entry("huge", "k", 4 * one));  // over the cap on its own: not kept, nothing evicted
  EXPECT_EQ(s.Get("huge", "k"), nullptr);
  EXPECT_EQ(s.size(), 3u);
  ResponseStoreOptions zero;
  zero.max_bytes = 0;
  ResponseStore none(zero);
  none.Complete(Entry("a"));
  EXPECT_EQ(none.Get("a", "k"), nullptr);
}

TEST(ResponseStoreTest, InFlightCancelAndStoreFlag) {
  ResponseStore s({});
  int cancels = 0;
  StoredResponse snap = Entry("a");
  snap.response["status"] = "in_progress";
  s.Begin(snap, true, [&] { ++cancels; });
  ASSERT_NE(s.Get("a", "k"), nullptr);
  EXPECT_EQ(s.Get("a", "k")->response["status"], "in_progress");
  EXPECT_EQ(s.Get("a", "k")->input_items.size(), 1u);
  EXPECT_FALSE(s.CancelRequested("a"));
  Json shown;
  EXPECT_EQ(s.Cancel("a", "other", &shown), ResponseStore::CancelResult::kNotFound);
  EXPECT_EQ(s.Cancel("a", "k", &shown), ResponseStore::CancelResult::kCancelled);
  EXPECT_EQ(shown["status"], "cancelled");
  EXPECT_EQ(cancels, 1);
  EXPECT_TRUE(s.CancelRequested("a"));
  s.Complete(Entry("a"));
  EXPECT_EQ(s.Cancel("a", "k", &shown), ResponseStore::CancelResult::kNotInProgress);
  EXPECT_EQ(shown["status"], "completed");

  s.Begin(Entry("b"), false, [] {});  // store: false: invisible, not kept
  EXPECT_EQ(s.Get("b", "k"), nullptr);
  s.Complete(Entry("b"));
  EXPECT_EQ(s.Get("b", "k"), nullptr);

  s.Begin(Entry("c"), true, [&] { ++cancels; });  // deleted in flight: cancelled, not kept
  EXPECT_TRUE(s.Delete("c", "k"));
  EXPECT_EQ(cancels, 2);
  s.Complete(Entry("c"));
  EXPECT_EQ(s.Get("c", "k"), nullptr);

  s.Begin(Entry("d"), true, [] {});  // abandoned (failed): gone
  s.Abandon("d");
  EXPECT_EQ(s.Get("d", "k"), nullptr);
}

}  // namespace
}  // namespace tessera::responses
