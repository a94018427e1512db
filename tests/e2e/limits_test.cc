// Message limits that cannot work together are refused at startup, and a
// request that cannot fit its message buffer is TooLarge, never copied past it.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <utility>

#include "common/protocol/messages.h"
#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

TEST(LimitsTest, ServerRefusesMessageBytesThatCannotHoldTheLongestKey) {
  TransportEnv env = TransportEnv::Make(Kind::kLoopback);
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.message_bytes = 256;  // both accepted by kvserver's option checks
  cfg.max_key_bytes = 1023;
  StoreConfig sc;
  sc.index_homes = 1 << 13;
  sc.segment_bytes = 1 << 20;
  sc.log_bytes = 16 << 20;
  sc.workers = cfg.workers;
  sc.max_key_bytes = cfg.max_key_bytes;
  sc.max_value_bytes = 64 << 10;
  sc.huge_pages = HugePages::kOff;
  auto backend = server::StoreBackend::Create(sc);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  server::Server s(cfg, env.server, **backend);
  Status st = s.Start();
  ASSERT_FALSE(st.ok()) << "256 message bytes with 1023-byte keys were accepted";
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("--message-bytes to at least 1056"), std::string::npos) << st.ToString();
}

// Issue 25, item 11: the descriptor's round limit (half of --grace-ms) must
// be shorter than the grace period the store actually keeps (its own
// StoreConfig): a GET round within the limit trusts its window READ only as
// long as freed segments and move tags outlive it. A test could build the
// two from different numbers, and the server served them.
TEST(LimitsTest, ServerRefusesARoundLimitNotBelowTheStoresGracePeriod) {
  TransportEnv env = TransportEnv::Make(Kind::kLoopback);
  server::ServerConfig cfg = TestServer::Defaults();
  // {--grace-ms (round limit: half of it), the store's grace period}: a round
  // limit of 50 ms over 75 (3 round limits, a late round's recheck, must stay
  // below 2 grace periods), 50, 20 and 0 ms; a round limit of 0 (proves no miss).
  for (auto [grace_ms, store_grace_ms] : {std::pair{100, 75}, {100, 50}, {100, 20}, {100, 0}, {0, 100}}) {
    cfg.grace_period_ms = static_cast<uint32_t>(grace_ms);
    StoreConfig sc;
    sc.index_homes = 1 << 13;
    sc.segment_bytes = 1 << 20;
    sc.log_bytes = 16 << 20;
    sc.workers = cfg.workers;
    sc.max_key_bytes = cfg.max_key_bytes;
    sc.max_value_bytes = 64 << 10;
    sc.huge_pages = HugePages::kOff;
    sc.grace_period = std::chrono::milliseconds(store_grace_ms);
    auto backend = server::StoreBackend::Create(sc);
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    server::Server s(cfg, env.server, **backend);
    Status st = s.Start();
    ASSERT_FALSE(st.ok()) << "a round limit of " << grace_ms * 1000 / 2 << " us was served over a " << store_grace_ms
                          << " ms grace period";
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(st.message().find("below two thirds of the store's grace period"), std::string::npos) << st.ToString();
  }
  // Just below: served.
  cfg.grace_period_ms = 100;
  TestServer ok(env, cfg, [](StoreConfig& sc) { sc.grace_period = std::chrono::microseconds(75001); });
  auto c = ok.Connect(PutMode::kSend);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Put("k", "v").ok());
}

class SmallMessageBytesTest : public ::testing::TestWithParam<PutMode> {};

TEST_P(SmallMessageBytesTest, TheLongestKeyAllowedStillPutsAndOneMoreIsTooLarge) {
  TransportEnv env = TransportEnv::Make(Kind::kLoopback);
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.message_bytes = 256;
  cfg.max_key_bytes = 256 - kRequestHeaderSize - 1;  // 223: one value byte per first fragment
  TestServer server(env, cfg);
  auto c = server.Connect(GetParam());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Client& client = **c;
  const std::string key(cfg.max_key_bytes, 'k');
  const std::string value(3000, 'v');  // 1 byte in the first fragment, then 224-byte ones
  ASSERT_TRUE(client.Put(key, value).ok());
  std::string got;
  ASSERT_TRUE(client.Get(key, &got).ok());
  EXPECT_EQ(got, value);
  ASSERT_TRUE(client.Put(key, "").ok());
  ASSERT_TRUE(client.Delete(key).ok());
  Status st = client.Put(key + "k", "v");
  EXPECT_EQ(st.code(), Status::Code::kTooLarge) << st.ToString();
  // The connection is fine afterwards.
  ASSERT_TRUE(client.Put("short", "ok").ok());
  ASSERT_TRUE(client.Get("short", &got).ok());
  EXPECT_EQ(got, "ok");
}

INSTANTIATE_TEST_SUITE_P(Loopback, SmallMessageBytesTest, ::testing::Values(PutMode::kSend, PutMode::kWriteImm),
                         [](const auto& i) { return i.param == PutMode::kSend ? "send" : "writeimm"; });

}  // namespace
}  // namespace kvrdma::testing
