// Issue 13, finding 2: the lease clock is the server's alone, and lock owner
// ids are unique for the server's lifetime.
//
// On c1cae9c the clock was word 0 of the CAS-able lock table (a client could
// push it forward and make every lease look expired), and owner ids were
// conn_id % (2^24-1) + 1 (connection 0 and connection 2^24-1 shared owner 1).
// From then until protocol 6 the clock was a word in its own REMOTE_READ
// region, stored every 10 ms by a server thread; now a CLOCK request reads it.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>

#include "common/protocol/locks.h"
#include "tests/e2e/e2e_util.h"

namespace kvrdma::server {
class ServerTestPeer {
 public:
  // Pretends every owner id has been handed out once.
  static void ExhaustFreshIds(Server& s) { s.next_conn_id_ = kLockOwnerMax + 1; }
};
}  // namespace kvrdma::server

namespace kvrdma::testing {
namespace {

// A connection on the transport alone: its descriptor, and one 8-byte
// READ/CAS/WRITE at a time.
class RawConnection {
 public:
  Status Connect(TransportEnv& env, uint16_t port) {
    uint8_t req[kMaxRequestData];
    size_t n = EncodeConnectRequest(ConnectRequestMsg{}, req);
    ConnectOptions o;
    o.host = env.addr;
    o.port = port;
    std::vector<uint8_t> reject;
    auto c = env.client->Connect(o, QpConfig{}, {req, n}, &reject);
    if (!c.ok()) {
      auto r = DecodeReject(reject);
      return r.ok() ? Status(r->code, r->reason) : c.status();
    }
    conn_ = std::move(c).value();
    auto d = DecodeServerDescriptor(conn_->peer_private_data());
    if (!d.ok()) return d.status();
    desc_ = *d;
    auto mr = env.client->RegisterMemory(mem_, sizeof(mem_), kAccessLocalWrite);
    if (!mr.ok()) return mr.status();
    mr_ = std::move(mr).value();
    return Status::OK();
  }
  Completion Op(WrOpcode op, uint64_t addr, uint32_t rkey, uint64_t compare = 0, uint64_t swap = 0) {
    SendWr w;
    w.opcode = op;
    w.local = mr_->Slice(0, 8);
    w.remote_addr = addr;
    w.rkey = rkey;
    w.compare_add = compare;
    w.swap = swap;
    EXPECT_TRUE(conn_->PostSend({&w, 1}).ok());
    auto c = WaitForSend(*conn_, 1);
    return c.empty() ? Completion{0, WcStatus::kOther} : c[0];
  }
  uint64_t Word() const {
    uint64_t v;
    std::memcpy(&v, mem_, 8);
    return v;
  }
  const ServerDescriptor& desc() const { return desc_; }

 private:
  alignas(8) uint8_t mem_[64] = {};
  ServerDescriptor desc_;
  std::unique_ptr<Connection> conn_;  // before mr_: destroyed after it
  std::unique_ptr<MemoryRegion> mr_;
};

class LockClockTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    env_ = TransportEnv::Make(GetParam());
    if (!env_.skip_reason.empty()) GTEST_SKIP() << env_.skip_reason;
    server_ = std::make_unique<TestServer>(env_);
  }
  TransportEnv env_;
  std::unique_ptr<TestServer> server_;
};

// Since protocol 6 a client asks for the lease clock (a CLOCK request) and
// the server reads its clock when it answers: there is no clock word in
// client-visible memory to push, and the lease a client installs starts at
// the server's time of the answer, not at a tick up to 10 ms old.
TEST_P(LockClockTest, ALeaseStartsAtTheServersClockWhenItAnswered) {
  const server::LockView locks = server_->server().lock_view();
  auto holder = server_->Connect(PutMode::kSend);
  auto other = server_->Connect(PutMode::kSend);
  ASSERT_TRUE(holder.ok() && other.ok());
  const auto lease = std::chrono::seconds(10);
  const uint64_t before = locks.clock->NowMs();
  ASSERT_TRUE((*holder)->TryLock("k", lease).ok());
  const uint64_t after = locks.clock->NowMs();
  const uint64_t word = __atomic_load_n(&locks.words[LockPlaceOf("k", locks.seed, locks.lock_words).index], __ATOMIC_ACQUIRE);
  const uint64_t lease_ms = static_cast<uint64_t>(std::chrono::milliseconds(lease).count());
  EXPECT_GE(LockExpiry(word), before + lease_ms);
  EXPECT_LT(LockExpiry(word), after + lease_ms + kLockExpiryUnitMs);  // rounded up to a unit at most
  // And a lease another client holds is respected.
  EXPECT_EQ((*other)->TryLock("k", lease).code(), Status::Code::kLocked);
}

TEST_P(LockClockTest, TwoConnectionsNeverShareAnOwnerId) {
  std::vector<std::unique_ptr<RawConnection>> live;
  std::set<uint32_t> ids;
  for (int i = 0; i < 8; ++i) {
    live.push_back(std::make_unique<RawConnection>());
    ASSERT_TRUE(live.back()->Connect(env_, server_->port()).ok());
    const uint32_t id = live.back()->desc().conn_id;
    EXPECT_GE(id, 1u);
    EXPECT_LE(id, kLockOwnerMax);
    EXPECT_TRUE(ids.insert(id).second) << "owner id " << id << " handed out twice";
  }
  // A client takes a lease, then goes away: its id stays named by the lease.
  uint32_t gone_id = 0;
  {
    RawConnection holder;
    ASSERT_TRUE(holder.Connect(env_, server_->port()).ok());
    gone_id = holder.desc().conn_id;
    const LockPlace place = LockPlaceOf("held", holder.desc().hash_seed, holder.desc().lock_words);
    const uint64_t lease = PackLock(gone_id, place.key, server_->server().lock_view().clock->NowMs() + 60000);
    const uint64_t word = place.index;
    ASSERT_EQ(holder.Op(WrOpcode::kCompareSwap, holder.desc().locks.addr + word * 8, holder.desc().locks.rkey, 0,
                        lease).status,
              WcStatus::kSuccess);
  }
  // Wait (bounded) until the server has seen the holder go: then only its
  // lease, not a live connection, names its id.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server_->server().counters().connections.load() != live.size() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(server_->server().counters().connections.load(), live.size());
  // Every id has now been handed out once: new connections must reuse ids,
  // but never one a live connection holds or an unended lease names.
  server::ServerTestPeer::ExhaustFreshIds(server_->server());
  for (int i = 0; i < 8; ++i) {
    live.push_back(std::make_unique<RawConnection>());
    ASSERT_TRUE(live.back()->Connect(env_, server_->port()).ok());
    const uint32_t id = live.back()->desc().conn_id;
    EXPECT_NE(id, gone_id) << "reused the id of an unended lease";
    EXPECT_TRUE(ids.insert(id).second) << "owner id " << id << " held by two live connections";
  }
}

INSTANTIATE_TEST_SUITE_P(Loopback, LockClockTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, LockClockTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
