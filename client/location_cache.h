// The client's location cache: key hash -> the entry ref last seen for the
// key (entry location + size class), so a GET of a hot key reads the entry
// with one READ instead of the window READ + entry READ.
//
// Safe without invalidation messages: a cached entry is accepted only if its
// checksum holds, the key matches and its superseded word is clear, and the
// server sets that word before the entry ref moves away from the entry
// (docs/DESIGN.md, "Client: location cache"). Anything else falls back to the
// index path, which refreshes the cache.
//
// Bounded, allocation-free after construction: a set-associative table of
// kWays entries per set, least-recently-used replacement within a set (an
// approximation of global LRU, as in CPU caches). Not thread-safe (one per
// Client).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kvrdma {

class LocationCache {
 public:
  static constexpr size_t kWays = 4;

  // `entries` rounded up to a power-of-two multiple of kWays; 0 disables it.
  explicit LocationCache(size_t entries) {
    if (entries == 0) return;
    size_t sets = 1;
    while (sets * kWays < entries) sets *= 2;
    sets_ = sets;
    e_ = std::make_unique<Entry[]>(sets * kWays);
  }
  bool enabled() const noexcept { return sets_ != 0; }
  size_t capacity() const noexcept { return sets_ * kWays; }

  // The ref cached for `hash`, or 0.
  uint64_t Lookup(uint64_t hash) noexcept {
    if (!enabled()) return 0;
    Entry* set = Set(hash);
    for (size_t w = 0; w < kWays; ++w) {
      if (set[w].hash == hash && set[w].ref != 0) {
        set[w].used = ++clock_;
        return set[w].ref;
      }
    }
    return 0;
  }
  void Insert(uint64_t hash, uint64_t ref) noexcept {
    if (!enabled() || ref == 0) return;
    Entry* set = Set(hash);
    Entry* victim = &set[0];
    for (size_t w = 0; w < kWays; ++w) {
      if (set[w].hash == hash || set[w].ref == 0) {
        victim = &set[w];
        break;
      }
      if (set[w].used < victim->used) victim = &set[w];
    }
    *victim = Entry{hash, ref, ++clock_};
  }
  void Erase(uint64_t hash) noexcept {
    if (!enabled()) return;
    Entry* set = Set(hash);
    for (size_t w = 0; w < kWays; ++w) {
      if (set[w].hash == hash) set[w] = Entry{};
    }
  }
  void Clear() noexcept {
    for (size_t i = 0; i < capacity(); ++i) e_[i] = Entry{};
  }

 private:
  struct Entry {
    uint64_t hash = 0;
    uint64_t ref = 0;  // 0 = empty
    uint64_t used = 0;  // last use (clock_ value)
  };
  Entry* Set(uint64_t hash) noexcept {
    // The low bits pick the home on the server; mix before taking the set.
    uint64_t h = hash * 0x9E3779B97F4A7C15ull;
    return &e_[((h >> 32) & (sets_ - 1)) * kWays];
  }
  size_t sets_ = 0;
  uint64_t clock_ = 0;
  std::unique_ptr<Entry[]> e_;
};

}  // namespace kvrdma
