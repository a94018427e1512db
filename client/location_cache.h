// The client's location cache: key hash -> where the key's entry ref was last
// seen (the ref, so the entry's location and size class, and the word of the
// key's window that held it), so a GET of a hot key reads the entry and that
// one word in one round trip instead of the window READ + entry READ.
//
// Safe without invalidation messages: a cached GET READs the index word and
// then the entry in one doorbell, and accepts the entry only if the word
// still names it, the round took less than the round limit, its checksum
// holds and the key matches (docs/DESIGN.md, "Client: location cache").
// Anything else falls back to the index path, which refreshes the cache.
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
  // A cached location: `ref` (0 = none) and the word of the key's window
  // (0 .. window words - 1) that held it. `confirmed`: a GET may READ from
  // it; an unconfirmed location is only remembered, so that the next GET
  // that finds the same ref there confirms it (the client caches large
  // entries this way: client_get.cc, OnEntry).
  struct Location {
    uint64_t ref = 0;
    uint64_t word = 0;
    bool confirmed = true;
  };

  bool enabled() const noexcept { return sets_ != 0; }
  // False while nothing was inserted since construction or Clear: an
  // Erase would find nothing (a client that only writes skips hashing its
  // keys for it).
  bool may_hold_entries() const noexcept { return inserted_; }
  size_t capacity() const noexcept { return sets_ * kWays; }

  // The location cached for `hash` (ref 0: none).
  Location Lookup(uint64_t hash) noexcept {
    if (!enabled()) return {};
    Entry* set = Set(hash);
    for (size_t w = 0; w < kWays; ++w) {
      if (set[w].hash == hash && set[w].ref != 0) {
        set[w].used = ++clock_;
        return {set[w].ref, set[w].word & ~kConfirmedBit, (set[w].word & kConfirmedBit) != 0};
      }
    }
    return {};
  }
  void Insert(uint64_t hash, Location loc) noexcept {
    if (!enabled() || loc.ref == 0) return;
    Entry* set = Set(hash);
    Entry* victim = &set[0];
    for (size_t w = 0; w < kWays; ++w) {
      if (set[w].hash == hash || set[w].ref == 0) {
        victim = &set[w];
        break;
      }
      if (set[w].used < victim->used) victim = &set[w];
    }
    *victim = Entry{hash, loc.ref, loc.word | (loc.confirmed ? kConfirmedBit : 0), ++clock_};
    inserted_ = true;
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
    inserted_ = false;
  }

 private:
  // Location::confirmed, in the top bit of Entry::word (a word index is < 128).
  static constexpr uint64_t kConfirmedBit = uint64_t{1} << 63;
  struct Entry {
    uint64_t hash = 0;
    uint64_t ref = 0;   // 0 = empty
    uint64_t word = 0;  // the word of the key's window that held ref, and kConfirmedBit
    uint64_t used = 0;  // last use (clock_ value)
  };
  static_assert(sizeof(Entry) == 32, "ClientOptions::location_cache_entries documents 32 bytes per entry");
  Entry* Set(uint64_t hash) noexcept {
    // The low bits pick the home on the server; mix before taking the set.
    uint64_t h = hash * 0x9E3779B97F4A7C15ull;
    return &e_[((h >> 32) & (sets_ - 1)) * kWays];
  }
  size_t sets_ = 0;
  uint64_t clock_ = 0;
  bool inserted_ = false;  // see may_hold_entries
  std::unique_ptr<Entry[]> e_;
};

}  // namespace kvrdma
