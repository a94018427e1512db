#include "server/store/store.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "common/log.h"
#include "common/memory/racy_copy.h"

namespace kvrdma {

Result<std::unique_ptr<Store>> Store::Open(const StoreConfig& cfg) {
  if (cfg.workers == 0) return Status::InvalidArgument("workers must be >= 1");
  if (cfg.max_key_bytes == 0 || cfg.max_key_bytes > kMaxKeyBytes || cfg.max_value_bytes > kMaxValueBytes) {
    return Status::InvalidArgument("max_key_bytes / max_value_bytes beyond the layout limits");
  }
  if (EntryBytes(cfg.max_key_bytes, cfg.max_value_bytes) > cfg.segment_bytes) {
    return Status::InvalidArgument("segment_bytes smaller than the largest entry");
  }
  if (!cfg.data_dir.empty() && cfg.mode != CapacityMode::kStore) {
    return Status::InvalidArgument("a data dir needs store mode: cache mode keeps no files");
  }
  auto index = Index::Create(cfg.index_homes, cfg.index_window, cfg.grace_period, cfg.huge_pages);
  if (!index.ok()) return index.status();
  auto log = ValueLog::Create(cfg, cfg.workers + 1);
  if (!log.ok()) return log.status();
  StoreConfig c = cfg;
  std::unique_ptr<DurableLog> durable;
  if (!cfg.data_dir.empty()) {
    DurableLogConfig dc;
    dc.fs = cfg.file_system != nullptr ? cfg.file_system : &PosixFileSystem();
    dc.dir = cfg.data_dir;
    dc.fsync = cfg.fsync;
    dc.segment_bytes = cfg.segment_bytes;
    dc.segment_count = (*log)->segment_count();
    dc.heads = cfg.workers + 1;
    dc.log_base = (*log)->data();
    auto d = DurableLog::Open(dc, &c.seed);  // an existing dir's seed replaces ours
    if (!d.ok()) return d.status();
    durable = std::move(d).value();
  }
  if (durable && cfg.huge_pages == HugePages::kAuto && (*log)->backing() != Arena::Backing::kHugeTlb) {
    // Recovery reads the files into the log's fresh pages, and a fresh page
    // costs its first touch: zeroing, and on a VM whose balloon reports free
    // pages to the host (free page reporting), a fault on the host as well.
    // Reserved huge pages are never handed back (DESIGN "Recovery").
    auto huge_pages_of = [](uint64_t bytes) { return (bytes + kHugePageBytes - 1) / kHugePageBytes; };
    const uint64_t pages = huge_pages_of((*log)->bytes()) + huge_pages_of((*index)->bytes());
    KVRDMA_LOG_INFO("store: the log is on %s: a restart's recovery faults in each of its pages fresh, which can "
                    "take longer than reading the files; to recover at the disk's speed, start with %llu huge "
                    "pages of 2 MiB free for index and log (HugePages_Free in /proc/meminfo; reserve them with "
                    "sysctl vm.nr_hugepages)",
                    Arena::BackingName((*log)->backing()), static_cast<unsigned long long>(pages));
  }
  std::unique_ptr<Store> s(new Store(c, std::move(index).value(), std::move(log).value()));
  if (durable) {
    s->durable_ = std::move(durable);
    KVRDMA_RETURN_IF_ERROR(s->Recover());
    s->log_->set_durable(s->durable_.get());
  }
  KVRDMA_LOG_INFO("store: %llu index homes (windows of %llu words), log %llu bytes in %u segments, %s mode, grace %lld us",
                  static_cast<unsigned long long>(cfg.index_homes),
                  static_cast<unsigned long long>(cfg.index_window),
                  static_cast<unsigned long long>(cfg.log_bytes), s->log_->segment_count(),
                  cfg.mode == CapacityMode::kCache ? "cache" : "store",
                  static_cast<long long>(cfg.grace_period.count() / 1000));
  if (cfg.cleaner_thread) s->cleaner_ = std::thread([p = s.get()] { p->CleanerLoop(); });
  return s;
}

Store::Store(const StoreConfig& cfg, std::unique_ptr<Index> index, std::unique_ptr<ValueLog> log)
    : cfg_(cfg),
      cleaner_head_(cfg.workers),
      index_(std::move(index)),
      log_(std::move(log)),
      head_stats_(new HeadStats[cfg.workers + 1]) {}

Store::~Store() {
  {
    std::lock_guard<std::mutex> lock(cleaner_mu_);
    cleaner_stop_ = true;
  }
  cleaner_cv_.notify_all();
  if (cleaner_.joinable()) cleaner_.join();
}

Status Store::Recover() {
  const auto t0 = std::chrono::steady_clock::now();
  // Each write read goes straight into the index: a key's newest write (the
  // highest version) holds its word; every other write read is superseded
  // (and marked again: its mark may not have reached the disk before the
  // crash). Tombstones hold words too, as after any DELETE (the cleaner
  // purges them).
  std::vector<uint64_t> superseded;
  uint64_t max_version = 0;
  Status failed;
  HeadStats& hs = head_stats_[cleaner_head_];
  const uint64_t homes = index_->home_count();
  // The keys installed so far, one bit of each key's hash (8 bits per index
  // word, at most 2^31 bits: an eighth of the index's bytes at most, on
  // huge pages where there are, freed when recovery returns). A key whose
  // bit is clear is not in the index: its install takes the first empty
  // word from its home and skips the scan of its window (16 cache lines:
  // most of an install's time when the keys are new). A set bit (the key,
  // or another key with the same bit) scans the window.
  const uint64_t seen_bits = std::bit_ceil(std::min<uint64_t>(index_->words() * 8, uint64_t{1} << 31));
  const int seen_shift = 64 - std::countr_zero(seen_bits);
  // Huge pages when the pool has them, never required (--huge-pages on asks
  // them for index and log, which the operator sized the pool for).
  auto seen_arena = Arena::Create(std::max<uint64_t>(8, seen_bits / 8),
                                  cfg_.huge_pages == HugePages::kOff ? HugePages::kOff : HugePages::kAuto,
                                  "recovery's key filter");
  if (!seen_arena.ok()) return seen_arena.status();
  uint64_t* const seen = reinterpret_cast<uint64_t*>(seen_arena->data());
  auto seen_bit = [seen_shift](uint64_t hash) { return (hash * 0x9E3779B97F4A7C15ull) >> seen_shift; };
  // Counted here, added to the counters once: the install is the bound of
  // a small-value recovery, and each relaxed add is a locked instruction.
  int64_t items = 0, tombstones = 0, file_live = 0;  // file_live: the current file's segment's
  auto install_one = [&](const DurableLog::Write& w) {
    const uint64_t off = w.entry_off, version = w.version;
    ++recovered_writes_;
    max_version = std::max(max_version, version);
    const EntryHeader h = ReadHeader(off);
    const std::string_view key = EntryKey(off, h);
    const bool tomb = LengthsTombstone(h.lengths);
    const KeyHash kh = KeyHashOf(w.key_hash, homes);  // MakeKeyHash(key, cfg_.seed, homes): the dir's seed is ours
    const uint64_t ref = PackRef(kh.fingerprint, SizeClassFor(LengthsEntryBytes(h.lengths)), off);
    // No window lock: no other thread uses the index until the recovery
    // returns (the cleaner and the workers start after it), and the install
    // is the bound of a small-value recovery (MakeRoom locks as it hops).
    const uint64_t bit = seen_bit(kh.hash);
    for (int attempt = 0; attempt < 4 * kInsertAttempts; ++attempt) {
      uint64_t empty = Found::kNone;
      Found cur;
      if ((seen[bit / 64] >> (bit % 64) & 1) != 0) {
        cur = FindKeyAlone(kh, key, &empty);
      } else {
        empty = FirstEmptyWord(kh.home);
      }
      if (cur.found() && EntryVersion(RefLogOffset(cur.ref)) >= version) {
        superseded.push_back(off);  // older (or the cleaner's other copy of the same write)
        return;
      }
      const uint64_t word = cur.found() ? cur.word : empty;
      if (word != Found::kNone) {
        if (cur.found()) {
          superseded.push_back(RefLogOffset(cur.ref));
          log_->AddLive(RefLogOffset(cur.ref),
                        -static_cast<int64_t>(kLeaderBytes + LengthsEntryBytes(cur.header.lengths)));
          --(LengthsTombstone(cur.header.lengths) ? tombstones : items);
        }
        index_->StoreRef(word, ref);
        seen[bit / 64] |= uint64_t{1} << (bit % 64);
        // Published now (its NOT-CURRENT bit may be set in its file: it
        // was written before its publication); set again below if a newer
        // write of its key comes later.
        Publish(off);
        file_live += static_cast<int64_t>(kLeaderBytes + LengthsEntryBytes(h.lengths));
        ++(tomb ? tombstones : items);
        return;
      }
      Status room = index_->MakeRoom(kh, [this](uint64_t r) { return HashOfRef(r); });
      if (!room.ok() && room.code() != Status::Code::kRetry) break;
    }
    failed = Status::ServerFull("the index has no room for the data dir's keys: raise --index-mb");
  };
  // The writes of one file, in order (DurableLog::Load calls this on this
  // thread while its reading thread reads the next files), each key hashed
  // by the walk that checked it; the windows a few writes ahead are fetched
  // into the cache while this one is installed.
  auto install = [&](uint32_t, std::span<const DurableLog::Write> writes) {
    constexpr size_t kPrefetchAhead = 8;
    for (size_t i = 0; i < writes.size() && failed.ok(); ++i) {
      if (i + kPrefetchAhead < writes.size()) {
        const uint64_t ahead = writes[i + kPrefetchAhead].key_hash;
        const uint64_t bit = seen_bit(ahead);
        __builtin_prefetch(&seen[bit / 64]);
        index_->PrefetchHome(KeyHashOf(ahead, homes).home);
      }
      install_one(writes[i]);
    }
    // Every write of a file is in its segment (a superseded one of an older
    // file gave its bytes back above, to its own).
    if (!writes.empty()) log_->AddLive(writes.front().entry_off, file_live);
    file_live = 0;
  };
  auto report = [](const std::string& m, bool damage) {
    if (damage) {
      KVRDMA_LOG_ERROR("recovery: %s", m.c_str());
    } else {
      KVRDMA_LOG_WARN("recovery: %s", m.c_str());
    }
  };
  DurableLog::LoadTimes times;
  auto segs = durable_->Load(install, report, &times);
  if (!segs.ok()) return segs.status();
  KVRDMA_RETURN_IF_ERROR(failed);
  hs.items.fetch_add(items, std::memory_order_relaxed);
  hs.tombstones.fetch_add(tombstones, std::memory_order_relaxed);
  for (const DurableLog::Segment& g : *segs) {
    KVRDMA_RETURN_IF_ERROR(log_->Restore(g.slot, g.open_seq, g.used));
    recovered_bytes_ += g.used;
  }
  recovered_segments_ = segs->size();
  write_seq_.store(max_version, std::memory_order_relaxed);
  for (const uint64_t off : superseded) {
    Supersede(off);
    // Its newer write is on disk already: the mark waits for nothing.
    durable_->QueueMark(off, LengthsEntryBytes(ReadHeader(off).lengths), 0, 0);
  }
  recovered_keys_ = static_cast<uint64_t>(hs.items.load(std::memory_order_relaxed));
  recovery_ms_ = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
  recovery_times_ = times;
  KVRDMA_LOG_INFO("store: recovered %llu keys from %llu writes in %llu segment files (%llu bytes) of %s in %llu ms "
                  "(reading thread: read %.0f ms; either thread: check %.0f ms; this thread: install %.0f ms, waiting for reads "
                  "%.0f ms); writes resume at version %llu",
                  static_cast<unsigned long long>(recovered_keys_), static_cast<unsigned long long>(recovered_writes_),
                  static_cast<unsigned long long>(recovered_segments_),
                  static_cast<unsigned long long>(recovered_bytes_), durable_->dir().c_str(),
                  static_cast<unsigned long long>(recovery_ms_), static_cast<double>(times.read_ns) / 1e6,
                  static_cast<double>(times.check_ns) / 1e6, static_cast<double>(times.install_ns) / 1e6,
                  static_cast<double>(times.wait_ns) / 1e6, static_cast<unsigned long long>(max_version + 1));
  return Status::OK();
}

Status Store::Commit(uint32_t worker) {
  if (!durable_) return Status::OK();
  return durable_->Commit(worker, log_->HeadSegment(worker), log_->HeadUsed(worker));
}

Status Store::ForgetSegmentFile(uint32_t seg, bool tombstones) {
  KVRDMA_RETURN_IF_ERROR(
      durable_->Commit(cleaner_head_, log_->HeadSegment(cleaner_head_), log_->HeadUsed(cleaner_head_)));
  KVRDMA_RETURN_IF_ERROR(durable_->Settle(seg, tombstones, cfg_.mark_wait));
  if (Status st = durable_->RemoveSegment(seg); !st.ok()) {
    // Its bytes are all superseded or copied (and marked): left behind, the
    // file costs disk space, never a wrong answer (DESIGN "Durability").
    KVRDMA_LOG_ERROR("store: removing the file of segment %u: %s", seg, st.ToString().c_str());
  }
  return Status::OK();
}

Status Store::CheckKey(std::string_view key) const {
  if (key.empty()) return Status::InvalidArgument("empty key");
  if (key.size() > cfg_.max_key_bytes) return Status::TooLarge("key longer than max_key_bytes");
  return Status::OK();
}

Result<uint64_t> Store::Delete(uint32_t worker, std::string_view key, const CommitCheck& check,
                              bool wait_for_space) {
  if (worker >= cfg_.workers) return Status::InvalidArgument("bad worker id");
  KVRDMA_RETURN_IF_ERROR(CheckKey(key));
  return Write(worker, key, {}, /*tombstone=*/true, check, wait_for_space);
}

Result<uint64_t> Store::ReserveSpace(uint32_t head, uint64_t bytes, bool wait_for_space) {
  auto r = log_->Reserve(head, bytes, /*may_use_reserve=*/false);
  if (r.ok() || r.status().code() != Status::Code::kNoResource) return r;
  // The log is short of free segments. Store mode: kick the cleaner and wait
  // up to full_wait + grace for it, then ServerFull. Cache mode makes room
  // instead: each waiting writer has a segment of its own on the way (it
  // evicts the oldest sealed one unless as many are already waiting out
  // their grace period as there are writers waiting), and a wait ends in
  // ServerFull only after full_wait + grace without any segment retired (by
  // a writer or the cleaner): never while room is being made, e.g. when
  // another writer took the segment this one waited for (issue 25 item 12,
  // Store.CacheModeSmallLogNeverRefusesAValueThatFits). Without
  // `wait_for_space` (the worker has other connections' requests waiting:
  // DESIGN "A full log does not hold the worker") it makes room but does not
  // wait: ServerFull at once.
  // A durable store: the cleaner removes a compacted segment's file only
  // once the writes that superseded its entries are in their files
  // (DurableLog::Settle); this head's may be among them. Write them now,
  // before waiting for the room the cleaner makes (else both wait).
  if (durable_) (void)Commit(head);
  space_waiters_.fetch_add(1, std::memory_order_relaxed);
  struct Leave {
    std::atomic<uint32_t>& n;
    ~Leave() { n.fetch_sub(1, std::memory_order_relaxed); }
  } leave{space_waiters_};
  const auto wait = wait_for_space ? cfg_.full_wait + cfg_.grace_period : std::chrono::nanoseconds{0};
  auto deadline = ValueLog::Clock::now() + wait;
  uint64_t retirements = log_->Retirements();
  for (;;) {
    bool evicted = false;
    if (cfg_.mode == CapacityMode::kCache) {
      std::unique_lock<std::mutex> lock(evict_mu_, std::try_to_lock);
      if (lock.owns_lock() && log_->Count().retired < space_waiters_.load(std::memory_order_relaxed)) {
        const int64_t seg = log_->ClaimOldest();
        if (seg >= 0) {
          EvictSegment(head, static_cast<uint32_t>(seg));
          evicted = true;
        }
      }
    } else {
      std::lock_guard<std::mutex> lock(cleaner_mu_);
      cleaner_kick_ = true;
      cleaner_cv_.notify_one();
    }
    const auto now = ValueLog::Clock::now();
    if (cfg_.mode == CapacityMode::kCache) {
      if (const uint64_t n = log_->Retirements(); n != retirements) {
        retirements = n;
        deadline = std::max(deadline, now + wait);
      }
    }
    if (!evicted) {
      if (now >= deadline) return Status::ServerFull("value log full");
      log_->WaitForFree(std::min(deadline, now + std::chrono::milliseconds(1)));
    }
    r = log_->Reserve(head, bytes, /*may_use_reserve=*/false);
    if (r.ok() || r.status().code() != Status::Code::kNoResource) return r;
  }
}

inline void Store::WriteEntry(uint64_t off, std::string_view key, std::string_view value, bool tombstone,
                              uint64_t version) noexcept {
  const uint32_t lengths = WriteEntryFrame(off, key, static_cast<uint32_t>(value.size()), tombstone, version);
#ifndef KVRDMA_TSAN  // there every store into the log goes through RacyStore's atomic copy
  if (value.size() >= kFusedCopyMinBytes) [[unlikely]] {
    // A large value is copied into the log in the pass that checksums it:
    // read once, and the checksum is of the bytes the log holds.
    StoreUnpublishedGuard(off, EntryChecksumCopyIn(lengths, log_->data() + off + kEntryKeyOffset,
                                                   key.size() + value.size(), key.size(),
                                                   reinterpret_cast<const std::byte*>(value.data()), cfg_.seed));
    return;
  }
#endif
  if (!value.empty()) RacyStore(log_->data() + off + kEntryKeyOffset + key.size(), value.data(), value.size());
  ChecksumEntry(off, lengths);
}

inline uint32_t Store::WriteEntryFrame(uint64_t off, std::string_view key, uint32_t value_len, bool tombstone,
                                       uint64_t version) noexcept {
  StoreLeader(off, PackLeader(version));
  std::byte* p = log_->data() + off;
  const uint32_t lengths = PackLengths(key.size(), value_len, tombstone);
  RacyStore(p + LengthsAt(off), &lengths, sizeof(lengths));
  // The 0..3 padding bytes after the value: the entry's last 4-byte word is
  // zeroed first (one store of a constant size, not a copy call of 0..3
  // bytes), and the key and value stores then overwrite what of it is theirs
  // (a key of at least one byte: the word lies past the header).
  static constexpr uint32_t kZero = 0;
  static_assert(kEntryKeyOffset % 4 == 0 && kEntryAlign == 4, "an entry with a key ends at least a word past its header");
  RacyStore(p + EntryBytes(key.size(), value_len) - sizeof(kZero), &kZero, sizeof(kZero));
  RacyStore(p + kEntryKeyOffset, key.data(), key.size());
  return lengths;
}

inline void Store::ChecksumEntry(uint64_t off, uint32_t lengths) noexcept {
  // Checksum over the entry as it is in the log (our own stores, or a READ
  // that has completed: no race).
  StoreUnpublishedGuard(off, ChecksumOf(off, lengths));
}

inline void Store::StoreUnpublishedGuard(uint64_t off, uint64_t checksum) noexcept {
  // The not-current bit SET: the entry is unpublished. Only Publish, after
  // the caller's ref store, clears it (DESIGN.md, "The not-current bit"); an
  // entry that is never published (a tombstone of an absent key, a
  // ServerFull leftover) never validates as current.
  GuardWord(off).store(checksum | kGuardNotCurrentBit, std::memory_order_relaxed);
}

inline uint64_t Store::ChecksumOf(uint64_t off, uint32_t lengths) const noexcept {
  return EntryChecksum(lengths, log_->data() + off + kEntryKeyOffset,
                       size_t{LengthsKey(lengths)} + LengthsValue(lengths), cfg_.seed);
}

Status Store::MeetsChecksum(uint64_t off, uint64_t expected) const {
  if ((GuardWord(off).load(std::memory_order_relaxed) & kGuardChecksumMask) == expected) return Status::OK();
  return Status::InvalidArgument("checksum mismatch: the value is not the one the checksum was computed over; "
                                 "nothing written");
}

inline Store::Found Store::FindKey(const KeyHash& kh, std::string_view key, uint64_t* first_empty) const {
  // The first empty word in a local, stored once (not through the pointer at
  // every word), and the window's end computed once.
  uint64_t empty = Found::kNone;
  const uint64_t end = kh.home + index_->window_words();
  for (uint64_t w = kh.home; w < end; ++w) {
    const uint64_t s = index_->LoadRef(w);
    if (s == kEmptyRef) {
      if (empty == Found::kNone) empty = w;
      continue;
    }
    if (RefFingerprint(s) != kh.fingerprint) continue;
    const EntryHeader h = ReadHeader(RefLogOffset(s));
    if (const std::string_view k = EntryKey(RefLogOffset(s), h);
        k.size() == key.size() && KeyBytesEqual(k.data(), key.data(), k.size())) {
      if (first_empty != nullptr) *first_empty = empty;
      return Found{w, s, h};
    }
  }
  if (first_empty != nullptr) *first_empty = empty;
  return {};
}

Store::Found Store::FindKeyAlone(const KeyHash& kh, std::string_view key, uint64_t* first_empty) const {
  const std::span<const std::byte> window(index_->data() + kh.home * kWordBytes,
                                          index_->window_words() * kWordBytes);
  WindowProbe probe;
  if (!ProbeWindow(window, kh, index_params(), &probe).ok()) return FindKey(kh, key, first_empty);
  *first_empty = FirstEmptyWord(kh.home);
  for (int i = NextCandidate(probe, 0); i >= 0; i = NextCandidate(probe, i + 1)) {
    const uint64_t w = kh.home + static_cast<uint64_t>(i);
    const uint64_t s = index_->LoadRef(w);
    const EntryHeader h = ReadHeader(RefLogOffset(s));
    if (const std::string_view k = EntryKey(RefLogOffset(s), h);
        k.size() == key.size() && KeyBytesEqual(k.data(), key.data(), k.size())) {
      return Found{w, s, h};
    }
  }
  return {};
}

uint64_t Store::FirstEmptyWord(uint64_t home) const {
  for (uint64_t w = home; w < home + index_->window_words(); ++w) {
    if (index_->LoadRef(w) == kEmptyRef) return w;
  }
  return Found::kNone;
}

Store::Found Store::FindLocation(const KeyHash& kh, uint64_t off) const {
  for (uint64_t w = kh.home; w < kh.home + index_->window_words(); ++w) {
    const uint64_t s = index_->LoadRef(w);
    if (s != kEmptyRef && RefLogOffset(s) == off && RefFingerprint(s) == kh.fingerprint) {
      return Found{w, s, ReadHeader(off)};
    }
  }
  return {};
}

Store::Found Store::FindTombstone(const KeyHash& kh) const {
  for (uint64_t w = kh.home; w < kh.home + index_->window_words(); ++w) {
    const uint64_t s = index_->LoadRef(w);
    if (s == kEmptyRef) continue;
    const EntryHeader h = ReadHeader(RefLogOffset(s));
    if (LengthsTombstone(h.lengths)) return Found{w, s, h};
  }
  return {};
}

uint64_t Store::HashOfRef(uint64_t ref) const noexcept {
  const uint64_t off = RefLogOffset(ref);
  if (off + kEntryHeaderBytes > log_->bytes()) return 0;
  // Racy when called without the lock (MakeRoom's search; it re-checks under
  // the lock): the entry may be recycled and rewritten meanwhile, so every
  // byte is copied with RacyCopy, and garbage only gives a wrong hash.
  uint32_t lengths;
  RacyCopy(&lengths, log_->data() + off + LengthsAt(off), sizeof(lengths));
  const uint32_t klen = LengthsKey(lengths);
  if (klen == 0 || off + kEntryKeyOffset + klen > log_->bytes()) return 0;
  char key[kMaxKeyBytes];
  RacyCopy(reinterpret_cast<std::byte*>(key), log_->data() + off + kEntryKeyOffset, klen);
  return HashKeyBytes(std::string_view(key, klen), cfg_.seed);
}

void Store::RemoveRef(uint32_t head, const Found& r) {
  const uint64_t off = RefLogOffset(r.ref);
  Supersede(off);
  index_->StoreRef(r.word, kEmptyRef);
  log_->AddLive(off, -static_cast<int64_t>(kLeaderBytes + LengthsEntryBytes(r.header.lengths)));
  HeadStats& st = head_stats_[head];
  if (LengthsTombstone(r.header.lengths)) {
    st.tombstones.fetch_sub(1, std::memory_order_relaxed);
  } else {
    st.items.fetch_sub(1, std::memory_order_relaxed);
  }
}

bool Store::EvictOldestCandidate(uint32_t head, const KeyHash& kh) {
  Found oldest;
  uint64_t oldest_seq = UINT64_MAX;
  for (uint64_t w = kh.home; w < kh.home + index_->window_words(); ++w) {
    const uint64_t s = index_->LoadRef(w);
    if (s == kEmptyRef) continue;
    const uint64_t seq = log_->OpenSeq(RefLogOffset(s));
    if (seq < oldest_seq) {
      oldest_seq = seq;
      oldest = Found{w, s, ReadHeader(RefLogOffset(s))};
    }
  }
  if (!oldest.found()) return false;
  const bool value = !LengthsTombstone(oldest.header.lengths);
  if (cfg_.on_evict && value) cfg_.on_evict(EntryKey(RefLogOffset(oldest.ref), oldest.header));
  RemoveRef(head, oldest);
  if (cfg_.on_evicted && value) cfg_.on_evicted(EntryKey(RefLogOffset(oldest.ref), oldest.header));
  head_stats_[head].evictions.fetch_add(1, std::memory_order_relaxed);
  return true;
}

Result<uint64_t> Store::Write(uint32_t head, std::string_view key, std::string_view value, bool tombstone,
                             const CommitCheck& check, bool wait_for_space, const uint64_t* expected_checksum) {
  const KeyHash kh = MakeKeyHash(key, cfg_.seed, index_->home_count());
  const uint64_t bytes = LogBytes(key.size(), value.size());
  uint64_t at;
  if (!log_->TryReserve(head, bytes, &at)) {  // the head's segment is full: a new one, or a wait
    auto reserved = ReserveSpace(head, bytes, wait_for_space);
    if (!reserved.ok()) return reserved.status();
    at = *reserved;
  }
  const uint64_t off = at + kLeaderBytes;  // the entry, after its leader
  // A checksum to meet: the entry is written (unpublished, version 0) and
  // checked now, over the log's own copy; under the lock only its leader
  // gets the version. Refused, it stays as any refused write does.
  const bool prewritten = expected_checksum != nullptr;
  if (prewritten) {
    WriteEntry(off, key, value, tombstone, 0);
    KVRDMA_RETURN_IF_ERROR(MeetsChecksum(off, *expected_checksum));
  }
  return IndexWrite(head, kh, off, key, value, tombstone, check, prewritten);
}

inline Result<uint64_t> Store::IndexWrite(uint32_t head, const KeyHash& kh, uint64_t off,
                                         std::string_view key, std::string_view value, bool tombstone,
                                         const CommitCheck& check, bool prewritten) {
  const uint64_t bytes = LogBytes(key.size(), value.size());  // leader + entry
  const uint64_t size_class = SizeClassFor(EntryBytes(key.size(), value.size()));
  HeadStats& st = head_stats_[head];
  // The clock is read only with tags queued (hops are rare; a write read
  // it every time before).
  if (index_->TagsQueued()) index_->ExpireTags(Index::Clock::now());
  for (int attempt = 0;; ++attempt) {
    Index::WindowGuard guard = index_->LockWindow(kh.home);
    // The commit point: nothing from here to the ref's store can block.
    uint64_t empty;
    const Found cur = FindKey(kh, key, &empty);
    const bool had_value = cur.found() && !LengthsTombstone(cur.header.lengths);
    if (Status ok = check(kh.hash, had_value ? EntryVersion(RefLogOffset(cur.ref)) : 0); !ok.ok()) {
      if (!prewritten) WriteEntry(off, key, value, tombstone, 0);  // never published: keeps the segment walkable
      return ok;
    }
    if (tombstone && !had_value) {
      if (!prewritten) WriteEntry(off, key, {}, true, 0);  // never published: keeps the segment walkable
      return Status::NotFound();
    }
    uint64_t word = cur.found() ? cur.word : empty;
    if (word == Found::kNone) {
      // Reuse the ref of another key's tombstone: that key stays deleted.
      const Found tomb = FindTombstone(kh);
      if (tomb.found()) {
        RemoveRef(head, tomb);
        word = tomb.word;
      }
    }
    if (word == Found::kNone) {
      guard.Unlock();
      Status room = attempt < kInsertAttempts
                        ? index_->MakeRoom(kh, [this](uint64_t ref) { return HashOfRef(ref); })
                        : Status::ServerFull("index full");
      if (room.ok() || room.code() == Status::Code::kRetry) continue;
      if (cfg_.mode == CapacityMode::kCache && attempt < 2 * kInsertAttempts) {
        Index::WindowGuard g2 = index_->LockWindow(kh.home);
        EvictOldestCandidate(head, kh);
        continue;
      }
      if (!prewritten) WriteEntry(off, key, value, tombstone, 0);  // never published (see WriteEntry)
      return Status::ServerFull("index full");
    }
    const uint64_t version = write_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
    // 1. the new entry, complete and checksummed, not yet current;
    if (prewritten) {
      StoreLeader(off, PackLeader(version));  // the rest was written and checked above
    } else {
      WriteEntry(off, key, value, tombstone, version);
    }
    log_->AddLive(off, static_cast<int64_t>(bytes));
    if (cur.found()) {
      // 2. the old entry is marked superseded before the ref leaves it (and,
      //    in its segment file, no longer its key's newest write once this
      //    write is durable: DurableLog::QueueMark);
      Supersede(RefLogOffset(cur.ref));
      if (durable_) {
        durable_->QueueMark(RefLogOffset(cur.ref), LengthsEntryBytes(cur.header.lengths), off - kLeaderBytes,
                            off + EntryBytes(key.size(), value.size()));
      }
      log_->AddLive(RefLogOffset(cur.ref),
                    -static_cast<int64_t>(kLeaderBytes + LengthsEntryBytes(cur.header.lengths)));
    }
    // 3. the ref switches with a release store (DESIGN.md, "Ordering");
    index_->StoreRef(word, PackRef(kh.fingerprint, size_class, off));
    // 4. only now may the entry validate as current (the one-READ GET).
    Publish(off);
    // The counts change by the write's net effect, each at most once: a
    // value over a value (most PUTs) changes neither (it took a fetch_sub
    // and a fetch_add of items, two locked instructions, before).
    const int64_t items = (tombstone ? 0 : 1) - (had_value ? 1 : 0);
    const int64_t tombs = (tombstone ? 1 : 0) - (cur.found() && !had_value ? 1 : 0);
    if (items != 0) st.items.fetch_add(items, std::memory_order_relaxed);
    if (tombs != 0) st.tombstones.fetch_add(tombs, std::memory_order_relaxed);
    return version;
  }
}

Result<uint64_t> Store::BeginPut(uint32_t worker, std::string_view key, uint32_t value_len, bool wait_for_space) {
  if (worker >= cfg_.workers) return Status::InvalidArgument("bad worker id");
  KVRDMA_RETURN_IF_ERROR(CheckKey(key));
  if (value_len > cfg_.max_value_bytes) return Status::TooLarge("value longer than max_value_bytes");
  if (durable_) return Status::Internal("a durable store takes no values in place");
  auto reserved = ReserveSpace(worker, LogBytes(key.size(), value_len), wait_for_space);
  if (!reserved.ok()) return reserved.status();
  const uint64_t off = *reserved + kLeaderBytes;
  // Pinned while the segment is still this head's open one: no cleaner or
  // evictor can have claimed it, and none claims it until the unpin.
  log_->Pin(off);
  WriteEntryFrame(off, key, value_len, /*tombstone=*/false, 0);
  return off;
}

std::byte* Store::PlacedValue(uint64_t place) const noexcept {
  uint32_t lengths;
  std::memcpy(&lengths, log_->data() + place + LengthsAt(place), sizeof(lengths));
  return log_->data() + place + kEntryKeyOffset + LengthsKey(lengths);
}

Result<uint64_t> Store::FinishPut(uint32_t worker, uint64_t place, std::string_view key, uint32_t value_len,
                                  uint64_t expected_checksum, const CommitCheck& check) {
  struct Unpin {
    ValueLog& log;
    uint64_t off;
    ~Unpin() { log.Unpin(off); }
  } unpin{*log_, place};
  ChecksumEntry(place, ReadHeader(place).lengths);
  KVRDMA_RETURN_IF_ERROR(MeetsChecksum(place, expected_checksum));
  const KeyHash kh = MakeKeyHash(key, cfg_.seed, index_->home_count());
  const std::string_view value{reinterpret_cast<const char*>(PlacedValue(place)), value_len};
  return IndexWrite(worker, kh, place, key, value, /*tombstone=*/false, check, /*prewritten=*/true);
}

void Store::AbandonPut(uint64_t place) noexcept {
  ChecksumEntry(place, ReadHeader(place).lengths);
  log_->Unpin(place);
}

Status Store::Get(std::string_view key, std::string* value, uint64_t* version) {
  KVRDMA_RETURN_IF_ERROR(CheckKey(key));
  const KeyHash kh = MakeKeyHash(key, cfg_.seed, index_->home_count());
  Index::WindowGuard guard = index_->LockWindow(kh.home);
  const Found r = FindKey(kh, key);
  if (!r.found() || LengthsTombstone(r.header.lengths)) return Status::NotFound();
  const std::byte* p = log_->data() + RefLogOffset(r.ref) + kEntryKeyOffset + key.size();
  value->assign(reinterpret_cast<const char*>(p), LengthsValue(r.header.lengths));
  if (version != nullptr) *version = EntryVersion(RefLogOffset(r.ref));
  return Status::OK();
}

Status Store::CheckIndex() const {
  for (uint64_t w = 0; w < index_->words(); ++w) {
    const uint64_t ref = index_->LoadRef(w);
    if (ref == kEmptyRef) continue;
    const uint64_t off = RefLogOffset(ref);
    auto bad = [&](const char* why) {
      return Status::Corruption("index word " + std::to_string(w) + " (log offset " + std::to_string(off) + "): " + why);
    };
    if (off < kLeaderBytes || off + kEntryHeaderBytes > log_->bytes()) return bad("outside the log");
    const SegmentState st = log_->State(off);
    if (st == SegmentState::kFree || st == SegmentState::kRetired) return bad("in a free or retired segment");
    const EntryHeader h = ReadHeader(off);
    const uint64_t segment_end = (uint64_t{log_->SegmentOf(off)} + 1) * log_->segment_bytes();
    if (LengthsKey(h.lengths) == 0 || off + LengthsEntryBytes(h.lengths) > segment_end) return bad("malformed entry");
    if ((h.guard & kGuardChecksumMask) != ChecksumOf(off, h.lengths)) return bad("checksum mismatch");
    if ((h.guard & kGuardNotCurrentBit) != 0) return bad("entry not current");
    const KeyHash kh = MakeKeyHash(EntryKey(off, h), cfg_.seed, index_->home_count());
    if (w < kh.home || w >= kh.home + index_->window_words() || RefFingerprint(ref) != kh.fingerprint) {
      return bad("not in its key's window");
    }
  }
  return Status::OK();
}

StoreStats Store::Stats() const {
  StoreStats s;
  int64_t items = 0, tombs = 0;
  for (uint32_t h = 0; h <= cfg_.workers; ++h) {
    const HeadStats& hs = head_stats_[h];
    items += hs.items.load(std::memory_order_relaxed);
    tombs += hs.tombstones.load(std::memory_order_relaxed);
    s.evictions += static_cast<uint64_t>(hs.evictions.load(std::memory_order_relaxed));
    s.relocations += static_cast<uint64_t>(hs.relocations.load(std::memory_order_relaxed));
    s.segments_cleaned += static_cast<uint64_t>(hs.segments_cleaned.load(std::memory_order_relaxed));
    s.cleaner_runs += static_cast<uint64_t>(hs.cleaner_runs.load(std::memory_order_relaxed));
  }
  s.items = static_cast<uint64_t>(items);
  s.tombstones = static_cast<uint64_t>(tombs);
  s.index_words_used = s.items + s.tombstones;
  s.index_homes = index_->home_count();
  s.index_bytes = index_->bytes();
  s.index_bytes_used = s.index_words_used * kWordBytes;
  s.log_bytes = log_->bytes();
  const ValueLog::Counts c = log_->Count();
  s.log_bytes_live = static_cast<uint64_t>(c.live_bytes);
  s.segments_free = c.free + c.retired;
  s.segments_retired = c.retired;
  s.segments_used = c.open + c.sealed + c.busy;
  s.segments_open = c.open;
  s.segments_sealed = c.sealed;
  s.segments_busy = c.busy;
  s.index_moves = index_->moves();
  s.index_tags = index_->tags_pending();
  if (durable_) {
    s.durable = true;
    s.disk = durable_->Stats();
    s.recovery_ms = recovery_ms_;
    s.recovered_writes = recovered_writes_;
    s.recovered_keys = recovered_keys_;
    s.recovered_segments = recovered_segments_;
    s.recovered_bytes = recovered_bytes_;
    s.recovery_times = recovery_times_;
  }
  return s;
}

}  // namespace kvrdma
