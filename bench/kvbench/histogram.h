// A latency histogram with bounded memory and < 1% relative error:
// log-linear buckets (HDR style). Values (nanoseconds) below 2^kSubBits are
// exact; above, each power of two is split into 2^(kSubBits-1) linear
// buckets, so a bucket's width is at most 2^-(kSubBits-1) of its value
// (0.78% with kSubBits = 8). Recording is one relaxed atomic add, so another
// thread can read percentiles while workers record; histograms merge by
// adding counts.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>

namespace kvrdma::bench {

class Histogram {
 public:
  static constexpr unsigned kSubBits = 8;                      // 128 sub-buckets per octave
  static constexpr unsigned kSub = 1u << (kSubBits - 1);
  static constexpr unsigned kOctaves = 64 - kSubBits + 1;
  static constexpr size_t kBuckets = (1u << kSubBits) + kOctaves * kSub;

  static size_t Index(uint64_t v) noexcept {
    if (v < (uint64_t{1} << kSubBits)) return static_cast<size_t>(v);
    unsigned msb = 63 - static_cast<unsigned>(std::countl_zero(v));  // >= kSubBits
    unsigned shift = msb - (kSubBits - 1);
    uint64_t sub = (v >> shift) - kSub;                              // 0..kSub-1
    return (1u << kSubBits) + (msb - kSubBits) * kSub + static_cast<size_t>(sub);
  }
  // The largest value that maps to bucket i (what a percentile reports).
  static uint64_t UpperBound(size_t i) noexcept {
    if (i < (1u << kSubBits)) return i;
    size_t j = i - (1u << kSubBits);
    unsigned msb = static_cast<unsigned>(j / kSub) + kSubBits;
    uint64_t sub = j % kSub + kSub;
    unsigned shift = msb - (kSubBits - 1);
    return ((sub + 1) << shift) - 1;
  }

  void Record(uint64_t v) noexcept {
    counts_[Index(v)].fetch_add(1, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(v, std::memory_order_relaxed);
    uint64_t m = max_.load(std::memory_order_relaxed);
    while (v > m && !max_.compare_exchange_weak(m, v, std::memory_order_relaxed)) {
    }
  }
  void Merge(const Histogram& o) noexcept {
    for (size_t i = 0; i < kBuckets; ++i) {
      uint64_t c = o.counts_[i].load(std::memory_order_relaxed);
      if (c != 0) counts_[i].fetch_add(c, std::memory_order_relaxed);
    }
    count_.fetch_add(o.count(), std::memory_order_relaxed);
    sum_.fetch_add(o.sum_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    uint64_t m = o.max();
    uint64_t cur = max_.load(std::memory_order_relaxed);
    while (m > cur && !max_.compare_exchange_weak(cur, m, std::memory_order_relaxed)) {
    }
  }
  uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }
  uint64_t max() const noexcept { return max_.load(std::memory_order_relaxed); }
  double Mean() const noexcept {
    uint64_t n = count();
    return n == 0 ? 0.0 : static_cast<double>(sum_.load(std::memory_order_relaxed)) / static_cast<double>(n);
  }
  // The value at quantile q (0..1): the upper bound of the bucket holding it.
  uint64_t Percentile(double q) const noexcept {
    uint64_t n = count();
    if (n == 0) return 0;
    uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(n - 1)) + 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i].load(std::memory_order_relaxed);
      if (seen >= rank) return std::min(UpperBound(i), max());
    }
    return max();
  }

 private:
  std::array<std::atomic<uint64_t>, kBuckets> counts_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_{0};
  std::atomic<uint64_t> max_{0};
};

}  // namespace kvrdma::bench
