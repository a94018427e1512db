// Finding 3 of issue 12: a connection can write its own request ring and
// nothing else, and the NIC enforces it. A ring's rkey is a type-2 memory
// window bound to its connection's QP, so another connection that knows the
// ring's address and rkey (here it is simply told them) gets a remote access
// error; the ring, its owner's connection and the store do not change, and
// everyone else is still served. On c1cae9c (rings registered REMOTE_WRITE,
// their rkey valid on every QP of the PD) the foreign write lands.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/e2e/e2e_util.h"
#include "tests/e2e/rogue_client.h"

namespace kvrdma::testing {
namespace {

class RingMwTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    env_ = TransportEnv::Make(GetParam());
    if (!env_.skip_reason.empty()) GTEST_SKIP() << env_.skip_reason;
    server_ = std::make_unique<TestServer>(env_, TestServer::Defaults());
    auto c = server_->Connect(PutMode::kWriteImm);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    good_ = std::move(c).value();
    ASSERT_TRUE(good_->Put("precious", "value that must survive").ok());
  }
  void ExpectValue(Client& c, const std::string& key, const std::string& want) {
    std::string got;
    Status st = c.Get(key, &got);
    ASSERT_TRUE(st.ok()) << key << ": " << st.ToString();
    EXPECT_EQ(got, want) << key;
  }
  uint64_t Stat(const std::string& name) { return StatOf(*good_, name); }
  bool ConnectionsBecome(uint64_t want, int timeout_ms) { return StatBecomes(*good_, "connections", want, timeout_ms); }
  TransportEnv env_;
  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> good_;
};

TEST_P(RingMwTest, AnotherConnectionCannotWriteARingItWasNotGiven) {
  RogueClient a;
  { Status st = a.Connect(env_, server_->port(), PutPath::kWriteImm); ASSERT_TRUE(st.ok()) << st.ToString(); }
  // A stages a PUT in its ring position 0 with a plain WRITE (no request yet).
  const auto mine = WholePut("a-key", "a-value", 1);
  ASSERT_TRUE(a.WriteRing(mine, 0).ok());

  // B knows A's ring address and rkey and tries both kinds of write into A's
  // position 0, each from a fresh connection (an access error ends the QP).
  const auto evil = WholePut("precious", "hijacked through another ring", 7);
  for (bool with_imm : {false, true}) {
    SCOPED_TRACE(with_imm ? "WRITE_WITH_IMM" : "WRITE");
    RogueClient b;
    { Status st = b.Connect(env_, server_->port(), PutPath::kWriteImm); ASSERT_TRUE(st.ok()) << st.ToString(); }
    ASSERT_NE(b.desc().ring.rkey, a.desc().ring.rkey);
    // The immediate names position 0 of B's own ring with the message's length.
    Status st = b.WriteInto(a.desc().ring, 0, evil, with_imm, static_cast<uint32_t>(evil.size()));
    EXPECT_TRUE(st.IsRemoteAccess()) << st.ToString();
    EXPECT_TRUE(b.conn().broken());
    EXPECT_TRUE(b.WaitClosed(10000)) << "the server did not close B's failed connection";
  }
  EXPECT_TRUE(ConnectionsBecome(2, 10000)) << "connections: " << Stat("connections");

  // A's position 0 still holds A's bytes: A rewrites only its first byte with
  // an immediate that names the whole message, and the server applies what
  // is in the message buffer.
  ASSERT_TRUE(a.WriteImm(std::span(mine).first(1), 0, static_cast<uint32_t>(mine.size())).ok());
  RawReply r = a.Reply();
  EXPECT_EQ(r.code, Status::Code::kOk) << r.body;
  EXPECT_EQ(r.request_id, 1u);
  ExpectValue(*good_, "a-key", "a-value");
  ExpectValue(*good_, "precious", "value that must survive");
  // A's connection is unchanged: it keeps being served, at another position.
  const auto more = WholePut("a-key", "a-value-2", 2);
  ASSERT_TRUE(a.WriteImm(more, 1).ok());
  r = a.Reply();
  EXPECT_EQ(r.code, Status::Code::kOk) << r.body;
  ExpectValue(*good_, "a-key", "a-value-2");

  // A third client, connected after the attack, is served.
  auto c = server_->Connect(PutMode::kWriteImm);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Put("third", "served").ok());
  ExpectValue(**c, "third", "served");
  ExpectValue(**c, "precious", "value that must survive");
}

TEST_P(RingMwTest, ARingsRkeyDiesWithItsConnection) {
  ServerDescriptor old;
  {
    RogueClient a;
    { Status st = a.Connect(env_, server_->port(), PutPath::kWriteImm); ASSERT_TRUE(st.ok()) << st.ToString(); }
    old = a.desc();
  }
  ASSERT_TRUE(ConnectionsBecome(1, 10000)) << "connections: " << Stat("connections");
  RogueClient b;
  { Status st = b.Connect(env_, server_->port(), PutPath::kWriteImm); ASSERT_TRUE(st.ok()) << st.ToString(); }
  const auto evil = WholePut("precious", "hijacked through a dead ring", 7);
  Status st = b.WriteInto(old.ring, 0, evil, true, static_cast<uint32_t>(evil.size()));
  EXPECT_TRUE(st.IsRemoteAccess()) << st.ToString();
  ExpectValue(*good_, "precious", "value that must survive");
}

TEST_P(RingMwTest, EachConnectionGetsItsOwnRingKey) {
  RogueClient a, b;
  { Status st = a.Connect(env_, server_->port(), PutPath::kWriteImm); ASSERT_TRUE(st.ok()) << st.ToString(); }
  { Status st = b.Connect(env_, server_->port(), PutPath::kWriteImm); ASSERT_TRUE(st.ok()) << st.ToString(); }
  EXPECT_NE(a.desc().ring.rkey, b.desc().ring.rkey);
  EXPECT_NE(a.desc().ring.addr, b.desc().ring.addr);
  // The index, log and lock table keep one rkey for everyone.
  EXPECT_EQ(a.desc().index.rkey, b.desc().index.rkey);
  // Both rings work through their own connection.
  ASSERT_TRUE(a.WriteImm(WholePut("ka", "va", 3), 0).ok());
  ASSERT_TRUE(b.WriteImm(WholePut("kb", "vb", 4), 0).ok());
  EXPECT_EQ(a.Reply().code, Status::Code::kOk);
  EXPECT_EQ(b.Reply().code, Status::Code::kOk);
  ExpectValue(*good_, "ka", "va");
  ExpectValue(*good_, "kb", "vb");
}

INSTANTIATE_TEST_SUITE_P(Loopback, RingMwTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, RingMwTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
