// Store: the server side of the key-value store. Owns the index and the value
// log (both RDMA-visible arenas), changes them on behalf of worker threads,
// and runs the cleaner.
//
// Threading: Put/Delete are called concurrently by up to `workers` threads,
// each with its own worker id (a worker id is used by one thread at a time).
// Get and Stats may be called from any thread. The cleaner runs on its own
// thread (StoreConfig::cleaner_thread) or by hand through RunCleanerOnce()
// (only one cleaner at a time). Nothing here throws; errors are Status.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/format/entry.h"
#include "common/format/read_path.h"
#include "common/memory/racy_copy.h"
#include "common/status.h"
#include "server/store/commit_check.h"
#include "server/store/durable_log.h"
#include "server/store/entry_leader.h"
#include "server/store/index.h"
#include "server/store/store_config.h"
#include "server/store/value_log.h"

namespace kvrdma {

struct StoreStats {
  uint64_t items = 0;             // keys with a value (tombstones excluded)
  uint64_t tombstones = 0;        // deleted keys whose tombstone still holds a ref
  uint64_t index_words_used = 0;  // items + tombstones
  uint64_t index_homes = 0;       // homes (the window's tail words not counted)
  uint64_t index_bytes = 0;       // size of the index region
  uint64_t index_bytes_used = 0;  // index_words_used * 8
  uint64_t log_bytes = 0;         // size of the log region
  uint64_t log_bytes_live = 0;    // bytes of entries the index points to
  uint64_t segments_free = 0;     // free (including retired, awaiting the grace period)
  uint64_t segments_retired = 0;  // waiting for the grace period
  uint64_t segments_used = 0;     // open + sealed + being cleaned
  uint64_t segments_open = 0;     // of segments_used: a head appends to it
  uint64_t segments_sealed = 0;   // of segments_used: full, waiting for the cleaner
  uint64_t segments_busy = 0;     // of segments_used: being compacted or evicted
  uint64_t cleaner_runs = 0;      // cleaner passes that reclaimed something
  uint64_t segments_cleaned = 0;  // segments compacted and retired
  uint64_t relocations = 0;       // live entries moved by the cleaner
  uint64_t evictions = 0;         // entries evicted (cache mode)
  uint64_t index_moves = 0;       // hops: refs moved inside their window to make room
  uint64_t index_tags = 0;        // words whose move tag has not expired yet
  // Durable store (zero when memory only): durable_log.h DurableStats, and
  // what the last Open recovered.
  bool durable = false;
  DurableStats disk;
  uint64_t recovery_ms = 0;            // wall time of the recovery in Open
  uint64_t recovered_writes = 0;       // valid writes read from the segment files
  uint64_t recovered_keys = 0;         // keys with a value after recovery
  uint64_t recovered_segments = 0;     // segment files read
  uint64_t recovered_bytes = 0;        // bytes of valid writes read
  DurableLog::LoadTimes recovery_times;  // where the recovery's time went
};

class Store {
 public:
  static Result<std::unique_ptr<Store>> Open(const StoreConfig& cfg);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Inserts or updates; returns the write's version: the store's write
  // sequence number (1 for the first write since Open, +1 per write of any
  // key), so a key's versions grow with each write of it.
  // InvalidArgument (bad worker id, empty key), TooLarge, ServerFull, or
  // what `check` returns (evaluated at the commit point, commit_check.h).
  // With a full log the write waits up to full_wait + grace_period for room
  // (the cleaner, or in cache mode an eviction); with wait_for_space false it
  // tries once (kicking the cleaner, evicting in cache mode) and answers
  // ServerFull at once (a worker with other connections' requests waiting).
  // expected_checksum (a rendezvous PUT: the client's): the entry is written
  // and checksummed before the commit point, over the log's copy, and the
  // write is refused (InvalidArgument, nothing published) unless its
  // checksum (EntryChecksum) is this one.
  Result<uint64_t> Put(uint32_t worker, std::string_view key, std::string_view value,
                       const CommitCheck& check = {}, bool wait_for_space = true,
                       const uint64_t* expected_checksum = nullptr);
  // A PUT whose value arrives in place (a rendezvous READ straight into the
  // log, DESIGN "Rendezvous PUTs"), in two steps on worker `worker`:
  //   BeginPut   reserves the entry (as Put: no wait unless wait_for_space),
  //              writes its leader (version 0), lengths and key, and pins
  //              its segment (no cleaner or evictor claims it) until
  //              FinishPut or AbandonPut. Returns the entry's place: the
  //              value's `value_len` bytes go to PlacedValue(place).
  //   FinishPut  checksums the log's copy (the entry stays dead, with a valid
  //              checksum, if it is not `expected_checksum`: InvalidArgument)
  //              and then does what Put does at the commit point; returns the
  //              version, or the refusal. The segment is unpinned.
  //   AbandonPut the value never came (the READ failed): the entry stays
  //              dead with a valid checksum; the segment is unpinned.
  // Memory-only stores (a durable store's head writes its segment in order:
  // Internal). REQUIRES: nothing writes the value's bytes once
  // FinishPut or AbandonPut has begun.
  Result<uint64_t> BeginPut(uint32_t worker, std::string_view key, uint32_t value_len, bool wait_for_space);
  std::byte* PlacedValue(uint64_t place) const noexcept;
  Result<uint64_t> FinishPut(uint32_t worker, uint64_t place, std::string_view key, uint32_t value_len,
                             uint64_t expected_checksum, const CommitCheck& check = {});
  void AbandonPut(uint64_t place) noexcept;
  bool durable() const noexcept { return durable_ != nullptr; }
  // Replaces the value with a tombstone; returns the write's version (as Put).
  // NotFound if the key has no value; or what `check` returns.
  Result<uint64_t> Delete(uint32_t worker, std::string_view key, const CommitCheck& check = {},
                          bool wait_for_space = true);
  // Durable store: makes worker `worker`'s writes so far survive kill -9,
  // and with FsyncMode::kAlways a power cut (DurableLog::Commit: group
  // commit). OK at once when memory only. A worker calls it before it
  // answers the writes it applied; an error (IOError) means they may not
  // survive a crash (they are applied in memory, and a later Commit writes
  // them again).
  Status Commit(uint32_t worker);

