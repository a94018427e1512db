// Clients that break the rules: RDMA WRITEs into read-only regions, another
// protocol version, malformed requests. Each gets a clear error; the store
// does not change; the server keeps serving everyone else.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/protocol/messages.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/rogue_client.h"

namespace kvrdma::testing {
namespace {

std::vector<uint8_t> PutMsg(std::string_view key, std::string_view value) {
  RequestHeader h;
  h.key_len = static_cast<uint16_t>(key.size());
  h.value_len = h.frag_len = static_cast<uint32_t>(value.size());
  h.request_id = 5;
  std::vector<uint8_t> m(kRequestHeaderSize);
  EncodeRequestHeader(h, m.data());
  m.insert(m.end(), key.begin(), key.end());
  m.insert(m.end(), value.begin(), value.end());
  return m;
}

class BadClientTest : public ::testing::TestWithParam<Kind> {
 protected:
  static constexpr uint32_t kReplyTimeoutMs = 500;
  void SetUp() override {
    env_ = TransportEnv::Make(GetParam());
    if (!env_.skip_reason.empty()) GTEST_SKIP() << env_.skip_reason;
    server::ServerConfig cfg = TestServer::Defaults();
    cfg.reply_timeout_ms = kReplyTimeoutMs;
    server_ = std::make_unique<TestServer>(env_, cfg);
    auto c = server_->Connect(PutMode::kSend);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    good_ = std::move(c).value();
    ASSERT_TRUE(good_->Put("precious", "value that must survive").ok());
  }
  void TearDown() override {
    good_.reset();
    server_.reset();
  }
  void ExpectStoreIntactAndServing() {
    std::string got;
    ASSERT_TRUE(good_->Get("precious", &got).ok());
    EXPECT_EQ(got, "value that must survive");
    ASSERT_TRUE(good_->Put("still", "serving").ok());
    ASSERT_TRUE(good_->Get("still", &got).ok());
    EXPECT_EQ(got, "serving");
  }
  uint64_t Stat(const std::string& name) { return StatOf(*good_, name); }
  bool ConnectionsBecome(uint64_t want, int timeout_ms) { return StatBecomes(*good_, "connections", want, timeout_ms); }
  TransportEnv env_;
  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> good_;
};

TEST_P(BadClientTest, RdmaWriteIntoIndexOrLogIsRemoteAccessAndChangesNothing) {
  for (int target = 0; target < 3; ++target) {
    RogueClient r;
    ASSERT_TRUE(r.Connect(env_, server_->port()).ok());
    const RemoteRegion& reg = target == 0 ? r.desc().index : target == 1 ? r.desc().log : r.desc().locks;
    Completion c = r.WriteTo(reg);
    EXPECT_EQ(c.status, WcStatus::kRemoteAccessError) << "target " << target << ": " << WcStatusName(c.status);
    EXPECT_TRUE(r.conn().broken());
  }
  ExpectStoreIntactAndServing();
}

TEST_P(BadClientTest, AnotherProtocolVersionIsRefusedWithAReason) {
  RogueClient r;
  ConnectRequestMsg m;
  m.major = 99;
  Status st = r.Connect(env_, server_->port(), m);
  ASSERT_FALSE(st.ok());
  auto why = DecodeReject(r.reject());
  ASSERT_TRUE(why.ok()) << "no reason in the reject";
  EXPECT_EQ(why->code, Status::Code::kProtocol);
  EXPECT_NE(why->reason.find("protocol 99." + std::to_string(kProtocolMinor)), std::string::npos) << why->reason;
  ExpectStoreIntactAndServing();
}

TEST_P(BadClientTest, MalformedRequestsGetClearErrorsAndTheStoreDoesNotChange) {
  RogueClient r;
  ASSERT_TRUE(r.Connect(env_, server_->port()).ok());
  auto msg = PutMsg("precious", "overwritten?");
  // Bad opcode.
  auto bad_op = msg;
  bad_op[0] = 77;
  ASSERT_TRUE(r.Send(bad_op).ok());
  const RawReply rep1 = r.Reply();
  EXPECT_EQ(rep1.code, Status::Code::kInvalidArgument);
  EXPECT_NE(rep1.body.find("unknown opcode 77"), std::string::npos) << rep1.body;
  // Lengths that do not add up (one byte missing).
  auto short_msg = msg;
  short_msg.pop_back();
  ASSERT_TRUE(r.Send(short_msg).ok());
  const RawReply rep2 = r.Reply();
  EXPECT_EQ(rep2.code, Status::Code::kInvalidArgument);
  EXPECT_NE(rep2.body.find("do not add up"), std::string::npos) << rep2.body;
  // A value over the limit (claimed in the header).
  auto big = msg;
  uint32_t huge = server_->config().max_value_bytes + 1;
  std::memcpy(big.data() + 4, &huge, 4);
  ASSERT_TRUE(r.Send(big).ok());
  const RawReply rep3 = r.Reply();
  EXPECT_EQ(rep3.code, Status::Code::kTooLarge) << rep3.body;
  // A ring message buffer out of range and a length over the message bytes (WRITE_WITH_IMM).
  ASSERT_TRUE(r.WriteImmAt(msg, 200, static_cast<uint32_t>(msg.size()), 0).ok());
  const RawReply rep4 = r.Reply();
  EXPECT_EQ(rep4.code, Status::Code::kInvalidArgument);
  EXPECT_NE(rep4.body.find("out of range"), std::string::npos) << rep4.body;
  ASSERT_TRUE(r.WriteImmAt(msg, 0, 1u << 20, 0).ok());
  const RawReply rep5 = r.Reply();
  EXPECT_EQ(rep5.code, Status::Code::kInvalidArgument) << rep5.body;
  // The rogue's connection still works for a well-formed request.
  ASSERT_TRUE(r.Send(PutMsg("rogue", "ok")).ok());
  EXPECT_EQ(r.Reply().code, Status::Code::kOk);
  ExpectStoreIntactAndServing();
}

// Several writes per message (protocol 10): a malformed request anywhere
// refuses the whole message (one error record naming it), and nothing of it
// is applied, not even the well-formed requests before it.
TEST_P(BadClientTest, AMessageOfSeveralWritesWithOneMalformedChangesNothing) {
  RogueClient r;
  ASSERT_TRUE(r.Connect(env_, server_->port()).ok());
  auto more = [](std::vector<uint8_t> m) {
    m[1] |= kFlagMore;
    return m;
  };
  auto cat = [](std::initializer_list<std::vector<uint8_t>> parts) {
    std::vector<uint8_t> m;
    for (const auto& p : parts) m.insert(m.end(), p.begin(), p.end());
    return m;
  };
  auto bad_op = PutMsg("third", "x");
  bad_op[0] = 77;
  ASSERT_TRUE(r.Send(cat({more(PutMsg("precious", "overwritten?")), more(PutMsg("second", "x")), bad_op})).ok());
  RawReply rep = r.Reply();
  EXPECT_EQ(rep.code, Status::Code::kInvalidArgument);
  EXPECT_NE(rep.body.find("request 2 of the message: unknown opcode 77"), std::string::npos) << rep.body;
  // MORE on the last request, and a STATS among writes.
  ASSERT_TRUE(r.Send(cat({more(PutMsg("second", "x")), more(PutMsg("third", "x"))})).ok());
  rep = r.Reply();
  EXPECT_EQ(rep.code, Status::Code::kInvalidArgument);
  EXPECT_NE(rep.body.find("request 1 of the message: request lengths do not add up"), std::string::npos) << rep.body;
  RequestHeader stats;
  stats.opcode = Opcode::kStats;
  std::vector<uint8_t> stats_msg(kRequestHeaderSize);
  EncodeRequestHeader(stats, stats_msg.data());
  ASSERT_TRUE(r.Send(cat({more(PutMsg("second", "x")), stats_msg})).ok());
  rep = r.Reply();
  EXPECT_EQ(rep.code, Status::Code::kInvalidArgument);
  EXPECT_NE(rep.body.find("only whole PUT/DELETEs share a message"), std::string::npos) << rep.body;
  std::string got;
  EXPECT_TRUE(good_->Get("second", &got).IsNotFound());
  EXPECT_TRUE(good_->Get("third", &got).IsNotFound());
  // The connection still works, for a well-formed message of two.
  ASSERT_TRUE(r.Send(cat({more(PutMsg("second", "2")), PutMsg("third", "3")})).ok());
  EXPECT_EQ(r.Reply().code, Status::Code::kOk);  // the first record
  ASSERT_TRUE(good_->Get("third", &got).ok());
  EXPECT_EQ(got, "3");
  ExpectStoreIntactAndServing();
}

TEST_P(BadClientTest, WriteWithImmPastTheEndOfTheRingIsRemoteAccessAndChangesNothing) {
  {
    RogueClient r;
    ASSERT_TRUE(r.Connect(env_, server_->port()).ok());
    // The server counts a connection after its accept returns, which may be
    // after the client saw it established: wait for it (with a bound).
    ASSERT_TRUE(ConnectionsBecome(2, 10000)) << "connections: " << Stat("connections");
    auto msg = PutMsg("precious", "overwritten past the ring?");
    ASSERT_LT(msg.size(), r.desc().ring.length);
    // Starts inside the ring (in its last message buffer), ends past it.
    Status st = r.WriteImmAt(msg, r.desc().credits - 1, static_cast<uint32_t>(msg.size()),
                           r.desc().ring.length - msg.size() / 2);
    EXPECT_TRUE(st.IsRemoteAccess()) << st.ToString();
    EXPECT_TRUE(r.conn().broken());
    // Entirely past the end.
    RogueClient r2;
    ASSERT_TRUE(r2.Connect(env_, server_->port()).ok());
    st = r2.WriteImmAt(msg, 0, static_cast<uint32_t>(msg.size()), r2.desc().ring.length);
    EXPECT_TRUE(st.IsRemoteAccess()) << st.ToString();
    ExpectStoreIntactAndServing();
  }
  // The rogues are gone: so are their connections on the server.
  EXPECT_TRUE(ConnectionsBecome(1, 10000)) << "connections: " << Stat("connections");
  ExpectStoreIntactAndServing();
}

TEST_P(BadClientTest, MoreRequestsThanCreditsClosesThatConnectionOnly) {
  RogueClient r;
  ASSERT_TRUE(r.Connect(env_, server_->port()).ok());
  const uint32_t credits = r.desc().credits;
  const uint64_t errors_before = Stat("errors");
  // 4x its credits, back to back, never taking a reply: the rogue posted 4
  // reply buffers, so the server's 5th reply finds none and cannot complete.
  auto msg = PutMsg("flood", "x");
  // The flood may be cut short by the server closing the connection.
  Status fs = r.Flood(msg, 4 * credits);
  std::printf("flood of %u requests: %s\n", 4 * credits, fs.ToString().c_str());
  // Meanwhile everyone else is served.
  ExpectStoreIntactAndServing();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(r.WaitClosed(kReplyTimeoutMs + 10000)) << "the server kept the flooding connection";
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  std::printf("flooding connection closed by the server after %lld ms (reply timeout %u ms)\n",
              static_cast<long long>(ms), kReplyTimeoutMs);
  EXPECT_TRUE(ConnectionsBecome(1, 10000)) << "connections: " << Stat("connections");
  EXPECT_GT(Stat("errors"), errors_before);
  EXPECT_EQ(Stat("closed_flow_control"), 1u);
  ExpectStoreIntactAndServing();
}

TEST_P(BadClientTest, StatsRequestsNobodyReadsCannotExhaustTheWorkersReplyBuffers) {
  // STATS replies are too large to send inline: each holds a worker reply
  // buffer until the client takes it. A client that floods STATS without
  // taking replies must lose its connection, not starve the others.
  std::vector<std::unique_ptr<RogueClient>> rogues;
  RequestHeader h;
  h.opcode = Opcode::kStats;
  h.request_id = 9;
  std::vector<uint8_t> stats(kRequestHeaderSize);
  EncodeRequestHeader(h, stats.data());
  for (int i = 0; i < 4; ++i) {
    rogues.push_back(std::make_unique<RogueClient>());
    ASSERT_TRUE(rogues.back()->Connect(env_, server_->port()).ok());
    (void)rogues.back()->Flood(stats, 4 * rogues.back()->desc().credits);  // may be cut short
  }
  ExpectStoreIntactAndServing();
  for (auto& r : rogues) EXPECT_TRUE(r->WaitClosed(kReplyTimeoutMs + 10000));
  EXPECT_TRUE(ConnectionsBecome(1, 10000)) << "connections: " << Stat("connections");
  EXPECT_EQ(Stat("closed_flow_control"), 4u);
  ExpectStoreIntactAndServing();
}

INSTANTIATE_TEST_SUITE_P(Loopback, BadClientTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, BadClientTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
