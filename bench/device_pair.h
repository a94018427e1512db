// Two ends of one connection in one process, for the benchmarks that time
// work requests on a device (kvrdma_rendezvous_cost, kvrdma_read_floor): the
// RDMA device tools/with-rdma names (KVRDMA_TEST_DEVICE, KVRDMA_TEST_ADDR),
// both ends on it as perftest's pair runs, or the loopback transport.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/loopback_transport.h"
#include "common/transport/transport.h"
#include "common/transport/verbs_transport.h"

namespace kvrdma::bench {

struct DevicePair {
  std::shared_ptr<LoopbackFabric> fabric;  // loopback only
  std::shared_ptr<Device> server_dev, client_dev;
  std::string addr = "loopback";
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Connection> server, client;
};

// The devices: loopback, or the device of tools/with-rdma's environment.
inline Status OpenDevicePair(bool loopback, DevicePair& e) {
  if (loopback) {
    e.fabric = LoopbackFabric::Create();
    e.server_dev = e.fabric->CreateDevice("srv");
    e.client_dev = e.fabric->CreateDevice("cli");
    return Status::OK();
  }
  const char* a = std::getenv("KVRDMA_TEST_ADDR");
  const char* d = std::getenv("KVRDMA_TEST_DEVICE");
  if (a == nullptr) return Status::InvalidArgument("KVRDMA_TEST_ADDR unset: run under tools/with-rdma (or --loopback)");
  e.addr = a;
  auto dev = OpenVerbsDevice(d != nullptr ? d : "");
  if (!dev.ok()) return dev.status();
  e.server_dev = e.client_dev = *dev;
  return Status::OK();
}

// Connects a client QP (client_cfg) to a server QP (server_cfg) through a
// listener on the pair's address.
inline Status ConnectPair(DevicePair& e, const QpConfig& client_cfg, const QpConfig& server_cfg) {
  auto l = e.server_dev->Listen(e.addr, 0, 4);
  if (!l.ok()) return l.status();
  e.listener = std::move(l).value();
  Result<std::unique_ptr<Connection>> cr = Status::Internal("not run");
  std::thread t([&] {
    ConnectOptions o;
    o.host = e.addr;
    o.port = e.listener->port();
    cr = e.client_dev->Connect(o, client_cfg, {}, nullptr);
  });
  Status st = Status::Unavailable("no connect request");
  for (int i = 0; i < 50 && !e.server; ++i) {
    auto ev = e.listener->NextEvent(200);
    if (!ev.ok() || ev->type != CmEvent::Type::kConnectRequest) continue;
    auto sc = ev->request->Accept(server_cfg, {});
    if (!sc.ok()) {
      st = sc.status();
      break;
    }
    e.server = std::move(sc).value();
  }
  t.join();
  if (!cr.ok()) return cr.status();
  e.client = std::move(cr).value();
  return e.server ? Status::OK() : st;
}

// The p-quantile (0..1) of timed samples, the nearest rank below.
inline double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace kvrdma::bench
