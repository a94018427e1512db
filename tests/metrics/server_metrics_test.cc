// What GET /metrics says about a running server (loopback transport, real
// Server + Store): every family has HELP and TYPE, names follow the
// Prometheus conventions, and the counters move with what clients do.
#include "server/metrics/server_metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "server/metrics/exposition.h"
#include "server/metrics/http_endpoint.h"
#include "tests/e2e/e2e_util.h"
#include "tests/metrics/http_client.h"

namespace kvrdma::testing {
namespace {

using server::metrics::Exposition;
using server::metrics::MetricsSources;
using server::metrics::RenderMetrics;

// Parsed exposition: sample "name{labels}" -> value; family -> type.
struct Parsed {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  std::set<std::string> helps;
  std::vector<std::string> problems;
  double at(const std::string& k) const {
    auto it = samples.find(k);
    return it == samples.end() ? -1 : it->second;
  }
};

// A strict reading of the format's rules this test relies on.
Parsed Parse(const std::string& text) {
  Parsed p;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      p.helps.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::string rest = line.substr(7);
      p.types[rest.substr(0, rest.find(' '))] = rest.substr(rest.find(' ') + 1);
      continue;
    }
    // name[{labels}] value
    const size_t sp = line.rfind(' ');
    const size_t brace = line.find('{');
    const size_t name_end = std::min(sp, brace);
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() ||
        !Exposition::ValidName(line.substr(0, name_end)) ||
        (brace != std::string::npos && (brace > sp || line[sp - 1] != '}'))) {
      p.problems.push_back("unparsable: " + line);
      continue;
    }
    const std::string name = line.substr(0, name_end);
    const std::string labels = brace == std::string::npos ? "" : line.substr(brace, sp - brace);
    const std::string value = line.substr(sp + 1);
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      std::string s = suffix;
      if (family.size() > s.size() && family.compare(family.size() - s.size(), s.size(), s) == 0 &&
          p.types.count(family.substr(0, family.size() - s.size())) != 0) {
        family = family.substr(0, family.size() - s.size());
      }
    }
    if (p.types.count(family) == 0) p.problems.push_back("no TYPE before " + name);
    if (p.helps.count(family) == 0) p.problems.push_back("no HELP before " + name);
    if (p.types[family] == "counter" && name.size() > 6 && name.substr(name.size() - 6) != "_total") {
      p.problems.push_back("counter without _total: " + name);
    }
    if (name.rfind("kvrdma_", 0) != 0) p.problems.push_back("no kvrdma_ prefix: " + name);
    p.samples[name + labels] = std::strtod(value.c_str(), nullptr);
  }
  return p;
}

