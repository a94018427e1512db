// Store operations, capacity modes and memory arenas.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "tests/store/store_test_util.h"

namespace kvrdma::test {
namespace {

TEST(Store, PutGetUpdateDelete) {
  auto s = OpenOrDie(SmallConfig());
  ASSERT_TRUE(s);
  std::string v;
  EXPECT_TRUE(s->Get("a", &v).IsNotFound());
  auto r = s->Put(0, "a", "one");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);  // versions are the store's write sequence numbers
  ASSERT_TRUE(s->Get("a", &v).ok());
  EXPECT_EQ(v, "one");
  NativeGetResult first;
  ASSERT_TRUE(ReadNative(*s, "a", &v, &first).ok());
  EXPECT_EQ(v, "one");

  r = s->Put(1, "a", "two, longer");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2u);
  ASSERT_TRUE(ReadNative(*s, "a", &v).ok());
  EXPECT_EQ(v, "two, longer");
  // The old entry was marked superseded before the key's word took the new ref.
  std::vector<std::byte> old(SizeClassBytes(RefSizeClass(first.ref)));
  RacyLoad(old.data(), s->log_base() + first.log_offset, old.size());
  EXPECT_EQ(DecodeEntry(old, "a", first.ref, s->config().seed, true).verdict, EntryVerdict::kSuperseded);
  EXPECT_EQ(DecodeEntry(old, "a", first.ref, s->config().seed, false).verdict, EntryVerdict::kValue);

  r = s->Delete(0, "a");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 3u);
  EXPECT_TRUE(s->Get("a", &v).IsNotFound());
  EXPECT_TRUE(ReadNative(*s, "a", &v).IsNotFound());
  EXPECT_TRUE(s->Delete(0, "a").status().IsNotFound());
  EXPECT_TRUE(s->Delete(0, "never").status().IsNotFound());
  r = s->Put(0, "a", "three");  // versions continue across a delete
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 4u);
  ASSERT_TRUE(ReadNative(*s, "a", &v).ok());
  EXPECT_EQ(v, "three");

  r = s->Put(0, "b", "");  // empty values are values
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 5u);  // the sequence is the store's, not the key's
  ASSERT_TRUE(ReadNative(*s, "b", &v).ok());
  EXPECT_EQ(v, "");
  StoreStats st = s->Stats();
  EXPECT_EQ(st.items, 2u);
  EXPECT_EQ(st.tombstones, 0u);
  EXPECT_EQ(st.index_homes, 8192u);
  EXPECT_EQ(st.index_bytes_used, 16u);
}

// A write with a checksum to meet (a rendezvous PUT's), both ways its value
// comes: copied from staging (Put with the checksum) and arrived in place
// (BeginPut, the bytes, FinishPut). Published only if the entry checksum over
// the log's copy is that one; refused, nothing changes and the next write's
// version follows the last published one.
TEST(Store, APutWithAChecksumIsPublishedOnlyIfItsEntryChecksumIsThatOne) {
  for (const bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "from staging");
    auto s = OpenOrDie(SmallConfig());
    ASSERT_TRUE(s);
    auto sum = [seed = s->config().seed](std::string_view k, std::string_view v) {
      return EntryChecksumOf(k, std::as_bytes(std::span(v.data(), v.size())), seed);
    };
    auto put = [&](uint32_t worker, std::string_view key, std::string_view bytes,
                   uint64_t checksum) -> Result<uint64_t> {
      if (!in_place) return s->Put(worker, key, bytes, {}, true, &checksum);
      auto place = s->BeginPut(worker, key, static_cast<uint32_t>(bytes.size()), true);
      if (!place.ok()) return place.status();
      std::memcpy(s->PlacedValue(*place), bytes.data(), bytes.size());
      return s->FinishPut(worker, *place, key, static_cast<uint32_t>(bytes.size()), checksum);
    };
    const std::string value(5000, 'v');
    auto r = put(0, "k", value, sum("k", value));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, 1u);
    std::string v;
    ASSERT_TRUE(ReadNative(*s, "k", &v).ok());
    EXPECT_TRUE(v == value);
    // Another value's checksum, another key's, one bit off.
    const std::string w(5000, 'w');
    for (uint64_t bad : {sum("k", value), sum("other", w), sum("k", w) ^ 1}) {
      r = put(0, "k", w, bad);
      EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
    }
    ASSERT_TRUE(ReadNative(*s, "k", &v).ok());
    EXPECT_TRUE(v == value);
    r = put(1, "k", "new", sum("k", "new"));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, 2u);  // the refused writes took no version
    ASSERT_TRUE(ReadNative(*s, "k", &v).ok());
    EXPECT_EQ(v, "new");
  }
}

