// Issue 13, finding 3: a GET of a large value beside busy readers and
// writers must complete. On c1cae9c a round older than the round limit (half
// the grace period) started over, so on a slow link a 1 MiB GET restarted
// dozens of times and could fail with a Timeout that blamed writers.
//
// Four reader threads GET other keys and two writer threads PUT other keys
// without pause while the main thread GETs a 1 MiB value kRounds times. Every
// GET must return the value; the latencies (p50, max) and the restarts are
// printed. Not a speed test: it asserts completion and correctness only.
// KVRDMA_LARGE_GET_ROUNDS overrides the number of GETs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "common/memory/racy_copy.h"  // KVRDMA_TSAN
#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

class LargeGetTest : public ::testing::TestWithParam<Kind> {};

TEST_P(LargeGetTest, OneMiBGetBesideFourBusyReadersAndTwoWritersCompletes) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  TestServer server(env);  // default grace period (100 ms): round limit 50 ms
  const char* env_rounds = std::getenv("KVRDMA_LARGE_GET_ROUNDS");
  const int rounds = env_rounds != nullptr ? std::atoi(env_rounds) : 20;

  auto big_client = server.Connect(PutMode::kWriteImm);
  ASSERT_TRUE(big_client.ok()) << big_client.status().ToString();
  std::unique_ptr<Client> big = std::move(big_client).value();
  std::string value(1 << 20, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>('a' + (i * 7 + i / 4096) % 26);
  ASSERT_TRUE(big->Put("big", value).ok());
  for (int k = 0; k < 64; ++k) ASSERT_TRUE(big->Put("small-" + std::to_string(k), std::string(200, 's')).ok());

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> background_ops{0}, background_errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    auto c = server.Connect(PutMode::kWriteImm);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    threads.emplace_back([&, t, cl = std::move(c).value()]() mutable {
      const bool writer = t >= 4;
      std::string v;
      for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const std::string key = "small-" + std::to_string((i * 13 + static_cast<uint64_t>(t)) % 64);
        Status st = writer ? cl->Put(key, std::string(100 + i % 900, static_cast<char>('A' + t))) : cl->Get(key, &v);
        background_ops.fetch_add(1, std::memory_order_relaxed);
        if (!st.ok()) background_errors.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }

  std::vector<double> ms;
  const uint64_t retries_before = big->stats().get_retries;
  for (int r = 0; r < rounds; ++r) {
    std::string got;
    auto t0 = std::chrono::steady_clock::now();
    Status st = big->Get("big", &got);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    EXPECT_TRUE(st.ok()) << "GET " << r << ": " << st.ToString();
    EXPECT_TRUE(got == value) << "GET " << r << " returned " << got.size() << " bytes that differ";
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();
  std::sort(ms.begin(), ms.end());
  std::printf("[large-get] %s: %d GETs of 1 MiB beside 4 readers + 2 writers: p50 %.2f ms, max %.2f ms, "
              "restarts %llu; background %llu ops (%llu errors)\n",
              KindName({GetParam(), 0}).c_str(), rounds, ms[ms.size() / 2], ms.back(),
              static_cast<unsigned long long>(big->stats().get_retries - retries_before),
              static_cast<unsigned long long>(background_ops.load()),
              static_cast<unsigned long long>(background_errors.load()));
  EXPECT_GT(background_ops.load(), 0u);
  EXPECT_EQ(background_errors.load(), 0u);
}

// Client::Get into the caller's memory (and Op::buffer): the value lands at
// the buffer's start and nothing past it is written; a buffer too small fails
// with TooLarge and the value's length; every path a GET can take (the op
// buffer, the large buffer, a cached location) delivers the same way.
TEST_P(LargeGetTest, AGetIntoTheCallersBufferFillsItOrSaysHowLongTheValueIs) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  TestServer server(env);
  auto cl = server.Connect(PutMode::kSend);
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  Client& c = **cl;
  constexpr std::byte kGuard{0xA5};
  for (size_t size : {size_t{0}, size_t{1}, size_t{4093}, size_t{(16 << 10) + 1}, size_t{777'777}, size_t{1} << 20}) {
    SCOPED_TRACE("value of " + std::to_string(size) + " bytes");
    std::string value(size, '\0');
    for (size_t i = 0; i < size; ++i) value[i] = static_cast<char>(i * 131 + size);
    const std::string key = "into-" + std::to_string(size);
    ASSERT_TRUE(c.Put(key, value).ok());
    for (int pass = 0; pass < 2; ++pass) {  // the second GET of a small value takes its cached location
      std::vector<std::byte> buf(size + 64, kGuard);
      size_t n = 12345;
      Status st = c.Get(key, std::span(buf).first(size), &n);
      ASSERT_TRUE(st.ok()) << st.ToString();
      ASSERT_EQ(n, size);
      EXPECT_TRUE(size == 0 || std::memcmp(buf.data(), value.data(), size) == 0);  // memcmp of an empty vector's null data is undefined
      for (size_t i = size; i < buf.size(); ++i) ASSERT_EQ(buf[i], kGuard) << "byte " << i << " past the buffer";
    }
    if (size > 0) {
      std::vector<std::byte> small(size - 1);
      size_t n = 0;
      Status st = c.Get(key, small, &n);
      EXPECT_EQ(st.code(), Status::Code::kTooLarge) << st.ToString();
      EXPECT_EQ(n, size);
      EXPECT_NE(st.message().find("value of " + std::to_string(size) + " bytes"), std::string::npos) << st.message();
    }
    // The asynchronous form, beside a GET into a string.
    std::vector<std::byte> buf(size);
    std::string str;
    Op a, b;
    a.key = b.key = key;
    a.buffer = buf;
    b.result = &str;
    Op* ops[2] = {&a, &b};
    ASSERT_EQ(c.Submit(ops), 2u);
    Op* done[2];
    for (size_t got = 0; got < 2;) got += c.Wait(std::span(done).subspan(got), 5000);
    ASSERT_TRUE(a.status.ok()) << a.status.ToString();
    ASSERT_TRUE(b.status.ok()) << b.status.ToString();
    EXPECT_EQ(a.value_bytes, size);
    EXPECT_EQ(b.value_bytes, size);
    EXPECT_TRUE(size == 0 || std::memcmp(buf.data(), value.data(), size) == 0);  // memcmp of an empty vector's null data is undefined
    EXPECT_EQ(str, value);
  }
  // Absent: NotFound, 0 bytes. An Op with neither a string nor a buffer: a
  // buffer of 0 bytes, so TooLarge that says what is missing.
  std::vector<std::byte> buf(16);
  size_t n = 99;
  EXPECT_TRUE(c.Get("into-absent", buf, &n).IsNotFound());
  EXPECT_EQ(n, 0u);
  ASSERT_TRUE(c.Put("into-x", "x").ok());
  Op bare;
  bare.key = "into-x";
  Op* ops[1] = {&bare};
  ASSERT_EQ(c.Submit(ops), 1u);
  Op* done[1];
  while (c.Wait(done, 5000) == 0) {
  }
  EXPECT_EQ(bare.status.code(), Status::Code::kTooLarge);
  EXPECT_EQ(bare.value_bytes, 1u);
  EXPECT_NE(bare.status.message().find("needs a result string or a buffer"), std::string::npos)
      << bare.status.message();
}

// Sixteen GETs of 1 MiB values in flight on one connection, which has one
// large buffer: they take it in turn. On 89c93d6 a GET whose entry needed the
// buffer waited for it after its window READ, so its round aged while the
// others' READs ran; past the round limit it needed the recheck, which aged
// too, and it started over, queued behind the same GETs again: at 1 x 16 on
// Soft-RoCE none completed (0 GETs a second, bench/bandwidth). Now a GET that
// waited past the round limit reads its window again with the buffer
// reserved for it. On
// loopback each large READ takes 12 ms (the fault hook) against the default
// round limit of 50 ms (the recheck's limit 150 ms): a queue of 16 is 192 ms.
// Every GET must return its value, each in a round or two, none restarted.
TEST_P(LargeGetTest, SixteenLargeGetsInFlightOnOneConnectionAllComplete) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  TestServer server(env);  // default grace period (100 ms): round limit 50 ms
  auto cl = server.Connect(PutMode::kWriteImm);
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  Client& c = **cl;
  constexpr int kGets = 16;
  std::vector<std::string> values(kGets);
  for (int i = 0; i < kGets; ++i) {
    values[i].assign(1 << 20, static_cast<char>('a' + i));
    values[i][i * 1000] = '!';
    ASSERT_TRUE(c.Put("large-" + std::to_string(i), values[i]).ok());
  }
  if (env.fabric) {
    LoopbackFaults f;
    f.fail_wr = [](const SendWr& w) {
      if (w.opcode == WrOpcode::kRead && w.local.length > (64 << 10)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(12));
      }
      return WcStatus::kSuccess;
    };
    env.fabric->SetFaults(f);
  }
  std::vector<std::string> got(kGets);
  std::vector<std::string> keys(kGets);
  std::vector<Op> ops(kGets);
  std::vector<Op*> ptrs(kGets);
  for (int i = 0; i < kGets; ++i) {
    keys[i] = "large-" + std::to_string(i);
    ops[i].key = keys[i];
    ops[i].result = &got[i];
    ptrs[i] = &ops[i];
  }
  const ClientStats before = c.stats();
  ASSERT_EQ(c.Submit(ptrs), static_cast<size_t>(kGets));
  std::vector<Op*> done(kGets);
  size_t n = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (n < static_cast<size_t>(kGets) && std::chrono::steady_clock::now() < deadline) {
    n += c.Wait(std::span(done).subspan(n), 1000);
  }
  if (env.fabric) env.fabric->SetFaults(LoopbackFaults{});
  ASSERT_EQ(n, static_cast<size_t>(kGets));
  for (int i = 0; i < kGets; ++i) {
    EXPECT_TRUE(ops[i].status.ok()) << "GET " << i << ": " << ops[i].status.ToString();
    EXPECT_TRUE(got[i] == values[i]) << "GET " << i << " returned another value";
  }
  const ClientStats after = c.stats();
  std::printf("[large-get] %s: %d GETs of 1 MiB at once: %llu window rounds, %llu restarts\n",
              KindName({GetParam(), 0}).c_str(), kGets,
              static_cast<unsigned long long>(after.get_rounds - before.get_rounds),
              static_cast<unsigned long long>(after.get_retries - before.get_retries));
  // One round each, plus one more for each GET that waited for the buffer
  // past the round limit: at most two. On loopback, where each READ takes
  // what the hook says, none restarts (nothing went stale). On Soft-RoCE a
  // READ of 1 MiB itself can outlive the round limit on a busy host (one
  // restart in a CI run): there the test asks for what the fix is for, that
  // every GET completes, and bounds the rounds loosely. So it does under
  // ThreadSanitizer, whose loopback copies a 1 MiB READ a word at a time
  // through atomics (racy_copy.h) and can take past the limit itself (one
  // restart in a CI run); the plain and ASan builds ask for none.
#ifdef KVRDMA_TSAN
  constexpr bool kReadsTakeWhatTheHookSays = false;
#else
  constexpr bool kReadsTakeWhatTheHookSays = true;
#endif
  if (env.fabric && kReadsTakeWhatTheHookSays) {
    EXPECT_LE(after.get_rounds - before.get_rounds, uint64_t{2 * kGets});
    EXPECT_EQ(after.get_retries - before.get_retries, 0u);
  } else {
    EXPECT_LE(after.get_rounds - before.get_rounds, uint64_t{4 * kGets});
  }
}

INSTANTIATE_TEST_SUITE_P(Loopback, LargeGetTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, LargeGetTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