TEST(Exposition, EscapesAndRefusesBadNames) {
  Exposition e;
  e.Family("a_total", "counter", "line one\nback\\slash");
  e.Sample("a_total", {{"l", "q\"uote\\n\nx"}}, uint64_t{3});
  e.Sample("9bad", {}, uint64_t{1});
  e.Sample("ok", {{"bad-label", "v"}}, uint64_t{1});
  e.Sample("g", {}, 0.25);
  e.Sample("g", {}, 1.0 / 0.0);
  std::string t = e.Take();
  EXPECT_NE(t.find("# HELP a_total line one\\nback\\\\slash\n"), std::string::npos) << t;
  EXPECT_NE(t.find("a_total{l=\"q\\\"uote\\\\n\\nx\"} 3\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("9bad"), std::string::npos) << t;
  EXPECT_EQ(t.find("bad-label"), std::string::npos) << t;
  EXPECT_NE(t.find("g 0.25\n"), std::string::npos) << t;
  EXPECT_NE(t.find("g +Inf\n"), std::string::npos) << t;
  EXPECT_EQ(server::metrics::SnakeCase("InvalidArgument"), "invalid_argument");
  EXPECT_EQ(server::metrics::SnakeCase("IOError"), "io_error");
  EXPECT_EQ(server::metrics::SnakeCase("NotFound"), "not_found");
  EXPECT_EQ(server::metrics::SnakeCase("Ok"), "ok");
}

class ServerMetricsTest : public ::testing::Test {
 protected:
  ServerMetricsTest() : env_(TransportEnv::Make(Kind::kLoopback)) {}
  static std::string Render(TestServer& s) {
    MetricsSources src;
    src.config = &s.config();
    src.counters = &s.server().counters();
    src.store = &s.backend().store();
    src.locks = s.server().lock_view();
    return RenderMetrics(src);
  }
  template <typename F>
  static bool WaitFor(F cond, int timeout_ms = 5000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!cond()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
  TransportEnv env_;
};

TEST_F(ServerMetricsTest, CountersMoveWithRequests) {
  TestServer s(env_);
  Parsed before = Parse(Render(s));
  ASSERT_TRUE(before.problems.empty()) << before.problems.front();
  EXPECT_EQ(before.at("kvrdma_puts_total"), 0);
  EXPECT_EQ(before.at("kvrdma_connections"), 0);

  auto c = s.Connect(PutMode::kSend);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE((*c)->Put("k" + std::to_string(i), std::string(100, 'v')).ok());
  ASSERT_TRUE((*c)->Delete("k0").ok());
  EXPECT_TRUE((*c)->Delete("k0").IsNotFound());
  EXPECT_EQ((*c)->Put("big", std::string(s.config().max_value_bytes + 1, 'x')).code(), Status::Code::kTooLarge);
  ASSERT_TRUE((*c)->Lock("held", std::chrono::milliseconds(60000)).ok());

  Parsed p = Parse(Render(s));
  ASSERT_TRUE(p.problems.empty()) << p.problems.front();
  EXPECT_EQ(p.at("kvrdma_puts_total"), 50);
  EXPECT_EQ(p.at("kvrdma_deletes_total"), 1);
  EXPECT_EQ(p.at("kvrdma_request_failures_total{status=\"not_found\"}"), 1);
  EXPECT_EQ(p.at("kvrdma_connections"), 1);
  EXPECT_EQ(p.at("kvrdma_connections_accepted_total"), 1);
  EXPECT_EQ(p.at("kvrdma_items"), 49);
  EXPECT_EQ(p.at("kvrdma_index_words_used"), 50);  // 49 items + the tombstone
  EXPECT_GT(p.at("kvrdma_log_live_bytes"), 49 * 100);
  EXPECT_EQ(p.types["kvrdma_worker_service_seconds"], "histogram");
  // Every message a worker handled is in the histogram: 50 PUTs, 2 DELETEs
  // (the too-large PUT is refused by the client library before it is sent).
  EXPECT_GE(p.at("kvrdma_worker_service_seconds_count"), 52);
  EXPECT_EQ(p.at("kvrdma_worker_service_seconds_count"), p.at("kvrdma_worker_service_seconds_bucket{le=\"+Inf\"}"));
  EXPECT_GT(p.at("kvrdma_worker_service_seconds_sum"), 0);
  // Buckets are cumulative: each le's count is at least the one below.
  double prev = 0;
  for (uint64_t ns : server::metrics::kServiceBoundsNs) {
    double v = p.at("kvrdma_worker_service_seconds_bucket{le=\"" + Exposition::FormatDouble(ns * 1e-9) + "\"}");
    EXPECT_GE(v, prev) << ns;
    prev = v;
  }
  EXPECT_EQ(p.at("kvrdma_locks{state=\"held\"}"), 1);
  EXPECT_EQ(p.at("kvrdma_lock_words"), s.config().lock_words);
  double segs = 0;
  for (const char* st : {"free", "open", "sealed", "cleaning", "retired"}) {
    segs += p.at("kvrdma_log_segments{state=\"" + std::string(st) + "\"}");
  }
  EXPECT_EQ(segs * (4 << 20), p.at("kvrdma_log_size_bytes"));

  c.value().reset();  // the client disconnects
  ASSERT_TRUE(WaitFor([&] { return Parse(Render(s)).at("kvrdma_connections") == 0; }));
  p = Parse(Render(s));
  EXPECT_EQ(p.at("kvrdma_connections_closed_total{reason=\"client\"}"), 1);
}

// Refused connect requests are counted by reason (issue 25, item 6).
TEST_F(ServerMetricsTest, RefusalsAreCountedByReason) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.max_connections = 2;
  cfg.max_connections_per_peer = 1;
  cfg.auth_token = "t";
  TestServer s(env_, cfg);
  auto connect = [&](const std::shared_ptr<Device>& from, const char* token) {
    ClientOptions o;
    o.host = env_.addr;
    o.port = s.port();
    o.auth_token = token;
    return ClientFactory::ConnectWith(from, o);
  };
  auto other_host = env_.fabric->CreateDevice("loop-client-b");
  auto third_host = env_.fabric->CreateDevice("loop-client-c");
  auto a = connect(env_.client, "t");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_FALSE(connect(env_.client, "t").ok());     // max_per_peer
  EXPECT_FALSE(connect(env_.client, "bad").ok());   // auth (checked first)
  auto b = connect(other_host, "t");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_FALSE(connect(third_host, "t").ok());      // max_connections
  EXPECT_FALSE(connect(third_host, "t").ok());
  Parsed p = Parse(Render(s));
  ASSERT_TRUE(p.problems.empty()) << p.problems.front();
  EXPECT_EQ(p.at("kvrdma_connections_rejected_total{reason=\"max_per_peer\"}"), 1);
  EXPECT_EQ(p.at("kvrdma_connections_rejected_total{reason=\"auth\"}"), 1);
  EXPECT_EQ(p.at("kvrdma_connections_rejected_total{reason=\"max_connections\"}"), 2);
  EXPECT_EQ(p.at("kvrdma_connections_rejected_total{reason=\"flow_control_backoff\"}"), 0);
  EXPECT_EQ(p.at("kvrdma_connections_rejected_total{reason=\"other\"}"), 0);
  EXPECT_EQ(p.at("kvrdma_connections"), 2);
}

// Overwrites in small segments make the cleaner compact and retire them;
// in cache mode a full log evicts. The metrics show both.
TEST_F(ServerMetricsTest, CleanerAndEvictionCountersMove) {
  for (CapacityMode mode : {CapacityMode::kStore, CapacityMode::kCache}) {
    server::ServerConfig cfg = TestServer::Defaults();
    cfg.max_value_bytes = 2048;
    cfg.grace_period_ms = 2;
    TestServer s(env_, cfg, [&](StoreConfig& sc) {
      sc.segment_bytes = 64 << 10;
      sc.log_bytes = 1 << 20;  // 16 segments
      sc.mode = mode;
      sc.grace_period = std::chrono::milliseconds(2);
    });
    auto c = s.Connect(PutMode::kSend);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const int keys = mode == CapacityMode::kStore ? 40 : 2000;  // cache: more than the log holds
    for (int i = 0; i < 3000; ++i) {
      Status st = (*c)->Put("key" + std::to_string(i % keys), std::string(1500, static_cast<char>('a' + i % 26)));
      ASSERT_TRUE(st.ok()) << i << " " << st.ToString();
    }
    ASSERT_TRUE(WaitFor([&] { return Parse(Render(s)).at("kvrdma_cleaner_segments_retired_total") > 0; }, 10000))
        << Render(s);
    Parsed p = Parse(Render(s));
    ASSERT_TRUE(p.problems.empty()) << p.problems.front();
    EXPECT_GT(p.at("kvrdma_cleaner_passes_total"), 0);
    if (mode == CapacityMode::kStore) {
      EXPECT_GT(p.at("kvrdma_cleaner_relocations_total"), 0);
      EXPECT_EQ(p.at("kvrdma_evictions_total"), 0);
      EXPECT_EQ(p.at("kvrdma_items"), keys);
    } else {
      EXPECT_GT(p.at("kvrdma_evictions_total"), 0);
      EXPECT_LT(p.at("kvrdma_items"), keys);
    }
    EXPECT_GT(p.at("kvrdma_log_free_bytes"), 0);
  }
}

// A durable store (--data-dir, --fsync always): the disk families move with
// the writes, and a restart reports what its recovery read and where the
// time went.
TEST_F(ServerMetricsTest, DiskAndRecoveryFamiliesOfADurableStore) {
  char tmpl[] = "/tmp/kvrdma-metrics-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/data";
  auto durable = [&](StoreConfig& sc) {
    sc.data_dir = dir;
    sc.fsync = FsyncMode::kAlways;
  };
  constexpr int kKeys = 60;
  {
    TestServer s(env_, TestServer::Defaults(), durable);
    auto c = s.Connect(PutMode::kSend);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (int i = 0; i < kKeys; ++i) ASSERT_TRUE((*c)->Put("k" + std::to_string(i), std::string(100, 'v')).ok());
    Parsed p = Parse(Render(s));
    ASSERT_TRUE(p.problems.empty()) << p.problems.front();
    EXPECT_GE(p.at("kvrdma_disk_segments"), 1);
    EXPECT_GE(p.at("kvrdma_disk_written_bytes_total"), kKeys * 100);
    // Every PUT was answered after its commit's sync (one PUT in flight).
    EXPECT_GE(p.at("kvrdma_disk_commits_flushed_total"), kKeys);
    EXPECT_GE(p.at("kvrdma_disk_flush_seconds_count"), kKeys);
    EXPECT_EQ(p.at("kvrdma_recovery_writes"), 0);
    EXPECT_GE(p.at("kvrdma_disk_spares_taken_total"), 0);
  }
  TestServer s(env_, TestServer::Defaults(), durable);
  Parsed p = Parse(Render(s));
  ASSERT_TRUE(p.problems.empty()) << p.problems.front();
  EXPECT_EQ(p.at("kvrdma_recovery_writes"), kKeys);
  EXPECT_EQ(p.at("kvrdma_recovery_keys"), kKeys);
  EXPECT_GT(p.at("kvrdma_recovery_bytes"), kKeys * 100);
  for (const char* phase : {"read", "check", "install", "wait"}) {
    EXPECT_GE(p.at(std::string("kvrdma_recovery_phase_seconds{phase=\"") + phase + "\"}"), 0) << phase;
  }
  EXPECT_GT(p.at("kvrdma_recovery_cpu_seconds{thread=\"reader\"}"), 0);
  EXPECT_GT(p.at("kvrdma_recovery_cpu_seconds{thread=\"installer\"}"), 0);
  EXPECT_EQ(p.types["kvrdma_recovery_phase_seconds"], "gauge");
  std::system(("rm -rf " + std::string(tmpl)).c_str());
}

}  // namespace
}  // namespace kvrdma::testing