// In place: a value that never came (AbandonPut) changes nothing and takes
// no version; an empty value arrives as nothing; the cleaner walks segments
// holding refused and abandoned entries.
TEST(Store, AValuePutInPlaceThatNeverCameChangesNothing) {
  auto s = OpenOrDie(SmallConfig());
  ASSERT_TRUE(s);
  const uint64_t seed = s->config().seed;
  ASSERT_TRUE(s->Put(0, "k", "old").ok());
  auto place = s->BeginPut(0, "k", 300, true);
  ASSERT_TRUE(place.ok());
  s->AbandonPut(*place);
  std::string v;
  ASSERT_TRUE(ReadNative(*s, "k", &v).ok());
  EXPECT_EQ(v, "old");
  place = s->BeginPut(1, "k", 0, true);
  ASSERT_TRUE(place.ok());
  auto r = s->FinishPut(1, *place, "k", 0, EntryChecksumOf("k", {}, seed));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 2u);  // the abandoned one took no version
  ASSERT_TRUE(ReadNative(*s, "k", &v).ok());
  EXPECT_EQ(v, "");
  place = s->BeginPut(0, "k", 100, true);  // refused: another checksum
  ASSERT_TRUE(place.ok());
  EXPECT_EQ(s->FinishPut(0, *place, "k", 100, 1).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s->BeginPut(2, "k", 1, true).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s->BeginPut(0, "k", (16 << 10) + 1, true).status().code(), Status::Code::kTooLarge);
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(s->Put(0, "filler", std::string(4000, 'f')).ok());
  EXPECT_GT(s->RunCleanerOnce(), 0u);
  ASSERT_TRUE(ReadNative(*s, "k", &v).ok());
  EXPECT_EQ(v, "");
  EXPECT_TRUE(s->CheckIndex().ok());
}

// While a value is arriving in a segment, no cleaner claims it, even once
// it is sealed and holds nothing live: otherwise it would be retired and
// reused under the READ (put-back 26.pin).
TEST(Store, TheCleanerLeavesASegmentAloneWhileAValueIsArrivingInIt) {
  auto s = OpenOrDie(SmallConfig());  // grace 0: a retired segment is free at once
  ASSERT_TRUE(s);
  const std::string value(8000, 'x');
  auto place = s->BeginPut(0, "late", static_cast<uint32_t>(value.size()), true);
  ASSERT_TRUE(place.ok());
  const uint64_t generation = s->SegmentGeneration(*place);
  // The head moves on twice; everything before is superseded: the place's
  // segment holds nothing live and is sealed.
  for (int i = 0; i < 24; ++i) ASSERT_TRUE(s->Put(0, "filler", std::string(8000, char('a' + i % 26))).ok());
  for (int pass = 0; pass < 3; ++pass) {
    s->RunCleanerOnce();
    for (int i = 0; i < 24; ++i) ASSERT_TRUE(s->Put(0, "filler", std::string(8000, char('a' + i % 26))).ok());
  }
  EXPECT_EQ(s->SegmentGeneration(*place), generation) << "the segment was reused under the arriving value";
  std::memcpy(s->PlacedValue(*place), value.data(), value.size());
  const uint64_t sum = EntryChecksumOf("late", std::as_bytes(std::span(value.data(), value.size())), s->config().seed);
  auto r = s->FinishPut(0, *place, "late", static_cast<uint32_t>(value.size()), sum);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::string v;
  ASSERT_TRUE(ReadNative(*s, "late", &v).ok());
  EXPECT_TRUE(v == value);
  // Unpinned, it is the cleaner's again: its one live entry moves.
  EXPECT_GT(s->RunCleanerOnce(), 0u);
  ASSERT_TRUE(ReadNative(*s, "late", &v).ok());
  EXPECT_TRUE(v == value);
  ASSERT_TRUE(ReadNative(*s, "filler", &v).ok());
  EXPECT_EQ(v, std::string(8000, char('a' + 23 % 26)));
}

