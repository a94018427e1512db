#include "server/store/value_log.h"

#include <algorithm>

namespace kvrdma {

Result<std::unique_ptr<ValueLog>> ValueLog::Create(const StoreConfig& cfg, uint32_t heads) {
  if (cfg.segment_bytes < 4096 || cfg.segment_bytes % kEntryAlign != 0) {
    return Status::InvalidArgument("segment_bytes must be a multiple of 8 and >= 4096");
  }
  if (cfg.log_bytes % cfg.segment_bytes != 0 || cfg.log_bytes > kMaxLogBytes) {
    return Status::InvalidArgument("log_bytes must be a multiple of segment_bytes, <= 256 GiB");
  }
  const uint64_t count = cfg.log_bytes / cfg.segment_bytes;
  if (count < heads + kCleanerReserveSegments + 1 || count > UINT32_MAX) {
    return Status::InvalidArgument("log too small: need more segments than heads + reserve");
  }
  auto arena = Arena::Create(cfg.log_bytes, cfg.huge_pages, "value log");
  if (!arena.ok()) return arena.status();
  return std::unique_ptr<ValueLog>(new ValueLog(std::move(arena).value(), cfg, heads));
}

ValueLog::ValueLog(Arena arena, const StoreConfig& cfg, uint32_t heads)
    : arena_(std::move(arena)),
      segment_bytes_(cfg.segment_bytes),
      segment_count_(static_cast<uint32_t>(cfg.log_bytes / cfg.segment_bytes)),
      grace_(std::chrono::duration_cast<Clock::duration>(cfg.grace_period)),
      segs_(new SegmentInfo[segment_count_]),
      heads_(new Head[heads]) {
  free_.reserve(segment_count_);
  // Hand out low segments first (popped from the back).
  for (uint32_t s = segment_count_; s-- > 0;) free_.push_back(s);
  retired_.resize(segment_count_);
}

void ValueLog::PromoteExpiredLocked(Clock::time_point now) {
  bool any = false;
  while (retired_len_ > 0) {
    const uint32_t s = retired_[retired_head_];
    if (now - segs_[s].retired_at < grace_) break;  // FIFO: the rest retired later
    retired_head_ = (retired_head_ + 1) % segment_count_;
    --retired_len_;
    segs_[s].state.store(SegmentState::kFree, std::memory_order_relaxed);
    free_.push_back(s);
    any = true;
  }
  if (any) freed_cv_.notify_all();
}

Result<uint64_t> ValueLog::Reserve(uint32_t head, uint64_t bytes, bool may_use_reserve) {
  if (uint64_t off; TryReserve(head, bytes, &off)) return off;
  Head& h = heads_[head];
  if (bytes > segment_bytes_) return Status::TooLarge("entry larger than a log segment");
  std::unique_lock<std::mutex> lock(mu_);
  PromoteExpiredLocked(Clock::now());
  const size_t keep = may_use_reserve ? 0 : kCleanerReserveSegments;
  if (free_.size() <= keep) return Status::NoResource("no free log segment");
  const uint32_t s = free_.back();
  free_.pop_back();
  const uint64_t open_seq = next_open_seq_.fetch_add(1, std::memory_order_relaxed);
  if (durable_ != nullptr) {
    // The segment's file first (I/O, outside the lock): a segment whose file
    // cannot be made (disk full) is not used, and the head keeps its own.
    lock.unlock();
    Status st = durable_->OpenSegment(s, open_seq);
    lock.lock();
    if (!st.ok()) {
      free_.push_back(s);
      return st;
    }
    durable_->HeadMoved(head, h.seg, h.used, s);
  }
  if (h.seg >= 0) {
    // Seal: `used` is final; the release pairs with the acquire in Claim*.
    segs_[h.seg].used.store(h.used, std::memory_order_relaxed);
    segs_[h.seg].state.store(SegmentState::kSealed, std::memory_order_release);
  }
  StartUse(s, open_seq, bytes, SegmentState::kOpen);
  h.seg = s;
  h.used = bytes;
  return static_cast<uint64_t>(s) * segment_bytes_;
}

void ValueLog::StartUse(uint32_t seg, uint64_t open_seq, uint64_t used, SegmentState state) {
  SegmentInfo& si = segs_[seg];
  si.live_bytes.store(0, std::memory_order_relaxed);
  si.open_seq.store(open_seq, std::memory_order_relaxed);
  si.generation.fetch_add(1, std::memory_order_release);
  si.used.store(used, std::memory_order_relaxed);
  si.state.store(state, std::memory_order_release);
}

Status ValueLog::Restore(uint32_t seg, uint64_t open_seq, uint64_t used) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(free_.begin(), free_.end(), seg);
  if (it == free_.end() || used > segment_bytes_) return Status::Internal("restoring a segment that is not free");
  free_.erase(it);
  StartUse(seg, open_seq, used, SegmentState::kSealed);
  if (open_seq >= next_open_seq_.load(std::memory_order_relaxed)) next_open_seq_.store(open_seq + 1);
  return Status::OK();
}

