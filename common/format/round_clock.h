// The clock a reader times its GET rounds on, against the round limit
// (docs/DESIGN.md "Reclamation", "Misses while entry refs move").
//
// CLOCK_BOOTTIME, not CLOCK_MONOTONIC (std::chrono::steady_clock): the
// monotonic clock stops while the host is suspended, so a client suspended
// between its window READ and its entry READ would find its round "within
// the limit" however long the server's grace period had run meanwhile, and
// trust an entry ref to a segment since reused. BOOTTIME counts the
// suspension. Linux serves it through the vDSO (since 5.x), like
// CLOCK_MONOTONIC: no system call per read.
//
// Operation timeouts stay on steady_clock: a timeout that fires late after
// a suspension harms nobody.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace kvrdma {

// A round that outlived the round limit D may still accept its entry if the
// word that named it, READ again after it, still does within this many round
// limits of the round's start (client OnRecheck; DESIGN.md "Why a GET returns
// a value the key had during the GET", (b)): sound only while
// kRecheckRoundLimits x D < 2 x the store's grace period, which Server::Start
// checks.
inline constexpr uint64_t kRecheckRoundLimits = 3;

struct RoundClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<RoundClock>;
  static constexpr bool is_steady = true;

  static time_point now() noexcept {
    timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return time_point(duration(int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec));
  }
};

}  // namespace kvrdma