TEST(Store, RejectsBadArguments) {
  auto s = OpenOrDie(SmallConfig());
  ASSERT_TRUE(s);
  EXPECT_EQ(s->Put(0, "", "x").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s->Put(2, "k", "x").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s->Put(0, std::string(1024, 'k'), "x").status().code(), Status::Code::kTooLarge);
  EXPECT_EQ(s->Put(0, "k", std::string((16 << 10) + 1, 'v')).status().code(), Status::Code::kTooLarge);
  StoreConfig bad = SmallConfig();
  bad.index_homes = 1000;
  EXPECT_FALSE(Store::Open(bad).ok());
  bad = SmallConfig();
  bad.log_bytes = 3 * bad.segment_bytes;
  EXPECT_FALSE(Store::Open(bad).ok());
}

// Issue 15: whatever the size, one entry READ of at most (1 + 1/64) x the
// entry, which its size class covers.
TEST(Store, EveryValueSizeTakesOneEntryRead) {
  StoreConfig cfg = SmallConfig();
  cfg.max_value_bytes = kMaxValueBytes;
  cfg.segment_bytes = 4 << 20;
  cfg.log_bytes = 32 << 20;
  auto s = OpenOrDie(cfg);
  ASSERT_TRUE(s);
  std::vector<std::byte> buf(SizeClassBytes(kMaxSizeClass));
  // Around the last exact class (entries of 4092 bytes), the first coarse
  // ones, 8 KiB, 16 KiB, 32 KiB and up to the largest value (keys "bigN":
  // an entry is 12 + 4 + value bytes, rounded up to 4).
  const size_t sizes[] = {0,     1,     8,          4092 - 16,      4092 - 15,      4096 - 16,  4096 - 15,
                          8192 - 16, 8192 - 15, 16384 - 16, 16384 - 15, 32767, 32769, 100 << 10, 1 << 20,
                          kMaxValueBytes};
  int n = 0;
  for (size_t size : sizes) {
    const std::string key = "big" + std::to_string(n);
    const std::string value = Value(n++, 1, size);
    ASSERT_TRUE(s->Put(0, key, value).ok()) << size;
    ReadCounters c;
    NativeGetResult r;
    ASSERT_TRUE(NativeGet(s->index_params(), s->index_base(), s->log_base(), key, buf, &r, &c).ok()) << size;
    EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(r.value.data()), r.value.size()), value) << size;
    const uint64_t entry = EntryBytes(key.size(), size);
    EXPECT_EQ(RefSizeClass(r.ref), SizeClassFor(entry)) << size;
    EXPECT_EQ(c.rounds, 1u) << size;
    EXPECT_EQ(c.restarts, 0u) << size;
    EXPECT_EQ(c.entry_reads, 1u) << size;
    EXPECT_GE(c.entry_read_bytes, entry) << size;
    EXPECT_LE(c.entry_read_bytes * kSizeClassSteps, entry * (kSizeClassSteps + 1)) << size;  // <= 1 + 1/32
  }
}

