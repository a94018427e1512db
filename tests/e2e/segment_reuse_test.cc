// Regression tests for issue 13, finding 1: a cached location survives the
// reuse of its log segment. The same offset then holds a complete,
// checksummed entry of the same key that the index never published (the
// tombstone of a DELETE of an absent key, the leftover of a PUT answered
// ServerFull). The one-READ GET must not return it: on c1cae9c (a) returned
// NotFound for a present key and (b) returned a value no PUT ever committed.
//
// Both steer the log by hand: 4 KiB segments, the cleaner run by the test,
// writer A on worker 1 fills and seals segment 0, the cleaner retires it, and
// after the grace period writer B's first write (worker 0, a fresh head) opens
// the reused segment 0 at offset 0: exactly the reader's cached location.
#include <gtest/gtest.h>

#include <thread>

#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

constexpr uint32_t kGraceMs = 20;

class SegmentReuseTest : public ::testing::TestWithParam<Kind> {
 protected:
  // An index of `homes` homes with windows of `window` words.
  void Start(uint64_t homes, uint64_t window = kDefaultWindowWords) {
    env_ = TransportEnv::Make(GetParam());
    if (!env_.skip_reason.empty()) GTEST_SKIP() << env_.skip_reason;
    server::ServerConfig cfg = TestServer::Defaults();
    cfg.workers = 2;
    cfg.max_key_bytes = 64;
    cfg.max_value_bytes = 2048;
    cfg.grace_period_ms = kGraceMs;
    server_ = std::make_unique<TestServer>(env_, cfg, [homes, window](StoreConfig& sc) {
      sc.cleaner_thread = false;
      sc.index_homes = homes;
      sc.index_window = window;
      sc.segment_bytes = 4096;
      sc.log_bytes = 16 * 4096;
    });
    // Connections go to workers round robin: reader -> 0, A -> 1, B -> 0.
    reader_ = Connect();
    a_ = Connect();
    b_ = Connect();
    ASSERT_TRUE(reader_ && a_ && b_);
  }
  std::unique_ptr<Client> Connect() {
    auto c = server_->Connect(PutMode::kSend);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  Store& store() { return server_->backend().store(); }
  // Writer A seals segment 0 with superseded filler entries (key "f").
  void SealSegmentZero() {
    const std::string filler(495, 'f');  // 512-byte entries
    for (int i = 0; i < 9; ++i) ASSERT_TRUE(a_->Put("f", filler).ok());
  }
  // Compacts segment 0, then waits out the grace period.
  void RetireSegmentZeroAndWait() {
    const uint64_t cleaned = store().Stats().segments_cleaned;
    store().RunCleanerOnce();
    ASSERT_GT(store().Stats().segments_cleaned, cleaned) << "segment 0 was not retired";
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * kGraceMs));
  }
  void CacheLocationOfK() {
    std::string v;
    ASSERT_TRUE(reader_->Get("k", &v).ok());
    ASSERT_EQ(v, "abc");
    const uint64_t reads = reader_->stats().reads;
    ASSERT_TRUE(reader_->Get("k", &v).ok());
    ASSERT_EQ(reader_->stats().reads - reads, 1u) << "the location of k is not cached";
  }

  TransportEnv env_;
  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> reader_, a_, b_;
};

// (a) A DELETE of an absent key writes a tombstone where the reader's cached
// location points; then the key is PUT elsewhere. The GET, started after
// that PUT returned, must return the PUT's value.
TEST_P(SegmentReuseTest, CachedGetIgnoresTheTombstoneOfADeleteOfAnAbsentKey) {
  Start(1 << 13);
  if (IsSkipped()) return;
  ASSERT_TRUE(a_->Put("k", "abc").ok());
  CacheLocationOfK();
  ASSERT_TRUE(a_->Put("k", "abd").ok());
  ASSERT_TRUE(a_->Delete("k").ok());
  SealSegmentZero();
  RetireSegmentZeroAndWait();
  const uint64_t gen = store().SegmentGeneration(0);
  EXPECT_TRUE(b_->Delete("k").IsNotFound());  // its tombstone lands at offset 0
  ASSERT_GT(store().SegmentGeneration(0), gen) << "segment 0 was not reused";
  ASSERT_TRUE(b_->Put("k", "xyz").ok());
  std::string v;
  Status st = reader_->Get("k", &v);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(v, "xyz");
}

// (b) A 14-word index (one home, a window of 14) full of other keys: a PUT of the absent
// key is answered ServerFull and leaves its entry where the reader's cached
// location points. The key is absent: the GET must return NotFound.
TEST_P(SegmentReuseTest, CachedGetIgnoresTheEntryOfAPutAnsweredServerFull) {
  Start(1, 14);
  if (IsSkipped()) return;
  ASSERT_TRUE(a_->Put("k", "abc").ok());
  CacheLocationOfK();
  ASSERT_TRUE(a_->Delete("k").ok());
  // 14 words: k's tombstone, "f" and 12 others.
  for (int i = 1; i <= 12; ++i) ASSERT_TRUE(a_->Put("o" + std::to_string(i), "v").ok());
  SealSegmentZero();
  RetireSegmentZeroAndWait();  // relocates o1..o12, purges k's tombstone
  ASSERT_TRUE(a_->Put("o13", "v").ok());  // the last free word (A's head is in segment 1)
  const uint64_t gen = store().SegmentGeneration(0);
  Status put = b_->Put("k", "zzz");
  ASSERT_EQ(put.code(), Status::Code::kServerFull) << put.ToString();
  ASSERT_GT(store().SegmentGeneration(0), gen) << "segment 0 was not reused";
  std::string v;
  Status st = reader_->Get("k", &v);
  EXPECT_TRUE(st.IsNotFound()) << st.ToString() << " value '" << v << "'";
}

INSTANTIATE_TEST_SUITE_P(Loopback, SegmentReuseTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, SegmentReuseTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
