// The protocol-level suite, run over both transports: loopback natively
// (label unit), verbs on a real RDMA device (label rdma, via tools/with-rdma).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <numeric>

#include "tests/common/transport_test_util.h"

namespace kvrdma::testing {
namespace {

class TransportTest : public ::testing::TestWithParam<Kind> {
 protected:
  static constexpr size_t kRegion = 64 * 1024;
  static constexpr size_t kRecvBuf = 4096;
  static constexpr size_t kRecvCount = 16;

  void SetUp() override {
    env_ = TransportEnv::Make(GetParam());
    if (!env_.skip_reason.empty()) GTEST_SKIP() << env_.skip_reason;
    auto l = env_.server->Listen(env_.addr, 0, 16);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(l).value();
    auto srq = env_.server->CreateSharedReceiveQueue(256);
    ASSERT_TRUE(srq.ok()) << srq.status().ToString();
    srq_ = std::move(srq).value();
    auto cq = env_.server->CreateCompletionQueue(256);
    ASSERT_TRUE(cq.ok()) << cq.status().ToString();
    recv_cq_ = std::move(cq).value();

    remote_.assign(kRegion, 0);
    readonly_.assign(4096, 0x5a);
    recv_.assign(kRecvBuf * kRecvCount, 0);
    local_.assign(kRegion, 0);
    remote_mr_ = Register(env_.server, remote_.data(), remote_.size(),
                          kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic);
    readonly_mr_ = Register(env_.server, readonly_.data(), readonly_.size(), kAccessRemoteRead);
    recv_mr_ = Register(env_.server, recv_.data(), recv_.size(), kAccessLocalWrite);
    local_mr_ = Register(env_.client, local_.data(), local_.size(), kAccessLocalWrite);
  }

  void TearDown() override {
    // Connections before the queues they use; then regions; then devices.
    pairs_.clear();
    srq_.reset();
    recv_cq_.reset();
  }

  static std::unique_ptr<MemoryRegion> Register(const std::shared_ptr<Device>& d, void* p, size_t n,
                                                uint32_t access) {
    auto mr = d->RegisterMemory(p, n, access);
    EXPECT_TRUE(mr.ok()) << mr.status().ToString();
    return mr.ok() ? std::move(mr).value() : nullptr;
  }

  QpConfig ServerCfg() {
    QpConfig c;
    c.srq = srq_.get();
    c.recv_cq = recv_cq_.get();
    return c;
  }

  Pair& Connect() {
    pairs_.push_back(ConnectPair(env_, *listener_, ServerCfg()));
    return pairs_.back();
  }

  void PostReceives() {
    std::vector<RecvWr> r;
    for (size_t i = 0; i < kRecvCount; ++i) r.push_back(RecvWr{i, recv_mr_->Slice(i * kRecvBuf, kRecvBuf)});
    ASSERT_TRUE(srq_->PostRecv(r).ok());
  }

  SendWr Read(uint64_t id, size_t local_off, uint64_t raddr, uint32_t rkey, uint32_t len) {
    SendWr w;
    w.wr_id = id;
    w.opcode = WrOpcode::kRead;
    w.local = local_mr_->Slice(local_off, len);
    w.remote_addr = raddr;
    w.rkey = rkey;
    return w;
  }

  // Posts one WR and returns its completion.
  Completion RunOne(Connection& c, const SendWr& w) {
    EXPECT_TRUE(c.PostSend({&w, 1}).ok());
    auto got = WaitForSend(c, 1);
    EXPECT_EQ(got.size(), 1u);
    return got.empty() ? Completion{0, WcStatus::kOther} : got[0];
  }

