// A GET of an absent key whose window shows a move tag matching it cannot
// prove the miss (docs/DESIGN.md, "Misses while entry refs move"): it reads the
// window again until the tag expires (about the grace period). The client
// backs off between such rounds (25 us doubling to 1 ms), so a client that
// makes keys hop costs a reader about one window READ per millisecond, not a
// flood. With the back-off taken out of client_get.cc this test fails: on the
// loopback fabric a round takes microseconds, so the GET reads the window
// thousands of times while the tag lives.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/format/hash.h"
#include "common/memory/racy_copy.h"
#include "common/format/window.h"
#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

TEST(MissBackoffTest, AMissBehindAMatchingTagReadsTheWindowAboutOncePerMillisecond) {
  TransportEnv env = TransportEnv::Make(Kind::kLoopback);
  // Four homes, windows of two words: a fourth key of home 1 makes the key
  // in word 2 hop to word 3, leaving a tag on word 2 (as Store.AHopTagsTheWordItLeaves).
  TestServer server(env, TestServer::Defaults(), [](StoreConfig& c) {
    c.index_homes = 4;
    c.index_window = 2;
  });
  Store& store = server.backend().store();
  const IndexParams p = store.index_params();
  auto hash = [&](const std::string& k) { return MakeKeyHash(k, p.seed, p.home_count); };
  auto key_with_home = [&](uint64_t home, int from) {
    for (int i = from;; ++i) {
      const std::string k = "key" + std::to_string(i);
      if (hash(k).home == home) return k;
    }
  };
  const std::string x = key_with_home(0, 0), k = key_with_home(1, 0), y = key_with_home(2, 0),
                    z = key_with_home(1, 1000);
  auto client = server.Connect(PutMode::kSend);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  Client& c = **client;
  ASSERT_TRUE(c.Put(x, "x").ok());
  ASSERT_TRUE(c.Put(k, "k").ok());
  ASSERT_TRUE(c.Put(y, "y").ok());
  ASSERT_TRUE(c.Put(z, "z").ok());  // y hops from word 2 to word 3
  ASSERT_EQ(store.Stats().index_moves, 1u);
  uint64_t word2;
  RacyLoad(reinterpret_cast<std::byte*>(&word2), store.index_base() + 2 * 8, 8);
  ASSERT_TRUE(TagMatches(WordTag(word2), hash(y).tag_nibble())) << "word 2 carries no tag of y";
  // An absent key of home 2 with y's tag nibble (about 1 key in 15) and no stored
  // key's fingerprint: its window is words 2 and 3.
  std::string q;
  for (int i = 2000; q.empty(); ++i) {
    const std::string cand = "absent" + std::to_string(i);
    const KeyHash h = hash(cand);
    if (h.home == 2 && h.tag_nibble() == hash(y).tag_nibble() && h.fingerprint != hash(y).fingerprint &&
        h.fingerprint != hash(z).fingerprint) {
      q = cand;
    }
  }
  const ClientStats before = c.stats();
  const auto t0 = std::chrono::steady_clock::now();
  std::string v;
  EXPECT_TRUE(c.Get(q, &v).IsNotFound());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t rounds = c.stats().get_miss_rounds - before.get_miss_rounds;
  std::printf("a miss behind a matching tag: %llu window rounds in %.1f ms\n", static_cast<unsigned long long>(rounds),
              ms);
  EXPECT_GT(rounds, 1u) << "the tag did not hold the miss back (did it expire before the GET?)";
  // Back-off: 25, 50, 100, 200, 400, 800 us, then 1 ms per round. Allow a
  // round per ms, the ramp, and slack for a slow machine's late wake-ups
  // (they only make rounds fewer).
  EXPECT_LE(static_cast<double>(rounds), ms + 10.0) << "the GET did not back off between rounds";
}

// Issue 25, item 10: format 5 took a key's tag nibble from hash bits 44..47,
// and nibble 15 is the any-key code, so the first hop of 1 key in 16 left a
// tag matching every key: every absent key of the window took rounds until
// the tag expired. Now no key's nibble is 15: the hop of a key whose bits
// 44..47 are 1111 tags its word for its own nibble only, and the miss of
// another absent key of the window is one round.
TEST(MissBackoffTest, AHopOfAKeyWithHashBits1111LeavesATagOfItsNibbleOnly) {
  TransportEnv env = TransportEnv::Make(Kind::kLoopback);
  TestServer server(env, TestServer::Defaults(), [](StoreConfig& c) {
    c.index_homes = 4;
    c.index_window = 2;
  });
  Store& store = server.backend().store();
  const IndexParams p = store.index_params();
  auto hash = [&](const std::string& k) { return MakeKeyHash(k, p.seed, p.home_count); };
  auto key_with = [&](uint64_t home, int from, bool bits_1111) {
    for (int i = from;; ++i) {
      const std::string k = "key" + std::to_string(i);
      if (hash(k).home == home && (!bits_1111 || ((hash(k).hash >> 44) & 15) == 15)) return k;
    }
  };
  const std::string x = key_with(0, 0, false), k = key_with(1, 0, false), y = key_with(2, 0, true),
                    z = key_with(1, 1000, false);
  auto client = server.Connect(PutMode::kSend);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  Client& c = **client;
  for (const std::string& key : {x, k, y, z}) ASSERT_TRUE(c.Put(key, "v").ok());  // z makes y hop
  ASSERT_EQ(store.Stats().index_moves, 1u);
  uint64_t word2;
  RacyLoad(reinterpret_cast<std::byte*>(&word2), store.index_base() + 2 * 8, 8);
  const uint64_t tag = WordTag(word2);
  ASSERT_TRUE(TagMatches(tag, hash(y).tag_nibble())) << "word 2 carries no tag of y";
  EXPECT_NE(tag, kTagSetBit | kTagAnyKey) << "y's first hop left an any-key tag";
  for (uint64_t n = 0; n < kKeyTagNibbles; ++n) {
    EXPECT_EQ(TagMatches(tag, n), n == hash(y).tag_nibble()) << "nibble " << n << ", tag " << tag;
  }
  // An absent key of home 2 with another nibble and no stored fingerprint:
  // its miss is proven by its first window READ.
  std::string q;
  for (int i = 2000; q.empty(); ++i) {
    const std::string cand = "absent" + std::to_string(i);
    const KeyHash h = hash(cand);
    if (h.home == 2 && h.tag_nibble() != hash(y).tag_nibble() && h.fingerprint != hash(y).fingerprint &&
        h.fingerprint != hash(z).fingerprint) {
      q = cand;
    }
  }
  const ClientStats before = c.stats();
  std::string v;
  EXPECT_TRUE(c.Get(q, &v).IsNotFound());
  EXPECT_EQ(c.stats().get_miss_rounds - before.get_miss_rounds, 1u) << "the miss of an unrelated key took rounds";
}

}  // namespace
}  // namespace kvrdma::testing
