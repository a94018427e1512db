// Configuration of the server store: runtime options (StoreConfig) and the
// compile-time tunables of the index, log and cleaner, all in one place.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/format/format_constants.h"

namespace kvrdma {

// ---- compile-time tunables
inline constexpr size_t kLockStripes = 4096;           // index lock stripes, one per block of 128 words
inline constexpr size_t kHopscotchProbe = 4096;        // words searched for an empty one past the home
inline constexpr int kInsertAttempts = 8;              // displacement rounds before ServerFull
inline constexpr size_t kCleanerReserveSegments = 2;   // free segments only the cleaner may take
inline constexpr size_t kHugePageBytes = size_t{2} << 20;
static_assert((kLockStripes & (kLockStripes - 1)) == 0);

enum class CapacityMode : uint8_t {
  kStore,  // a full index or log answers ServerFull; nothing stored is lost
  kCache,  // the oldest entries are evicted to make room (counted)
};

enum class HugePages : uint8_t {
  kAuto,  // MAP_HUGETLB, else transparent huge pages (madvise), else normal pages
  kOn,    // MAP_HUGETLB or fail (NoResource)
  kOff,   // normal pages
};

// How a durable store flushes its writes (DurableLog, docs/DESIGN.md
// "Durability"; kvserver --fsync).
enum class FsyncMode : uint8_t {
  kAlways,    // a write is answered once it is on stable storage (group commit)
  kEverySec,  // answered once in the kernel; flushed at least once a second
  kNo,        // answered once in the kernel; the kernel decides when to flush
};

class FileSystem;

struct StoreConfig {
  // Index: index_homes homes (a power of two >= 1), each key within the
  // index_window words from its home (1..128; DESIGN.md
  // "Index words and windows"). Tests use small windows to make moves
  // and full windows common.
  uint64_t index_homes = uint64_t{1} << 19;
  uint64_t index_window = kDefaultWindowWords;
  // Value log: log_bytes / segment_bytes segments (both multiples of 8;
  // log_bytes a multiple of segment_bytes).
  uint64_t log_bytes = uint64_t{256} << 20;
  uint64_t segment_bytes = uint64_t{4} << 20;
  // Worker threads that call Put/Delete; each has its own log head. Worker ids
  // are 0..workers-1 and a worker id is used by one thread at a time.
  uint32_t workers = 1;
  CapacityMode mode = CapacityMode::kStore;
  HugePages huge_pages = HugePages::kAuto;
  // XXH3 seed for keys and checksums (clients learn it at connect time).
  uint64_t seed = 0x6b7672646d61ull;
  // Limits (<= the layout's kMaxKeyBytes / kMaxValueBytes).
  uint32_t max_key_bytes = 1023;
  uint32_t max_value_bytes = 1u << 20;
  // A segment freed by the cleaner is reused only after this long. Clients
  // must finish (or abandon and restart) a GET round within a round limit strictly
  // shorter than this; see docs/DESIGN.md "Reclamation".
  std::chrono::nanoseconds grace_period = std::chrono::milliseconds(100);
  // Sealed segments whose live ratio is below this are compacted.
  double clean_live_ratio = 0.5;
  // The cleaner works to keep at least this many segments free (compacting
  // the emptiest segments, or in cache mode evicting the oldest).
  uint32_t min_free_segments = 4;
  // Run the background cleaner thread (tests may drive it by hand instead).
  bool cleaner_thread = true;
  // Between cleaner passes; idle passes back off to 16x this.
  std::chrono::microseconds cleaner_interval = std::chrono::microseconds(500);
  // Store mode: how long (plus grace_period) an append waits for the cleaner
  // to free a segment before answering ServerFull. Cache mode: how long
  // (plus grace_period) it waits with no segment retired at all; while
  // evictions make room it keeps waiting.
  std::chrono::milliseconds full_wait = std::chrono::milliseconds(200);
  // Cache mode, tests: called just before an eviction removes a key's value
  // (under the key's window lock, on the evicting thread), so that a
  // linearizability check can count the eviction as a DELETE. Empty: unused.
  std::function<void(std::string_view key)> on_evict;
  // ... and right after it removed it (the key's word cleared, the lock
  // still held): the eviction took effect between the two calls.
  std::function<void(std::string_view key)> on_evicted;
  // Durable store (store mode only): the data dir holding the log's segment
  // files; empty: memory only, a restart loses everything. A dir that
  // already holds data is recovered by Open (and its hash seed replaces
  // `seed`).
  std::string data_dir;
  FsyncMode fsync = FsyncMode::kEverySec;
  // How long the cleaner waits, before it removes a compacted segment's
  // file, for the writes that superseded its entries to reach their files
  // (each worker's next Commit); after that it keeps the segment and tries
  // again later (DESIGN "Durability").
  std::chrono::milliseconds mark_wait = std::chrono::milliseconds(1000);
  // The file system under the data dir: nullptr is the real one
  // (PosixFileSystem); tests pass a FaultFileSystem.
  FileSystem* file_system = nullptr;
};

}  // namespace kvrdma
