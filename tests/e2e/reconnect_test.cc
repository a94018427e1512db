// A server restarted under a running client: operations in flight fail with
// ConnectionLost (or Timeout), later ones reconnect and succeed.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <thread>
#include <unistd.h>

#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

class ReconnectTest : public ::testing::TestWithParam<Kind> {};

TEST_P(ReconnectTest, ServerRestartFailsInFlightOpsThenTheClientReconnects) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.port = static_cast<uint16_t>(41000 + getpid() % 1000);
  auto server = std::make_unique<TestServer>(env, cfg);
  ClientOptions o;
  o.host = env.addr;
  o.port = cfg.port;
  o.op_timeout_ms = 3000;
  auto c = ClientFactory::ConnectWith(env.client, o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Client& client = **c;
  ASSERT_TRUE(client.Put("before", "restart").ok());

  // A load of pipelined GETs and PUTs runs across the restart.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ok_before{0}, lost{0}, ok_after{0}, other{0}, wrong{0};
  std::atomic<bool> restarted{false};
  std::thread load([&] {
    constexpr int kDepth = 16;
    std::vector<Op> ops(kDepth);
    std::vector<std::string> keys(kDepth), results(kDepth);
    std::vector<Op*> done(kDepth);
    uint64_t n = 0;
    for (int i = 0; i < kDepth; ++i) {
      keys[i] = "key" + std::to_string(i);
      ops[i].key = keys[i];
      ops[i].value = keys[i];
      ops[i].result = &results[i];
    }
    std::vector<Op*> idle;
    for (auto& op : ops) idle.push_back(&op);
    while (!stop.load()) {
      for (Op* op : idle) op->type = (n++ % 2) ? Op::Type::kGet : Op::Type::kPut;
      size_t taken = client.Submit(idle);
      idle.erase(idle.begin(), idle.begin() + static_cast<ptrdiff_t>(taken));
      size_t got = client.Wait(done, 100);
      for (size_t i = 0; i < got; ++i) {
        Op* op = done[i];
        const Status& st = op->status;
        if (st.ok() || st.IsNotFound()) {
          (restarted.load() ? ok_after : ok_before)++;
          if (st.ok() && op->type == Op::Type::kGet && *op->result != op->key) wrong++;
        } else if (st.IsConnectionLost() || st.IsTimeout()) {
          lost++;
        } else {
          other++;
        }
        idle.push_back(op);
      }
      if (lost.load() > 0 && !restarted.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    while (client.in_flight() > 0) client.Wait(done, 100);
  });
  // Wait for the conditions the test asserts, with a bound, not for a guessed
  // time: some operations succeed before the restart ...
  auto wait_for = [](const std::function<bool()>& cond, int ms) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!cond() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return cond();
  };
  EXPECT_TRUE(wait_for([&] { return ok_before.load() >= 100; }, 20000)) << ok_before.load();
  server->Stop();  // clients are disconnected
  server.reset();
  // ... and some fail while the server is away, before it comes back.
  EXPECT_TRUE(wait_for([&] { return lost.load() > 0; }, 20000));
  restarted = true;
  server = std::make_unique<TestServer>(env, cfg);  // same port, empty store
  for (int i = 0; i < 100 && ok_after.load() < 200; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  stop = true;
  load.join();
  std::printf("reconnect: %llu ok before, %llu lost/timed out, %llu ok after, %llu other errors, %llu wrong\n",
              static_cast<unsigned long long>(ok_before.load()), static_cast<unsigned long long>(lost.load()),
              static_cast<unsigned long long>(ok_after.load()), static_cast<unsigned long long>(other.load()),
              static_cast<unsigned long long>(wrong.load()));
  EXPECT_GT(ok_before.load(), 0u);
  EXPECT_GT(lost.load(), 0u);
  EXPECT_GE(ok_after.load(), 200u);
  EXPECT_EQ(other.load(), 0u);
  EXPECT_EQ(wrong.load(), 0u);
  // The new server is empty: the key written before the restart is gone.
  std::string v;
  EXPECT_TRUE(client.Get("before", &v).IsNotFound());
  ASSERT_TRUE(client.Put("after", "restart").ok());
  ASSERT_TRUE(client.Get("after", &v).ok());
  EXPECT_EQ(v, "restart");
}

TEST_P(ReconnectTest, AnIdleClientsNextCallAfterAServerRestartReconnectsAndSucceeds) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.port = static_cast<uint16_t>(42000 + getpid() % 1000);
  auto server = std::make_unique<TestServer>(env, cfg);
  ClientOptions o;
  o.host = env.addr;
  o.port = cfg.port;
  o.op_timeout_ms = 3000;
  auto c = ClientFactory::ConnectWith(env.client, o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Client& client = **c;
  ASSERT_TRUE(client.Put("k", "first server").ok());
  server->Stop();  // the idle client is disconnected
  server.reset();
  server = std::make_unique<TestServer>(env, cfg);  // same port, empty store
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the DISCONNECTED event arrives
  // The first call after the restart does not fail: it notices the closed
  // connection before posting on it, and reconnects.
  std::string v;
  Status st = client.Get("k", &v);
  EXPECT_TRUE(st.IsNotFound()) << st.ToString();  // the new server is empty
  EXPECT_TRUE(client.Put("k", "second server").ok());
  ASSERT_TRUE(client.Get("k", &v).ok());
  EXPECT_EQ(v, "second server");
  // Locks too: the lock table of the new server.
  server->Stop();
  server.reset();
  server = std::make_unique<TestServer>(env, cfg);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  st = client.TryLock("k", std::chrono::milliseconds(1000));
  EXPECT_TRUE(st.ok()) << st.ToString();
}

INSTANTIATE_TEST_SUITE_P(Loopback, ReconnectTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, ReconnectTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
