// Conditional writes (protocol 9): a PUT/DELETE that commits only if the
// key's current version is the one it names (kIfAbsent: no value), checked
// by the server at the commit point under the key's window lock, answered
// with VersionMismatch and the current version otherwise. Sync and
// pipelined, whole and fragmented.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <thread>

#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

class ConditionalWriteTest : public E2eServerTest {};

TEST_P(ConditionalWriteTest, PutAndDeleteCommitOnlyAtTheVersionTheyName) {
  auto c = NewClient();
  ASSERT_TRUE(c->Put("k", "one", kIfAbsent).ok());
  const uint64_t v1 = c->last_version();
  Status st = c->Put("k", "two", kIfAbsent);  // it has a value now
  EXPECT_TRUE(st.IsVersionMismatch()) << st.ToString();
  EXPECT_EQ(c->last_version(), v1);
  EXPECT_TRUE(c->Put("k", "two", v1 + 1000).IsVersionMismatch());
  EXPECT_EQ(c->last_version(), v1);
  ASSERT_TRUE(c->Put("k", "two", v1).ok());
  const uint64_t v2 = c->last_version();
  EXPECT_GT(v2, v1);
  EXPECT_TRUE(c->Put("k", "three", v1).IsVersionMismatch());  // v1 is gone
  EXPECT_EQ(c->last_version(), v2);
  std::string v;
  ASSERT_TRUE(c->Get("k", &v).ok());
  EXPECT_EQ(v, "two");
  // DELETE: at its version only; never "only if absent".
  EXPECT_EQ(c->Delete("k", kIfAbsent).code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(c->Delete("k", v1).IsVersionMismatch());
  ASSERT_TRUE(c->Delete("k", v2).ok());
  // A tombstone is no value: current version 0, and "if absent" commits.
  st = c->Delete("k", v2);
  EXPECT_TRUE(st.IsVersionMismatch()) << st.ToString();  // not NotFound: the condition decides first
  EXPECT_EQ(c->last_version(), 0u);
  EXPECT_TRUE(c->Put("k", "four", v2).IsVersionMismatch());
  EXPECT_EQ(c->last_version(), 0u);
  ASSERT_TRUE(c->Put("k", "four", kIfAbsent).ok());
  EXPECT_TRUE(c->Delete("never written", 5).IsVersionMismatch());
  EXPECT_EQ(c->last_version(), 0u);
  // Unconditional writes are unchanged.
  ASSERT_TRUE(c->Put("k", "five").ok());
  EXPECT_TRUE(c->Delete("never written").IsNotFound());
}

// Clients race to create a key with "only if absent": exactly one wins, and
// every loser learns the winner's version.
TEST_P(ConditionalWriteTest, OfClientsRacingToCreateAKeyExactlyOneSucceeds) {
  constexpr int kClients = 6, kKeys = 30;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(NewClient());
  std::vector<std::array<Status::Code, kClients>> codes(kKeys);
  std::vector<std::array<uint64_t, kClients>> versions(kKeys);
  std::atomic<int> ready{0};
  std::vector<std::thread> t;
  for (int i = 0; i < kClients; ++i) {
    t.emplace_back([&, i] {
      ready++;
      while (ready.load() < kClients) std::this_thread::yield();
      for (int k = 0; k < kKeys; ++k) {
        Status st = clients[i]->Put("new" + std::to_string(k), "client " + std::to_string(i), kIfAbsent);
        codes[k][i] = st.code();
        versions[k][i] = clients[i]->last_version();
      }
    });
  }
  for (auto& th : t) th.join();
  for (int k = 0; k < kKeys; ++k) {
    int winner = -1, winners = 0;
    for (int i = 0; i < kClients; ++i) {
      if (codes[k][i] == Status::Code::kOk) {
        winner = i;
        winners++;
      } else {
        EXPECT_EQ(codes[k][i], Status::Code::kVersionMismatch) << "key " << k << " client " << i;
      }
    }
    ASSERT_EQ(winners, 1) << "key " << k;
    for (int i = 0; i < kClients; ++i) EXPECT_EQ(versions[k][i], versions[k][winner]) << "key " << k;
    std::string v;
    ASSERT_TRUE(clients[0]->Get("new" + std::to_string(k), &v).ok());
    EXPECT_EQ(v, "client " + std::to_string(winner));
  }
}

// Read-modify-write without locks: learn the version, read, write at that
// version; a write in between makes the last step fail, and the loop retries.
// No increment is lost (the lock-free twin of EightClientsIncrementACounter).
TEST_P(ConditionalWriteTest, ClientsIncrementACounterWithConditionalWritesAndLoseNoIncrement) {
  constexpr int kClients = 4, kRounds = 100;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(NewClient());
  std::atomic<int> errors{0}, conflicts{0};
  std::vector<std::thread> t;
  for (int i = 0; i < kClients; ++i) {
    t.emplace_back([&, i] {
      Client& c = *clients[i];
      uint64_t version = kIfAbsent;
      std::string cur;
      for (int r = 0; r < kRounds; ++r) {
        for (;;) {
          const long n = cur.empty() ? 0 : std::stol(cur);
          Status st = c.Put("counter", std::to_string(n + 1), version);
          if (st.ok()) {
            version = c.last_version();
            cur = std::to_string(n + 1);
            break;
          }
          if (!st.IsVersionMismatch()) {
            errors++;
            break;
          }
          conflicts++;
          version = c.last_version();  // first the version, then the value
          Status g = c.Get("counter", &cur);
          if (g.IsNotFound()) {
            cur.clear();
          } else if (!g.ok()) {
            errors++;
          }
        }
      }
    });
  }
  for (auto& th : t) th.join();
  std::string v;
  ASSERT_TRUE(clients[0]->Get("counter", &v).ok());
  std::printf("conditional counter: %d clients x %d rounds -> %s, %d conflicts retried, %d errors\n", kClients,
              kRounds, v.c_str(), conflicts.load(), errors.load());
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(v, std::to_string(kClients * kRounds));
}

// The pipelined API: conditions travel per Op, failures report the current
// version in Op::version; a value larger than a message buffer (a
// fragmented PUT) carries its condition to the commit point too.
TEST_P(ConditionalWriteTest, PipelinedConditionalWritesWholeAndFragmented) {
  auto c = NewClient();
  const std::string big(std::min<uint32_t>(c->max_value_bytes(), 100000), 'B');
  ASSERT_TRUE(c->Put("a", "a0").ok());
  const uint64_t va = c->last_version();
  ASSERT_TRUE(c->Put("b", big).ok());
  const uint64_t vb = c->last_version();
  struct Case {
    Op::Type type;
    std::string key, value;
    uint64_t if_version;
    Status::Code want;
    uint64_t want_version;  // on VersionMismatch; 0 = any on OK
  };
  std::deque<Case> cases = {
      {Op::Type::kPut, "a", "a1", va, Status::Code::kOk, 0},
      {Op::Type::kPut, "b", big + "x", va, Status::Code::kVersionMismatch, vb},       // fragmented, refused
      {Op::Type::kPut, "c", big, kIfAbsent, Status::Code::kOk, 0},                    // fragmented, commits
      {Op::Type::kPut, "d", "d", vb, Status::Code::kVersionMismatch, 0},              // absent: current 0
      {Op::Type::kDelete, "b", "", vb + 999999, Status::Code::kVersionMismatch, vb},
      {Op::Type::kDelete, "e", "", kIfAbsent, Status::Code::kInvalidArgument, 0},
  };
  std::deque<Op> ops;
  std::vector<Op*> ptrs;
  for (Case& k : cases) {
    Op& o = ops.emplace_back();
    o.type = k.type;
    o.key = k.key;
    o.value = k.value;
    o.if_version = k.if_version;
    ptrs.push_back(&o);
  }
  ASSERT_EQ(c->Submit(ptrs), ptrs.size());
  size_t done = 0;
  Op* out[8];
  for (int i = 0; i < 1000 && done < ptrs.size(); ++i) done += c->Wait(out, 100);
  ASSERT_EQ(done, ptrs.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(ops[i].status.code(), cases[i].want) << "case " << i << ": " << ops[i].status.ToString();
    if (cases[i].want == Status::Code::kVersionMismatch) {
      EXPECT_EQ(ops[i].version, cases[i].want_version) << i;
    }
    if (cases[i].want == Status::Code::kOk) {
      EXPECT_GT(ops[i].version, vb) << i;
    }
  }
  std::string v;
  ASSERT_TRUE(c->Get("b", &v).ok());
  EXPECT_EQ(v, big);  // the refused fragmented PUT changed nothing
  ASSERT_TRUE(c->Get("c", &v).ok());
  EXPECT_EQ(v, big);
  ASSERT_TRUE(c->Get("a", &v).ok());
  EXPECT_EQ(v, "a1");
  EXPECT_TRUE(c->Get("d", &v).IsNotFound());
}

INSTANTIATE_TEST_SUITE_P(Loopback, ConditionalWriteTest,
                         ::testing::Values(E2eParam{Kind::kLoopback, PutMode::kSend},
                                           E2eParam{Kind::kLoopback, PutMode::kWriteImm}),
                         E2eName);
INSTANTIATE_TEST_SUITE_P(Verbs, ConditionalWriteTest,
                         ::testing::Values(E2eParam{Kind::kVerbs, PutMode::kSend},
                                           E2eParam{Kind::kVerbs, PutMode::kWriteImm}),
                         E2eName);

}  // namespace
}  // namespace kvrdma::testing