bool ValueLog::Claimable(uint32_t seg) const noexcept {
  // The acquire on pins pairs with Unpin's release: the claimer sees the
  // value that arrived and its entry's checksum.
  return segs_[seg].state.load(std::memory_order_acquire) == SegmentState::kSealed &&
         segs_[seg].pins.load(std::memory_order_acquire) == 0;
}

int64_t ValueLog::ClaimEmptiest(double max_ratio) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t best = -1;
  double best_ratio = max_ratio;
  for (uint32_t s = 0; s < segment_count_; ++s) {
    if (!Claimable(s)) continue;
    const uint64_t used = segs_[s].used.load(std::memory_order_relaxed);
    const double ratio = used == 0 ? 0.0
                                   : static_cast<double>(segs_[s].live_bytes.load(std::memory_order_relaxed)) /
                                         static_cast<double>(used);
    if (ratio < best_ratio) {
      best_ratio = ratio;
      best = s;
    }
  }
  if (best >= 0) segs_[best].state.store(SegmentState::kBusy, std::memory_order_relaxed);
  return best;
}

int64_t ValueLog::ClaimOldest() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t best = -1;
  uint64_t best_seq = UINT64_MAX;
  for (uint32_t s = 0; s < segment_count_; ++s) {
    if (!Claimable(s)) continue;
    const uint64_t seq = segs_[s].open_seq.load(std::memory_order_relaxed);
    if (seq < best_seq) {
      best_seq = seq;
      best = s;
    }
  }
  if (best >= 0) segs_[best].state.store(SegmentState::kBusy, std::memory_order_relaxed);
  return best;
}

void ValueLog::Unclaim(uint32_t seg) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  segs_[seg].state.store(SegmentState::kSealed, std::memory_order_release);
}

void ValueLog::Retire(uint32_t seg) {
  std::lock_guard<std::mutex> lock(mu_);
  SegmentInfo& si = segs_[seg];
  si.state.store(SegmentState::kRetired, std::memory_order_relaxed);
  si.retired_at = Clock::now();
  retired_[(retired_head_ + retired_len_) % segment_count_] = seg;
  ++retired_len_;
  retirements_.fetch_add(1, std::memory_order_relaxed);
  PromoteExpiredLocked(si.retired_at);  // grace 0 (tests): free at once
}

bool ValueLog::WaitForFree(Clock::time_point until) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const auto now = Clock::now();
    PromoteExpiredLocked(now);
    if (free_.size() > kCleanerReserveSegments) return true;
    if (now >= until) return false;
    auto wake = until;
    if (retired_len_ > 0) wake = std::min(wake, segs_[retired_[retired_head_]].retired_at + grace_);
    freed_cv_.wait_until(lock, wake);
  }
}

ValueLog::Counts ValueLog::Count() const {
  Counts c;
  for (uint32_t s = 0; s < segment_count_; ++s) {
    switch (segs_[s].state.load(std::memory_order_relaxed)) {
      case SegmentState::kFree: ++c.free; break;
      case SegmentState::kOpen: ++c.open; break;
      case SegmentState::kSealed: ++c.sealed; break;
      case SegmentState::kBusy: ++c.busy; break;
      case SegmentState::kRetired: ++c.retired; break;
    }
    c.live_bytes += segs_[s].live_bytes.load(std::memory_order_relaxed);
  }
  return c;
}

}  // namespace kvrdma