  // Server-side lookup (copies the value, and its version if `version` is
  // not null). NotFound if absent or deleted.
  Status Get(std::string_view key, std::string* value, uint64_t* version = nullptr);

  // One cleaner pass: compacts sealed segments below the live-ratio threshold
  // (and more when free segments run low; in cache mode evicts the oldest).
  // Returns the number of segments retired. REQUIRES: one caller at a time.
  size_t RunCleanerOnce();

  // Tests: every ref in the index names a current entry of its key's window
  // (lengths, checksum, hash) inside a segment in use (open, sealed or being
  // cleaned: never free or retired). Corruption naming the first word that
  // does not. REQUIRES: no write, cleaner pass or recovery under way.
  Status CheckIndex() const;

  StoreStats Stats() const;
  const StoreConfig& config() const noexcept { return cfg_; }
  IndexParams index_params() const noexcept {
    return IndexParams{index_->home_count(), index_->window_words(), cfg_.seed, log_->bytes()};
  }
  // The two regions to register with the NIC.
  std::byte* index_base() const noexcept { return index_->data(); }
  size_t index_bytes() const noexcept { return index_->bytes(); }
  std::byte* log_base() const noexcept { return log_->data(); }
  size_t log_bytes() const noexcept { return log_->bytes(); }
  // Reuse generation of the segment holding log offset `off` (tests).
  uint64_t SegmentGeneration(uint64_t off) const noexcept { return log_->Generation(off); }

 private:
  // Per-head counters; each written by the thread owning the head.
  struct alignas(64) HeadStats {
    std::atomic<int64_t> items{0}, tombstones{0}, evictions{0}, relocations{0}, segments_cleaned{0},
        cleaner_runs{0};
  };
  // Where a key's ref is (REQUIRES the key's window lock while used).
  struct Found {
    static constexpr uint64_t kNone = ~uint64_t{0};
    uint64_t word = kNone;  // index word holding the ref
    uint64_t ref = 0;
    EntryHeader header{};
    bool found() const noexcept { return word != kNone; }
  };

