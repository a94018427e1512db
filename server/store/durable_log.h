// DurableLog: the value log's segments kept in files, so that acknowledged
// writes survive kill -9 and (with --fsync always) a power cut
// (docs/DESIGN.md, "Durability"). The in-memory segments are the format on
// disk (segment_file.h): a write is not logged twice, its bytes are written
// from the log itself.
//
// Who calls what:
// - ValueLog, when a head opens a segment: OpenSegment (creates the file,
//   whole, so that writes into it cannot fail for want of space; with
//   kAlways it takes the spare file, made ahead with zeros, when one is
//   ready), then
//   HeadMoved (the tail of the segment it leaves is written by its next
//   Commit).
// - Store::Commit(head) -> Commit: the head's writes since the last Commit
//   go to their files (kAlways: pwrite; else copied through the file's mapping,
//   File::WriteMapped); with kAlways it then syncs (fdatasync) the
//   files the head wrote, on the calling thread: every write the caller
//   applied since its last Commit shares that flush (group commit), and
//   the heads' syncs run side by side (a commit waits for no other head's
//   flush, nor for a flusher's turn).
// - Store::Write, when a write supersedes an older entry: QueueMark. The
//   mark (a zero-version leader written over the old entry's, in its file)
//   is written only once (1) the old entry's own bytes are in its file, so
//   that no later write of that range brings its old leader back, and (2)
//   the newer write is in its file and a flush has made it durable since, so
//   that a mark on disk always has its newer write on disk beside it. Marks
//   are what lets the cleaner drop tombstones (DESIGN "Durability"). The
//   leader in memory is never changed: what a head writes to its file is the
//   leader its write was born with.
// - The cleaner, before a compacted segment's file goes: Settle (its copies
//   and the writes that superseded the segment's entries durable; the queued
//   marks written too if the compaction drops tombstones), then
//   RemoveSegment.
//
// - After every sync of a segment file that returned (a head's own, kAlways;
//   a flush round's): the file's synced bound record (segment_file.h), one
//   small write into its header region (kAlways: pwrite; else through the
//   mapping), made durable by the file's next sync. It is never ahead of
//   what a sync covered, so recovery may cut a hole it finds at or after it
//   as a power cut's unsynced tail. A segment opened under kAlways has its
//   header (and first record, bound 0) synced before any write in it: the
//   zeros' sync when it is allocated at open, one sync of its own when it
//   takes the spare.
//
// Threads: a flusher thread runs the flush rounds (fdatasync of every file
// written since the last round, then the marks queued before the round
// began): on demand (Settle), and at least once a second while something
// is unflushed (kEverySec; kNo writes marks but never flushes). A head's
// own syncs (kAlways) never clear what a round must flush: a file stays
// dirty for the rounds until a round syncs it.
// Each head is used by one thread at a time (as in ValueLog).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/store/file_system.h"
#include "server/store/store_config.h"

namespace kvrdma {

const char* FsyncModeName(FsyncMode m) noexcept;

struct DurableLogConfig {
  FileSystem* fs = nullptr;
  std::string dir;
  FsyncMode fsync = FsyncMode::kEverySec;
  uint64_t segment_bytes = 0;
  uint32_t segment_count = 0;
  uint32_t heads = 0;
  std::byte* log_base = nullptr;  // the value log (segment i at i * segment_bytes)
};

// Counters for metrics (all monotonic except segments_on_disk).
struct DurableStats {
  uint64_t flushes = 0;           // flush rounds that synced at least one file, and head syncs (kAlways)
  uint64_t flush_ns_total = 0;    // their wall time
  uint64_t flush_ns_max = 0;
  uint64_t commits_flushed = 0;   // Commit calls made durable by their sync (kAlways)
  uint64_t bytes_written = 0;     // segment bytes written to files
  uint64_t marks_written = 0;     // dead marks written
  uint64_t segments_on_disk = 0;  // segment files that exist
  uint64_t io_errors = 0;         // failed writes, flushes, creations
  uint64_t spares_on_disk = 0;    // the spare file (kAlways): 0 or 1
  uint64_t segments_from_spares = 0;  // segment files that were the spare (the rest were allocated at open)
  // Flush latency histogram: counts of flushes at or below each bound (ns).
  static constexpr uint64_t kFlushBucketsNs[] = {100'000, 300'000, 1'000'000, 3'000'000, 10'000'000,
                                                 30'000'000, 100'000'000, 1'000'000'000};
  static constexpr size_t kFlushBuckets = sizeof(kFlushBucketsNs) / sizeof(kFlushBucketsNs[0]);
  uint64_t flush_buckets[kFlushBuckets] = {};  // not cumulative; above the last bound: flushes - sum
};

class DurableLog {
 public:
  // Opens the data dir (creating it and its meta file if it has none). A new
  // dir takes *hash_seed; an existing one sets *hash_seed to its own and
  // refuses another segment size (InvalidArgument, naming both).
  static Result<std::unique_ptr<DurableLog>> Open(const DurableLogConfig& cfg, uint64_t* hash_seed);
  ~DurableLog();  // a last flush (kAlways/kEverySec), then the flusher stops
  DurableLog(const DurableLog&) = delete;
  DurableLog& operator=(const DurableLog&) = delete;

