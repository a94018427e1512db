// A worker's connections by QP number: a flat open-addressing table the
// worker owns. Lookups (one per completion) take no lock and copy no
// reference count; the table is rebuilt only when a connection comes or goes.
#pragma once

#include <cstdint>
#include <vector>

#include "server/conn_state.h"

namespace kvrdma::server {

class ConnTable {
 public:
  ConnState* Find(uint32_t qp_num) const noexcept {
    if (buckets_.empty()) return nullptr;
    const size_t mask = buckets_.size() - 1;
    for (size_t i = Hash(qp_num) & mask;; i = (i + 1) & mask) {
      ConnState* c = buckets_[i];
      if (c == nullptr) return nullptr;
      if (c->qp_num == qp_num) return c;
    }
  }
  void Insert(ConnState* c) {
    all_.push_back(c);
    Rebuild();
  }
  void Erase(ConnState* c) {
    for (size_t i = 0; i < all_.size(); ++i) {
      if (all_[i] == c) {
        all_[i] = all_.back();
        all_.pop_back();
        break;
      }
    }
    Rebuild();
  }
  const std::vector<ConnState*>& all() const noexcept { return all_; }

 private:
  static size_t Hash(uint32_t q) noexcept { return q ^ (q >> 12); }
  void Rebuild() {
    size_t n = 8;
    while (n < 2 * all_.size()) n *= 2;  // at most half full: probes stay short
    buckets_.assign(n, nullptr);
    for (ConnState* c : all_) {
      size_t i = Hash(c->qp_num) & (n - 1);
      while (buckets_[i] != nullptr) i = (i + 1) & (n - 1);
      buckets_[i] = c;
    }
  }
  std::vector<ConnState*> all_;    // every connection of the worker
  std::vector<ConnState*> buckets_;  // power of two, at most half full
};

}  // namespace kvrdma::server
