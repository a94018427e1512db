// Message limits that cannot work together are refused at startup, and a
// request that cannot fit its message buffer is TooLarge, never copied past it.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

// Issue 25, item 6: one client opened 2,000 connections in 0.5 s (each pins
// 56 KiB of registered memory, a QP and a memory window). Now the server holds
// at most max_connections, and max_connections_per_peer from one address
// (loopback: one device is one host); the refused client's Status says why,
// the refusals are counted, and a freed connection lets a new one in.
TEST(ConnectionLimitsTest, ExtraConnectionsAreRefusedWithTheReasonAndCounted) {
  TransportEnv env = TransportEnv::Make(Kind::kLoopback);
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.max_connections = 4;
  cfg.max_connections_per_peer = 2;
  TestServer server(env, cfg);
  std::shared_ptr<Device> host_b = env.fabric->CreateDevice("loop-client-b");
  std::shared_ptr<Device> host_c = env.fabric->CreateDevice("loop-client-c");
  auto connect = [&](const std::shared_ptr<Device>& from) {
    ClientOptions o;
    o.host = env.addr;
    o.port = server.port();
    o.connect_timeout_ms = 5000;
    return ClientFactory::ConnectWith(from, o);
  };
  using Why = server::metrics::RequestMetrics::RejectReason;
  const auto& metrics = server.server().counters().request_metrics;
  auto open_now = [&] { return server.server().counters().connections.load(); };
  // The server counts a close when its connection manager sees it: wait for it.
  auto open_becomes = [&](uint64_t want) {
    for (int i = 0; i < 500 && open_now() != want; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return open_now() == want;
  };

  auto a1 = connect(env.client);
  auto a2 = connect(env.client);
  ASSERT_TRUE(a1.ok()) << a1.status().ToString();
  ASSERT_TRUE(a2.ok()) << a2.status().ToString();
  auto a3 = connect(env.client);  // a third from the same host
  ASSERT_FALSE(a3.ok()) << "a third connection from one peer was accepted (limit 2)";
  EXPECT_EQ(a3.status().code(), Status::Code::kNoResource) << a3.status().ToString();
  EXPECT_NE(a3.status().message().find("refused the connection: too many connections from loop-client (limit 2"),
            std::string::npos)
      << a3.status().ToString();
  EXPECT_EQ(metrics.rejected(Why::kMaxPerPeer), 1u);
  EXPECT_EQ(StatOf(**a1, "rejected_max_per_peer"), 1u);

  auto b1 = connect(host_b);
  auto b2 = connect(host_b);
  ASSERT_TRUE(b1.ok()) << b1.status().ToString();
  ASSERT_TRUE(b2.ok()) << b2.status().ToString();
  auto c1 = connect(host_c);  // a fifth, from a host with none
  ASSERT_FALSE(c1.ok()) << "a fifth connection was accepted (limit 4)";
  EXPECT_EQ(c1.status().code(), Status::Code::kNoResource) << c1.status().ToString();
  EXPECT_NE(c1.status().message().find("refused the connection: too many connections (limit 4"), std::string::npos)
      << c1.status().ToString();
  EXPECT_EQ(metrics.rejected(Why::kMaxConnections), 1u);
  EXPECT_EQ(StatOf(**b1, "rejected_max_connections"), 1u);
  EXPECT_EQ(open_now(), 4u);

  // A freed connection lets a new one in: one of a's makes room for c ...
  a1->reset();
  ASSERT_TRUE(open_becomes(3)) << open_now();
  c1 = connect(host_c);
  ASSERT_TRUE(c1.ok()) << c1.status().ToString();
  // ... and, once b frees one, a is below its own limit again.
  b2->reset();
  ASSERT_TRUE(open_becomes(3)) << open_now();
  a1 = connect(env.client);
  ASSERT_TRUE(a1.ok()) << a1.status().ToString();
  for (auto* c : {&a1, &a2, &b1, &c1}) {
    ASSERT_TRUE((**c)->Put("k", "v").ok());
  }
  EXPECT_EQ(metrics.rejected(Why::kMaxPerPeer), 1u);
  EXPECT_EQ(metrics.rejected(Why::kMaxConnections), 1u);
}

// The per-address limit over each transport: the server names the client's
// address as the transport reports it (verbs: the IP rdma_cm gives; client
// and server share the device here, so it is KVRDMA_TEST_ADDR).
class PeerLimitTest : public ::testing::TestWithParam<Kind> {};

TEST_P(PeerLimitTest, TheRefusalNamesTheClientsAddress) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.max_connections_per_peer = 3;
  TestServer server(env, cfg);
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 3; ++i) {
    auto c = server.Connect(PutMode::kSend);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    held.push_back(std::move(c).value());
  }
  auto extra = server.Connect(PutMode::kSend);
  ASSERT_FALSE(extra.ok()) << "a 4th connection from one address was accepted (limit 3)";
  const std::string want = GetParam() == Kind::kLoopback ? "loop-client" : env.addr;
  EXPECT_NE(extra.status().message().find("too many connections from " + want + " (limit 3"), std::string::npos)
      << extra.status().ToString();
  EXPECT_EQ(StatOf(*held[0], "rejected_max_per_peer"), 1u);
}

INSTANTIATE_TEST_SUITE_P(Loopback, PeerLimitTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, PeerLimitTest, ::testing::Values(Kind::kVerbs), KindName);

INSTANTIATE_TEST_SUITE_P(Loopback, SmallMessageBytesTest, ::testing::Values(PutMode::kSend, PutMode::kWriteImm),
                         [](const auto& i) { return i.param == PutMode::kSend ? "send" : "writeimm"; });

}  // namespace
}  // namespace kvrdma::testing