  Store(const StoreConfig& cfg, std::unique_ptr<Index> index, std::unique_ptr<ValueLog> log);
  // Open: rebuilds the log and the index from the data dir (durable_).
  Status Recover();
  // Compaction of a durable store: the cleaner's copies and the writes that
  // superseded the segment's entries durable (and every queued mark, if the
  // compaction drops `tombstones`), then the segment's file removed (before
  // Retire).
  Status ForgetSegmentFile(uint32_t seg, bool tombstones);
  Status CheckKey(std::string_view key) const;
  Result<uint64_t> Write(uint32_t head, std::string_view key, std::string_view value, bool tombstone,
                         const CommitCheck& check, bool wait_for_space, const uint64_t* expected_checksum = nullptr);
  // The index half of a write whose entry is reserved at `off` (written
  // and checksummed already if `prewritten`, else written here from
  // `value`): the commit point, then publish and supersede.
  // Inline into Write (a small PUT's path) and FinishPut.
  [[gnu::always_inline]] Result<uint64_t> IndexWrite(uint32_t head, const KeyHash& kh, uint64_t off,
                                                     std::string_view key, std::string_view value, bool tombstone,
                                                     const CommitCheck& check, bool prewritten);
  Result<uint64_t> ReserveSpace(uint32_t head, uint64_t bytes, bool wait_for_space);
  // Writes the leader (with `version`, 0 for a write that is refused) and the
  // entry into reserved log space (`off`: the entry's offset, after its
  // leader; RacyStore; checksum last), not current (unpublished) until
  // Publish. Inline, as FindKey (a small PUT's path: a call, and its saved
  // registers, less each).
  [[gnu::always_inline]] void WriteEntry(uint64_t off, std::string_view key, std::string_view value, bool tombstone,
                  uint64_t version) noexcept;
  // WriteEntry in two steps: everything but the value's bytes and the guard
  // (leader, lengths, key, padding: WriteEntryFrame), then the checksum over
  // the entry as it is in the log and the guard, not current (ChecksumEntry).
  // Both inline into WriteEntry (a small PUT's path). WriteEntryFrame
  // returns the entry's lengths word; ChecksumEntry takes it.
  [[gnu::always_inline]] uint32_t WriteEntryFrame(uint64_t off, std::string_view key, uint32_t value_len,
                                                  bool tombstone, uint64_t version) noexcept;
  [[gnu::always_inline]] void ChecksumEntry(uint64_t off, uint32_t lengths) noexcept;
  // The guard of the entry at `off`: `checksum` with the not-current bit set.
  [[gnu::always_inline]] void StoreUnpublishedGuard(uint64_t off, uint64_t checksum) noexcept;
  // The entry checksum of the entry at `off` as its bytes are in the log.
  [[gnu::always_inline]] uint64_t ChecksumOf(uint64_t off, uint32_t lengths) const noexcept;
  // OK if the guard ChecksumEntry wrote is `expected` (a rendezvous PUT's
  // checksum, from the client), else InvalidArgument.
  Status MeetsChecksum(uint64_t off, uint64_t expected) const;
  // The version in the leader of the entry at `off` (0: not a write, or dead).
  uint64_t EntryVersion(uint64_t off) const noexcept;
  // The leader of the entry at `off` (entry_leader.h).
  uint64_t LoadLeader(uint64_t off) const noexcept;
  void StoreLeader(uint64_t off, uint64_t leader) noexcept;

  EntryHeader ReadHeader(uint64_t off) const noexcept;
  // The guard word of the entry at `off` (entry.h: GuardAt).
  std::atomic_ref<uint64_t> GuardWord(uint64_t off) const noexcept;
  std::string_view EntryKey(uint64_t off, const EntryHeader& h) const noexcept;
  // REQUIRES: kh's window lock. The ref of `key` (found() false: none).
  // `first_empty` (if given): the first word of the window whose ref is
  // empty, or Found::kNone (the same scan: a write needs both).
  [[gnu::always_inline]] Found FindKey(const KeyHash& kh, std::string_view key,
                                       uint64_t* first_empty = nullptr) const;
  // FindKey for recovery, where no other thread writes the index (the
  // workers and the cleaner start after it): the window's words are read
  // plainly through ProbeWindow's vector filter (the clients' read path),
  // and only the words with the key's fingerprint are looked at one by one.
  Found FindKeyAlone(const KeyHash& kh, std::string_view key, uint64_t* first_empty) const;
  // REQUIRES: the window's lock, or that no other thread uses the index
  // (recovery). The first word of the window at `home` whose ref is empty,
  // or Found::kNone.
  uint64_t FirstEmptyWord(uint64_t home) const;
  // REQUIRES: kh's window lock. The ref pointing at log offset `off`.
  Found FindLocation(const KeyHash& kh, uint64_t off) const;
  // REQUIRES: kh's window lock. A tombstone ref in kh's window (any key).
  Found FindTombstone(const KeyHash& kh) const;
  // The hash of the key the live entry `ref` names (hopscotch; the caller
  // re-checks under the window lock, see Index::MakeRoom).
  uint64_t HashOfRef(uint64_t ref) const noexcept;
  // Sets the not-current bit of the entry at `off` (before its ref moves).
  void Supersede(uint64_t off) noexcept;
  // Clears it, once: REQUIRES the key's window lock and that a ref of the
  // key now points at `off` (stored before this call).
  void Publish(uint64_t off) noexcept;
  // Removes a ref (tombstone purge or eviction). REQUIRES its window lock.
  void RemoveRef(uint32_t head, const Found& r);
  // Index full in cache mode: evicts the oldest ref of kh's window. REQUIRES its lock.
  bool EvictOldestCandidate(uint32_t head, const KeyHash& kh);

