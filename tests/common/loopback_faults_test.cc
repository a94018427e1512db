// Loopback-only behaviour: the fault and torn-read hooks that the store and
// client tests rely on, and asynchronous delivery.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>

#include "tests/common/transport_test_util.h"

namespace kvrdma::testing {
namespace {

struct LoopbackFixture : ::testing::Test {
  void SetUp() override {
    env = TransportEnv::Make(Kind::kLoopback);
    auto l = env.server->Listen("", 0, 4);
    ASSERT_TRUE(l.ok());
    listener = std::move(l).value();
    remote.assign(4096, 0xab);
    local.assign(4096, 0);
    remote_mr = env.server->RegisterMemory(remote.data(), remote.size(), kAccessRemoteRead).value().release();
    local_mr = env.client->RegisterMemory(local.data(), local.size(), kAccessLocalWrite).value().release();
    pair = ConnectPair(env, *listener, QpConfig{});
    ASSERT_TRUE(pair.client && pair.server);
  }
  void TearDown() override {
    pair = Pair{};
    delete remote_mr;
    delete local_mr;
  }
  SendWr Read(uint32_t len) {
    SendWr w;
    w.wr_id = 1;
    w.opcode = WrOpcode::kRead;
    w.local = local_mr->Slice(0, len);
    w.remote_addr = remote_mr->base();
    w.rkey = remote_mr->rkey();
    return w;
  }
  TransportEnv env;
  std::unique_ptr<Listener> listener;
  std::vector<uint8_t> remote, local;
  MemoryRegion* remote_mr = nullptr;
  MemoryRegion* local_mr = nullptr;
  Pair pair;
};

TEST_F(LoopbackFixture, TornReadHookSeesTheReadInChunks) {
  LoopbackFaults f;
  f.read_chunk_bytes = 64;
  std::atomic<int> calls{0};
  // Between chunks the "writer" changes the source: the READ returns a mix of
  // old and new bytes, exactly what a torn RDMA READ looks like.
  f.between_read_chunks = [&](const SendWr&, size_t done) {
    calls++;
    if (done == 128) std::memset(remote.data(), 0xcd, remote.size());
  };
  env.fabric->SetFaults(f);
  SendWr w = Read(512);
  ASSERT_TRUE(pair.client->PostSend({&w, 1}).ok());
  auto c = WaitForSend(*pair.client, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(calls.load(), 7);  // 8 chunks, 7 gaps
  EXPECT_EQ(local[0], 0xab);
  EXPECT_EQ(local[127], 0xab);
  EXPECT_EQ(local[128], 0xcd);
  EXPECT_EQ(local[511], 0xcd);
}

TEST_F(LoopbackFixture, InjectedWrFailureBreaksTheQpLikeVerbs) {
  LoopbackFaults f;
  f.fail_wr = [](const SendWr& w) { return w.wr_id == 2 ? WcStatus::kRetryExceeded : WcStatus::kSuccess; };
  env.fabric->SetFaults(f);
  SendWr w[3] = {Read(8), Read(8), Read(8)};
  w[0].wr_id = 1;
  w[1].wr_id = 2;
  w[2].wr_id = 3;
  ASSERT_TRUE(pair.client->PostSend(w).ok());
  auto c = WaitForSend(*pair.client, 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[1].status, WcStatus::kRetryExceeded);
  EXPECT_EQ(c[2].status, WcStatus::kFlushed);
  EXPECT_TRUE(pair.client->broken());
  EXPECT_TRUE(CompletionStatus(c[1]).IsConnectionLost());
}

TEST_F(LoopbackFixture, FailTheNthPost) {
  LoopbackFaults f;
  f.fail_post_number = 2;
  env.fabric->SetFaults(f);
  SendWr w = Read(8);
  EXPECT_TRUE(pair.client->PostSend({&w, 1}).ok());
  EXPECT_EQ(pair.client->PostSend({&w, 1}).code(), Status::Code::kIOError);
  EXPECT_TRUE(pair.client->PostSend({&w, 1}).ok());
  EXPECT_EQ(WaitForSend(*pair.client, 2).size(), 2u);
}

TEST_F(LoopbackFixture, InjectedQpErrorBreaksBothEndsAndTellsTheListener) {
  env.fabric->InjectQpError(*pair.client);
  EXPECT_TRUE(pair.client->broken());
  EXPECT_TRUE(pair.server->broken());
  bool seen = false;
  for (int i = 0; i < 10 && !seen; ++i) {
    auto ev = listener->NextEvent(100);
    seen = ev.ok() && ev->type == CmEvent::Type::kDisconnected && ev->connection == pair.server.get();
  }
  EXPECT_TRUE(seen);
}

TEST_F(LoopbackFixture, CompletionsArriveAsynchronously) {
  LoopbackFaults f;
  f.wr_delay = std::chrono::milliseconds(30);
  env.fabric->SetFaults(f);
  SendWr w = Read(8);
  ASSERT_TRUE(pair.client->PostSend({&w, 1}).ok());
  Completion c[1];
  EXPECT_EQ(pair.client->send_cq().Poll(c), 0);  // not yet: the "NIC" is busy
  EXPECT_EQ(WaitForSend(*pair.client, 1).size(), 1u);
  EXPECT_EQ(env.fabric->stats().reads, 1u);
}

TEST_F(LoopbackFixture, LocalBufferOutsideRegisteredMemoryIsLocalProtection) {
  SendWr w = Read(8);
  w.local.lkey ^= 0x77;
  ASSERT_TRUE(pair.client->PostSend({&w, 1}).ok());
  auto c = WaitForSend(*pair.client, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kLocalProtectionError);
}

}  // namespace
}  // namespace kvrdma::testing
