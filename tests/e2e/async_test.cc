// The asynchronous API: 10,000 mixed operations submitted as fast as the
// client takes them, every result checked.
#include <gtest/gtest.h>

#include <deque>

#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

class AsyncTest : public ::testing::TestWithParam<E2eParam> {
 protected:
  void SetUp() override {
    env_ = TransportEnv::Make(GetParam().kind);
    if (!env_.skip_reason.empty()) GTEST_SKIP() << env_.skip_reason;
    server_ = std::make_unique<TestServer>(env_);
    auto c = server_->Connect(GetParam().put_mode);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
  }
  TransportEnv env_;
  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> client_;
};

struct Expect {
  Op op;
  std::string key, value, result;
  Status::Code want = Status::Code::kOk;
  std::string want_value;
};

std::string Val(const std::string& key, int gen) { return key + "#" + std::to_string(gen) + std::string(gen * 7 % 300, 'x'); }

TEST_P(AsyncTest, TenThousandMixedOperationsAllCorrect) {
  constexpr int kExisting = 3000, kDoomed = 2000, kNew = 3000, kAbsent = 2000;
  // Setup through the async API too (PUTs only).
  std::deque<Expect> ops;  // deque: Op addresses stay valid
  auto add = [&](Op::Type t, std::string key, std::string value, Status::Code want, std::string want_value) {
    Expect& e = ops.emplace_back();
    e.key = std::move(key);
    e.value = std::move(value);
    e.want = want;
    e.want_value = std::move(want_value);
    e.op.type = t;
    e.op.key = e.key;
    e.op.value = e.value;
    e.op.result = &e.result;
  };
  auto run_all = [&](size_t from) {
    size_t next = from, completed = 0;
    std::vector<Op*> done(64);
    while (completed < ops.size() - from) {
      while (next < ops.size()) {
        Op* o = &ops[next].op;
        if (client_->Submit({&o, 1}) == 0) break;
        ++next;
      }
      completed += client_->Wait(done, 10000);
      if (client_->in_flight() == 0 && next == ops.size() && completed < ops.size() - from) break;
    }
    return completed;
  };
  for (int i = 0; i < kExisting; ++i) add(Op::Type::kPut, "e" + std::to_string(i), Val("e" + std::to_string(i), 1), Status::Code::kOk, "");
  for (int i = 0; i < kDoomed; ++i) add(Op::Type::kPut, "d" + std::to_string(i), "doomed", Status::Code::kOk, "");
  ASSERT_EQ(run_all(0), ops.size());
  for (auto& e : ops) ASSERT_TRUE(e.op.status.ok()) << e.key << ": " << e.op.status.ToString();
  size_t base = ops.size();

  // The 10,000: GETs of existing keys, DELETEs, PUTs of new keys, GETs of
  // absent keys, interleaved; every key appears once, so each result is known.
  for (int i = 0; i < 10000; ++i) {
    int kind = i % 5;
    int n = i / 5;
    if ((kind == 0 || kind == 4) && n * 2 + (kind == 4) < kExisting) {
      std::string k = "e" + std::to_string(n * 2 + (kind == 4));
      add(Op::Type::kGet, k, "", Status::Code::kOk, Val(k, 1));
    } else if (kind == 1 && n < kDoomed) {
      add(Op::Type::kDelete, "d" + std::to_string(n), "", Status::Code::kOk, "");
    } else if (kind == 2 && n < kNew) {
      std::string k = "n" + std::to_string(n);
      add(Op::Type::kPut, k, Val(k, 2), Status::Code::kOk, "");
    } else {
      add(Op::Type::kGet, "absent" + std::to_string(i), "", Status::Code::kNotFound, "");
    }
  }
  ASSERT_EQ(ops.size() - base, 10000u);
  (void)kNew;
  (void)kAbsent;
  uint64_t reads_before = client_->stats().reads;
  ASSERT_EQ(run_all(base), 10000u);
  int wrong = 0;
  for (size_t i = base; i < ops.size(); ++i) {
    const Expect& e = ops[i];
    if (e.op.status.code() != e.want || (e.op.type == Op::Type::kGet && e.want == Status::Code::kOk && e.result != e.want_value)) {
      if (++wrong < 10) ADD_FAILURE() << e.key << ": " << e.op.status.ToString() << " result size " << e.result.size();
    }
  }
  EXPECT_EQ(wrong, 0);
  std::printf("async: 10000 mixed ops, %llu READs, %llu get rounds, %llu retries, %llu messages\n",
              static_cast<unsigned long long>(client_->stats().reads - reads_before),
              static_cast<unsigned long long>(client_->stats().get_rounds),
              static_cast<unsigned long long>(client_->stats().get_retries),
              static_cast<unsigned long long>(client_->stats().messages));
  // Afterwards the synchronous view agrees.
  std::string v;
  EXPECT_TRUE(client_->Get("d0", &v).IsNotFound());
  ASSERT_TRUE(client_->Get("n7", &v).ok());
  EXPECT_EQ(v, Val("n7", 2));
}

TEST_P(AsyncTest, SubmitTakesNoMoreThanMaxInFlight) {
  std::vector<Op> ops(client_->max_in_flight() + 10);
  std::vector<std::string> results(ops.size());
  std::vector<Op*> ptrs;
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i].type = Op::Type::kGet;
    ops[i].key = "nothing";
    ops[i].result = &results[i];
    ptrs.push_back(&ops[i]);
  }
  size_t taken = client_->Submit(ptrs);
  EXPECT_EQ(taken, client_->max_in_flight());
  std::vector<Op*> done(ops.size());
  size_t got = 0;
  while (got < taken) got += client_->Wait({done.data() + got, done.size() - got}, 10000);
  for (size_t i = 0; i < taken; ++i) EXPECT_TRUE(done[i]->status.IsNotFound()) << done[i]->status.ToString();
}

INSTANTIATE_TEST_SUITE_P(Loopback, AsyncTest,
                         ::testing::Values(E2eParam{Kind::kLoopback, PutMode::kSend},
                                           E2eParam{Kind::kLoopback, PutMode::kWriteImm}),
                         E2eName);
INSTANTIATE_TEST_SUITE_P(Verbs, AsyncTest,
                         ::testing::Values(E2eParam{Kind::kVerbs, PutMode::kSend},
                                           E2eParam{Kind::kVerbs, PutMode::kWriteImm}),
                         E2eName);

}  // namespace
}  // namespace kvrdma::testing
