// Message limits that cannot work together are refused at startup, and a
// request that cannot fit its message buffer is TooLarge, never copied past it.
#include <gtest/gtest.h>

#include <string>

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
  EXPECT_NE(st.message().find("--message-bytes to at least 1064"), std::string::npos) << st.ToString();
}

class SmallMessageBytesTest : public ::testing::TestWithParam<PutMode> {};

TEST_P(SmallMessageBytesTest, TheLongestKeyAllowedStillPutsAndOneMoreIsTooLarge) {
  TransportEnv env = TransportEnv::Make(Kind::kLoopback);
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.message_bytes = 256;
  cfg.max_key_bytes = 256 - kRequestHeaderSize - 1;  // 215: one value byte per first fragment
  TestServer server(env, cfg);
  auto c = server.Connect(GetParam());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Client& client = **c;
  const std::string key(cfg.max_key_bytes, 'k');
  const std::string value(3000, 'v');  // 1 byte in the first fragment, then 216-byte ones
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