  // Cleaner (cleaner.cc).
  bool CompactSegment(uint32_t seg);               // relocate live entries, retire
  size_t EvictSegment(uint32_t head, uint32_t seg);  // drop live entries, retire
  void CleanerLoop();

  const StoreConfig cfg_;
  const uint32_t cleaner_head_;  // == cfg_.workers
  std::unique_ptr<Index> index_;
  std::unique_ptr<ValueLog> log_;
  std::unique_ptr<DurableLog> durable_;  // null: memory only; after log_ (it writes from the log)
  std::unique_ptr<HeadStats[]> head_stats_;
  uint64_t recovery_ms_ = 0, recovered_writes_ = 0, recovered_keys_ = 0, recovered_segments_ = 0,
           recovered_bytes_ = 0;
  DurableLog::LoadTimes recovery_times_;
  // The last write's version (Write takes the next one under the key's
  // window lock, so a key's versions grow with each write of it).
  std::atomic<uint64_t> write_seq_{0};

  std::mutex evict_mu_;  // one segment eviction at a time (cache mode, workers)
  std::atomic<uint32_t> space_waiters_{0};  // writers in ReserveSpace short of a segment
  std::mutex cleaner_mu_;
  std::condition_variable cleaner_cv_;
  bool cleaner_stop_ = false;     // guarded by cleaner_mu_
  bool cleaner_kick_ = false;     // guarded by cleaner_mu_
  std::thread cleaner_;
};

// Inline: its checks cost a few compares, and StoreBackend::Put then calls
// Write directly (a call less per PUT).
inline Result<uint64_t> Store::Put(uint32_t worker, std::string_view key, std::string_view value,
                                   const CommitCheck& check, bool wait_for_space, const uint64_t* expected_checksum) {
  if (worker >= cfg_.workers) return Status::InvalidArgument("bad worker id");
  // CheckKey's refusal; a valid key costs two compares here, not a call and a Status.
  if (key.empty() || key.size() > cfg_.max_key_bytes) return CheckKey(key);
  if (value.size() > cfg_.max_value_bytes) return Status::TooLarge("value longer than max_value_bytes");
  return Write(worker, key, value, /*tombstone=*/false, check, wait_for_space, expected_checksum);
}

// The small accessors every write calls (some several times), inline here
// rather than calls into store.cc: cleaner.cc uses them too.
inline uint64_t Store::LoadLeader(uint64_t off) const noexcept {
  uint64_t leader;
  RacyCopy(&leader, log_->data() + off - kLeaderBytes, sizeof(leader));
  return leader;
}

inline void Store::StoreLeader(uint64_t off, uint64_t leader) noexcept {
  RacyStore(log_->data() + off - kLeaderBytes, &leader, sizeof(leader));
}

inline std::atomic_ref<uint64_t> Store::GuardWord(uint64_t off) const noexcept {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(log_->data() + off + GuardAt(off)));
}

inline EntryHeader Store::ReadHeader(uint64_t off) const noexcept {
  EntryHeader h;
  // The guard may be superseded concurrently (under the key's window lock,
  // which the cleaner's walk does not hold): load it atomically. The lengths
  // never change while the segment is in use.
  h.guard = GuardWord(off).load(std::memory_order_relaxed);
  std::memcpy(&h.lengths, log_->data() + off + LengthsAt(off), sizeof(h.lengths));
  return h;
}

inline std::string_view Store::EntryKey(uint64_t off, const EntryHeader& h) const noexcept {
  return {reinterpret_cast<const char*>(log_->data() + off + kEntryKeyOffset), LengthsKey(h.lengths)};
}

inline uint64_t Store::EntryVersion(uint64_t off) const noexcept { return LeaderVersion(LoadLeader(off)); }

inline void Store::Publish(uint64_t off) noexcept {
  std::atomic_ref<uint64_t> g = GuardWord(off);
  g.store(g.load(std::memory_order_relaxed) & kGuardChecksumMask, std::memory_order_release);
}

inline void Store::Supersede(uint64_t off) noexcept {
  std::atomic_ref<uint64_t> g = GuardWord(off);
  g.store(g.load(std::memory_order_relaxed) | kGuardNotCurrentBit, std::memory_order_release);
}

}  // namespace kvrdma
