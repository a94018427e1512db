#include "server/store/index.h"

#include <thread>

namespace kvrdma {

Result<std::unique_ptr<Index>> Index::Create(uint64_t bucket_count, HugePages huge_pages) {
  if (bucket_count < 2 || (bucket_count & (bucket_count - 1)) != 0) {
    return Status::InvalidArgument("index_buckets must be a power of two >= 2");
  }
  auto arena = Arena::Create(bucket_count * kBucketBytes, huge_pages, "index");
  if (!arena.ok()) return arena.status();
  return std::unique_ptr<Index>(new Index(std::move(arena).value(), bucket_count));
}

Index::Index(Arena arena, uint64_t bucket_count)
    : arena_(std::move(arena)),
      buckets_(reinterpret_cast<IndexBucket*>(arena_.data())),  // mmap: page-aligned, zero-filled
      bucket_count_(bucket_count),
      stripes_(new Stripe[kLockStripes]) {}

void Index::LockStripe(size_t s) noexcept {
  std::atomic<uint32_t>& l = stripes_[s].locked;
  for (int spins = 0;; ++spins) {
    if (l.load(std::memory_order_relaxed) == 0 && l.exchange(1, std::memory_order_acquire) == 0) return;
    if (spins > 64) std::this_thread::yield();  // holders may be descheduled (more threads than cores)
  }
}

Index::PairGuard::PairGuard(Index* idx, uint64_t b0, uint64_t b1)
    : idx_(idx), s0_(b0 & (kLockStripes - 1)), s1_(b1 & (kLockStripes - 1)), held_(true) {
  if (s0_ > s1_) std::swap(s0_, s1_);
  idx_->LockStripe(s0_);
  if (s1_ != s0_) idx_->LockStripe(s1_);
}

void Index::PairGuard::Unlock() {
  if (!held_) return;
  held_ = false;
  if (s1_ != s0_) idx_->UnlockStripe(s1_);
  idx_->UnlockStripe(s0_);
}

int Index::FindEmpty(const IndexBucket& b) noexcept {
  for (size_t i = 0; i < kSlotsPerBucket; ++i) {
    if (LoadSlot(b, i) == kEmptySlot) return static_cast<int>(i);
  }
  return -1;
}

bool Index::MoveSlot(uint64_t from, size_t i, uint64_t to) {
  PairGuard g(this, from, to);
  IndexBucket& src = buckets_[from];
  IndexBucket& dst = buckets_[to];
  const uint64_t s = LoadSlot(src, i);
  if (s == kEmptySlot || AlternateBucket(from, SlotFingerprint(s), bucket_count_) != to) return false;
  const int j = FindEmpty(dst);
  if (j < 0) return false;
  // Order matters for lock-free readers (DESIGN.md "Displacement and misses"):
  // the key is in `to` before it leaves `from`, and `from`'s version changes
  // before the slot is cleared.
  StoreSlot(dst, static_cast<size_t>(j), s);
  BumpVersion(src);
  StoreSlot(src, i, kEmptySlot);
  moves_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

Status Index::MakeRoom(const KeyHash& kh) {
  struct Node {
    uint64_t bucket;
    int32_t parent;  // index into nodes, -1 for a root
    uint8_t slot;    // slot of the parent bucket that moves into this bucket
    uint8_t depth;
  };
  Node nodes[kCuckooMaxBfsNodes];
  size_t n = 0;
  nodes[n++] = {kh.bucket[0], -1, 0, 0};
  nodes[n++] = {kh.bucket[1], -1, 0, 0};
  const size_t rot = kh.hash % kSlotsPerBucket;  // vary the slot order between keys
  for (size_t head = 0; head < n; ++head) {
    const Node cur = nodes[head];
    if (cur.depth >= kCuckooMaxPathLength) continue;
    for (size_t k = 0; k < kSlotsPerBucket; ++k) {
      const size_t i = (k + rot) % kSlotsPerBucket;
      const uint64_t s = LoadSlot(buckets_[cur.bucket], i);
      if (s == kEmptySlot) {
        return Status::OK();  // a slot freed up meanwhile: let the caller retry
      }
      const uint64_t alt = AlternateBucket(cur.bucket, SlotFingerprint(s), bucket_count_);
      if (FindEmpty(buckets_[alt]) >= 0) {
        // Execute: the last move first, so every move has a free destination.
        if (!MoveSlot(cur.bucket, i, alt)) return Status::Retry("cuckoo path changed");
        for (int32_t c = static_cast<int32_t>(head); nodes[c].parent >= 0; c = nodes[c].parent) {
          const Node& child = nodes[c];
          if (!MoveSlot(nodes[child.parent].bucket, child.slot, child.bucket)) {
            return Status::Retry("cuckoo path changed");
          }
        }
        return Status::OK();
      }
      if (n < kCuckooMaxBfsNodes) {
        nodes[n++] = {alt, static_cast<int32_t>(head), static_cast<uint8_t>(i),
                      static_cast<uint8_t>(cur.depth + 1)};
      }
    }
  }
  return Status::ServerFull("index full: no cuckoo path");
}

}  // namespace kvrdma
