// Counters the request path records for the metrics endpoint: worker
// service time per request (a histogram per worker), requests answered with
// an error status (by status), connections closed by their client or
// refused at connect.
//
// Thread ownership: a worker writes only its own ServiceTimeHistogram (single
// writer: relaxed load + store, no locked instruction on the request path);
// the other counters are shared and take a relaxed fetch_add. A scrape reads
// every field with relaxed loads from another thread, never taking a lock
// the request path takes: it may see a request in one field and not yet in
// another (a histogram's sum can lag its buckets by a request), which
// Prometheus tolerates; each counter on its own never goes backwards.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "common/status.h"

namespace kvrdma::server::metrics {

// Upper bounds of the service-time buckets, in nanoseconds (the exposition
// converts them to seconds). A request longer than the last lands in +Inf.
inline constexpr std::array<uint64_t, 18> kServiceBoundsNs = {
    1'000,      2'500,      5'000,      10'000,      25'000,      50'000,
    100'000,    250'000,    500'000,    1'000'000,   2'500'000,   5'000'000,
    10'000'000, 25'000'000, 50'000'000, 100'000'000, 250'000'000, 1'000'000'000};

class alignas(64) ServiceTimeHistogram {
 public:
  static constexpr size_t kBuckets = kServiceBoundsNs.size() + 1;  // the last is +Inf

  // REQUIRES: one writer thread (the worker that owns it).
  void Record(uint64_t ns) noexcept {
    // b: how many bounds ns exceeds (its bucket), by halving steps: five
    // compares whatever the time (a scan from the first bound took one per
    // bucket passed, most under callgrind, whose requests take longest).
    size_t b = 0;
    static_assert(kServiceBoundsNs.size() < 32, "five steps cover the bounds");
#pragma GCC unroll 5
    for (size_t step = 16; step != 0; step /= 2) {
      if (b + step <= kServiceBoundsNs.size() && ns > kServiceBoundsNs[b + step - 1]) b += step;
    }
    Bump(buckets_[b], 1);
    Bump(sum_ns_, ns);
  }
  // Any thread. Per-bucket counts (not cumulative).
  uint64_t bucket(size_t i) const noexcept { return buckets_[i].load(std::memory_order_relaxed); }
  uint64_t sum_ns() const noexcept { return sum_ns_.load(std::memory_order_relaxed); }

 private:
  static void Bump(std::atomic<uint64_t>& a, uint64_t d) noexcept {
    a.store(a.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> sum_ns_{0};
};

// Times one request into a histogram: from `start` to the timer's
// destruction, whose clock reading is then left in `start` for the next
// request. The caller's `start` is a reading it has anyway (the worker's
// loop reads the clock once per batch, before it drains the completion
// queue), so a request costs one clock reading, not two: the first request
// after a reading is timed from it, each later one from the end of the one
// before (the copy of its request out of the receive buffer included).
class ServiceTimer {
 public:
  using Clock = std::chrono::steady_clock;
  ServiceTimer(ServiceTimeHistogram& h, Clock::time_point& start) noexcept : h_(h), start_(start) {}
  ~ServiceTimer() {
    const Clock::time_point end = Clock::now();
    auto d = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start_).count();
    h_.Record(static_cast<uint64_t>(d < 0 ? 0 : d));
    start_ = end;
  }
  ServiceTimer(const ServiceTimer&) = delete;
  ServiceTimer& operator=(const ServiceTimer&) = delete;

 private:
  ServiceTimeHistogram& h_;
  Clock::time_point& start_;
};

class RequestMetrics {
 public:
  static constexpr uint32_t kMaxWorkers = 256;  // kvserver --workers at most
  static constexpr size_t kStatusCodes = static_cast<size_t>(Status::kLastCode) + 1;  // every Status::Code

  RequestMetrics() : service_(new ServiceTimeHistogram[kMaxWorkers]) {}

  // The histogram of worker `w` (its index; clamped into range).
  ServiceTimeHistogram& service_time(uint32_t w) noexcept { return service_[w < kMaxWorkers ? w : 0]; }
  const ServiceTimeHistogram& service_time(uint32_t w) const noexcept { return service_[w]; }

  // A reply with a status other than OK.
  void CountFailure(Status::Code code) noexcept {
    auto i = static_cast<size_t>(code);
    failures_[i < kStatusCodes ? i : 0].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t failures(Status::Code code) const noexcept {
    auto i = static_cast<size_t>(code);
    return i < kStatusCodes ? failures_[i].load(std::memory_order_relaxed) : 0;
  }

  // Connections that ended with the client's disconnect.
  std::atomic<uint64_t> closed_by_client{0};
  // Connect requests refused, by why.
  enum class RejectReason : uint8_t {
    kOther,           // malformed request, out of memory or ids, a verbs error
    kAuth,            // missing or wrong auth token
    kMaxConnections,  // the server holds --max-connections already
    kMaxPerPeer,      // the peer address holds --max-connections-per-peer already
    kFlowControlBackoff,  // the peer address is in its --flow-control-backoff-ms
  };
  static constexpr size_t kRejectReasons = 5;
  static_assert(static_cast<size_t>(RejectReason::kFlowControlBackoff) + 1 == kRejectReasons);
  void CountRejected(RejectReason r) noexcept {
    rejected_[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t rejected(RejectReason r) const noexcept {
    return rejected_[static_cast<size_t>(r)].load(std::memory_order_relaxed);
  }

 private:
  std::unique_ptr<ServiceTimeHistogram[]> service_;
  std::array<std::atomic<uint64_t>, kStatusCodes> failures_{};
  std::array<std::atomic<uint64_t>, kRejectReasons> rejected_{};
};

}  // namespace kvrdma::server::metrics