  TransportEnv env_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<SharedReceiveQueue> srq_;
  std::unique_ptr<CompletionQueue> recv_cq_;
  std::vector<uint8_t> remote_, readonly_, recv_, local_;
  std::unique_ptr<MemoryRegion> remote_mr_, readonly_mr_, recv_mr_, local_mr_;
  std::deque<Pair> pairs_;  // deque: references stay valid
};

TEST_P(TransportTest, ReadReturnsTheRegionsBytes) {
  std::iota(remote_.begin(), remote_.end(), uint8_t{7});
  Pair& p = Connect();
  ASSERT_TRUE(p.client && p.server);
  // Three READs, one doorbell, only the last signaled: completions of a QP
  // arrive in order, so one completion covers all three.
  SendWr w[3] = {Read(1, 0, remote_mr_->base(), remote_mr_->rkey(), 4096),
                 Read(2, 4096, remote_mr_->base() + 8192, remote_mr_->rkey(), 64),
                 Read(3, 8192, remote_mr_->base() + kRegion - 100, remote_mr_->rkey(), 100)};
  w[0].signaled = w[1].signaled = false;
  ASSERT_TRUE(p.client->PostSend(w).ok());
  auto got = WaitForSend(*p.client, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess) << WcStatusName(got[0].status);
  EXPECT_EQ(got[0].wr_id, 3u);
  EXPECT_EQ(got[0].opcode, WrOpcode::kRead);
  EXPECT_EQ(0, std::memcmp(local_.data(), remote_.data(), 4096));
  EXPECT_EQ(0, std::memcmp(local_.data() + 4096, remote_.data() + 8192, 64));
  EXPECT_EQ(0, std::memcmp(local_.data() + 8192, remote_.data() + kRegion - 100, 100));
  EXPECT_FALSE(p.client->broken());
}

TEST_P(TransportTest, WriteWithImmLandsAndDeliversImmediateThroughSrq) {
  PostReceives();
  Pair& p = Connect();
  ASSERT_TRUE(p.client && p.server);
  for (size_t i = 0; i < 300; ++i) local_[i] = static_cast<uint8_t>(i * 3);
  SendWr w;
  w.wr_id = 9;
  w.opcode = WrOpcode::kWriteImm;
  w.local = local_mr_->Slice(0, 300);
  w.remote_addr = remote_mr_->base() + 1000;
  w.rkey = remote_mr_->rkey();
  w.imm = 0xdeadbeef;
  Completion c = RunOne(*p.client, w);
  EXPECT_EQ(c.status, WcStatus::kSuccess) << WcStatusName(c.status);
  auto rc = WaitFor(*recv_cq_, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rc[0].opcode, WrOpcode::kRecvWriteImm);
  EXPECT_TRUE(rc[0].has_imm);
  EXPECT_EQ(rc[0].imm, 0xdeadbeefu);
  EXPECT_EQ(rc[0].qp_num, p.server->qp_num());
  EXPECT_LT(rc[0].wr_id, kRecvCount);  // a receive taken from the SRQ
  EXPECT_EQ(0, std::memcmp(remote_.data() + 1000, local_.data(), 300));
  EXPECT_EQ(remote_[999], 0);
  EXPECT_EQ(remote_[1300], 0);
}

TEST_P(TransportTest, SendRecvThroughOneSrqSharedByTwoQps) {
  PostReceives();
  Pair& a = Connect();
  Pair& b = Connect();
  ASSERT_TRUE(a.client && a.server && b.client && b.server);
  ASSERT_NE(a.server->qp_num(), b.server->qp_num());
  std::memcpy(local_.data(), "hello from a", 12);
  std::memcpy(local_.data() + 64, "and from b, longer", 18);
  SendWr sa;
  sa.wr_id = 1;
  sa.opcode = WrOpcode::kSend;
  sa.local = local_mr_->Slice(0, 12);
  SendWr sb = sa;
  sb.wr_id = 2;
  sb.local = local_mr_->Slice(64, 18);
  sb.inline_data = true;  // small SENDs go inline
  EXPECT_EQ(RunOne(*a.client, sa).status, WcStatus::kSuccess);
  EXPECT_EQ(RunOne(*b.client, sb).status, WcStatus::kSuccess);
  auto rc = WaitFor(*recv_cq_, 2);
  ASSERT_EQ(rc.size(), 2u);
  bool seen_a = false, seen_b = false;
  for (const Completion& c : rc) {
    EXPECT_EQ(c.status, WcStatus::kSuccess);
    EXPECT_EQ(c.opcode, WrOpcode::kRecv);
    const char* buf = reinterpret_cast<const char*>(recv_.data() + c.wr_id * kRecvBuf);
    if (c.qp_num == a.server->qp_num()) {
      seen_a = true;
      EXPECT_EQ(c.byte_len, 12u);
      EXPECT_EQ(std::string(buf, 12), "hello from a");
    } else if (c.qp_num == b.server->qp_num()) {
      seen_b = true;
      EXPECT_EQ(c.byte_len, 18u);
      EXPECT_EQ(std::string(buf, 18), "and from b, longer");
    }
  }
  EXPECT_TRUE(seen_a && seen_b);
}

TEST_P(TransportTest, CompareSwapAndFetchAddReturnOldValue) {
  Pair& p = Connect();
  ASSERT_TRUE(p.client && p.server);
  uint64_t* word = reinterpret_cast<uint64_t*>(remote_.data() + 64);
  *word = 41;
  SendWr w;
  w.wr_id = 1;
  w.opcode = WrOpcode::kCompareSwap;
  w.local = local_mr_->Slice(0, 8);
  w.remote_addr = remote_mr_->base() + 64;
  w.rkey = remote_mr_->rkey();
  w.compare_add = 41;
  w.swap = 1000;
  auto old = [&] {
    uint64_t v;
    std::memcpy(&v, local_.data(), 8);
    return v;
  };
  ASSERT_EQ(RunOne(*p.client, w).status, WcStatus::kSuccess);
  EXPECT_EQ(old(), 41u);
  EXPECT_EQ(*word, 1000u);
  // A failed compare returns the current value and leaves the word alone.
  w.compare_add = 41;
  w.swap = 5;
  ASSERT_EQ(RunOne(*p.client, w).status, WcStatus::kSuccess);
  EXPECT_EQ(old(), 1000u);
  EXPECT_EQ(*word, 1000u);
  w.opcode = WrOpcode::kFetchAdd;
  w.compare_add = 24;
  ASSERT_EQ(RunOne(*p.client, w).status, WcStatus::kSuccess);
  EXPECT_EQ(old(), 1000u);
  EXPECT_EQ(*word, 1024u);
}

// A READ into two places (SendWr::local2): its first bytes fill `local`,
// the rest `local2`, in another region; the completion counts both.
TEST_P(TransportTest, ReadIntoTwoScatterElementsSplitsTheBytesInOrder) {
  std::iota(remote_.begin(), remote_.end(), uint8_t{3});
  std::vector<uint8_t> other(8192, 0xee);
  auto other_mr = Register(env_.client, other.data(), other.size(), kAccessLocalWrite);
  ASSERT_TRUE(other_mr);
  Pair& p = Connect();
  ASSERT_TRUE(p.client && p.server);
  SendWr w = Read(1, 100, remote_mr_->base() + 1000, remote_mr_->rkey(), 28);
  w.local2 = other_mr->Slice(16, 5000);
  Completion c = RunOne(*p.client, w);
  ASSERT_EQ(c.status, WcStatus::kSuccess) << WcStatusName(c.status);
  EXPECT_EQ(c.byte_len, 28u + 5000u);
  EXPECT_EQ(0, std::memcmp(local_.data() + 100, remote_.data() + 1000, 28));
  EXPECT_EQ(0, std::memcmp(other.data() + 16, remote_.data() + 1028, 5000));
  EXPECT_EQ(other[15], 0xee);
  EXPECT_EQ(other[16 + 5000], 0xee);
  EXPECT_EQ(local_[99], 0);
  EXPECT_EQ(local_[128], 0);
  // Both elements count against the remote region: past its end is refused.
  SendWr past = Read(2, 0, remote_mr_->base() + kRegion - 64, remote_mr_->rkey(), 32);
  past.local2 = other_mr->Slice(0, 64);
  c = RunOne(*p.client, past);
  EXPECT_EQ(c.status, WcStatus::kRemoteAccessError) << WcStatusName(c.status);
  other_mr.reset();
}

// The second element must be local memory the READ may write: an lkey of
// another region's range is a local protection error (no byte lands).
TEST_P(TransportTest, ASecondScatterElementOutsideItsRegionIsALocalError) {
  std::vector<uint8_t> other(4096, 0xee);
  auto other_mr = Register(env_.client, other.data(), other.size(), kAccessLocalWrite);
  ASSERT_TRUE(other_mr);
  Pair& p = Connect();
  ASSERT_TRUE(p.client && p.server);
  SendWr w = Read(1, 0, remote_mr_->base(), remote_mr_->rkey(), 64);
  w.local2 = other_mr->Slice(4000, 64);
  w.local2.length = 200;  // past the region's end
  Completion c = RunOne(*p.client, w);
  EXPECT_NE(c.status, WcStatus::kSuccess);
  EXPECT_TRUE(p.client->broken());
  other_mr.reset();
}

TEST_P(TransportTest, ReadWithWrongRkeyIsRemoteAccessAndBreaksConnection) {
  Pair& p = Connect();
  ASSERT_TRUE(p.client && p.server);
  Completion c = RunOne(*p.client, Read(1, 0, remote_mr_->base(), remote_mr_->rkey() ^ 0x5500, 64));
  EXPECT_EQ(c.status, WcStatus::kRemoteAccessError) << WcStatusName(c.status);
  EXPECT_TRUE(CompletionStatus(c).IsRemoteAccess()) << CompletionStatus(c).ToString();
  EXPECT_TRUE(p.client->broken());
  SendWr again = Read(2, 0, remote_mr_->base(), remote_mr_->rkey(), 64);
  EXPECT_TRUE(p.client->PostSend({&again, 1}).IsConnectionLost());
}

TEST_P(TransportTest, ReadPastTheRegionsEndIsRemoteAccess) {
  Pair& p = Connect();
  ASSERT_TRUE(p.client && p.server);
  Completion c = RunOne(*p.client, Read(1, 0, remote_mr_->base() + kRegion - 32, remote_mr_->rkey(), 64));
  EXPECT_EQ(c.status, WcStatus::kRemoteAccessError) << WcStatusName(c.status);
  EXPECT_TRUE(CompletionStatus(c).IsRemoteAccess());
  EXPECT_TRUE(p.client->broken());
}

TEST_P(TransportTest, WriteToReadOnlyRegionIsRemoteAccessAndChangesNothing) {
  Pair& p = Connect();
  ASSERT_TRUE(p.client && p.server);
  std::memset(local_.data(), 0x11, 256);
  SendWr w;
  w.opcode = WrOpcode::kWrite;
  w.local = local_mr_->Slice(0, 256);
  w.remote_addr = readonly_mr_->base();
  w.rkey = readonly_mr_->rkey();
  Completion c = RunOne(*p.client, w);
  EXPECT_EQ(c.status, WcStatus::kRemoteAccessError) << WcStatusName(c.status);
  EXPECT_TRUE(CompletionStatus(c).IsRemoteAccess());
  EXPECT_TRUE(p.client->broken());
  for (uint8_t b : readonly_) ASSERT_EQ(b, 0x5a);
}

// A type-2 memory window: its rkey writes through the QP it is bound to and
// through no other, the region under it exposes no usable rkey, and the
// memory window dies with its QP.
TEST_P(TransportTest, AMemoryWindowWorksOnlyThroughTheQpItIsBoundTo) {
  std::vector<uint8_t> ring(8192, 0);
  auto mr = Register(env_.server, ring.data(), ring.size(), kAccessLocalWrite | kAccessMwBind);
  ASSERT_TRUE(mr);
  auto mw = env_.server->CreateMemoryWindow();
  ASSERT_TRUE(mw.ok()) << mw.status().ToString();
  QpConfig cfg = ServerCfg();
  cfg.mw_binding = MwBinding{mw->get(), mr.get(), mr->base() + 4096, 4096, kAccessRemoteWrite, 77};
  Pair& owner = Connect();  // a connection without a memory window, to fill the QP numbers
  pairs_.push_back(ConnectPair(env_, *listener_, cfg));
  Pair& bound = pairs_.back();
  Pair& other = Connect();
  ASSERT_TRUE(owner.client && bound.client && other.client);
  const uint32_t rkey = (*mw)->rkey();
  auto write = [&](Connection& c, uint64_t addr, uint32_t key, uint8_t fill) {
    std::memset(local_.data(), fill, 64);
    SendWr w;
    w.opcode = WrOpcode::kWrite;
    w.local = local_mr_->Slice(0, 64);
    w.remote_addr = addr;
    w.rkey = key;
    return RunOne(c, w).status;
  };
  // Through its own QP: lands.
  EXPECT_EQ(write(*bound.client, mr->base() + 4096, rkey, 0x11), WcStatus::kSuccess);
  EXPECT_EQ(ring[4096], 0x11);
  EXPECT_EQ(ring[4096 + 63], 0x11);
  // Through another QP with the same rkey: refused, nothing changes.
  EXPECT_EQ(write(*other.client, mr->base() + 4096, rkey, 0x22), WcStatus::kRemoteAccessError);
  EXPECT_EQ(write(*owner.client, mr->base() + 4096, mr->rkey(), 0x33), WcStatus::kRemoteAccessError);
  EXPECT_EQ(ring[4096], 0x11);
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(ring[i], 0) << i;  // outside the memory window: untouched
  // A memory window goes before its QP (MemoryWindow); after it, its rkey answers
  // on no QP, the one it was bound to included.
  mw->reset();
  EXPECT_EQ(write(*bound.client, mr->base() + 4096, rkey, 0x44), WcStatus::kRemoteAccessError);
  bound.client.reset();
  bound.server.reset();
  Pair& late = Connect();
  ASSERT_TRUE(late.client);
  EXPECT_EQ(write(*late.client, mr->base() + 4096, rkey, 0x55), WcStatus::kRemoteAccessError);
  EXPECT_EQ(ring[4096], 0x11);
  pairs_.clear();  // the QPs before the region
}

// A window the CLIENT binds at run time on its own QP (what a rendezvous PUT
// does): READ-only, within its range, through that QP only, and dead once a
// kLocalInv executed; a new binding has a new rkey and the old one names
// nothing. Every violation is a remote access error at the reader.
class RuntimeWindowTest : public TransportTest {
 protected:
  static constexpr size_t kSrc = 16384;
  void SetUp() override {
    TransportTest::SetUp();
    if (IsSkipped()) return;
    src_.resize(kSrc);
    std::iota(src_.begin(), src_.end(), uint8_t{3});
    // Only window binding: the region itself exposes no rkey, not even local write.
    src_mr_ = Register(env_.client, src_.data(), src_.size(), kAccessMwBind);
    ASSERT_TRUE(src_mr_);
    auto mw = env_.client->CreateMemoryWindow();
    ASSERT_TRUE(mw.ok()) << mw.status().ToString();
    mw_ = std::move(mw).value();
  }
  void TearDown() override {
    mw_.reset();  // before the QP it is bound to (MemoryWindow)
    pairs_.clear();
    src_mr_.reset();
    TransportTest::TearDown();
  }
  Pair& ConnectWithWindows() {
    QpConfig cc;
    cc.windows = true;
    pairs_.push_back(ConnectPair(env_, *listener_, ServerCfg(), {}, {}, cc));
    return pairs_.back();
  }
  // Binds [off, off + len) of src_ READ-only on p's client QP; the completion's status.
  WcStatus Bind(Pair& p, size_t off, size_t len, uint32_t access = kAccessRemoteRead) {
    MwBinding b{mw_.get(), src_mr_.get(), src_mr_->base() + off, len, access, 900};
    Status st = p.client->BindWindow(b, true);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) return WcStatus::kOther;
    auto got = WaitForSend(*p.client, 1);
    EXPECT_EQ(got.size(), 1u);
    if (got.empty()) return WcStatus::kOther;
    EXPECT_EQ(got[0].wr_id, 900u);
    if (got[0].status == WcStatus::kSuccess) {
      EXPECT_EQ(got[0].opcode, WrOpcode::kBindMw);
    }
    return got[0].status;
  }
  WcStatus Invalidate(Pair& p, uint32_t rkey) {
    SendWr w;
    w.wr_id = 901;
    w.opcode = WrOpcode::kLocalInv;
    w.rkey = rkey;
    Completion c = RunOne(*p.client, w);
    EXPECT_EQ(c.wr_id, 901u);
    if (c.status == WcStatus::kSuccess) {
      EXPECT_EQ(c.opcode, WrOpcode::kLocalInv);
    }
    return c.status;
  }
  // The SERVER side of p READs len bytes at src_ + off into remote_ (server memory).
  WcStatus ServerRead(Pair& p, size_t off, uint32_t len, uint32_t rkey) {
    std::fill(remote_.begin(), remote_.end(), 0);
    SendWr w;
    w.wr_id = 902;
    w.opcode = WrOpcode::kRead;
    w.local = remote_mr_->Slice(0, len);
    w.remote_addr = reinterpret_cast<uint64_t>(src_.data()) + off;
    w.rkey = rkey;
    return RunOne(*p.server, w).status;
  }
  bool Landed(size_t off, size_t len) { return std::memcmp(remote_.data(), src_.data() + off, len) == 0; }
  // A window over [4096, 8192); a READ of [off, off + len) through it is
  // refused and lands nothing.
  void ExpectReadThroughWindowRefused(size_t off, uint32_t len) {
    Pair& p = ConnectWithWindows();
    ASSERT_TRUE(p.client && p.server);
    ASSERT_EQ(Bind(p, 4096, 4096), WcStatus::kSuccess);
    EXPECT_EQ(ServerRead(p, off, len, mw_->rkey()), WcStatus::kRemoteAccessError);
    EXPECT_FALSE(Landed(off, len));
  }
  static constexpr const char* kRxeChecksTheRegionOnly =
      "rxe (Linux 6.1) checks a READ through a window against the window's region only (measured: READs 64 bytes "
      "before and past the window, inside the region, succeeded); kvrdma binds its windows over regions of exactly "
      "the window's bytes (RegionWideWindow...)";