// A hop tags the word it leaves: a reader that READ the hop's destination
// before the hop and its source after it (a responder may read the bytes of
// one READ in any order) sees the moved key nowhere, but sees its tag, so it
// does not conclude a miss (DESIGN.md, "Misses while entry refs move"). Staged by
// hand on a 4-home index with windows of 2 words (5 words):
//   X (home 0) -> word 0, K (home 1) -> word 1, Y (home 2) -> word 2;
//   the reader of Y copies word 3 (empty) ...
//   Z (home 1): its window [1, 2] is full, word 3 is free: Y hops 2 -> 3, Z
//   takes word 2;
//   ... then the reader copies word 2 (Z's ref).
TEST(Store, AHopTagsTheWordItLeaves) {
  StoreConfig c = SmallConfig();
  c.index_homes = 4;
  c.index_window = 2;
  c.grace_period = std::chrono::milliseconds(50);
  auto s = OpenOrDie(c);
  ASSERT_TRUE(s);
  const IndexParams p = s->index_params();
  auto key_with_home = [&](uint64_t home, int from) {
    for (int i = from;; ++i) {
      const std::string k = Key(i);
      if (MakeKeyHash(k, p.seed, p.home_count).home == home) return k;
    }
  };
  const std::string x = key_with_home(0, 0), k = key_with_home(1, 0), y = key_with_home(2, 0),
                    z = key_with_home(1, 1000);
  ASSERT_TRUE(s->Put(0, x, "x").ok());
  ASSERT_TRUE(s->Put(0, k, "k").ok());
  ASSERT_TRUE(s->Put(0, y, "y").ok());
  const auto word = [&](uint64_t w) {
    uint64_t v;
    RacyLoad(reinterpret_cast<std::byte*>(&v), s->index_base() + w * 8, 8);
    return v;
  };
  const KeyHash yh = MakeKeyHash(y, p.seed, p.home_count);
  ASSERT_EQ(RefFingerprint(WordRef(word(2))), yh.fingerprint) << "Y is not in word 2";
  uint64_t window[2];
  window[1] = word(3);  // the reader copies the higher word first
  ASSERT_EQ(window[1], kEmptyRef);
  ASSERT_TRUE(s->Put(0, z, "z").ok());
  EXPECT_EQ(s->Stats().index_moves, 1u);
  window[0] = word(2);  // ... and the lower one after the hop
  ASSERT_EQ(RefFingerprint(WordRef(word(3))), yh.fingerprint) << "Y did not hop to word 3";
  WindowProbe probe;
  ASSERT_TRUE(ProbeWindow(std::as_bytes(std::span(window)), yh, p, &probe).ok());
  if (probe.count == 0) {  // (Z's fingerprint could collide with Y's: then the entry says "another key")
    EXPECT_TRUE(probe.tag_matched) << "the word Y left carries no tag matching Y";
    EXPECT_FALSE(MissIsProven(probe, /*round_within_limit=*/true));
  }
  EXPECT_TRUE(TagMatches(WordTag(word(2)), yh.tag_nibble()));
  EXPECT_EQ(s->Stats().index_tags, 1u);
  // Y is found where it went; every key reads back.
  std::string v;
  for (const auto& [key, val] : {std::pair{x, "x"}, {k, "k"}, {y, "y"}, {z, "z"}}) {
    ASSERT_TRUE(ReadNative(*s, key, &v).ok()) << key;
    EXPECT_EQ(v, val);
  }
  // The tag expires after tag_ttl (the grace period); the ref in the word stays.
  std::this_thread::sleep_for(c.grace_period + std::chrono::milliseconds(5));
  ASSERT_TRUE(s->Put(0, x, "x2").ok());  // any write expires due tags
  EXPECT_EQ(WordTag(word(2)), 0u);
  EXPECT_EQ(s->Stats().index_tags, 0u);
  ASSERT_TRUE(ReadNative(*s, z, &v).ok());
  EXPECT_EQ(v, "z");
}

