// Issue 15: a GET of a value of any size up to the server's maximum takes one
// entry READ after the index READ. The entry ref's size class covers the entry, so
// an uncached GET costs one window READ + 1 entry READ, from
// an empty value to a 2 MiB - 1 one; before size classes, an entry over
// 32760 bytes needed a second READ. Values at the edge of the exact classes
// (entries of 4092 bytes, the largest exact class, and 4096, the first
// coarse one), at the edge of the client's per-GET entry buffer (16 KiB) and
// just past it (the shared large buffer) are included.
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "common/format/entry_ref.h"
#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

// The key's window, then its entry: one READ each (format 4).
constexpr uint64_t kUncachedGetReads = 2;

constexpr size_t kKeyBytes = 8;  // "size-NNN"

// Value sizes: the entry is 12 + kKeyBytes + value, rounded up to 4.
std::vector<size_t> Sizes() {
  const size_t exact_max = kMaxExactEntryBytes - kEntryHeaderBytes - kKeyBytes;  // entry 4092
  const size_t buffer_max = (16 << 10) - kEntryHeaderBytes - kKeyBytes;           // entry 16384
  return {0,
          1,
          exact_max - 1,   // entry 4092
          exact_max,       // entry 4092: the largest exact class
          exact_max + 1,   // entry 4096: the first coarse class
          exact_max + 5,   // entry 4100: the second coarse class
          buffer_max,      // entry 16384: the last class that fits the op's own entry buffer
          buffer_max + 1,  // entry 16388: the large buffer
          (32 << 10) + 1,  // 32 KiB + 1
          100 << 10,       // 100 KiB
          kMaxValueBytes};  // the server's maximum (configured to the layout's)
}

std::string Pattern(size_t size, int salt) {
  std::string v(size, '\0');
  for (size_t i = 0; i < size; ++i) v[i] = static_cast<char>((i * 131 + i / 4099 + static_cast<size_t>(salt)) & 0xff);
  return v;
}

class OneReadGetTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    env_ = TransportEnv::Make(GetParam());
    if (!env_.skip_reason.empty()) GTEST_SKIP() << env_.skip_reason;
    server::ServerConfig cfg = TestServer::Defaults();
    cfg.max_value_bytes = kMaxValueBytes;
    // A round limit (half the grace period) that a 2 MiB READ meets even on a
    // loaded Soft-RoCE guest: with the default 100 ms grace, a round of ~50 ms
    // was late once in CI and READ its word again (a third READ, rightly:
    // DESIGN "Location cache"). The READ counts below are about rounds in
    // time; the cleaner is off, so a longer grace changes nothing else.
    cfg.grace_period_ms = 2000;
    server_ = std::make_unique<TestServer>(env_, cfg, [](StoreConfig& sc) { sc.cleaner_thread = false; });
    auto w = server_->Connect(PutMode::kWriteImm);
    auto r = server_->Connect(PutMode::kSend);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    writer_ = std::move(w).value();
    reader_ = std::move(r).value();
  }
  void TearDown() override {
    reader_.reset();
    writer_.reset();
    server_.reset();
  }
  static std::string KeyOf(size_t i) {
    std::string k = "size-" + std::to_string(100 + i);
    EXPECT_EQ(k.size(), kKeyBytes);
    return k;
  }
  TransportEnv env_;
  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> writer_, reader_;
};

TEST_P(OneReadGetTest, UncachedGetOfAnySizeIsAWindowReadPlusOneEntryRead) {
  const std::vector<size_t> sizes = Sizes();
  std::vector<std::string> values;
  for (size_t i = 0; i < sizes.size(); ++i) {
    values.push_back(Pattern(sizes[i], static_cast<int>(i)));
    ASSERT_TRUE(writer_->Put(KeyOf(i), values.back()).ok()) << sizes[i];
  }
  // The reader has never seen these keys: every GET goes through the index.
  for (size_t i = 0; i < sizes.size(); ++i) {
    const ClientStats before = reader_->stats();
    std::string got;
    Status st = reader_->Get(KeyOf(i), &got);
    ASSERT_TRUE(st.ok()) << sizes[i] << ": " << st.ToString();
    const ClientStats after = reader_->stats();
    EXPECT_EQ(after.get_hits - before.get_hits, 1u) << sizes[i];
    EXPECT_EQ(after.get_hit_reads - before.get_hit_reads, kUncachedGetReads) << "value of " << sizes[i];
    EXPECT_EQ(after.reads - before.reads, kUncachedGetReads) << "value of " << sizes[i];
    EXPECT_EQ(after.get_retries - before.get_retries, 0u) << sizes[i];
    EXPECT_EQ(got.size(), sizes[i]);
    EXPECT_TRUE(got == values[i]) << "value of " << sizes[i] << " bytes differs";
  }
  // Again: entries that fit the GET's own buffer were cached (one round trip);
  // larger ones are not cached and take the index path, still one entry READ.
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint64_t before = reader_->stats().reads;
    std::string got;
    ASSERT_TRUE(reader_->Get(KeyOf(i), &got).ok()) << sizes[i];
    const bool fits_op_buffer = EntryBytes(kKeyBytes, sizes[i]) <= 16384;
    EXPECT_EQ(reader_->stats().reads - before, fits_op_buffer ? kCachedGetReads : kUncachedGetReads) << sizes[i];
    EXPECT_TRUE(got == values[i]) << "value of " << sizes[i] << " bytes differs";
  }
}

// Several GETs of large values in flight at once share the one large buffer
// (one owner at a time): each still takes one entry READ and gets its value.
TEST_P(OneReadGetTest, ConcurrentLargeGetsShareTheLargeBuffer) {
  constexpr int kKeys = 6;
  const size_t sizes[kKeys] = {(32 << 10) + 1, 100 << 10, 16 << 10, kMaxValueBytes, 300 << 10, 17 << 10};
  std::vector<std::string> values;
  for (int i = 0; i < kKeys; ++i) {
    values.push_back(Pattern(sizes[i], 50 + i));
    ASSERT_TRUE(writer_->Put(KeyOf(static_cast<size_t>(i)), values.back()).ok());
  }
  std::deque<std::string> keys, results(kKeys);
  std::vector<Op> ops(kKeys);
  std::vector<Op*> ptrs;
  for (int i = 0; i < kKeys; ++i) {
    keys.push_back(KeyOf(static_cast<size_t>(i)));
    ops[i].type = Op::Type::kGet;
    ops[i].key = keys.back();
    ops[i].result = &results[i];
    ptrs.push_back(&ops[i]);
  }
  const ClientStats before = reader_->stats();
  ASSERT_EQ(reader_->Submit(ptrs), static_cast<size_t>(kKeys));
  size_t completed = 0;
  std::vector<Op*> done(kKeys);
  while (completed < kKeys && reader_->in_flight() != 0) completed += reader_->Wait(done, 10000);
  ASSERT_EQ(completed, static_cast<size_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(ops[i].status.ok()) << sizes[i] << ": " << ops[i].status.ToString();
    EXPECT_TRUE(results[i] == values[i]) << "value of " << sizes[i] << " bytes differs";
  }
  const ClientStats after = reader_->stats();
  EXPECT_EQ(after.get_hits - before.get_hits, static_cast<uint64_t>(kKeys));
  EXPECT_EQ(after.get_hit_reads - before.get_hit_reads, kKeys * kUncachedGetReads);
}

INSTANTIATE_TEST_SUITE_P(Loopback, OneReadGetTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, OneReadGetTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
