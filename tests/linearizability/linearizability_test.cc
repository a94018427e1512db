// Records a history over the real client and server (concurrent clients,
// GET/PUT/DELETE on a few keys, values rewritten over and over, small log
// segments so the cleaner relocates and recycles all the time) and checks
// that it is linearizable. Loopback runs natively and under TSan; verbs runs
// on an RDMA device (tools/with-rdma).
//
// On a violation the whole history and a minimized failing history per key
// are written to the working directory (lincheck re-checks them).
//
// KVRDMA_LIN_OPS (per client), KVRDMA_LIN_SECONDS and KVRDMA_LIN_CLIENTS
// scale it; KVRDMA_LIN_SEED fixes the workload; KVRDMA_LIN_SAVE=PREFIX saves
// every history as PREFIX-<test>.history.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/e2e/e2e_util.h"
#include "tests/linearizability/checker.h"
#include "tests/linearizability/recorder.h"

namespace kvrdma::testing {
namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif
#else
constexpr bool kTsan = false;
#endif

struct LinParam {
  Kind kind;
  PutMode put_mode;
  uint32_t depth;       // operations in flight per client
  bool faults = false;  // loopback only: break a connection every so often, tear READs
};

std::string LinName(const ::testing::TestParamInfo<LinParam>& i) {
  return std::string(i.param.kind == Kind::kLoopback ? "loopback" : "verbs") +
         (i.param.put_mode == PutMode::kSend ? "_send" : "_writeimm") + "_depth" + std::to_string(i.param.depth) +
         (i.param.faults ? "_faults" : "");
}

void PrintTo(const LinParam& p, std::ostream* os) { *os << LinName({p, 0}); }

// Negative control on real data: one GET of the recorded history moved to
// after a PUT that began after the GET's value was written and completed
// since: a stale read the checker must reject (and minimize to a few ops).
bool RejectsAPlantedStaleRead(lin::History h) {
  std::map<std::string, const lin::HistoryOp*> put_of;  // value -> its PUT
  for (const lin::HistoryOp& op : h) {
    if (op.type == lin::OpType::kPut && op.outcome == lin::Outcome::kOk) put_of[op.value] = &op;
  }
  for (lin::HistoryOp& g : h) {
    if (g.type != lin::OpType::kGet || g.outcome != lin::Outcome::kOk || !put_of.count(g.value)) continue;
    const lin::HistoryOp* w = put_of[g.value];
    for (const lin::HistoryOp& p : h) {
      if (p.key != g.key || p.type != lin::OpType::kPut || p.outcome != lin::Outcome::kOk ||
          p.invoke_ns <= w->complete_ns) {
        continue;
      }
      std::string value = g.value;
      std::string key = g.key;
      g.invoke_ns = p.complete_ns + 1;
      g.complete_ns = p.complete_ns + 2;
      lin::History mine;
      for (const lin::HistoryOp& op : h) {
        if (op.key == key) mine.push_back(op);
      }
      lin::KeyResult r = lin::CheckKey(mine);
      std::printf("[lin] negative control (a GET of '%s' moved after a later PUT completed): %s in %zu ops\n",
                  value.substr(0, value.find(':')).c_str(), std::string(lin::VerdictName(r.verdict)).c_str(), r.ops);
      if (r.verdict != lin::Verdict::kViolation) return false;
      lin::History m = lin::MinimizeViolation(mine, 10.0);
      uint64_t t0 = m.empty() ? 0 : m.front().invoke_ns;
      for (const lin::HistoryOp& op : m) t0 = std::min(t0, op.invoke_ns);
      std::printf("[lin]   minimized to %zu ops:\n", m.size());
      for (const lin::HistoryOp& op : m) std::printf("[lin]     %s\n", lin::DescribeOp(op, t0).c_str());
      return true;
    }
  }
  std::printf("[lin] negative control: no GET to move\n");
  return false;
}

uint64_t EnvOr(const char* name, uint64_t def) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : def;
}

class LinearizabilityTest : public ::testing::TestWithParam<LinParam> {};

