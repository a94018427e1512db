// The hash index in RDMA-visible memory, and the server-private locks that
// serialize changes to it.
//
// Thread safety: any number of server threads. Every change of a bucket's
// words happens with that bucket's lock stripe held (LockPair); readers on
// other machines (and the stress test's reader threads) read the words
// concurrently without any lock, which is why every store into a bucket is a
// single 8-byte atomic store (release) and never a multi-word memcpy.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "common/format/bucket.h"
#include "common/format/hash.h"
#include "common/format/slot.h"
#include "common/status.h"
#include "server/store/arena.h"
#include "server/store/store_config.h"

namespace kvrdma {

class Index {
 public:
  // REQUIRES: bucket_count is a power of two >= 2.
  static Result<std::unique_ptr<Index>> Create(uint64_t bucket_count, HugePages huge_pages);

  class PairGuard {
   public:
    PairGuard(Index* idx, uint64_t b0, uint64_t b1);
    ~PairGuard() { Unlock(); }
    PairGuard(const PairGuard&) = delete;
    PairGuard& operator=(const PairGuard&) = delete;
    void Unlock();

   private:
    Index* idx_;
    size_t s0_, s1_;
    bool held_;
  };
  // Locks the stripes of both buckets (in stripe order: no deadlock).
  PairGuard LockPair(uint64_t b0, uint64_t b1) { return PairGuard(this, b0, b1); }

  uint64_t bucket_count() const noexcept { return bucket_count_; }
  IndexBucket& bucket(uint64_t b) noexcept { return buckets_[b]; }
  std::byte* data() const noexcept { return arena_.data(); }
  size_t bytes() const noexcept { return arena_.size(); }
  const char* backing() const noexcept { return Arena::BackingName(arena_.backing()); }

  // Word access. Load: relaxed (callers hold the lock, or are scanning
  // optimistically and re-check under the lock). Store/Bump: REQUIRES the
  // bucket's lock; release so that everything written before (the entry
  // bytes) is visible before the slot is.
  static uint64_t LoadSlot(const IndexBucket& b, size_t i) noexcept {
    return std::atomic_ref<const uint64_t>(b.slots[i]).load(std::memory_order_relaxed);
  }
  static void StoreSlot(IndexBucket& b, size_t i, uint64_t v) noexcept {
    std::atomic_ref<uint64_t>(b.slots[i]).store(v, std::memory_order_release);
  }
  static void BumpVersion(IndexBucket& b) noexcept {
    std::atomic_ref<uint64_t> v(b.version);
    v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  // Index of an empty slot in the bucket, or -1.
  static int FindEmpty(const IndexBucket& b) noexcept;

  // Frees a slot in one of kh's two buckets by moving slots along a cuckoo
  // path (breadth-first search, then moves from the free end backwards, each
  // under the locks of its two buckets). REQUIRES: no lock held by the caller.
  // OK if it made room (another thread may take it: the caller retries);
  // ServerFull if no path was found; Retry if the path changed under it.
  Status MakeRoom(const KeyHash& kh);

  uint64_t moves() const noexcept { return moves_.load(std::memory_order_relaxed); }

 private:
  struct alignas(64) Stripe {
    std::atomic<uint32_t> locked{0};
  };
  Index(Arena arena, uint64_t bucket_count);
  void LockStripe(size_t s) noexcept;
  void UnlockStripe(size_t s) noexcept { stripes_[s].locked.store(0, std::memory_order_release); }
  // Moves one slot of bucket `from` whose other bucket is `to` into a free
  // slot of `to` (write `to`, bump `from`'s version, clear `from`).
  bool MoveSlot(uint64_t from, size_t i, uint64_t to);

  Arena arena_;
  IndexBucket* buckets_;
  uint64_t bucket_count_;
  std::unique_ptr<Stripe[]> stripes_;
  std::atomic<uint64_t> moves_{0};
};

}  // namespace kvrdma