TEST(Store, IndexFillsBeyond90PercentThenServerFull) {
  StoreConfig c = SmallConfig();
  c.log_bytes = 16 << 20;
  auto s = OpenOrDie(c);
  ASSERT_TRUE(s);
  // Load against every word a key can use (homes + the last window's tail).
  const int words = static_cast<int>(IndexWords(c.index_homes, c.index_window));
  int n = 0;
  Status last;
  for (; n < words + 10; ++n) {
    auto r = s->Put(n % 2, Key(n), Value(n, 1, 8));
    if (!r.ok()) {
      last = r.status();
      break;
    }
  }
  EXPECT_EQ(last.code(), Status::Code::kServerFull);
  const double load = static_cast<double>(n) / words;
  std::printf("index load at first ServerFull: %.4f (%d of %d words, %llu index moves)\n", load, n, words,
              static_cast<unsigned long long>(s->Stats().index_moves));
  EXPECT_GE(load, 0.90);
  EXPECT_GT(s->Stats().index_moves, 0u);
  // Nothing already stored is lost, and updates of stored keys still work.
  std::string v;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(ReadNative(*s, Key(i), &v).ok()) << i;
    ASSERT_EQ(v, Value(i, 1, 8));
  }
  EXPECT_TRUE(s->Put(0, Key(5), "updated").ok());
  EXPECT_EQ(s->Stats().items, static_cast<uint64_t>(n));
}

// The version a conditional write is checked against (CommitCheck's
// current_version) is kept per index word in server memory: it must follow
// its entry ref through hopscotch hops and cleaner relocations, and be 0 for
// a tombstone or an absent key.
uint64_t CurrentVersion(Store& s, const std::string& key) {
  uint64_t seen = ~uint64_t{0};
  const CommitCheck probe{[](const void* ctx, uint64_t, uint64_t current) {
                            *static_cast<uint64_t*>(const_cast<void*>(ctx)) = current;
                            return Status::Locked("probe only");  // commits nothing
                          },
                          &seen};
  EXPECT_EQ(s.Put(0, key, "probe", probe).status().code(), Status::Code::kLocked);
  return seen;
}

TEST(Store, AKeysVersionFollowsItThroughHopsAndCleanerRelocations) {
  StoreConfig c = SmallConfig();
  c.index_homes = 1024;
  c.log_bytes = 16 << 20;
  c.segment_bytes = 16 << 10;
  c.max_value_bytes = 1024;
  auto s = OpenOrDie(c);
  ASSERT_TRUE(s);
  // 90 % of the words: keys hop to make room.
  const int n = static_cast<int>(IndexWords(c.index_homes, c.index_window) * 9 / 10);
  std::vector<uint64_t> version(n);
  for (int i = 0; i < n; ++i) {
    auto r = s->Put(i % 2, Key(i), Value(i, 1, 40));
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    version[i] = *r;
  }
  ASSERT_GT(s->Stats().index_moves, 0u);
  // Overwrite every key but one in 8, and delete one in 8: the old segments
  // are mostly dead, and the cleaner relocates the keys left in them.
  for (int i = 0; i < n; ++i) {
    if (i % 8 == 0) continue;
    auto r = i % 8 == 1 ? s->Delete(0, Key(i)) : s->Put(0, Key(i), Value(i, 2, 40));
    ASSERT_TRUE(r.ok()) << i;
    version[i] = i % 8 == 1 ? 0 : *r;
  }
  s->RunCleanerOnce();
  ASSERT_GT(s->Stats().relocations, 0u);
  for (int i = 0; i < n; ++i) {
    std::string v;
    uint64_t got = 0;
    Status st = s->Get(Key(i), &v, &got);
    if (version[i] == 0) {
      ASSERT_TRUE(st.IsNotFound()) << i;
    } else {
      ASSERT_TRUE(st.ok()) << i;
      ASSERT_EQ(got, version[i]) << "key " << i;
    }
    ASSERT_EQ(CurrentVersion(*s, Key(i)), version[i]) << "key " << i;
  }
  EXPECT_EQ(CurrentVersion(*s, "never written"), 0u);
  std::printf("%d keys, %llu index moves, %llu relocations: every version kept\n", n,
              static_cast<unsigned long long>(s->Stats().index_moves),
              static_cast<unsigned long long>(s->Stats().relocations));
}

