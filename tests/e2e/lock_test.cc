// CAS locks with leases: mutual exclusion, refusal of other clients' writes,
// and takeover after a dead holder's lease.
#include <gtest/gtest.h>

#include <thread>

#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

using std::chrono::milliseconds;

class LockTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    env_ = TransportEnv::Make(GetParam());
    if (!env_.skip_reason.empty()) GTEST_SKIP() << env_.skip_reason;
    server_ = std::make_unique<TestServer>(env_);
  }
  void TearDown() override { server_.reset(); }
  std::unique_ptr<Client> NewClient(int timeout_ms = 20000) {
    ClientOptions o;
    o.host = env_.addr;
    o.port = server_->port();
    o.op_timeout_ms = timeout_ms;
    auto c = ClientFactory::ConnectWith(env_.client, o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  TransportEnv env_;
  std::unique_ptr<TestServer> server_;
};

TEST_P(LockTest, EightClientsIncrementACounterUnderTheLock) {
  constexpr int kClients = 8;
  constexpr int kRounds = 200;
  auto setup = NewClient();
  ASSERT_TRUE(setup->Put("counter", "0").ok());
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(NewClient());
  std::atomic<int> errors{0};
  std::vector<std::thread> t;
  for (int i = 0; i < kClients; ++i) {
    t.emplace_back([&, i] {
      Client& c = *clients[i];
      std::string v;
      for (int r = 0; r < kRounds; ++r) {
        Status st = c.Lock("counter", milliseconds(10000));
        if (!st.ok()) {
          errors++;
          continue;
        }
        if (!c.Get("counter", &v).ok() || !c.Put("counter", std::to_string(std::stoi(v) + 1)).ok()) errors++;
        if (!c.Unlock("counter").ok()) errors++;
      }
    });
  }
  for (auto& th : t) th.join();
  std::string v;
  ASSERT_TRUE(setup->Get("counter", &v).ok());
  std::printf("locks: %d clients x %d rounds -> counter %s, %d errors\n", kClients, kRounds, v.c_str(), errors.load());
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(v, std::to_string(kClients * kRounds));
}

TEST_P(LockTest, WritesOfOthersAreRefusedWhileLocked) {
  auto a = NewClient(), b = NewClient();
  ASSERT_TRUE(a->Put("k", "before").ok());
  ASSERT_TRUE(a->Lock("k", milliseconds(10000)).ok());
  EXPECT_EQ(b->Put("k", "b writes").code(), Status::Code::kLocked);
  EXPECT_EQ(b->Delete("k").code(), Status::Code::kLocked);
  EXPECT_EQ(b->TryLock("k", milliseconds(1000)).code(), Status::Code::kLocked);
  EXPECT_TRUE(b->Unlock("k").IsNotFound());
  ASSERT_TRUE(a->Put("k", "a writes").ok());
  std::string v;
  ASSERT_TRUE(b->Get("k", &v).ok());  // reads are never blocked
  EXPECT_EQ(v, "a writes");
  ASSERT_TRUE(a->Unlock("k").ok());
  ASSERT_TRUE(b->Put("k", "b writes").ok());
  ASSERT_TRUE(b->Get("k", &v).ok());
  EXPECT_EQ(v, "b writes");
}

TEST_P(LockTest, ADeadHoldersLockIsTakenOverAfterTheLeaseNotBefore) {
  const auto lease = milliseconds(600);
  auto a = NewClient(), b = NewClient();
  ASSERT_TRUE(a->Lock("k", lease).ok());
  auto t0 = std::chrono::steady_clock::now();
  a.reset();  // the holder disappears without unlocking
  EXPECT_EQ(b->TryLock("k", lease).code(), Status::Code::kLocked);
  EXPECT_EQ(b->Put("k", "too early").code(), Status::Code::kLocked);
  ASSERT_TRUE(b->Lock("k", lease).ok());  // waits for the lease to end
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, lease - milliseconds(20));  // server and client clocks tick alike; 1 ms clock steps
  EXPECT_LT(waited, lease + milliseconds(3000));
  EXPECT_TRUE(b->Put("k", "after the lease").ok());
  EXPECT_TRUE(b->Unlock("k").ok());
}

INSTANTIATE_TEST_SUITE_P(Loopback, LockTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, LockTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
