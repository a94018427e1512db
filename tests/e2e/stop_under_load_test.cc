// kvserver stopped (as by SIGTERM) under a PUT load: clients see
// ConnectionLost (or Timeout), the server stops cleanly, and every PUT that
// was acknowledged is in the store.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

class StopUnderLoadTest : public ::testing::TestWithParam<Kind> {};

TEST_P(StopUnderLoadTest, NoAcknowledgedPutIsLost) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  TestServer server(env);
  constexpr int kClients = 4;
  struct Result {
    std::vector<std::pair<std::string, std::string>> acked;  // the last acknowledged value per key
    std::string unknown_key, unknown_value;  // the PUT whose reply never came: it may or may not have landed
    uint64_t lost = 0, other = 0;
  };
  std::vector<Result> results(kClients);
  // PUTs acknowledged so far per client (-1: it could not connect), for the
  // wait below.
  std::vector<std::atomic<int64_t>> progress(kClients);
  std::vector<std::thread> t;
  for (int i = 0; i < kClients; ++i) {
    t.emplace_back([&, i] {
      ClientOptions o;
      o.host = env.addr;
      o.port = server.port();
      o.op_timeout_ms = 3000;
      auto c = ClientFactory::ConnectWith(env.client, o);
      if (!c.ok()) {
        progress[i] = -1;
        return;
      }
      std::map<std::string, std::string> last;
      // Runs until the server is gone, not until the main thread says so: a
      // PUT answered during the drain may leave this thread asleep until after
      // Stop, and its next PUT is the one that must see the loss (once, on
      // 2 cores, a client woke to a stop flag instead: 3 of 4 saw the loss).
      // The bound only ends a client that never sees it (the check below
      // then fails).
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      for (uint64_t n = 0; std::chrono::steady_clock::now() < give_up; ++n) {
        std::string key = "c" + std::to_string(i) + "-" + std::to_string(n % 50);
        std::string value = key + "#" + std::to_string(n);
        Status st = (*c)->Put(key, value);
        if (st.ok()) {
          last[key] = value;
          progress[i].fetch_add(1, std::memory_order_relaxed);
        } else if (st.IsConnectionLost() || st.IsTimeout()) {
          results[i].lost++;
          results[i].unknown_key = key;
          results[i].unknown_value = value;
          break;  // the server is gone
        } else {
          results[i].other++;
        }
      }
      results[i].acked.assign(last.begin(), last.end());
    });
  }
  // Stop under load: once every client has had PUTs acknowledged (bounded;
  // no guessed time: at load 12+ a fixed 400 ms once ended before any PUT).
  constexpr int64_t kAcksEach = 20;
  auto loaded = [&] {
    for (auto& p : progress) {
      if (p.load(std::memory_order_relaxed) < kAcksEach) return false;
    }
    return true;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!loaded() && std::chrono::steady_clock::now() < deadline) {
    bool dead = false;
    for (auto& p : progress) dead |= p.load() < 0;
    if (dead) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(loaded()) << "not every client connected and had " << kAcksEach << " PUTs acknowledged in 60 s";
  server.Stop();  // what SIGTERM does: stop accepting, drain, disconnect
  for (auto& th : t) th.join();
  // The store outlives the network side: check every acknowledged PUT.
  uint64_t acked = 0, missing = 0, lost = 0;
  for (const Result& r : results) {
    lost += r.lost;
    EXPECT_EQ(r.other, 0u);
    for (const auto& [key, value] : r.acked) {
      ++acked;
      std::string v;
      Status st = server.backend().store().Get(key, &v);
      bool newer = key == r.unknown_key && v == r.unknown_value;  // the unacknowledged PUT landed
      if (!st.ok() || (v != value && !newer)) {
        ++missing;
        ADD_FAILURE() << key << ": acknowledged " << value << ", store has " << (st.ok() ? v : st.ToString());
      }
    }
  }
  std::printf("stop under load: %llu keys with acknowledged PUTs, %llu missing or stale, %llu clients saw the loss\n",
              static_cast<unsigned long long>(acked), static_cast<unsigned long long>(missing),
              static_cast<unsigned long long>(lost));
  EXPECT_GT(acked, 0u);
  EXPECT_EQ(missing, 0u);
  EXPECT_EQ(lost, uint64_t{kClients});  // every client noticed, none hung
}

// A worker sleeps on its completion channel with no timeout while nothing
// arrives (an idle kvserver must not wake up for nothing). So whatever it must
// do that is not a completion has to wake it: the connection manager's Remove
// of a closed connection, which the worker acknowledges before the manager
// frees the connection and destroys its QP. With the Wake in Remove taken
// out, the closed connection's QP lives on until some other completion
// arrives: this test fails (2 QPs left over).
TEST(IdleServerTest, AClosedConnectionIsFreedWhileTheServerIsIdle) {
  TransportEnv env = TransportEnv::Make(Kind::kLoopback);
  TestServer server(env);
  const uint64_t before = env.fabric->stats().qps;
  {
    ClientOptions o;
    o.host = env.addr;
    o.port = server.port();
    auto c = ClientFactory::ConnectWith(env.client, o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE((*c)->Put("k", "v").ok());
    EXPECT_EQ(env.fabric->stats().qps, before + 2);  // the client's QP and the server's
  }  // the client disconnects; then nothing more arrives
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (env.fabric->stats().qps != before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(env.fabric->stats().qps, before) << "the closed connection's QPs are still alive 5 s later";
}

INSTANTIATE_TEST_SUITE_P(Loopback, StopUnderLoadTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, StopUnderLoadTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
