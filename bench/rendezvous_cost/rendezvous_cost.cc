// What exposing a client's value to the server READ-only costs per PUT, for
// the rendezvous PUT of issue 26 (the server pulls a large value with one
// RDMA READ through a type-2 window the client binds on its own QP). Three
// ways, each timed as a client would pay it, the server's READ included:
//
//   register  per PUT: register the value's memory (window binding only),
//             bind the window and SEND a 32-byte request behind it (the
//             server learns the rkey only after the bind, as a PUT's request
//             does), the server READs through the window, invalidate (and
//             wait for it: rxe's source refuses to deregister a region
//             under a bound window), deregister.
//   cached    the memory registered once (a registration cache that hits):
//             bind, READ, invalidate.
//   copy      memcpy into a buffer registered once, bind, READ, invalidate:
//             what a client pays if it copies instead of registering.
//
// Usage (a real device; loopback with --loopback):
//   tools/with-rdma build/bench/kvrdma_rendezvous_cost [--sizes 4096,65536,1048576] [--iters 200]
// Prints per way and size the median and p90 in microseconds.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/device_pair.h"

using namespace kvrdma;

namespace {

// The next receive completion of c (its own receive CQ).
Status WaitRecv(Connection& c) {
  Completion wc[1];
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       std::chrono::steady_clock::now() < deadline;) {
    if (c.recv_cq().Poll(wc) == 1) return CompletionStatus(wc[0]);
  }
  return Status::Timeout("no receive");
}

Status WaitOne(Connection& c, uint64_t wr_id) {
  Completion wc[4];
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       std::chrono::steady_clock::now() < deadline;) {
    int n = c.PollSend(wc);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) return CompletionStatus(wc[i]);
      if (wc[i].wr_id == wr_id) return Status::OK();
    }
  }
  return Status::Timeout("no completion");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cost of exposing a value through a memory window per PUT (issue 26)"};
  std::vector<size_t> sizes{4096, 65536, 1048576};
  int iters = 200;
  bool loopback = false;
  app.add_option("--sizes", sizes, "value sizes in bytes")->delimiter(',');
  app.add_option("--iters", iters, "PUTs per way and size");
  app.add_flag("--loopback", loopback, "the loopback transport instead of a device");
  CLI11_PARSE(app, argc, argv);

  bench::DevicePair e;
  Status setup = bench::OpenDevicePair(loopback, e);
  QpConfig client_cfg;
  client_cfg.windows = true;
  if (setup.ok()) setup = bench::ConnectPair(e, client_cfg, QpConfig{});
  if (!setup.ok()) {
    std::fprintf(stderr, "%s\n", setup.ToString().c_str());
    return setup.code() == Status::Code::kInvalidArgument ? 2 : 1;
  }
  const size_t max_size = *std::max_element(sizes.begin(), sizes.end());
  std::vector<uint8_t> value(max_size, 0x5a), staging(max_size), dst(max_size + 64);
  auto dst_mr = e.server_dev->RegisterMemory(dst.data(), dst.size(), kAccessLocalWrite);
  uint8_t request[32] = {};
  auto staging_mr = e.client_dev->RegisterMemory(staging.data(), staging.size(), kAccessMwBind);
  auto mw = e.client_dev->CreateMemoryWindow();
  if (!dst_mr.ok() || !staging_mr.ok() || !mw.ok()) {
    std::fprintf(stderr, "setup failed\n");
    return 1;
  }
  std::printf("%-9s %9s %10s %10s\n", "way", "bytes", "p50_us", "p90_us");
  int rc = 0;
  for (const char* way : {"register", "cached", "copy"}) {
    for (size_t size : sizes) {
      std::unique_ptr<MemoryRegion> cached;
      if (std::strcmp(way, "cached") == 0) {
        auto r = e.client_dev->RegisterMemory(value.data(), size, kAccessMwBind);
        if (!r.ok()) return 1;
        cached = std::move(r).value();
      }
      std::vector<double> us;
      for (int i = 0; i < iters; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        std::unique_ptr<MemoryRegion> per_put;
        const MemoryRegion* region = cached.get();
        uint64_t base = reinterpret_cast<uint64_t>(value.data());
        if (std::strcmp(way, "register") == 0) {
          auto r = e.client_dev->RegisterMemory(value.data(), size, kAccessMwBind);
          if (!r.ok()) {
            std::fprintf(stderr, "register: %s\n", r.status().ToString().c_str());
            return 1;
          }
          per_put = std::move(r).value();
          region = per_put.get();
        } else if (std::strcmp(way, "copy") == 0) {
          std::memcpy(staging.data(), value.data(), size);
          region = staging_mr->get();
          base = reinterpret_cast<uint64_t>(staging.data());
        }
        MwBinding b{mw->get(), region, base, size, kAccessRemoteRead, 1};
        RecvWr recv{9, (*dst_mr)->Slice(max_size, 64)};
        Status st = e.server->PostRecv({&recv, 1});
        if (st.ok()) st = e.client->BindWindow(b, false);
        SendWr send;
        send.wr_id = 4;
        send.opcode = WrOpcode::kSend;
        send.signaled = false;
        send.inline_data = true;
        send.local = Sge{reinterpret_cast<uint64_t>(request), sizeof(request), 0};
        if (st.ok()) st = e.client->PostSend({&send, 1});
        if (st.ok()) st = WaitRecv(*e.server);
        if (!st.ok()) {  // why: the client's failed bind or SEND, if that was it
          Completion wc[4];
          int n = e.client->PollSend(wc);
          for (int k = 0; k < n; ++k) {
            std::fprintf(stderr, "client completion %llu: %s %s\n", static_cast<unsigned long long>(wc[k].wr_id),
                         WrOpcodeName(wc[k].opcode), WcStatusName(wc[k].status));
          }
        }
        SendWr read;
        read.wr_id = 2;
        read.opcode = WrOpcode::kRead;
        read.local = (*dst_mr)->Slice(0, static_cast<uint32_t>(size));
        read.remote_addr = base;
        read.rkey = (*mw)->rkey();
        if (st.ok()) st = e.server->PostSend({&read, 1});
        if (st.ok()) st = WaitOne(*e.server, 2);
        SendWr inv;
        inv.wr_id = 3;
        inv.opcode = WrOpcode::kLocalInv;
        inv.rkey = (*mw)->rkey();
        if (st.ok()) st = e.client->PostSend({&inv, 1});
        if (st.ok()) st = WaitOne(*e.client, 3);
        per_put.reset();
        if (!st.ok()) {
          std::fprintf(stderr, "%s %zu: %s\n", way, size, st.ToString().c_str());
          rc = 1;
          break;
        }
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      if (rc != 0) break;
      std::printf("%-9s %9zu %10.1f %10.1f\n", way, size, bench::Percentile(us, 0.5), bench::Percentile(us, 0.9));
    }
    if (rc != 0) break;
  }
  mw->reset();  // before the QPs (MemoryWindow)
  e.client.reset();
  e.server.reset();
  return rc;
}
