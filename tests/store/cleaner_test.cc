// The cleaner keeps every live key readable, purges old tombstones, reclaims
// space, and respects the grace period before reuse.
#include <gtest/gtest.h>

#include <thread>

#include "tests/store/store_test_util.h"

namespace kvrdma::test {
namespace {

StoreConfig CleanerConfig() {
  StoreConfig c = SmallConfig();
  c.log_bytes = 64 * (16 << 10);
  c.segment_bytes = 16 << 10;
  c.max_value_bytes = 1024;
  return c;
}

TEST(Cleaner, KeepsLiveKeysAndReclaimsSpace) {
  auto s = OpenOrDie(CleanerConfig());
  ASSERT_TRUE(s);
  const int keys = 300;
  int ver = 0;
  // Churn: each round rewrites every key (~ 70 KB per round).
  for (ver = 1; ver <= 8; ++ver) {
    for (int i = 0; i < keys; ++i) ASSERT_TRUE(s->Put(i % 2, Key(i), Value(i, ver, 200)).ok());
  }
  for (int i = 0; i < keys; i += 10) ASSERT_TRUE(s->Delete(0, Key(i)).ok());
  const StoreStats before = s->Stats();
  EXPECT_EQ(before.tombstones, static_cast<uint64_t>(keys / 10));
  const size_t retired = s->RunCleanerOnce();
  const StoreStats after = s->Stats();
  std::printf("cleaner: retired %zu segments; used %llu -> %llu, free %llu -> %llu, relocations %llu\n", retired,
              static_cast<unsigned long long>(before.segments_used),
              static_cast<unsigned long long>(after.segments_used),
              static_cast<unsigned long long>(before.segments_free),
              static_cast<unsigned long long>(after.segments_free),
              static_cast<unsigned long long>(after.relocations));
  EXPECT_GT(retired, 0u);
  EXPECT_LT(after.segments_used, before.segments_used);
  EXPECT_GT(after.segments_free, before.segments_free);
  EXPECT_GE(after.cleaner_runs, 1u);
  std::string v;
  for (int i = 0; i < keys; ++i) {
    Status st = ReadNative(*s, Key(i), &v);
    if (i % 10 == 0) {
      ASSERT_TRUE(st.IsNotFound()) << i;
      ASSERT_TRUE(s->Get(Key(i), &v).IsNotFound());
    } else {
      ASSERT_TRUE(st.ok()) << i;
      ASSERT_EQ(v, Value(i, 8, 200));
    }
  }
  // Keep going: many cleaning rounds interleaved with writes, then check again.
  for (int round = 0; round < 30; ++round) {
    for (int i = 0; i < keys; ++i) {
      if (i % 10 == 0) continue;
      ASSERT_TRUE(s->Put(0, Key(i), Value(i, 100 + round, 200)).ok()) << round << " " << i;
    }
    s->RunCleanerOnce();
  }
  for (int i = 0; i < keys; ++i) {
    Status st = ReadNative(*s, Key(i), &v);
    if (i % 10 == 0) {
      ASSERT_TRUE(st.IsNotFound());
    } else {
      ASSERT_TRUE(st.ok());
      ASSERT_EQ(v, Value(i, 129, 200));
    }
  }
  const StoreStats end = s->Stats();
  EXPECT_GT(end.relocations, 0u);
  EXPECT_LT(end.tombstones, before.tombstones);  // old deletes were forgotten
  EXPECT_EQ(end.items, static_cast<uint64_t>(keys - keys / 10));
  // Live bytes are what the items take.
  EXPECT_EQ(end.log_bytes_live, end.items * LogBytes(Key(1).size(), 200) +
                                    end.tombstones * LogBytes(Key(10).size(), 0) +
                                    0 * end.tombstones);
}

// Format 5: an entry's header words swap places with its offset's parity
// (entry.h). A cleaner copy often lands at the other parity than its
// source: it must still decode, through the index and as a current entry
// (the cached one-READ GET).
TEST(Cleaner, ACopyAtTheOtherParityStillDecodes) {
  auto s = OpenOrDie(CleanerConfig());
  ASSERT_TRUE(s);
  const int keys = 200;
  // Entries of 12 + 5..7 + 100 or 104 bytes: both parities from the start.
  const auto value = [](int i, int ver) { return Value(i, ver, 100 + 4 * static_cast<size_t>(i % 2)); };
  std::string v;
  std::vector<uint64_t> first(keys);
  for (int i = 0; i < keys; ++i) {
    ASSERT_TRUE(s->Put(0, Key(i), value(i, 1)).ok());
    NativeGetResult r;
    ASSERT_TRUE(ReadNative(*s, Key(i), &v, &r).ok());
    first[i] = r.log_offset;
  }
  int parities[2] = {0, 0};
  for (uint64_t off : first) ++parities[(off / 4) % 2];
  EXPECT_GT(parities[0], 0);
  EXPECT_GT(parities[1], 0);
  // Every third key is rewritten (its old entries die), then the cleaner
  // moves the others.
  for (int round = 2; round < 8; ++round) {
    for (int i = 0; i < keys; i += 3) ASSERT_TRUE(s->Put(0, Key(i), value(i, round)).ok());
  }
  for (int pass = 0; pass < 4; ++pass) s->RunCleanerOnce();
  ASSERT_GT(s->Stats().relocations, 0u);
  int swapped = 0;
  std::vector<std::byte> entry(1024);
  for (int i = 0; i < keys; ++i) {
    NativeGetResult r;
    ASSERT_TRUE(ReadNative(*s, Key(i), &v, &r).ok()) << i;
    ASSERT_EQ(v, value(i, i % 3 == 0 ? 7 : 1)) << i;
    if (i % 3 != 0 && (r.log_offset / 4) % 2 != (first[i] / 4) % 2) ++swapped;
    // The one-READ GET's check: the entry at the ref's location is current.
    const size_t len = SizeClassBytes(RefSizeClass(r.ref));
    RacyLoad(entry.data(), s->log_base() + r.log_offset, len);
    EXPECT_EQ(DecodeEntry(std::span(entry).first(len), Key(i), r.ref, s->config().seed, true).verdict,
              EntryVerdict::kValue)
        << i;
  }
  EXPECT_GT(swapped, 0) << "no copy landed at the other parity: the test proves nothing";
}

TEST(Cleaner, ThreadFreesSpaceForAFullStoreModeLog) {
  StoreConfig c = CleanerConfig();
  c.cleaner_thread = true;
  c.full_wait = std::chrono::milliseconds(2000);
  auto s = OpenOrDie(c);
  ASSERT_TRUE(s);
  // 200 keys rewritten 100 times: ~ 5 MB through a 1 MiB log.
  for (int ver = 1; ver <= 100; ++ver) {
    for (int i = 0; i < 200; ++i) ASSERT_TRUE(s->Put(0, Key(i), Value(i, ver, 200)).ok()) << ver << " " << i;
  }
  std::string v;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(ReadNative(*s, Key(i), &v).ok());
    ASSERT_EQ(v, Value(i, 100, 200));
  }
  EXPECT_GT(s->Stats().segments_cleaned, 50u);
}

TEST(Cleaner, ReuseWaitsForTheGracePeriod) {
  StoreConfig c = CleanerConfig();
  c.grace_period = std::chrono::milliseconds(300);
  auto s = OpenOrDie(c);
  ASSERT_TRUE(s);
  NativeGetResult first;
  std::string v;
  ASSERT_TRUE(s->Put(0, "k", Value(0, 0, 200)).ok());
  ASSERT_TRUE(ReadNative(*s, "k", &v, &first).ok());
  const uint64_t gen = s->SegmentGeneration(first.log_offset);
  for (int ver = 1; ver <= 200; ++ver) ASSERT_TRUE(s->Put(0, "k", Value(0, ver, 200)).ok());
  ASSERT_GT(s->RunCleanerOnce(), 0u);
  StoreStats st = s->Stats();
  EXPECT_GT(st.segments_retired, 0u);
  // Until the grace period passes, the retired segment keeps its old bytes: a
  // slow reader that read the old ref still validates the old entry.
  for (int ver = 201; ver <= 400; ++ver) ASSERT_TRUE(s->Put(0, "k", Value(0, ver, 200)).ok());
  EXPECT_EQ(s->SegmentGeneration(first.log_offset), gen);
  std::vector<std::byte> old(SizeClassBytes(RefSizeClass(first.ref)));
  RacyLoad(old.data(), s->log_base() + first.log_offset, old.size());
  EntryView ev = DecodeEntry(old, "k", first.ref, c.seed, false);
  EXPECT_EQ(ev.verdict, EntryVerdict::kValue);
  EXPECT_TRUE(ev.superseded);
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  for (int ver = 401; ver <= 2000; ++ver) ASSERT_TRUE(s->Put(0, "k", Value(0, ver, 200)).ok());
  s->RunCleanerOnce();
  for (int ver = 2001; ver <= 2400; ++ver) ASSERT_TRUE(s->Put(0, "k", Value(0, ver, 200)).ok());
  EXPECT_GT(s->SegmentGeneration(first.log_offset), gen);  // reused after the grace period
  ASSERT_TRUE(ReadNative(*s, "k", &v).ok());
  EXPECT_EQ(v, Value(0, 2400, 200));
}

}  // namespace
}  // namespace kvrdma::test
