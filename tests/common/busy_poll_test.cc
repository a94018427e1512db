// BusyPoll's window (common/transport/busy_poll.h), driven by the events a
// polling thread reports: finds and sleeps.
#include "common/transport/busy_poll.h"

#include <gtest/gtest.h>

#include <chrono>

namespace kvrdma {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

// One operation of a thread whose next piece of work comes `gap` after its
// last: a poll that catches it (a find inside the window), or a sleep, then
// the wake-up's find. The wake-up takes `wake` (an emulated guest: hundreds
// of microseconds).
void Operation(BusyPoll& p, microseconds gap, microseconds wake = microseconds(300)) {
  if (gap < p.window()) {
    p.FoundWork();
    return;
  }
  p.Slept(gap - std::chrono::duration_cast<microseconds>(p.window()) + wake, /*woke=*/true);
  p.FoundWork();
}

TEST(BusyPoll, StartsAtTheFloor) {
  BusyPoll p(microseconds(50), microseconds(250));
  EXPECT_EQ(p.window(), microseconds(50));
  EXPECT_EQ(p.floor(), microseconds(50));
  EXPECT_EQ(p.ceiling(), microseconds(250));
}

TEST(BusyPoll, GrowsUntilItCoversTheGap) {
  BusyPoll p(microseconds(50), microseconds(250));
  // Work 90 us apart: a wake-up each time at 50 us, none from 100 us.
  Operation(p, microseconds(90));
  EXPECT_EQ(p.window(), microseconds(100));
  for (int i = 0; i < 1000; ++i) Operation(p, microseconds(90));
  EXPECT_EQ(p.window(), microseconds(100));
}

TEST(BusyPoll, DoublesUpToTheCeilingAndNoFurther) {
  BusyPoll p(microseconds(50), microseconds(250));
  Operation(p, microseconds(240));
  EXPECT_EQ(p.window(), microseconds(100));
  Operation(p, microseconds(240));
  EXPECT_EQ(p.window(), microseconds(200));
  Operation(p, microseconds(240));
  EXPECT_EQ(p.window(), microseconds(250));
  for (int i = 0; i < 100; ++i) Operation(p, microseconds(240));
  EXPECT_EQ(p.window(), microseconds(250));
}

TEST(BusyPoll, ALongSleepFallsBackToTheFloor) {
  BusyPoll p(microseconds(50), microseconds(250));
  Operation(p, microseconds(150));
  Operation(p, microseconds(150));
  EXPECT_EQ(p.window(), microseconds(200));
  p.Slept(milliseconds(3), true);  // the load stopped for a while
  EXPECT_EQ(p.window(), microseconds(50));
}

TEST(BusyPoll, ATimeoutFallsBackToTheFloor) {
  BusyPoll p(microseconds(50), microseconds(250));
  Operation(p, microseconds(150));
  EXPECT_EQ(p.window(), microseconds(100));
  p.Slept(microseconds(400), /*woke=*/false);
  EXPECT_EQ(p.window(), microseconds(50));
}

TEST(BusyPoll, ASparseLoadDoesNotKeepTheWindowAtTheCeiling) {
  // Work 600 us apart (past the ceiling, inside kLongSleep with the
  // wake-up): the window climbs, misses twice at the ceiling, then stays at
  // the floor for kHoldSleeps sleeps.
  BusyPoll p(microseconds(50), microseconds(250));
  for (int i = 0; i < 3; ++i) Operation(p, microseconds(600), microseconds(100));
  EXPECT_EQ(p.window(), microseconds(250));
  Operation(p, microseconds(600), microseconds(100));
  EXPECT_EQ(p.window(), microseconds(250));  // one miss at the ceiling
  Operation(p, microseconds(600), microseconds(100));
  EXPECT_EQ(p.window(), microseconds(50));  // two in a row
  for (uint32_t i = 0; i < BusyPoll::kHoldSleeps; ++i) {
    Operation(p, microseconds(600), microseconds(100));
    EXPECT_EQ(p.window(), microseconds(50)) << i;
  }
  Operation(p, microseconds(600), microseconds(100));
  EXPECT_EQ(p.window(), microseconds(100));  // climbs again
  // Polled time over a long run: well below a ceiling per operation.
  BusyPoll q(microseconds(50), microseconds(250));
  microseconds polled{0};
  constexpr int kOps = 10000;
  for (int i = 0; i < kOps; ++i) {
    polled += std::chrono::duration_cast<microseconds>(q.window());
    Operation(q, microseconds(600), microseconds(100));
  }
  EXPECT_LT(polled.count() / kOps, 70);
}

TEST(BusyPoll, AMissAtTheCeilingAmongHitsKeepsTheWindow) {
  // Work 200 us apart, now and then 400 (a slow reply): the misses are not
  // in a row, so the window stays at the ceiling.
  BusyPoll p(microseconds(50), microseconds(250));
  for (int i = 0; i < 3; ++i) Operation(p, microseconds(200));
  EXPECT_EQ(p.window(), microseconds(250));
  for (int i = 0; i < 1000; ++i) {
    Operation(p, microseconds(i % 10 == 0 ? 400 : 200));
    ASSERT_EQ(p.window(), microseconds(250)) << i;
  }
}

TEST(BusyPoll, AHeldWindowStillFallsBackAfterALongSleep) {
  BusyPoll p(microseconds(50), microseconds(250));
  for (int i = 0; i < 5; ++i) Operation(p, microseconds(600), microseconds(100));
  EXPECT_EQ(p.window(), microseconds(50));
  p.Slept(milliseconds(5), true);
  EXPECT_EQ(p.window(), microseconds(50));
}

TEST(BusyPoll, ACeilingAtOrBelowTheFloorNeverGrows) {
  BusyPoll zero(microseconds(0), microseconds(0));
  BusyPoll fixed(microseconds(50), microseconds(10));
  EXPECT_EQ(fixed.ceiling(), microseconds(50));
  EXPECT_FALSE(zero.adapts());
  EXPECT_FALSE(fixed.adapts());
  EXPECT_TRUE(BusyPoll(microseconds(50), microseconds(51)).adapts());
  for (int i = 0; i < 100; ++i) {
    Operation(zero, microseconds(90));
    Operation(fixed, microseconds(90));
    ASSERT_EQ(zero.window(), microseconds(0));
    ASSERT_EQ(fixed.window(), microseconds(50));
  }
}

TEST(BusyPoll, AZeroFloorWithACeilingGrowsFromTheSmallestStep) {
  BusyPoll p(microseconds(0), microseconds(100));
  Operation(p, microseconds(40));
  EXPECT_EQ(p.window(), BusyPoll::kMinGrownWindow);
  Operation(p, microseconds(40));
  EXPECT_EQ(p.window(), microseconds(32));
  Operation(p, microseconds(40));
  EXPECT_EQ(p.window(), microseconds(64));
  Operation(p, microseconds(40));
  EXPECT_EQ(p.window(), microseconds(64));
}

}  // namespace
}  // namespace kvrdma
