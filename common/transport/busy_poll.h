// BusyPoll: how long a thread polls its completion queue after work before
// it sleeps on the queue's completion channel (its poll window).
//
// A wake-up from the channel costs a few microseconds on a host and hundreds
// of them in an emulated guest; a poll costs the CPU it spins. A window
// shorter than the usual gap between one piece of work and the next pays a
// wake-up per operation (a PUT at depth 1 in the Soft-RoCE guest: the next
// request comes ~70-100 us after the reply, past a 50 us window); a longer
// one spins for nothing when the load is sparse. So the window adapts
// between a floor (busy_poll_us) and a ceiling (busy_poll_max_us), and it
// learns only when the thread goes to sleep, never on the path that finds
// completions (that path counts one thing: FoundWork):
//  - a sleep that ended with work within kLongSleep means the next piece of
//    work came soon after the window closed: the window doubles (at least
//    to kMinGrownWindow), up to the ceiling;
//  - a sleep that ended later, or by its timeout, means the load is sparse
//    or idle: back to the floor;
//  - kMissesAtCeiling sleeps in a row at the ceiling, with no work found by
//    polling in between, mean the work comes further apart than the ceiling:
//    back to the floor, and no growth for the next kHoldSleeps sleeps (so a
//    steady sparse load pays a climb now and then, not a full window per
//    operation).
// Growth is off by default (docs/DESIGN.md, "Waiting"; docs/PERFORMANCE.md,
// "An adaptive poll window"): on a machine where the polling thread shares
// its CPU with the threads it waits for, a longer poll takes their time.
// A ceiling at or below the floor keeps the window at the floor (busy_poll_us
// = busy_poll_max_us = 0: sleep at once, always). Not thread-safe: one per
// polling thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace kvrdma {

class BusyPoll {
 public:
  using Clock = std::chrono::steady_clock;
  using Duration = Clock::duration;
  // A sleep at least this long says the load is sparse or idle (an emulated
  // guest's wake-up takes ~300 us; a host's, microseconds).
  static constexpr Duration kLongSleep = std::chrono::milliseconds(1);
  static constexpr Duration kMinGrownWindow = std::chrono::microseconds(16);
  static constexpr uint32_t kMissesAtCeiling = 2;
  static constexpr uint32_t kHoldSleeps = 64;

  BusyPoll(std::chrono::microseconds floor, std::chrono::microseconds ceiling)
      : floor_(floor), ceiling_(std::max(floor, ceiling)), window_(floor_) {}

  // How long to poll after the work just done.
  Duration window() const { return window_; }
  Duration floor() const { return floor_; }
  Duration ceiling() const { return ceiling_; }
  // False: the window stays at the floor, and Slept need not be called (a
  // thread may skip its clock read).
  bool adapts() const { return ceiling_ > floor_; }

  // A poll found work (the one that follows a wake-up included).
  void FoundWork() { ++found_; }

  // The thread slept for `slept` after a window that found nothing; `woke`:
  // the wait ended because work may be there (not by its timeout).
  void Slept(Duration slept, bool woke) {
    // More than one find since the last sleep: besides the wake-up's own,
    // a poll inside the window found work.
    const bool polled_work = found_ - found_at_sleep_ > 1;
    found_at_sleep_ = found_;
    if (!woke || slept >= kLongSleep) {
      window_ = floor_;
      misses_at_ceiling_ = 0;
      return;
    }
    if (window_ >= ceiling_) {
      misses_at_ceiling_ = polled_work ? 1 : misses_at_ceiling_ + 1;
      if (misses_at_ceiling_ >= kMissesAtCeiling && adapts()) {
        window_ = floor_;
        misses_at_ceiling_ = 0;
        hold_ = kHoldSleeps;
      }
      return;
    }
    if (hold_ > 0) {
      --hold_;
      return;
    }
    window_ = std::min<Duration>(ceiling_, std::max<Duration>(2 * window_, kMinGrownWindow));
  }

 private:
  Duration floor_, ceiling_, window_;
  uint64_t found_ = 0, found_at_sleep_ = 0;
  uint32_t misses_at_ceiling_ = 0;
  uint32_t hold_ = 0;  // sleeps left before the window may grow again
};

}  // namespace kvrdma
