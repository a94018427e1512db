// Key choosers for kvbench: uniform, zipfian (YCSB's generator after Gray et
// al., "Quickly generating billion-record synthetic databases", with the
// ranks scrambled by a hash so hot keys are spread over the key space), and
// latest (zipfian over recency: the most recently inserted keys are hottest).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace kvrdma::bench {

class Zipfian {
 public:
  // Ranks 0..n-1, P(rank k) proportional to 1/(k+1)^theta. REQUIRES n >= 1, 0 < theta < 1.
  Zipfian(uint64_t n, double theta) : n_(n), theta_(theta) {
    zetan_ = Zeta(n, theta);
    double zeta2 = Zeta(2, theta);
    alpha_ = 1.0 / (1.0 - theta);
    eta_ = (1.0 - std::pow(2.0 / static_cast<double>(n), 1.0 - theta)) / (1.0 - zeta2 / zetan_);
  }
  template <typename Rng>
  uint64_t Next(Rng& rng) const {
    double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    double uz = u * zetan_;
    if (uz < 1.0) return 0;
    if (uz < 1.0 + std::pow(0.5, theta_)) return n_ > 1 ? 1 : 0;
    uint64_t r = static_cast<uint64_t>(static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1.0, alpha_));
    return r >= n_ ? n_ - 1 : r;
  }
  uint64_t n() const { return n_; }

 private:
  static double Zeta(uint64_t n, double theta) {
    double s = 0;
    for (uint64_t i = 1; i <= n; ++i) s += 1.0 / std::pow(static_cast<double>(i), theta);
    return s;
  }
  uint64_t n_;
  double theta_, zetan_, alpha_, eta_;
};

// A bijective-enough scramble of ranks onto key ids (FNV-1a over the rank).
inline uint64_t Scramble(uint64_t rank, uint64_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < 8; ++i) {
    h ^= (rank >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h % n;
}

}  // namespace kvrdma::bench