  // Recovery: reads every segment file (in open order) into log slots 0, 1,
  // ..., checks it, and calls `install(slot, writes)` with its writes whose
  // leader and entry validate, in file order (versions > 0 only: a zero
  // version is a write refused or known to be superseded). After a file's
  // last valid write: a torn tail if nothing but zeros follows the write
  // that fails to validate (the write a crash interrupted: cut, and reported
  // through `report` as a warning); if data follows it, an unsynced tail a
  // power cut left with a hole when the write starts at or after the file's
  // synced bound (segment_file.h; cut, and reported as a warning naming the
  // file, the offset and the bound); otherwise (before the bound, or a file
  // that records none) damage: reported, and Corruption naming the file,
  // the offset and what was expected.
  //
  // Two threads: a reading thread reads the files into their slots (up to
  // kLoadAhead files ahead) and checks their headers, while the calling
  // thread installs the ones already read. Each file is walked (every entry
  // checked, the keys hashed) by the reading thread when the calling thread
  // has kLoadAhead / 2 files or more waiting (the reads are ahead), else by
  // the calling thread before it installs it. `install` and `report` run on the calling thread only, file
  // after file, as a one-thread walk would call them (a file's reports
  // before its writes). A file that fails stops the load: the files before
  // it have been installed, none after it.
  struct Segment {
    uint32_t slot = 0;
    uint64_t open_seq = 0;
    uint64_t used = 0;  // bytes of valid writes (the torn tail cut)
  };
  struct Write {
    uint64_t entry_off;  // a log offset
    uint64_t version;
    uint64_t key_hash;   // HashKeyBytes of its key with the dir's hash seed
  };
  // Where recovery's time went (ns). read: the reading thread's wall time
  // reading files into the log; reader_cpu its CPU time (user and system:
  // the kernel zeroes the fresh pages the reads fill, and copies into them;
  // and the walks it takes). check: walking the files and checking every
  // entry, on both threads. On the calling thread: install, installing the
  // writes; install_cpu, its CPU time in that and its walks; wait, waiting
  // for the reading thread. CPU times say what each
  // part costs whatever else the machine runs.
  struct LoadTimes {
    uint64_t read_ns = 0, check_ns = 0, reader_cpu_ns = 0, install_ns = 0, install_cpu_ns = 0, wait_ns = 0;
  };
  static constexpr size_t kLoadAhead = 4;
  using InstallVisitor = std::function<void(uint32_t slot, std::span<const Write> writes)>;
  using Report = std::function<void(const std::string& message, bool damage)>;
  Result<std::vector<Segment>> Load(const InstallVisitor& install, const Report& report, LoadTimes* times = nullptr);

  // kvserver --verify: checks a data dir without changing it (meta file,
  // every segment file's header, every write's leader and checksum); each
  // problem goes to `report` (damage: true). Error: not a data dir.
  struct VerifySummary {
    uint64_t segment_bytes = 0, files = 0, writes = 0, bytes = 0, damaged = 0;
  };
  static Result<VerifySummary> Verify(FileSystem& fs, const std::string& dir, const Report& report);

  // ValueLog hooks (the head's owner thread). OpenSegment creates segment
  // `slot`'s file for open seq `open_seq` (allocated whole; its name made
  // durable unless kNo); on failure nothing is left behind. Then HeadMoved:
  // the head left `old_slot` (-1: none) after `old_used` bytes, whose tail
  // its next Commit writes, and appends to `new_slot`.
  Status OpenSegment(uint32_t slot, uint64_t open_seq);
  void HeadMoved(uint32_t head, int64_t old_slot, uint64_t old_used, uint32_t new_slot);

