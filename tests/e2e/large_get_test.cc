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
#include <thread>
#include <vector>

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

INSTANTIATE_TEST_SUITE_P(Loopback, LargeGetTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, LargeGetTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
