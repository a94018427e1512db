// Several writes per message (protocol 10): PUT/DELETEs submitted together
// travel in shared messages, applied in order, and each operation gets its
// own result: OK with its version, VersionMismatch with the current one,
// Locked, NotFound, as it would alone.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>

#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

using std::chrono::milliseconds;

class BatchWriteTest : public E2eServerTest {};

struct Case {
  Op op;
  std::string key, value;
  Status::Code want = Status::Code::kOk;
  int same_version_as = -1;  // VersionMismatch: the version case i wrote
};

// Submits every case at once (all fit max_in_flight) and waits for all.
void RunTogether(Client& c, std::deque<Case>& cases) {
  std::vector<Op*> ops;
  for (Case& k : cases) ops.push_back(&k.op);
  ASSERT_EQ(c.Submit(ops), ops.size());
  size_t done = 0;
  std::vector<Op*> out(64);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (done < ops.size() && std::chrono::steady_clock::now() < deadline) done += c.Wait(out, 100);
  ASSERT_EQ(done, ops.size());
}

TEST_P(BatchWriteTest, WritesInFlightTogetherShareMessagesAndKeepTheirOwnResults) {
  auto c = NewClient();
  auto other = NewClient();
  ASSERT_TRUE(c && other);
  ASSERT_TRUE(c->Put("cond", "v0").ok());
  const uint64_t v0 = c->last_version();
  ASSERT_TRUE(c->Put("doomed", "x").ok());
  ASSERT_TRUE(other->Lock("locked", milliseconds(20000)).ok());

  std::deque<Case> cases;
  auto add = [&](Op::Type t, std::string key, std::string value, Status::Code want, uint64_t if_version = kAnyVersion,
                 int same_version_as = -1) {
    Case& k = cases.emplace_back();
    k.key = std::move(key);
    k.value = std::move(value);
    k.want = want;
    k.same_version_as = same_version_as;
    k.op.type = t;
    k.op.key = k.key;
    k.op.value = k.value;
    k.op.if_version = if_version;
  };
  using enum Status::Code;
  for (int i = 0; i < 5; ++i) add(Op::Type::kPut, "k" + std::to_string(i), "value " + std::to_string(i), kOk);
  const int cond_ok = static_cast<int>(cases.size());
  add(Op::Type::kPut, "cond", "v1", kOk, v0);                        // commits at v0 ...
  add(Op::Type::kPut, "cond", "v2", kVersionMismatch, v0, cond_ok);  // ... so v0 is gone, mid-message
  add(Op::Type::kPut, "locked", "no", kLocked);
  add(Op::Type::kPut, "k5", "after the refusals", kOk);
  add(Op::Type::kDelete, "locked", "", kLocked);
  add(Op::Type::kDelete, "never written", "", kNotFound);
  const int created = static_cast<int>(cases.size());
  add(Op::Type::kPut, "new", "first", kOk, kIfAbsent);
  add(Op::Type::kPut, "new", "second", kVersionMismatch, kIfAbsent, created);
  add(Op::Type::kDelete, "doomed", "", kOk);
  add(Op::Type::kDelete, "cond", "", kVersionMismatch, v0, cond_ok);
  for (int i = 6; i < 30; ++i) add(Op::Type::kPut, "k" + std::to_string(i), std::string(i * 13, 'a' + i % 26), kOk);
  add(Op::Type::kDelete, "k0", "", kOk);

  const uint64_t messages_before = c->stats().messages;
  const uint64_t batched_before = StatOf(*c, "batched_requests");
  RunTogether(*c, cases);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    EXPECT_EQ(k.op.status.code(), k.want) << "case " << i << " (" << k.key << "): " << k.op.status.ToString();
    if (k.want == kOk) {
      EXPECT_GT(k.op.version, v0) << "case " << i;
    }
    if (k.same_version_as >= 0) {
      EXPECT_EQ(k.op.version, cases[k.same_version_as].op.version) << "case " << i << ": the current version";
    }
    if (k.want == kLocked) {
      EXPECT_NE(k.op.status.message().find("locked"), std::string::npos) << k.op.status.ToString();
    }
  }
  // In order: each write's version is above the one before it.
  uint64_t last = 0;
  for (const Case& k : cases) {
    if (k.want != kOk) continue;
    EXPECT_GT(k.op.version, last);
    last = k.op.version;
  }
  // They shared messages (the credits alone would have allowed 8 of 1).
  const uint64_t messages = c->stats().messages - messages_before;
  EXPECT_LT(messages, cases.size() / 2) << messages << " messages for " << cases.size() << " writes";
  EXPECT_GE(StatOf(*c, "batched_requests") - batched_before, cases.size() - messages);
  EXPECT_GT(StatOf(*c, "batched_messages"), 0u);

  std::string v;
  ASSERT_TRUE(c->Get("cond", &v).ok());
  EXPECT_EQ(v, "v1");
  ASSERT_TRUE(c->Get("new", &v).ok());
  EXPECT_EQ(v, "first");
  EXPECT_TRUE(c->Get("doomed", &v).IsNotFound());
  EXPECT_TRUE(c->Get("k0", &v).IsNotFound());
  ASSERT_TRUE(c->Get("k5", &v).ok());
  EXPECT_EQ(v, "after the refusals");
  ASSERT_TRUE(c->Get("k29", &v).ok());
  EXPECT_EQ(v, std::string(29 * 13, 'a' + 29 % 26));
  EXPECT_TRUE(c->Get("locked", &v).IsNotFound());
}

// Writes too large to share a message with the next, and a fragmented PUT
// between them, keep the order and results of their neighbours.
TEST_P(BatchWriteTest, LargeAndFragmentedWritesBetweenSharedOnesKeepOrder) {
  auto c = NewClient();
  ASSERT_TRUE(c);
  std::deque<Case> cases;
  auto put = [&](std::string key, std::string value) {
    Case& k = cases.emplace_back();
    k.key = std::move(key);
    k.value = std::move(value);
    k.op.type = Op::Type::kPut;
    k.op.key = k.key;
    k.op.value = k.value;
  };
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 6; ++i) put("s" + std::to_string(i), "small " + std::to_string(round));
    put("big", std::string(3000, 'a' + round));    // fits a message alone, not with others
    put("huge", std::string(10000, 'A' + round));  // fragments
    put("s0", "last " + std::to_string(round));
  }
  RunTogether(*c, cases);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_TRUE(cases[i].op.status.ok()) << i << ": " << cases[i].op.status.ToString();
  std::string v;
  ASSERT_TRUE(c->Get("s0", &v).ok());
  EXPECT_EQ(v, "last 2");
  ASSERT_TRUE(c->Get("s5", &v).ok());
  EXPECT_EQ(v, "small 2");
  ASSERT_TRUE(c->Get("huge", &v).ok());
  EXPECT_EQ(v, std::string(10000, 'C'));
  ASSERT_TRUE(c->Get("big", &v).ok());
  EXPECT_EQ(v, std::string(3000, 'c'));
}

INSTANTIATE_TEST_SUITE_P(Loopback, BatchWriteTest,
                         ::testing::Values(E2eParam{Kind::kLoopback, PutMode::kSend},
                                           E2eParam{Kind::kLoopback, PutMode::kWriteImm}),
                         E2eName);
INSTANTIATE_TEST_SUITE_P(Verbs, BatchWriteTest,
                         ::testing::Values(E2eParam{Kind::kVerbs, PutMode::kSend},
                                           E2eParam{Kind::kVerbs, PutMode::kWriteImm}),
                         E2eName);

}  // namespace
}  // namespace kvrdma::testing
