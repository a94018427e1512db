#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "bench/kvbench/histogram.h"
#include "bench/kvbench/keygen.h"

namespace kvrdma::bench {
namespace {

TEST(HistogramTest, EveryValueIsWithinOnePercentOfItsBucketBound) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200000; ++i) {
    uint64_t v = rng() >> (rng() % 64);
    size_t b = Histogram::Index(v);
    ASSERT_LT(b, Histogram::kBuckets);
    uint64_t hi = Histogram::UpperBound(b);
    ASSERT_GE(hi, v);
    ASSERT_LE(static_cast<double>(hi - v), 0.01 * static_cast<double>(v) + 1.0) << v;
    if (b > 0) {
      ASSERT_LT(Histogram::UpperBound(b - 1), v);  // buckets are contiguous and ordered
    }
  }
}

TEST(HistogramTest, PercentilesOfAKnownDistribution) {
  Histogram h;
  for (uint64_t v = 1; v <= 100000; ++v) h.Record(v * 1000);  // 1 us .. 100 ms, uniform
  EXPECT_EQ(h.count(), 100000u);
  EXPECT_NEAR(static_cast<double>(h.Percentile(0.5)), 50e6, 50e6 * 0.01);
  EXPECT_NEAR(static_cast<double>(h.Percentile(0.99)), 99e6, 99e6 * 0.01);
  EXPECT_EQ(h.max(), 100000u * 1000);
  EXPECT_NEAR(h.Mean(), 50000.5e3, 1.0);
  Histogram m;
  m.Merge(h);
  m.Merge(h);
  EXPECT_EQ(m.count(), 200000u);
  EXPECT_EQ(m.Percentile(0.5), h.Percentile(0.5));
}

TEST(KeygenTest, ZipfianIsSkewedLikeTheFormula) {
  const uint64_t n = 1000;
  const double theta = 0.99;
  Zipfian z(n, theta);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> count(n);
  const int draws = 500000;
  for (int i = 0; i < draws; ++i) {
    uint64_t r = z.Next(rng);
    ASSERT_LT(r, n);
    count[r]++;
  }
  double zeta = 0;
  for (uint64_t i = 1; i <= n; ++i) zeta += 1.0 / std::pow(static_cast<double>(i), theta);
  // The hottest ranks get close to their exact share 1/(k^theta * zeta).
  for (uint64_t k : {1ull, 2ull, 10ull}) {
    double expect = draws / (std::pow(static_cast<double>(k), theta) * zeta);
    EXPECT_NEAR(static_cast<double>(count[k - 1]), expect, expect * 0.1) << "rank " << k;
  }
  EXPECT_GT(count[0], count[99] * 50);
}

TEST(KeygenTest, ScrambleSpreadsRanks) {
  std::vector<int> hit(1000);
  for (uint64_t r = 0; r < 1000; ++r) hit[Scramble(r, 1000)]++;
  int distinct = 0;
  for (int h : hit) distinct += h > 0;
  EXPECT_GT(distinct, 600);  // a hash, not a permutation: most ids are hit
}

}  // namespace
}  // namespace kvrdma::bench