  // Writes head's bytes since its last Commit (its sealed segments' tails,
  // then its open segment up to `used`) to their files; kAlways: then syncs
  // every file the head wrote since its last successful sync. OK: the
  // head's writes so far survive kill -9 (and, with kAlways, a power cut).
  Status Commit(uint32_t head, int64_t open_slot, uint64_t used);
  // The entry at log offset entry_off (entry_bytes long) no longer holds its
  // key's newest write: the write at [newer_off, newer_end) (log offsets;
  // newer_end 0: none to wait for) supersedes it. Thread-safe.
  void QueueMark(uint64_t entry_off, uint64_t entry_bytes, uint64_t newer_off, uint64_t newer_end);
  // Before the cleaner removes segment `slot`'s file: everything written so
  // far is durable (kNo: in the files), and
  // - every write that superseded an entry of the segment too (its marks'
  //   newer writes in their files, then a flush), so the segment's dead
  //   entries may go;
  // - with `tombstones` (the compaction drops tombstones), every mark queued
  //   so far written and flushed too, so no older write of their keys can
  //   come back at recovery (marks are written only here: most targets'
  //   segments are compacted before any tombstone needs them).
  // A mark waits for its writes to reach their files, which each head's
  // next Commit does: Retry if one still waits after `patience`.
  Status Settle(uint32_t slot, bool tombstones, std::chrono::milliseconds patience);
  // The segment's file is removed (after Settle), and the removal made
  // durable.
  Status RemoveSegment(uint32_t slot);

  DurableStats Stats() const;
  FsyncMode fsync() const noexcept { return cfg_.fsync; }
  const std::string& dir() const noexcept { return cfg_.dir; }
  uint64_t data_dir_id() const noexcept { return data_dir_id_; }

 private:
  struct Range {
    uint32_t slot;
    uint64_t open_seq;  // the segment's (its slot may have been compacted and reused since)
    uint64_t from, to;
  };
  // Where a write is: its segment's slot and open seq, and its end in the
  // segment (its bytes are in the file once the slot's `persisted` reaches
  // it, unless the slot holds another open seq by then: its file is gone).
  struct Place {
    uint32_t slot = 0;
    uint64_t open_seq = 0;  // 0: nothing to wait for
    uint64_t end = 0;
  };
  struct Mark {
    uint64_t seq;          // queue order (Settle waits for the ones before it)
    Place target;          // the superseded entry
    uint64_t in_segment;   // its leader's offset in its segment
    Place newer;           // the write that superseded it
  };
  // A segment file, named by its slot and the open seq it was made for.
  struct FileRef {
    uint32_t slot;
    uint64_t open_seq;
  };
  struct alignas(64) Head {
    int64_t slot = -1;           // the open segment's slot
    uint64_t open_seq = 0;       // and its open seq
    uint64_t persisted = 0;      // its bytes written to its file
    std::vector<Range> sealed;   // tails of segments it left, not yet written
    // kAlways: the files it wrote to since its last Commit that synced them
    // all (a failed sync leaves them here for the next Commit).
    std::vector<FileRef> unsynced;
  };
  struct SlotFile {
    std::shared_ptr<File> file;            // guarded by slots_mu_
    // The file's open seq (0: none). Written under slots_mu_; read without
    // it (PlaceOf, Written, Gone: on a worker's write path). A slot takes a
    // new open seq only after 0, and `persisted` is reset while it is 0.
    std::atomic<uint64_t> open_seq{0};
    std::atomic<bool> dirty{false};        // written since its last flush
    std::atomic<uint64_t> persisted{0};    // bytes from 0 written to the file (ranges are written in order)
    // The queued marks whose superseded entry is in this segment (guarded by
    // marks_mu): they go with the file, all at once, when it is removed.
    std::mutex marks_mu;
    std::vector<Mark> marks;
    // The file's synced bound records (segment_file.h), guarded by bound_mu
    // (taken after slots_mu_ when both are held): the open seq of the file
    // that takes them (0: none: kNo, a recovered file, removed); the newest
    // record's bound; records written to it (the next goes to slot
    // bound_records % 2; the header's is the first); and how many of those a
    // sync that returned covers.
    std::mutex bound_mu;
    uint64_t bound_seq = 0;
    uint64_t bound = 0;
    uint64_t bound_records = 0;
    uint64_t bound_durable = 0;
  };
  // What a sync of a file is about to cover (BeforeSync): the bytes written
  // to it from 0, and its synced bound records written so far (open_seq 0:
  // the file takes no records).
  struct SyncCover {
    uint64_t open_seq = 0;
    uint64_t bound = 0;
    uint64_t records = 0;
  };

