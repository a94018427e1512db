// Access control: a server with a shared secret refuses a client without it
// (or with a wrong one) in the connect handshake, before any rkey is sent.
#include <gtest/gtest.h>

#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

class AuthTest : public ::testing::TestWithParam<Kind> {};

TEST_P(AuthTest, OnlyClientsWithTheTokenGetIn) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.auth_token = "s3cret-token";
  TestServer server(env, cfg);
  auto connect = [&](const std::string& token) {
    ClientOptions o;
    o.host = env.addr;
    o.port = server.port();
    o.auth_token = token;
    return ClientFactory::ConnectWith(env.client, o);
  };
  for (const char* bad : {"", "wrong", "s3cret-token-but-longer", "s3cret-tokeN"}) {
    auto c = connect(bad);
    ASSERT_FALSE(c.ok()) << "token '" << bad << "' got in";
    EXPECT_EQ(c.status().code(), Status::Code::kRemoteAccess) << c.status().ToString();
    EXPECT_NE(c.status().message().find("authentication failed"), std::string::npos) << c.status().ToString();
  }
  // A refused client got no descriptor: nothing to READ or WRITE with.
  std::vector<uint8_t> reject;
  uint8_t req[kMaxRequestData];
  ConnectRequestMsg m;
  size_t n = EncodeConnectRequest(m, req);
  ConnectOptions co;
  co.host = env.addr;
  co.port = server.port();
  auto raw = env.client->Connect(co, QpConfig{}, {req, n}, &reject);
  ASSERT_FALSE(raw.ok());
  EXPECT_FALSE(DecodeServerDescriptor(reject).ok());

  auto good = connect("s3cret-token");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  ASSERT_TRUE((*good)->Put("k", "v").ok());
  std::string v;
  ASSERT_TRUE((*good)->Get("k", &v).ok());
  EXPECT_EQ(v, "v");
}

INSTANTIATE_TEST_SUITE_P(Loopback, AuthTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, AuthTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
