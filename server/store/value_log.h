// The value log: one RDMA-visible arena cut into fixed-size segments.
//
// Appends go to per-head open segments (one head per worker plus one for the
// cleaner), so the append path takes no shared lock: a head bumps its own
// offset and only takes the segment-list mutex when its segment is full.
// Segment life cycle (server-private metadata):
//
//   kFree -> kOpen (a head appends) -> kSealed (head moved on) -> kBusy
//   (cleaner compacting / evicting) -> kRetired (no ref points into it) ->
//   kFree once grace_period has passed since retirement.
//
// The grace period is what makes reuse safe for one-sided readers the server
// cannot see (docs/DESIGN.md, "Reclamation").
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "server/store/arena.h"
#include "server/store/durable_log.h"
#include "server/store/store_config.h"

namespace kvrdma {

enum class SegmentState : uint8_t { kFree, kOpen, kSealed, kBusy, kRetired };

class ValueLog {
 public:
  using Clock = std::chrono::steady_clock;

  // `heads`: number of append heads (workers + 1 for the cleaner).
  static Result<std::unique_ptr<ValueLog>> Create(const StoreConfig& cfg, uint32_t heads);

  std::byte* data() const noexcept { return arena_.data(); }
  uint64_t bytes() const noexcept { return arena_.size(); }
  Arena::Backing backing() const noexcept { return arena_.backing(); }
  uint64_t segment_bytes() const noexcept { return segment_bytes_; }
  uint32_t segment_count() const noexcept { return segment_count_; }
  uint32_t SegmentOf(uint64_t off) const noexcept { return static_cast<uint32_t>(off / segment_bytes_); }

  // Reserves `bytes` (a multiple of 8, <= segment_bytes) at head `head`'s
  // open segment, opening a new one when it is full. REQUIRES: head is used
  // by one thread at a time; the previous reservation of this head has been
  // written (its segment may be sealed here), or its segment is pinned (a
  // value still arriving, memory only). NoResource if no segment is free;
  // `may_use_reserve` lets the cleaner take the last few.
  Result<uint64_t> Reserve(uint32_t head, uint64_t bytes, bool may_use_reserve);
  // Reserve's common case, inline: room in the head's open segment (*off:
  // the bytes' offset). false: nothing reserved (Reserve opens a segment).
  // REQUIRES: as Reserve.
  bool TryReserve(uint32_t head, uint64_t bytes, uint64_t* off) noexcept {
    Head& h = heads_[head];
    if (h.seg < 0 || h.used + bytes > segment_bytes_) return false;
    *off = static_cast<uint64_t>(h.seg) * segment_bytes_ + h.used;
    h.used += bytes;
    segs_[h.seg].used.store(h.used, std::memory_order_relaxed);
    return true;
  }

  // Durable store: segment files follow the heads (durable_log.h). Set
  // before the first Reserve; nullptr: memory only.
  void set_durable(DurableLog* d) noexcept { durable_ = d; }
  // Recovery: segment `seg` (free) holds a segment file's `used` bytes,
  // opened as `open_seq`: it becomes sealed; later opens take higher seqs.
  Status Restore(uint32_t seg, uint64_t open_seq, uint64_t used);
  // Head `head`'s open segment (-1: none) and its bytes reserved so far.
  // REQUIRES: the head's owner thread.
  int64_t HeadSegment(uint32_t head) const noexcept { return heads_[head].seg; }
  uint64_t HeadUsed(uint32_t head) const noexcept { return heads_[head].used; }

  // Live-byte accounting of the segment holding `off`.
  void AddLive(uint64_t off, int64_t delta) noexcept {
    segs_[SegmentOf(off)].live_bytes.fetch_add(delta, std::memory_order_relaxed);
  }