TEST(Store, IndexFullCacheModeEvictsOldest) {
  StoreConfig c = SmallConfig();
  c.mode = CapacityMode::kCache;
  c.log_bytes = 16 << 20;
  auto s = OpenOrDie(c);
  ASSERT_TRUE(s);
  const int total = 1024 * 7 * 2;
  for (int i = 0; i < total; ++i) ASSERT_TRUE(s->Put(0, Key(i), Value(i, 1, 8)).ok()) << i;
  StoreStats st = s->Stats();
  EXPECT_GT(st.evictions, 0u);
  EXPECT_EQ(st.items + st.evictions, static_cast<uint64_t>(total));
  EXPECT_GE(st.items, 1024u * 7 * 9 / 10);
  std::string v;
  for (int i = total - 200; i < total; ++i) {  // the newest are never the oldest
    ASSERT_TRUE(ReadNative(*s, Key(i), &v).ok()) << i;
    EXPECT_EQ(v, Value(i, 1, 8));
  }
}

TEST(Store, LogFullStoreModeLosesNothing) {
  StoreConfig c = SmallConfig();
  c.log_bytes = 16 * (16 << 10);
  c.segment_bytes = 16 << 10;
  c.max_value_bytes = 1024;
  auto s = OpenOrDie(c);
  ASSERT_TRUE(s);
  int n = 0;
  Status last;
  for (; n < 100000; ++n) {
    auto r = s->Put(0, Key(n), Value(n, 1, 200));
    if (!r.ok()) {
      last = r.status();
      break;
    }
  }
  EXPECT_EQ(last.code(), Status::Code::kServerFull);
  EXPECT_GT(n, 500);
  std::string v;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(ReadNative(*s, Key(i), &v).ok()) << i;
    ASSERT_EQ(v, Value(i, 1, 200));
  }
  // All live: the cleaner cannot make room either.
  s->RunCleanerOnce();
  EXPECT_EQ(s->Put(0, Key(n), Value(n, 1, 200)).status().code(), Status::Code::kServerFull);
  for (int i = 0; i < n; ++i) ASSERT_TRUE(ReadNative(*s, Key(i), &v).ok()) << i;
}

TEST(Store, LogFullCacheModeEvictsOldestSegment) {
  StoreConfig c = SmallConfig();
  c.mode = CapacityMode::kCache;
  c.log_bytes = 16 * (16 << 10);
  c.segment_bytes = 16 << 10;
  c.max_value_bytes = 1024;
  auto s = OpenOrDie(c);
  ASSERT_TRUE(s);
  const int total = 5000;  // ~ 1.2 MB of entries into a 256 KiB log
  uint64_t first_version = 0;
  for (int i = 0; i < total; ++i) {
    auto r = s->Put(0, Key(i), Value(i, 1, 200));
    ASSERT_TRUE(r.ok()) << i;
    if (i == 0) first_version = *r;
  }
  StoreStats st = s->Stats();
  EXPECT_GT(st.evictions, 3000u);
  EXPECT_EQ(st.items + st.evictions, static_cast<uint64_t>(total));
  std::string v;
  for (int i = total - 50; i < total; ++i) {
    ASSERT_TRUE(ReadNative(*s, Key(i), &v).ok()) << i;
    EXPECT_EQ(v, Value(i, 1, 200));
  }
  int present = 0;
  for (int i = 0; i < total; ++i) {
    Status g = ReadNative(*s, Key(i), &v);
    ASSERT_TRUE(g.ok() || g.IsNotFound());
    if (g.ok()) {
      ++present;
      ASSERT_EQ(v, Value(i, 1, 200));
    }
  }
  EXPECT_EQ(static_cast<uint64_t>(present), st.items);
  // A key written again after its eviction gets a larger version than its
  // first write (format 4's per-key versions restarted at 1): a key's
  // versions grow with each write of it, evictions included.
  ASSERT_TRUE(ReadNative(*s, Key(0), &v).IsNotFound());
  auto again = s->Put(0, Key(0), "again");
  ASSERT_TRUE(again.ok());
  EXPECT_GT(*again, first_version);
}