  std::vector<uint8_t> src_;
  std::unique_ptr<MemoryRegion> src_mr_;
  std::unique_ptr<MemoryWindow> mw_;
};

TEST_P(RuntimeWindowTest, ReadableThroughItsQpUntilInvalidatedThenRebindableUnderANewKey) {
  Pair& p = ConnectWithWindows();
  ASSERT_TRUE(p.client && p.server);
  EXPECT_EQ(src_mr_->rkey(), 0u);  // the region exposes nothing by itself
  ASSERT_EQ(Bind(p, 4096, 8192), WcStatus::kSuccess);
  const uint32_t first = mw_->rkey();
  EXPECT_EQ(ServerRead(p, 4096, 8192, first), WcStatus::kSuccess);
  EXPECT_TRUE(Landed(4096, 8192));
  EXPECT_EQ(ServerRead(p, 8192, 100, first), WcStatus::kSuccess);  // inside, not at the start
  EXPECT_TRUE(Landed(8192, 100));
  ASSERT_EQ(Invalidate(p, first), WcStatus::kSuccess);
  ASSERT_EQ(Bind(p, 0, 4096), WcStatus::kSuccess);
  const uint32_t second = mw_->rkey();
  EXPECT_NE(second, first);
  EXPECT_EQ(second >> 8, first >> 8);  // the same window, a new key byte
  EXPECT_EQ(ServerRead(p, 0, 4096, second), WcStatus::kSuccess);
  EXPECT_TRUE(Landed(0, 4096));
  ASSERT_EQ(Invalidate(p, second), WcStatus::kSuccess);
  // Invalidated: the READ fails, lands nothing, and breaks the connection.
  EXPECT_EQ(ServerRead(p, 0, 4096, second), WcStatus::kRemoteAccessError);
  EXPECT_FALSE(Landed(0, 4096));
  EXPECT_TRUE(p.server->broken());
}

TEST_P(RuntimeWindowTest, AnEarlierBindingsKeyNamesNothing) {
  Pair& p = ConnectWithWindows();
  ASSERT_TRUE(p.client && p.server);
  ASSERT_EQ(Bind(p, 0, 4096), WcStatus::kSuccess);
  const uint32_t first = mw_->rkey();
  ASSERT_EQ(Invalidate(p, first), WcStatus::kSuccess);
  ASSERT_EQ(Bind(p, 0, 4096), WcStatus::kSuccess);
  EXPECT_EQ(ServerRead(p, 0, 64, first), WcStatus::kRemoteAccessError);
  EXPECT_FALSE(Landed(0, 64));
}

// What holds on every device, rxe included: a window over a whole region
// reaches nothing past the region.
TEST_P(RuntimeWindowTest, RegionWideWindowReachesNothingPastItsRegion) {
  Pair& p = ConnectWithWindows();
  ASSERT_TRUE(p.client && p.server);
  ASSERT_EQ(Bind(p, 0, kSrc), WcStatus::kSuccess);
  EXPECT_EQ(ServerRead(p, kSrc - 64, 64, mw_->rkey()), WcStatus::kSuccess);
  EXPECT_TRUE(Landed(kSrc - 64, 64));
  EXPECT_EQ(ServerRead(p, kSrc - 64, 128, mw_->rkey()), WcStatus::kRemoteAccessError);
  EXPECT_TRUE(p.server->broken());
}

TEST_P(RuntimeWindowTest, ReadOutsideTheWindowIsRemoteAccess) {
  if (GetParam() == Kind::kVerbs) GTEST_SKIP() << kRxeChecksTheRegionOnly;
  // The last 64 bytes of the window and 64 beyond it.
  ExpectReadThroughWindowRefused(8192 - 64, 128);
}

TEST_P(RuntimeWindowTest, ReadBeforeTheWindowIsRemoteAccess) {
  if (GetParam() == Kind::kVerbs) GTEST_SKIP() << kRxeChecksTheRegionOnly;
  ExpectReadThroughWindowRefused(4096 - 64, 64);
}

TEST_P(RuntimeWindowTest, WriteThroughAReadOnlyWindowIsRemoteAccessAndChangesNothing) {
  Pair& p = ConnectWithWindows();
  ASSERT_TRUE(p.client && p.server);
  ASSERT_EQ(Bind(p, 0, 4096), WcStatus::kSuccess);
  const std::vector<uint8_t> before = src_;
  std::fill(remote_.begin(), remote_.begin() + 64, 0xee);
  SendWr w;
  w.opcode = WrOpcode::kWrite;
  w.local = remote_mr_->Slice(0, 64);
  w.remote_addr = src_mr_->base();
  w.rkey = mw_->rkey();
  EXPECT_EQ(RunOne(*p.server, w).status, WcStatus::kRemoteAccessError);
  EXPECT_EQ(src_, before);
}

TEST_P(RuntimeWindowTest, AnotherQpCannotUseTheKeyAndTheOwnerIsUnaffected) {
  Pair& p = ConnectWithWindows();
  Pair& other = ConnectWithWindows();
  ASSERT_TRUE(p.client && p.server && other.client && other.server);
  ASSERT_EQ(Bind(p, 0, 4096), WcStatus::kSuccess);
  EXPECT_EQ(ServerRead(other, 0, 64, mw_->rkey()), WcStatus::kRemoteAccessError);
  EXPECT_FALSE(Landed(0, 64));
  EXPECT_EQ(ServerRead(p, 0, 64, mw_->rkey()), WcStatus::kSuccess);
  EXPECT_TRUE(Landed(0, 64));
}

TEST_P(RuntimeWindowTest, BindingABoundWindowFails) {
  Pair& p = ConnectWithWindows();
  ASSERT_TRUE(p.client && p.server);
  ASSERT_EQ(Bind(p, 0, 4096), WcStatus::kSuccess);
  EXPECT_NE(Bind(p, 4096, 4096), WcStatus::kSuccess);
  EXPECT_TRUE(p.client->broken());
}

TEST_P(RuntimeWindowTest, ABindPastItsRegionFails) {
  Pair& p = ConnectWithWindows();
  ASSERT_TRUE(p.client && p.server);
  EXPECT_EQ(Bind(p, kSrc - 64, 128), WcStatus::kMwBindError);
  EXPECT_TRUE(p.client->broken());
}

// rxe's source refuses to deregister a region with a window bound over it (the
// handle logs the failure and the memory stays registered); the loopback
// transport takes the window with the region, so a late READ reaches nothing.
TEST_P(RuntimeWindowTest, LoopbackAWindowDiesWithItsRegion) {
  if (GetParam() == Kind::kVerbs) GTEST_SKIP() << "rxe refuses the deregistration instead";
  Pair& p = ConnectWithWindows();
  ASSERT_TRUE(p.client && p.server);
  ASSERT_EQ(Bind(p, 0, 4096), WcStatus::kSuccess);
  src_mr_.reset();
  EXPECT_EQ(ServerRead(p, 0, 64, mw_->rkey()), WcStatus::kRemoteAccessError);
  EXPECT_FALSE(Landed(0, 64));
}

// A window destroyed while a READ through it is under way (the client gave
// up on its rendezvous PUT) ends the READ: nothing more is read from the
// memory, which its owner may free once the window is gone.
TEST_P(RuntimeWindowTest, LoopbackAWindowDestroyedDuringAReadEndsIt) {
  if (GetParam() == Kind::kVerbs) GTEST_SKIP() << "the fault hooks are the loopback transport's";
  Pair& p = ConnectWithWindows();
  ASSERT_TRUE(p.client && p.server);
  ASSERT_EQ(Bind(p, 0, 8192), WcStatus::kSuccess);
  const uint32_t rkey = mw_->rkey();
  LoopbackFaults f;
  f.read_chunk_bytes = 1024;
  f.between_read_chunks = [this](const SendWr&, size_t done) {
    if (done == 2048) mw_.reset();  // the fabric's lock is not held here
  };
  env_.fabric->SetFaults(f);
  EXPECT_EQ(ServerRead(p, 0, 8192, rkey), WcStatus::kRemoteAccessError);
  env_.fabric->SetFaults({});
  EXPECT_TRUE(Landed(0, 2048));  // before the window went
  EXPECT_TRUE(std::all_of(remote_.begin() + 2048, remote_.begin() + 8192, [](uint8_t b) { return b == 0; }));
}

TEST_P(RuntimeWindowTest, WithoutTheQpOptionNothingIsPosted) {
  Pair& p = Connect();
  ASSERT_TRUE(p.client && p.server);
  MwBinding b{mw_.get(), src_mr_.get(), src_mr_->base(), 4096, kAccessRemoteRead, 1};
  EXPECT_TRUE(p.client->BindWindow(b, true).code() == Status::Code::kInvalidArgument);
  SendWr w;
  w.opcode = WrOpcode::kLocalInv;
  w.rkey = mw_->rkey();
  EXPECT_TRUE(p.client->PostSend({&w, 1}).code() == Status::Code::kInvalidArgument);
}

TEST_P(TransportTest, WorkAfterAnErrorIsFlushed) {
  Pair& p = Connect();
  ASSERT_TRUE(p.client && p.server);
  SendWr w[2] = {Read(1, 0, remote_mr_->base(), remote_mr_->rkey() + 7777, 64),
                 Read(2, 64, remote_mr_->base(), remote_mr_->rkey(), 64)};
  ASSERT_TRUE(p.client->PostSend(w).ok());
  auto got = WaitForSend(*p.client, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[0].status, WcStatus::kRemoteAccessError) << WcStatusName(got[0].status);
  EXPECT_EQ(got[1].wr_id, 2u);
  EXPECT_EQ(got[1].status, WcStatus::kFlushed) << WcStatusName(got[1].status);
  EXPECT_TRUE(CompletionStatus(got[1]).IsConnectionLost());
}

TEST_P(TransportTest, PrivateDataTravelsBothWays) {
  const uint8_t req[] = {'k', 'v', 'r', 'q', 1, 2, 3};
  const uint8_t rep[] = {'k', 'v', 'r', 'p', 9, 8, 7, 6, 5};
  pairs_.push_back(ConnectPair(env_, *listener_, ServerCfg(), req, rep));
  Pair& p = pairs_.back();
  ASSERT_TRUE(p.client && p.server);
  // IB CM may pad private data with zeros: check the prefix.
  const auto& sd = p.server->peer_private_data();
  ASSERT_GE(sd.size(), sizeof(req));
  EXPECT_EQ(0, std::memcmp(sd.data(), req, sizeof(req)));
  const auto& cd = p.client->peer_private_data();
  ASSERT_GE(cd.size(), sizeof(rep));
  EXPECT_EQ(0, std::memcmp(cd.data(), rep, sizeof(rep)));
}

TEST_P(TransportTest, RejectCarriesTheReason) {
  std::vector<uint8_t> reason;
  Result<std::unique_ptr<Connection>> cr = Status::Internal("not run");
  std::thread t([&] {
    ConnectOptions o;
    o.host = env_.addr;
    o.port = listener_->port();
    cr = env_.client->Connect(o, QpConfig{}, {}, &reason);
  });
  bool rejected = false;
  for (int i = 0; i < 50 && !rejected; ++i) {
    auto ev = listener_->NextEvent(200);
    if (ev.ok() && ev->type == CmEvent::Type::kConnectRequest) {
      const char msg[] = "version 9 not supported";
      ev->request->Reject({reinterpret_cast<const uint8_t*>(msg), sizeof(msg)});
      rejected = true;
    }
  }
  t.join();
  ASSERT_TRUE(rejected);
  ASSERT_FALSE(cr.ok());
  EXPECT_EQ(cr.status().code(), Status::Code::kUnavailable) << cr.status().ToString();
  ASSERT_GE(reason.size(), 10u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(reason.data())), "version 9 not supported");
}

TEST_P(TransportTest, ClientDisconnectIsSeenByTheListener) {
  Pair& p = Connect();
  ASSERT_TRUE(p.client && p.server);
  Connection* server_side = p.server.get();
  p.client->Disconnect();
  p.client.reset();
  bool seen = false;
  for (int i = 0; i < 50 && !seen; ++i) {
    auto ev = listener_->NextEvent(100);
    if (ev.ok() && ev->type == CmEvent::Type::kDisconnected) {
      EXPECT_EQ(ev->connection, server_side);
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
  EXPECT_TRUE(server_side->broken());
}

TEST_P(TransportTest, ConnectToAPortNobodyListensOnFails) {
  ConnectOptions o;
  o.host = env_.addr;
  o.port = static_cast<uint16_t>(listener_->port() == 65000 ? 65001 : 65000);
  o.timeout_ms = 3000;
  auto c = env_.client->Connect(o, QpConfig{}, {}, nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().code() == Status::Code::kUnavailable || c.status().IsTimeout())
      << c.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Loopback, TransportTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, TransportTest, ::testing::Values(Kind::kVerbs), KindName);
INSTANTIATE_TEST_SUITE_P(Loopback, RuntimeWindowTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, RuntimeWindowTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