void PrintStoreStats(const char* when, const StoreStats& s) {
  std::printf("[lin] store %s: cleaner_runs=%llu segments_cleaned=%llu relocations=%llu segments_free=%llu "
              "items=%llu tombstones=%llu\n",
              when, static_cast<unsigned long long>(s.cleaner_runs),
              static_cast<unsigned long long>(s.segments_cleaned), static_cast<unsigned long long>(s.relocations),
              static_cast<unsigned long long>(s.segments_free), static_cast<unsigned long long>(s.items),
              static_cast<unsigned long long>(s.tombstones));
}

TEST_P(LinearizabilityTest, ConcurrentClientsWhileTheCleanerRuns) {
  const LinParam p = GetParam();
  TransportEnv env = TransportEnv::Make(p.kind);
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;

  server::ServerConfig cfg = TestServer::Defaults();
  cfg.max_value_bytes = 2048;  // entries stay far below a segment
  cfg.grace_period_ms = 40;    // recycle retired segments soon
  TestServer server(env, cfg, [](StoreConfig& sc) {
    sc.segment_bytes = 32 << 10;  // 32 KiB: a few dozen values each
    sc.log_bytes = 4 << 20;       // 128 segments
  });

  // Faults (loopback): every kFailEvery-th work request (client's or
  // server's, fabric-wide) fails, which breaks that connection: the
  // operations in flight end with ConnectionLost, some of them applied (the
  // server's reply was lost) and some not (the request was lost), and the
  // client reconnects. READs are copied in 64-byte chunks, so concurrent
  // updates can tear them.
  constexpr uint64_t kFailEvery = 1500;
  if (p.faults) {
    LoopbackFaults f;
    auto wrs = std::make_shared<std::atomic<uint64_t>>(0);  // the fabric may outlive this scope
    f.fail_wr = [wrs](const SendWr&) {
      return ++*wrs % kFailEvery == 0 ? WcStatus::kRetryExceeded : WcStatus::kSuccess;
    };
    f.read_chunk_bytes = 64;
    env.fabric->SetFaults(std::move(f));
  }

  lin::RecorderOptions o;
  o.clients = static_cast<uint32_t>(EnvOr("KVRDMA_LIN_CLIENTS", 4));
  o.keys = 6;
  o.depth = p.depth;
  o.max_value_bytes = 1500;
  o.ops_per_client = EnvOr("KVRDMA_LIN_OPS", kTsan ? 2500 : 4000);
  o.duration = std::chrono::milliseconds(1000 * EnvOr("KVRDMA_LIN_SECONDS", p.kind == Kind::kVerbs ? 8 : 10));
  o.seed = EnvOr("KVRDMA_LIN_SEED", static_cast<uint64_t>(::getpid()));
  std::printf("[lin] %s: %u clients x depth %u, %u keys, <= %llu ops/client or %lld s, values <= %u B, "
              "segments 32 KiB, grace 40 ms, seed %llu\n",
              LinName({p, 0}).c_str(), o.clients, o.depth, o.keys, static_cast<unsigned long long>(o.ops_per_client),
              static_cast<long long>(o.duration.count() / 1000), o.max_value_bytes,
              static_cast<unsigned long long>(o.seed));

  Store& store = server.backend().store();
  PrintStoreStats("before", store.Stats());
  lin::RecordStats rs;
  auto h = lin::RecordHistory(o, [&] { return server.Connect(p.put_mode); }, &rs);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  StoreStats after = store.Stats();
  PrintStoreStats("after", after);
  std::printf("[lin] recorded %llu operations in %.2f s (%.0f ops/s), %llu reconnects\n",
              static_cast<unsigned long long>(rs.ops), rs.seconds, static_cast<double>(rs.ops) / rs.seconds,
              static_cast<unsigned long long>(rs.reconnects));
  for (const auto& [k, v] : rs.by_type_outcome) std::printf("[lin]   %-16s %llu\n", k.c_str(), static_cast<unsigned long long>(v));
  for (const auto& [k, v] : rs.errors) std::printf("[lin]   error %-10s %llu\n", k.c_str(), static_cast<unsigned long long>(v));

  if (const char* save = std::getenv("KVRDMA_LIN_SAVE"); save != nullptr && *save != '\0') {
    std::ofstream out(std::string(save) + "-" + LinName({p, 0}) + ".history");
    lin::WriteHistory(out, *h);
  }
  lin::CheckResult r = lin::CheckHistory(*h);
  std::printf("[lin] checked %zu operations on %zu keys: %s, checker time %.3f s\n", r.ops, r.keys.size(),
              std::string(lin::VerdictName(r.verdict)).c_str(), r.seconds);
  for (const lin::KeyResult& k : r.keys) {
    std::printf("[lin]   %s: %zu ops (%zu unknown outcome), %s, %llu states, %llu backtracks\n", k.key.c_str(), k.ops,
                k.unknown, std::string(lin::VerdictName(k.verdict)).c_str(),
                static_cast<unsigned long long>(k.states), static_cast<unsigned long long>(k.backtracks));
  }

  if (r.verdict == lin::Verdict::kViolation) {
    std::string base = "linearizability-" + LinName({p, 0}) + "-" + std::to_string(o.seed);
    std::ofstream(base + ".history") << [&] {
      std::ostringstream s;
      lin::WriteHistory(s, *h);
      return s.str();
    }();
    for (const lin::KeyResult& k : r.keys) {
      if (k.verdict != lin::Verdict::kViolation) continue;
      std::printf("[lin] VIOLATION on %s: %s\n", k.key.c_str(), k.explanation.c_str());
      lin::History mine;
      for (const lin::HistoryOp& op : *h) {
        if (op.key == k.key) mine.push_back(op);
      }
      lin::History m = lin::MinimizeViolation(mine, 20.0);
      std::ofstream out(base + "-" + k.key + ".min.history");
      lin::WriteHistory(out, m);
      uint64_t t0 = m.empty() ? 0 : m.front().invoke_ns;
      for (const lin::HistoryOp& op : m) t0 = std::min(t0, op.invoke_ns);
      std::printf("[lin] minimal failing history (%zu ops, %s-%s.min.history):\n", m.size(), base.c_str(),
                  k.key.c_str());
      for (const lin::HistoryOp& op : m) std::printf("[lin]     %s\n", lin::DescribeOp(op, t0).c_str());
    }
    std::printf("[lin] full history: %s.history\n", base.c_str());
  }
  EXPECT_EQ(r.verdict, lin::Verdict::kLinearizable);
  if (r.verdict == lin::Verdict::kLinearizable) {
    EXPECT_TRUE(RejectsAPlantedStaleRead(*h));
  }
  // The run must have exercised what it claims to.
  EXPECT_GT(rs.by_type_outcome["GET OK"], 0u);
  EXPECT_GT(rs.by_type_outcome["GET NOTFOUND"] + rs.by_type_outcome["DELETE NOTFOUND"], 0u);
  EXPECT_GT(after.segments_cleaned, 0u) << "the cleaner never ran";
  if (p.faults) {
    EXPECT_GT(rs.reconnects, 0u) << "no connection broke";
  }
  // Errors other than a lost answer would mean a misconfigured run.
  for (const auto& [k, v] : rs.errors) {
    EXPECT_TRUE(k == "Timeout" || k == "ConnectionLost") << k << " x" << v;
  }
}

INSTANTIATE_TEST_SUITE_P(Loopback, LinearizabilityTest,
                         ::testing::Values(LinParam{Kind::kLoopback, PutMode::kSend, 1},
                                           LinParam{Kind::kLoopback, PutMode::kWriteImm, 4},
                                           LinParam{Kind::kLoopback, PutMode::kWriteImm, 2, true}),
                         LinName);
INSTANTIATE_TEST_SUITE_P(Verbs, LinearizabilityTest,
                         ::testing::Values(LinParam{Kind::kVerbs, PutMode::kSend, 1},
                                           LinParam{Kind::kVerbs, PutMode::kWriteImm, 4}),
                         LinName);

}  // namespace
}  // namespace kvrdma::testing