// Issue 25 item 12: a small cache-mode log (6 segments of 2 MiB, values up
// to 1 MiB, two workers, the cleaner thread on, the defaults' grace period
// and store-full wait) must make room for every value that fits: no PUT is
// answered ServerFull. With two heads each holding a segment and the
// cleaner's reserve kept free, at most one segment is sealed at a time; a
// writer that waited out one grace period only to see the other worker take
// the freed segment had to evict and wait again, past its deadline.
TEST(Store, CacheModeSmallLogNeverRefusesAValueThatFits) {
  StoreConfig c = SmallConfig();
  c.mode = CapacityMode::kCache;
  c.segment_bytes = 2 << 20;
  c.log_bytes = 6 * c.segment_bytes;
  c.max_value_bytes = 1 << 20;
  c.grace_period = std::chrono::milliseconds(20);
  c.full_wait = std::chrono::milliseconds(5);
  c.cleaner_thread = true;
  auto s = OpenOrDie(c);
  ASSERT_TRUE(s);
  std::atomic<int> refused{0};
  std::vector<std::thread> ts;
  for (uint32_t w = 0; w < 2; ++w) {
    ts.emplace_back([&, w] {
      std::mt19937 rng(w + 1);
      for (int i = 0; i < 150; ++i) {
        const size_t len = 1 + rng() % c.max_value_bytes;
        auto r = s->Put(w, Key(static_cast<int>(w) * 1000 + i % 40), Value(i, static_cast<int>(w), len));
        if (!r.ok()) {
          EXPECT_EQ(r.status().code(), Status::Code::kServerFull) << r.status().ToString();
          refused.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(refused.load(), 0) << "PUTs of values that fit answered ServerFull in cache mode";
  EXPECT_GT(s->Stats().evictions, 0u);
}

TEST(Store, ConcurrentWorkersDistinctKeys) {
  StoreConfig c = SmallConfig();
  c.workers = 4;
  c.log_bytes = 16 << 20;
  c.cleaner_thread = true;
  auto s = OpenOrDie(c);
  ASSERT_TRUE(s);
  std::vector<std::thread> ts;
  for (uint32_t w = 0; w < 4; ++w) {
    ts.emplace_back([&, w] {
      for (int i = 0; i < 1000; ++i) {
        uint64_t last = 0;
        for (int ver = 1; ver <= 3; ++ver) {
          auto r = s->Put(w, Key(w * 1000 + i), Value(w * 1000 + i, ver));
          ASSERT_TRUE(r.ok());
          ASSERT_GT(*r, last);  // a key's versions grow with each write of it
          last = *r;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  std::string v;
  for (int i = 0; i < 4000; ++i) {
    ASSERT_TRUE(ReadNative(*s, Key(i), &v).ok());
    EXPECT_EQ(v, Value(i, 3));
  }
  EXPECT_EQ(s->Stats().items, 4000u);
  // 12,000 writes, each with its own version: the next one is 12,001.
  auto r = s->Put(0, Key(0), "last");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 12001u);
}

TEST(Arena, HugePageModes) {
  auto off = Arena::Create(3 << 20, HugePages::kOff, "test");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->backing(), Arena::Backing::kNormal);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(off->data()) % 4096, 0u);
  EXPECT_GE(off->mapped_size(), off->size());
  auto aut = Arena::Create(4 << 20, HugePages::kAuto, "test");
  ASSERT_TRUE(aut.ok());
  EXPECT_NE(aut->data(), nullptr);
  std::printf("auto arena backing: %s\n", Arena::BackingName(aut->backing()));
  auto on = Arena::Create(2 << 20, HugePages::kOn, "test");
  if (on.ok()) {
    EXPECT_EQ(on->backing(), Arena::Backing::kHugeTlb);
  } else {
    EXPECT_EQ(on.status().code(), Status::Code::kNoResource);
  }
  Arena moved = std::move(off).value();
  EXPECT_NE(moved.data(), nullptr);
}

}  // namespace
}  // namespace kvrdma::test