  explicit DurableLog(const DurableLogConfig& cfg);
  static Result<std::vector<uint64_t>> ListSegments(FileSystem& fs, const std::string& dir, const Report& report);
  // Also sets *synced_bound: the header's (kSyncedBoundUnknown: none).
  static Result<bool> ReadSegmentFile(FileSystem& fs, const std::string& path, uint64_t seq, uint64_t dir_id,
                                      uint64_t seg_bytes, std::byte* mem, uint64_t* synced_bound,
                                      const Report& report);
  std::string PathOf(uint64_t open_seq) const;
  std::shared_ptr<File> FileOf(uint32_t slot, uint64_t* open_seq = nullptr) const;
  Status WriteRange(const Range& r);
  // kAlways: fdatasync the files head `h` wrote since it last synced them
  // (on the head's owner thread, beside the other heads' syncs).
  Status SyncHeadFiles(Head& h);
  static void NoteUnsynced(Head& h, uint32_t slot, uint64_t open_seq);
  // Asks for a flush round and waits for it: OK if it succeeded.
  Status WaitForFlush();
  void FlusherLoop();
  Place PlaceOf(uint64_t off, uint64_t end) const;
  // Whether the write at `p` is in its file (or its file is gone).
  bool Written(const Place& p) const;
  // Whether the file of the segment `p` names is gone (compacted).
  bool Gone(const Place& p) const;
  // One round: flushes the dirty files (unless kNo); with write_marks_, then
  // writes the marks whose writes were in their files before the flush (the
  // rest wait; the ones whose segment's file is gone are dropped).
  Status FlushRound();
  // Whether a mark queued before seq `upto` still waits to be written: any
  // (tombstones), or one of segment `slot` (open seq `seg_seq`) whose newer
  // write is not in its file yet.
  bool MarksWait(uint64_t upto, bool tombstones, uint32_t slot, uint64_t seg_seq);
  void CountFlush(uint64_t ns);
  // kAlways: makes the spare file whenever none is ready or being taken
  // (from the first OpenSegment on: not while recovery reads the disk).
  void SpareLoop();
  // OpenSegment's part: the spare renamed to `path`, or null (none ready,
  // or the rename failed: the caller allocates a file as without spares).
  std::unique_ptr<File> TakeSpare(const std::string& path);
  // Writes a segment file whole with zeros (header and segment), then
  // `first` at 0 (the header), then syncs.
  Status WriteZeros(File& f, std::span<const std::byte> first = {});
  // Around every sync of a segment file (a head's, a flush round's): before
  // it, what it will cover; after it returned OK, the file's synced bound
  // record is written (one small write; none if the bound did not grow, or
  // the newest record is not durable yet: the next sync writes it).
  SyncCover BeforeSync(uint32_t slot, uint64_t open_seq);
  void RecordSyncedBound(uint32_t slot, File& f, const SyncCover& c);

  const DurableLogConfig cfg_;
  uint64_t data_dir_id_ = 0;
  uint64_t hash_seed_ = 0;  // the dir's: entry checksums are seeded with it
  std::unique_ptr<Head[]> heads_;
  std::unique_ptr<SlotFile[]> slots_;
  mutable std::mutex slots_mu_;  // the file pointers of slots_, and changes of their open seqs

  // Flusher state, guarded by flush_mu_.
  std::mutex flush_mu_;
  std::condition_variable flush_cv_;   // the flusher waits here
  std::condition_variable served_cv_;  // Commit/Settle wait here
  uint64_t requested_ = 0;             // tickets handed out
  uint64_t served_ = 0;                // tickets whose round has ended
  std::vector<std::pair<uint64_t, uint64_t>> failed_;  // ticket ranges (from, to] of failed rounds, recent
  Status failure_;                     // the last failed round's error
  bool stop_ = false;
  // Marks (queued in their target's SlotFile): the next mark's seq, taken
  // under that slot's marks_mu; the Settle calls that want marks written;
  // the smallest seq among marks a flush round took out of their slots and
  // has not written or put back yet (UINT64_MAX: none).
  std::atomic<uint64_t> next_mark_seq_{1};
  std::atomic<uint32_t> write_marks_{0};
  std::atomic<uint64_t> marks_out_min_seq_{UINT64_MAX};
  std::thread flusher_;

  // The spare file (kAlways). Why: a sync after a write into blocks the file
  // already wrote costs the data write and a device flush; into blocks
  // allocated by fallocate, ext4 also converts the unwritten extent (a
  // journal commit): 0.75 against 3.06 ms a 4 KiB write + fdatasync on the
  // test bed's disk. Made by its own thread so that no commit waits for it.
  enum class SpareState : uint8_t { kNone, kMaking, kReady, kTaking };
  mutable std::mutex spare_mu_;  // mutable: Stats() reads the state
  std::condition_variable spare_cv_;
  SpareState spare_state_ = SpareState::kNone;  // guarded by spare_mu_
  bool spare_wanted_ = false;                    // an OpenSegment ran (guarded by spare_mu_)
  bool spare_stop_ = false;                      // guarded by spare_mu_
  std::thread spare_maker_;
  std::atomic<uint64_t> segments_from_spares_{0};

  // Counters (relaxed atomics: read by Stats from any thread).
  std::atomic<uint64_t> flushes_{0}, flush_ns_total_{0}, flush_ns_max_{0}, commits_flushed_{0}, bytes_written_{0},
      marks_written_{0}, segments_on_disk_{0}, io_errors_{0};
  std::atomic<uint64_t> flush_buckets_[DurableStats::kFlushBuckets] = {};
};

}  // namespace kvrdma