  // A value still arriving in the segment holding `off` (Store::BeginPut):
  // while pinned, Claim* pass the segment by. REQUIRES (Pin): the segment is
  // its head's open one, so no claim can be under way; a sealed segment's
  // pins only ever fall.
  void Pin(uint64_t off) noexcept { segs_[SegmentOf(off)].pins.fetch_add(1, std::memory_order_relaxed); }
  void Unpin(uint64_t off) noexcept { segs_[SegmentOf(off)].pins.fetch_sub(1, std::memory_order_release); }

  // Claims a sealed segment for the cleaner or an evictor (kSealed -> kBusy).
  // Cleaning: the sealed segment with the lowest live ratio if below
  // `max_ratio`, else -1. Eviction: the oldest sealed segment, else -1.
  int64_t ClaimEmptiest(double max_ratio);
  int64_t ClaimOldest();
  void Unclaim(uint32_t seg) noexcept;  // kBusy -> kSealed (compaction aborted)
  uint64_t SealedBytes(uint32_t seg) const noexcept { return segs_[seg].used.load(std::memory_order_acquire); }
  // kBusy -> kRetired; reusable after the grace period.
  void Retire(uint32_t seg);
  // Segments retired so far (room made: a writer short of space waits on).
  uint64_t Retirements() const noexcept { return retirements_.load(std::memory_order_relaxed); }
  // Waits until a segment may be free (or `until`). Returns false on timeout.
  bool WaitForFree(Clock::time_point until);

  struct Counts {
    uint32_t free = 0, open = 0, sealed = 0, busy = 0, retired = 0;
    int64_t live_bytes = 0;
  };
  Counts Count() const;
  // The state of the segment holding `off` (tests: Store::CheckIndex).
  SegmentState State(uint64_t off) const noexcept {
    return segs_[SegmentOf(off)].state.load(std::memory_order_acquire);
  }
  // Times the segment holding `off` has been reused (tests, the injector).
  uint64_t Generation(uint64_t off) const noexcept {
    return segs_[SegmentOf(off)].generation.load(std::memory_order_acquire);
  }
  uint64_t OpenSeq(uint64_t off) const noexcept {
    return segs_[SegmentOf(off)].open_seq.load(std::memory_order_relaxed);
  }

 private:
  struct SegmentInfo {
    std::atomic<int64_t> live_bytes{0};
    std::atomic<uint64_t> used{0};   // bytes appended; final once sealed
    std::atomic<SegmentState> state{SegmentState::kFree};
    std::atomic<uint64_t> open_seq{0};    // order of opening (smaller = older)
    std::atomic<uint64_t> generation{0};  // incremented each time it is opened
    std::atomic<uint32_t> pins{0};        // values still arriving (Pin)
    Clock::time_point retired_at{};       // guarded by mu_
  };
  struct alignas(64) Head {
    int64_t seg = -1;
    uint64_t used = 0;
  };

  ValueLog(Arena arena, const StoreConfig& cfg, uint32_t heads);
  void PromoteExpiredLocked(Clock::time_point now);  // REQUIRES: mu_ held
  bool Claimable(uint32_t seg) const noexcept;       // sealed and not pinned
  // A free segment taken into use (opened, or restored by recovery), with
  // `used` bytes and a new generation. REQUIRES: mu_ held.
  void StartUse(uint32_t seg, uint64_t open_seq, uint64_t used, SegmentState state);

  Arena arena_;
  const uint64_t segment_bytes_;
  const uint32_t segment_count_;
  const Clock::duration grace_;
  std::unique_ptr<SegmentInfo[]> segs_;
  std::unique_ptr<Head[]> heads_;
  std::atomic<uint64_t> next_open_seq_{1};
  std::atomic<uint64_t> retirements_{0};
  DurableLog* durable_ = nullptr;

  mutable std::mutex mu_;  // free list, retired ring, state transitions to/from kFree
  std::condition_variable freed_cv_;
  std::vector<uint32_t> free_;        // capacity segment_count_: no allocation after Create
  std::vector<uint32_t> retired_;     // ring, in retirement order
  size_t retired_head_ = 0, retired_len_ = 0;
};

}  // namespace kvrdma
