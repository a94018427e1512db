// Client side of the scale tests against a running kvserver:
//   kvrdma_scale --server ADDR:PORT hold N    N connections at once, all doing PUT and GET
//   kvrdma_scale --server ADDR:PORT churn N   N connect / PUT+GET / disconnect cycles
// Prints what it did; exits 0 when every operation succeeded.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kvrdma/client.h"

namespace {

kvrdma::ClientOptions Options(const std::string& server) {
  kvrdma::ClientOptions o;
  auto colon = server.rfind(':');
  o.host = server.substr(0, colon);
  o.port = static_cast<uint16_t>(std::atoi(server.c_str() + colon + 1));
  o.max_in_flight = 1;           // small per-client buffers: many clients in one process
  o.location_cache_entries = 0;
  o.op_timeout_ms = o.connect_timeout_ms = 20000;
  return o;
}

bool RoundTrip(kvrdma::Client& c, const std::string& key, const std::string& value) {
  std::string got;
  kvrdma::Status p = c.Put(key, value);
  kvrdma::Status g = c.Get(key, &got);
  if (!p.ok() || !g.ok() || got != value) {
    std::fprintf(stderr, "round trip of %s failed: put %s, get %s\n", key.c_str(), p.ToString().c_str(),
                 g.ToString().c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 || std::string(argv[1]) != "--server") {
    std::fprintf(stderr, "usage: kvrdma_scale --server ADDR:PORT hold|churn N\n");
    return 2;
  }
  const std::string server = argv[2], mode = argv[3];
  const int n = std::atoi(argv[4]);
  // Each connection holds a few file descriptors (CM event channel, CQ channels).
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  auto t0 = std::chrono::steady_clock::now();
  int failures = 0;
  if (mode == "hold") {
    std::vector<std::unique_ptr<kvrdma::Client>> clients;
    for (int i = 0; i < n; ++i) {
      auto c = kvrdma::Client::Connect(Options(server));
      if (!c.ok()) {
        std::fprintf(stderr, "connection %d: %s\n", i, c.status().ToString().c_str());
        return 1;
      }
      clients.push_back(std::move(c).value());
    }
    auto t1 = std::chrono::steady_clock::now();
    // With all of them connected, every one does a PUT and a GET (twice).
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < n; ++i) {
        if (!RoundTrip(*clients[i], "conn" + std::to_string(i), "r" + std::to_string(round))) ++failures;
      }
    }
    auto st = clients[0]->Stats();
    uint64_t held = 0;
    if (st.ok()) {
      for (auto& [k, v] : *st) {
        if (k == "connections") held = v;
      }
    }
    std::printf("hold: %d connections open at once (server counts %llu), %d PUT+GET round trips, %d failed; "
                "connecting took %.1f s\n",
                n, static_cast<unsigned long long>(held), 2 * n, failures,
                std::chrono::duration<double>(t1 - t0).count());
    if (held != static_cast<uint64_t>(n)) ++failures;
  } else if (mode == "churn") {
    for (int i = 0; i < n; ++i) {
      auto c = kvrdma::Client::Connect(Options(server));
      if (!c.ok()) {
        std::fprintf(stderr, "cycle %d: %s\n", i, c.status().ToString().c_str());
        ++failures;
        continue;
      }
      if (!RoundTrip(**c, "churn" + std::to_string(i % 100), std::to_string(i))) ++failures;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("churn: %d connect/disconnect cycles in %.1f s (%.0f/s), %d failed\n", n, secs, n / secs, failures);
  } else {
    std::fprintf(stderr, "mode must be hold or churn\n");
    return 2;
  }
  return failures == 0 ? 0 : 1;
}
