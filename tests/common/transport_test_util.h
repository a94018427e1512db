// Test fixture support: two endpoints connected over a transport (loopback
// or verbs), with the server's queues set up the way kvserver sets them up.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/loopback_transport.h"
#include "common/transport/transport.h"
#include "common/transport/verbs_transport.h"

namespace kvrdma::testing {

enum class Kind { kLoopback, kVerbs };

inline void PrintTo(Kind k, std::ostream* os) { *os << (k == Kind::kLoopback ? "loopback" : "verbs"); }

inline std::string KindName(const ::testing::TestParamInfo<Kind>& i) {
  return i.param == Kind::kLoopback ? "loopback" : "verbs";
}

// Two devices (one for verbs: client and server share the NIC) and the
// address a client connects to.
struct TransportEnv {
  std::shared_ptr<LoopbackFabric> fabric;  // loopback only
  std::shared_ptr<Device> server;
  std::shared_ptr<Device> client;
  std::string addr;
  std::string skip_reason;  // non-empty: no RDMA device here
  bool kind_is_verbs() const { return !fabric; }

  static TransportEnv Make(Kind k) {
    TransportEnv e;
    if (k == Kind::kLoopback) {
      e.fabric = LoopbackFabric::Create();
      e.server = e.fabric->CreateDevice("loop-server");
      e.client = e.fabric->CreateDevice("loop-client");
      e.addr = "loopback";
      return e;
    }
    const char* addr = std::getenv("KVRDMA_TEST_ADDR");
    if (addr == nullptr || *addr == '\0') {
      e.skip_reason = "no RDMA device: KVRDMA_TEST_ADDR unset (run under tools/with-rdma)";
      return e;
    }
    const char* dev = std::getenv("KVRDMA_TEST_DEVICE");
    auto d = OpenVerbsDevice(dev != nullptr ? dev : "");
    if (!d.ok()) {
      ADD_FAILURE() << "KVRDMA_TEST_ADDR is set but the device does not open: " << d.status().ToString();
      e.skip_reason = d.status().ToString();
      return e;
    }
    e.server = d.value();
    e.client = d.value();
    e.addr = addr;
    return e;
  }
};

// Collects n completions (or what arrived by the timeout) using `poll`, and
// `cq.Wait` between empty polls.
template <typename PollFn>
std::vector<Completion> CollectCompletions(CompletionQueue& cq, size_t n, int timeout_ms, PollFn poll) {
  std::vector<Completion> got;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  Completion buf[16];
  while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
    int k = poll(std::span<Completion>(buf));
    if (k > 0) {
      got.insert(got.end(), buf, buf + k);
      continue;
    }
    (void)cq.Wait(20);
  }
  return got;
}

// Polls a CQ until n completions arrived (or the timeout): returns them.
inline std::vector<Completion> WaitFor(CompletionQueue& cq, size_t n, int timeout_ms = 5000) {
  return CollectCompletions(cq, n, timeout_ms, [&](std::span<Completion> b) { return cq.Poll(b); });
}

// The same through Connection::PollSend (which marks a connection broken on
// a failed completion), for connections that own their send CQ.
inline std::vector<Completion> WaitForSend(Connection& c, size_t n, int timeout_ms = 5000) {
  return CollectCompletions(c.send_cq(), n, timeout_ms, [&](std::span<Completion> b) { return c.PollSend(b); });
}

// Connects client -> listener, accepting on this thread with `server_cfg`.
struct Pair {
  std::unique_ptr<Connection> client;
  std::unique_ptr<Connection> server;
};

inline Pair ConnectPair(TransportEnv& env, Listener& l, const QpConfig& server_cfg,
                        std::span<const uint8_t> req = {}, std::span<const uint8_t> reply = {},
                        const QpConfig& client_cfg = QpConfig{}) {
  Pair p;
  Result<std::unique_ptr<Connection>> cr = Status::Internal("not run");
  std::thread t([&] {
    ConnectOptions o;
    o.host = env.addr;
    o.port = l.port();
    cr = env.client->Connect(o, client_cfg, req, nullptr);
  });
  for (int i = 0; i < 50 && !p.server; ++i) {
    auto ev = l.NextEvent(200);
    if (!ev.ok()) continue;
    if (ev->type == CmEvent::Type::kConnectRequest) {
      auto sc = ev->request->Accept(server_cfg, reply);
      EXPECT_TRUE(sc.ok()) << sc.status().ToString();
      if (sc.ok()) p.server = std::move(sc).value();
    }
  }
  t.join();
  EXPECT_TRUE(cr.ok()) << cr.status().ToString();
  if (cr.ok()) p.client = std::move(cr).value();
  return p;
}

}  // namespace kvrdma::testing
