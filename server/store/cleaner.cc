// The log cleaner: compacts segments with a low live ratio (relocating their
// live entries to the cleaner's own log head), evicts the oldest segments in
// cache mode, and retires emptied segments so that the value log reuses them
// after the grace period. Runs on one thread at a time.
#include <pthread.h>

#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "common/memory/racy_copy.h"
#include "server/store/store.h"

namespace kvrdma {

namespace {
// Compacting a segment that is still this full gains too little to be worth it
// even when free segments run low.
constexpr double kMaxLiveRatioWhenShort = 0.9;
// Segments a pass compacts below the threshold before yielding.
constexpr int kMaxCompactionsPerPass = 64;
}  // namespace

size_t Store::RunCleanerOnce() {
  index_->ExpireTags(Index::Clock::now());  // tags also expire while nobody inserts
  size_t retired = 0;
  for (int n = 0; n < kMaxCompactionsPerPass; ++n) {
    const int64_t seg = log_->ClaimEmptiest(cfg_.clean_live_ratio);
    if (seg < 0 || !CompactSegment(static_cast<uint32_t>(seg))) break;
    ++retired;
  }
  for (ValueLog::Counts c = log_->Count(); c.free + c.retired < cfg_.min_free_segments; c = log_->Count()) {
    int64_t seg = log_->ClaimEmptiest(kMaxLiveRatioWhenShort);
    if (seg >= 0) {
      if (!CompactSegment(static_cast<uint32_t>(seg))) break;
    } else if (cfg_.mode == CapacityMode::kCache) {
      std::lock_guard<std::mutex> lock(evict_mu_);
      seg = log_->ClaimOldest();
      if (seg < 0) break;
      EvictSegment(cleaner_head_, static_cast<uint32_t>(seg));
    } else {
      break;
    }
    ++retired;
  }
  if (retired > 0) head_stats_[cleaner_head_].cleaner_runs.fetch_add(1, std::memory_order_relaxed);
  return retired;
}

bool Store::CompactSegment(uint32_t seg) {
  const uint64_t base = static_cast<uint64_t>(seg) * log_->segment_bytes();
  const uint64_t used = log_->SealedBytes(seg);
  HeadStats& st = head_stats_[cleaner_head_];
  bool tombstones = false;  // the segment holds a tombstone (a write): dropping it needs the marks
  for (uint64_t pos = 0; pos + kLeaderBytes + kEntryHeaderBytes <= used;) {
    const uint64_t off = base + pos + kLeaderBytes;  // the entry, after its leader
    const EntryHeader h = ReadHeader(off);
    const uint64_t size = kLeaderBytes + LengthsEntryBytes(h.lengths);
    if (LengthsKey(h.lengths) == 0 || pos + size > used) {
      KVRDMA_LOG_ERROR("store: cleaner found a malformed entry at log offset %llu; segment %u not reclaimed",
                       static_cast<unsigned long long>(off), seg);
      log_->Unclaim(seg);
      return false;
    }
    pos += size;
    tombstones |= LengthsTombstone(h.lengths) && EntryVersion(off) != 0;
    const std::string_view key = EntryKey(off, h);
    const KeyHash kh = MakeKeyHash(key, cfg_.seed, index_->home_count());
    {
      Index::WindowGuard g = index_->LockWindow(kh.home);
      const Found r = FindLocation(kh, off);
      if (!r.found()) continue;  // dead
      if (LengthsTombstone(h.lengths)) {  // a delete old enough to forget
        RemoveRef(cleaner_head_, r);
        continue;
      }
    }
    // Reserve outside the locks: opening a segment takes the log's mutex.
    auto dst = log_->Reserve(cleaner_head_, size, /*may_use_reserve=*/true);
    if (!dst.ok()) {
      log_->Unclaim(seg);  // the entries moved so far stay moved
      return false;
    }
    Index::WindowGuard g = index_->LockWindow(kh.home);
    // The copy has the same leader (the same write, the same version),
    // lengths, key, value and checksum (which covers nothing that depends on
    // the location); only the header's two words may swap places (entry.h:
    // GuardAt), and the guard's not-current bit starts SET (unpublished). A
    // copy that loses the race below stays unpublished forever, so it never
    // validates as current, and is marked in its segment file (a durable
    // store) as not its key's newest write.
    const uint64_t to = *dst + kLeaderBytes;
    std::byte* d = log_->data() + to;
    StoreLeader(to, LoadLeader(off));
    RacyStore(d + LengthsAt(to), &h.lengths, sizeof(h.lengths));
    RacyStore(d + kEntryKeyOffset, log_->data() + off + kEntryKeyOffset, size - kLeaderBytes - kEntryKeyOffset);
    GuardWord(to).store(h.guard | kGuardNotCurrentBit, std::memory_order_relaxed);
    const Found r = FindLocation(kh, off);
    if (!r.found()) {  // updated meanwhile: the copy is dead
      if (durable_) durable_->QueueMark(to, size - kLeaderBytes, 0, 0);
      continue;
    }
    log_->AddLive(to, static_cast<int64_t>(size));
    Supersede(off);  // before the ref leaves the old copy
    log_->AddLive(off, -static_cast<int64_t>(size));
    index_->StoreRef(r.word, PackRef(kh.fingerprint, RefSizeClass(r.ref), to));
    Publish(to);  // after the ref names it
    st.relocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (durable_) {
    // The segment's file may go only once its live entries' copies, the
    // writes that superseded its dead entries, and (if it holds tombstones)
    // the marks of every older write of their keys, are durable.
    if (Status fs = ForgetSegmentFile(seg, tombstones); !fs.ok()) {
      // Retry: marks wait for a head's next commit (an idle worker's, or one
      // stopping): the segment is cleaned again on a later pass. Anything
      // else is a disk error.
      if (fs.code() == Status::Code::kRetry) {
        KVRDMA_LOG_DEBUG("store: segment %u not reclaimed yet: %s", seg, fs.ToString().c_str());
      } else {
        KVRDMA_LOG_ERROR("store: segment %u not reclaimed: %s", seg, fs.ToString().c_str());
      }
      log_->Unclaim(seg);
      return false;
    }
  }
  log_->Retire(seg);
  st.segments_cleaned.fetch_add(1, std::memory_order_relaxed);
  return true;
}

size_t Store::EvictSegment(uint32_t head, uint32_t seg) {
  const uint64_t base = static_cast<uint64_t>(seg) * log_->segment_bytes();
  const uint64_t used = log_->SealedBytes(seg);
  size_t evicted = 0;
  for (uint64_t pos = 0; pos + kLeaderBytes + kEntryHeaderBytes <= used;) {
    const uint64_t off = base + pos + kLeaderBytes;  // the entry, after its leader
    const EntryHeader h = ReadHeader(off);
    const uint64_t size = kLeaderBytes + LengthsEntryBytes(h.lengths);
    if (LengthsKey(h.lengths) == 0 || pos + size > used) break;  // cannot happen; still retire
    pos += size;
    const std::string_view key = EntryKey(off, h);
    const KeyHash kh = MakeKeyHash(key, cfg_.seed, index_->home_count());
    Index::WindowGuard g = index_->LockWindow(kh.home);
    const Found r = FindLocation(kh, off);
    if (!r.found()) continue;
    if (cfg_.on_evict && !LengthsTombstone(h.lengths)) cfg_.on_evict(key);
    RemoveRef(head, r);
    if (cfg_.on_evicted && !LengthsTombstone(h.lengths)) cfg_.on_evicted(key);
    if (!LengthsTombstone(h.lengths)) {
      head_stats_[head].evictions.fetch_add(1, std::memory_order_relaxed);
      ++evicted;
    }
  }
  log_->Retire(seg);
  head_stats_[head].segments_cleaned.fetch_add(1, std::memory_order_relaxed);
  return evicted;
}

void Store::CleanerLoop() {
  pthread_setname_np(pthread_self(), "kv-cleaner");
  // A pass that finds nothing to do doubles the wait, up to 16 intervals: an
  // idle or read-only store is not scanned 50 times a second. A pass that
  // retires a segment, or a kick (a writer short of space), returns to the
  // configured interval.
  constexpr int kMaxBackoffShift = 4;
  int shift = 0;
  std::unique_lock<std::mutex> lock(cleaner_mu_);
  while (!cleaner_stop_) {
    lock.unlock();
    const size_t retired = RunCleanerOnce();
    lock.lock();
    shift = retired > 0 ? 0 : std::min(shift + 1, kMaxBackoffShift);
    const bool kicked = cleaner_cv_.wait_for(lock, cfg_.cleaner_interval * (1 << shift),
                                             [this] { return cleaner_stop_ || cleaner_kick_; });
    if (kicked) shift = 0;
    cleaner_kick_ = false;
  }
}

}  // namespace kvrdma
