// The metrics port's HTTP behaviour against hostile and careless clients:
// the right status for each bad request, slow clients closed, connection
// limits, and a render function never called for a refused request.
#include "server/metrics/http_endpoint.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/metrics/http_client.h"

namespace kvrdma::testing {
namespace {

using server::metrics::HttpEndpoint;
using server::metrics::HttpLimits;

// Waits (bounded) for cond; returns its last value.
template <typename F>
bool WaitUntil(F cond, int timeout_ms = 5000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

class HttpEndpointTest : public ::testing::Test {
 protected:
  void StartWith(HttpLimits limits) {
    auto e = HttpEndpoint::Start("127.0.0.1:0", [this] {
      renders_.fetch_add(1);
      const size_t big = big_body_.load();
      return big != 0 ? std::string(big, 'x') : std::string("# HELP x_total x\n# TYPE x_total counter\nx_total 1\n");
    }, limits);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    ep_ = std::move(e).value();
    ASSERT_NE(ep_->port(), 0);
  }
  void SetUp() override {
    HttpLimits l;
    l.idle_timeout_s = 1;
    StartWith(l);
  }
  std::atomic<int> renders_{0};
  std::atomic<size_t> big_body_{0};  // 0: the small body
  std::unique_ptr<HttpEndpoint> ep_;
};

TEST_F(HttpEndpointTest, GetMetricsIsPrometheusText) {
  std::string r = RawHttp::Request(ep_->port(), "GET", "/metrics");
  EXPECT_EQ(RawHttp::StatusOf(r), 200) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << r;
  EXPECT_NE(r.find("\r\n\r\n# HELP x_total x\n"), std::string::npos) << r;
  EXPECT_EQ(renders_.load(), 1);
  // HEAD: the headers only.
  r = RawHttp::Request(ep_->port(), "HEAD", "/metrics");
  EXPECT_EQ(RawHttp::StatusOf(r), 200) << r;
  EXPECT_EQ(r.find("x_total 1"), std::string::npos) << r;
  // A query string is ignored (scrapers add none, but some do).
  EXPECT_EQ(RawHttp::StatusOf(RawHttp::Request(ep_->port(), "GET", "/metrics?x=1")), 200);
}

TEST_F(HttpEndpointTest, WrongPathIs404) {
  for (const char* path : {"/", "/metric", "/metrics/", "/../etc/passwd", "/metrics%00"}) {
    std::string r = RawHttp::Request(ep_->port(), "GET", path);
    EXPECT_EQ(RawHttp::StatusOf(r), 404) << path << ": " << r;
  }
  EXPECT_EQ(renders_.load(), 0);
}

TEST_F(HttpEndpointTest, WrongMethodIs405WithAllow) {
  for (const char* m : {"POST", "PUT", "DELETE", "OPTIONS", "TRACE", "BREW"}) {
    std::string r = RawHttp::Request(ep_->port(), m, "/metrics", "Content-Length: 5\r\n");
    EXPECT_EQ(RawHttp::StatusOf(r), 405) << m << ": " << r;
    EXPECT_NE(r.find("Allow: GET, HEAD"), std::string::npos) << r;
  }
  EXPECT_EQ(renders_.load(), 0);
}

TEST_F(HttpEndpointTest, OversizedHeadersAre431AndLongUriIs414) {
  std::string big = "X-Filler: " + std::string(40000, 'a') + "\r\n";
  std::string r = RawHttp::Request(ep_->port(), "GET", "/metrics", big);
  EXPECT_EQ(RawHttp::StatusOf(r), 431) << r.substr(0, 200);
  // Many small headers add up the same way.
  std::string many;
  for (int i = 0; i < 2000; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
  r = RawHttp::Request(ep_->port(), "GET", "/metrics", many);
  EXPECT_EQ(RawHttp::StatusOf(r), 431) << r.substr(0, 200);
  r = RawHttp::Request(ep_->port(), "GET", "/metrics?" + std::string(40000, 'q'));
  EXPECT_EQ(RawHttp::StatusOf(r), 414) << r.substr(0, 200);
  EXPECT_EQ(renders_.load(), 0);
  // The endpoint still serves.
  EXPECT_EQ(RawHttp::StatusOf(RawHttp::Request(ep_->port(), "GET", "/metrics")), 200);
}

TEST_F(HttpEndpointTest, GarbageIsRefusedNotCrashed) {
  for (std::string junk : {std::string("\r\n\r\n"), std::string("GET\r\n\r\n"), std::string(5000, '\0'),
                           std::string("GET /metrics HTTP/9.9\r\n\r\n"), std::string("\x16\x03\x01\x02\x00", 5)}) {
    RawHttp h(ep_->port());
    ASSERT_TRUE(h.connected());
    (void)h.Send(junk);
    bool closed = false;
    std::string r = h.ReadAll(5000, &closed);
    int st = RawHttp::StatusOf(r);
    EXPECT_TRUE(st == 0 || st >= 400) << r;
    EXPECT_TRUE(closed) << "the connection stayed open after garbage";
  }
  EXPECT_EQ(RawHttp::StatusOf(RawHttp::Request(ep_->port(), "GET", "/metrics")), 200);
}

TEST_F(HttpEndpointTest, SlowClientIsClosedAfterIdleTimeout) {
  RawHttp slow(ep_->port());
  ASSERT_TRUE(slow.connected());
  ASSERT_TRUE(slow.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n"));  // and never the blank line
  auto t0 = std::chrono::steady_clock::now();
  bool closed = false;
  std::string r = slow.ReadAll(6000, &closed);
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(closed) << "a client that stopped sending was not closed within 6 s (idle timeout 1 s)";
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_EQ(renders_.load(), 0);
  // Meanwhile and afterwards, others are served.
  EXPECT_EQ(RawHttp::StatusOf(RawHttp::Request(ep_->port(), "GET", "/metrics")), 200);
}

// 503 counts responses being sent (bodies held for clients that do not read
// them), not connections: idle ones never make a scrape 503.
TEST_F(HttpEndpointTest, Busy503CountsResponsesNotIdleConnections) {
  ep_.reset();
  HttpLimits l;
  l.max_connections = 8;
  l.per_ip_connections = 0;
  l.busy_connections = 1;
  l.idle_timeout_s = 30;
  l.header_timeout_s = 30;
  big_body_ = size_t{32} << 20;  // more than the loopback socket buffers hold
  StartWith(l);
  std::vector<std::unique_ptr<RawHttp>> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(std::make_unique<RawHttp>(ep_->port()));
    ASSERT_TRUE(idle.back()->connected());
  }
  ASSERT_TRUE(WaitUntil([&] { return ep_->open_connections() == 3; })) << ep_->open_connections();
  auto stuck = std::make_unique<RawHttp>(ep_->port());  // asks, never reads: its response stays being sent
  ASSERT_TRUE(stuck->Send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(WaitUntil([&] { return renders_.load() == 1; }));
  std::string r = RawHttp::Request(ep_->port(), "GET", "/metrics");
  EXPECT_EQ(RawHttp::StatusOf(r), 503) << r.substr(0, 200);
  EXPECT_NE(r.find("Retry-After: 1"), std::string::npos) << r.substr(0, 200);
  EXPECT_EQ(renders_.load(), 1);
  // Once the stuck one is gone, three idle connections do not make a request 503.
  stuck.reset();
  ASSERT_TRUE(WaitUntil([&] { return ep_->open_connections() == 3; })) << ep_->open_connections();
  big_body_ = 0;
  std::string ok = RawHttp::Request(ep_->port(), "GET", "/metrics");
  EXPECT_EQ(RawHttp::StatusOf(ok), 200) << ok;
}

// Item 7 of issue 25: a header line every so often kept a connection open
// for ever (the idle timeout restarts with every byte).
TEST_F(HttpEndpointTest, TrickledHeadIsClosedAtTheHeaderDeadline) {
  ep_.reset();
  HttpLimits l;
  l.idle_timeout_s = 30;
  l.header_timeout_s = 1;
  StartWith(l);
  RawHttp slow(ep_->port());
  ASSERT_TRUE(slow.connected());
  auto t0 = std::chrono::steady_clock::now();
  bool sent = slow.Send("GET /metrics HTTP/1.1\r\n");
  bool closed = false;
  while (sent && !closed && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(8)) {
    (void)slow.ReadAll(200, &closed);
    if (!closed) sent = slow.Send("X-Slow: 1\r\n");  // a header line every 200 ms, never the blank line
  }
  auto held = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(closed || !sent) << "a head trickled for 8 s was not closed (header deadline 1 s)";
  // Closed at the deadline, not at the idle timeout (30 s); the slack is for
  // a loaded CI machine (2.5 s was passed once while a build ran beside it).
  EXPECT_LT(held, std::chrono::milliseconds(5000));
  EXPECT_TRUE(WaitUntil([&] { return ep_->late_heads() >= 1; })) << "the close was not counted";
  EXPECT_EQ(ep_->late_heads(), 1u);
  EXPECT_EQ(renders_.load(), 0);
  // Meanwhile and afterwards, others are served (each answer closes its
  // connection: libmicrohttpd does so for a response queued on the first call).
  EXPECT_EQ(RawHttp::StatusOf(RawHttp::Request(ep_->port(), "GET", "/metrics")), 200);
}

// The reproduction: 16 connections from each of 4 addresses, each
// trickling its head, filled the 64 connections and blocked every scrape
// (33 of them made every accepted scrape 503). A fresh address is served at once.
TEST_F(HttpEndpointTest, ScrapeIsServedWhileFourAddressesHoldEveryConnection) {
  ep_.reset();
  StartWith(HttpLimits{});  // the defaults kvserver runs with
  const HttpLimits d;
  std::vector<std::unique_ptr<RawHttp>> abusers;
  for (uint32_t from = 2; from <= 5; ++from) {
    for (unsigned i = 0; i < d.per_ip_connections; ++i) {
      abusers.push_back(std::make_unique<RawHttp>(ep_->port(), INADDR_LOOPBACK - 1 + from));
      ASSERT_TRUE(abusers.back()->connected());
      ASSERT_TRUE(abusers.back()->Send("GET /metrics HTTP/1.1\r\n"));
    }
  }
  ASSERT_EQ(abusers.size(), d.max_connections);
  ASSERT_TRUE(WaitUntil([&] { return ep_->open_connections() == d.max_connections; })) << ep_->open_connections();
  std::atomic<bool> stop{false};
  std::thread trickle([&] {  // a header line from each, well within the idle timeout
    while (!stop.load()) {
      for (auto& a : abusers) (void)a->Send("X-Slow: 1\r\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  for (int i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    std::string r = RawHttp::Request(ep_->port(), "GET", "/metrics");
    EXPECT_EQ(RawHttp::StatusOf(r), 200) << i << ": " << r;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1)) << i;
  }
  EXPECT_GE(ep_->evicted(), 1u);  // the first scrape made room; the evicted one did not come back
  EXPECT_LE(ep_->open_connections(), d.max_connections + 1);
  stop = true;
  trickle.join();
}

TEST_F(HttpEndpointTest, PerAddressLimit) {
  ep_.reset();
  HttpLimits l;
  l.max_connections = 16;
  l.per_ip_connections = 2;
  l.idle_timeout_s = 30;
  StartWith(l);
  RawHttp a(ep_->port()), b(ep_->port());
  ASSERT_TRUE(WaitUntil([&] { return ep_->open_connections() == 2; }));
  RawHttp c(ep_->port());
  (void)c.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  bool closed = false;
  std::string r = c.ReadAll(5000, &closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(RawHttp::StatusOf(r), 0) << r;
}

TEST(HttpEndpointStart, BadAddressesAreErrors) {
  auto render = [] { return std::string(); };
  for (const char* a : {"", "127.0.0.1", "127.0.0.1:", ":9000", "127.0.0.1:70000", "127.0.0.1:9x", "::1:9000"}) {
    auto e = HttpEndpoint::Start(a, render);
    EXPECT_FALSE(e.ok()) << a;
    if (!e.ok()) {
      EXPECT_EQ(e.status().code(), Status::Code::kInvalidArgument) << a << " " << e.status().ToString();
    }
  }
  // In use: Unavailable.
  auto first = HttpEndpoint::Start("127.0.0.1:0", render);
  ASSERT_TRUE(first.ok());
  auto second = HttpEndpoint::Start("127.0.0.1:" + std::to_string((*first)->port()), render);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Status::Code::kUnavailable) << second.status().ToString();
  // IPv6 loopback, bracketed.
  auto v6 = HttpEndpoint::Start("[::1]:0", render);
  if (v6.ok()) {
    EXPECT_NE((*v6)->port(), 0);
  }
}

}  // namespace
}  // namespace kvrdma::testing
