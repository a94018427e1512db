// The server clock leases are measured on: milliseconds since the server
// started, +1 (never 0). A client asks for it with a CLOCK request, and the
// worker reads it when it answers; the lock check at a write's commit point
// reads it again. It is read when needed, from the steady clock: no thread
// ticks it (a thread storing it every 10 ms cost an idle kvserver 1 % of a
// core in the Soft-RoCE guest, 2.3 % under a GET load).
#pragma once

#include <chrono>
#include <cstdint>

namespace kvrdma::server {

class ServerClock {
 public:
  ServerClock() = default;
  // A clock that reads *ms (tests and the fuzzer set the time themselves).
  explicit ServerClock(const uint64_t* ms) : manual_(ms) {}

  uint64_t NowMs() const noexcept {
    if (manual_ != nullptr) return *manual_;
    const auto since = std::chrono::steady_clock::now() - start_;
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(since).count()) + 1;
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  const uint64_t* manual_ = nullptr;
};

}  // namespace kvrdma::server
