// FaultFileSystem: an in-memory FileSystem that models the durability
// contract of server/store/file_system.h, for crash tests of the durable
// store (after LevelDB's FaultInjectionTestEnv).
//
// Model:
// - Each file has its current bytes (what reads return) and its durable bytes
//   (as of its last successful Sync), plus the WriteAt calls made since that
//   Sync, in call order.
// - Each name operation (Open(kCreate), Remove, Rename) is pending until a
//   SyncDir of its parent directory (the path up to its last '/'; "" for a
//   bare name). A rename across directories needs both SyncDirs.
//   Directories themselves (CreateDir) are always durable; Open(kCreate) and
//   Rename need the target's parent directory to exist (CreateDir), as on
//   disk. Paths are plain strings, compared as such (no normalisation).
// - Every mutating call (WriteAt, Sync, Allocate, Open(kCreate), Remove,
//   Rename, SyncDir, CreateDir) is one step, numbered from 1, whether it
//   succeeds or fails. A crash test runs a workload once to count its steps,
//   then again with CrashAtStep(n) for each n.
// - Restart(kPowerCut, seed) keeps, per file, its durable bytes plus the
//   first k of its unsynced writes (k uniform in 0..n, chosen by seed), the
//   (k+1)-th torn at a byte chosen by seed; every name operation not made
//   durable by SyncDir is undone. A file that comes back (removed, or renamed
//   away, without SyncDir) gets the same treatment as any other: durable bytes
//   plus a prefix of its unsynced writes. Restart(kProcess) keeps everything.
// - Restart(kPowerCutAnyOrder, seed): the same, except that what each file
//   keeps of its unsynced writes need not be a prefix: the kernel's
//   writeback and the disk persist a file's dirty pages, and a page's
//   sectors, in any order. Per file, the seed chooses one of: a prefix (one
//   time in four), as
//   kPowerCut (the (k+1)-th write torn at a byte); each sector (512 bytes
//   unless SetSectorBytes: what a disk writes whole; a 4 KiB page's sectors
//   too may land in any order) an unsynced write touched kept (as it is
//   now) or not (as it was at the last Sync), each with probability 1/2
//   (two in four); or each unsynced write kept or dropped, each with
//   probability 1/2, in call order (one in four).
//   A write at the crash step that tore (CrashAtStep with tear) is one of
//   the unsynced writes, as it is.
//
// Error messages have the shape of PosixFileSystem's ("PATH: writing N bytes
// at OFFSET: No space left on device").
//
// Thread-safe: every call, on the file system or on any of its Files, takes
// one mutex.
//
// Lifetime: the FaultFileSystem must outlive its Files. Files opened before
// Restart() must be destroyed before Restart() is called (a restarted process
// has no descriptors from before); one that is not fails every later call
// with "Stale file handle" instead of touching the new state.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "server/store/file_system.h"

namespace kvrdma::test {

class FaultFileSystem final : public FileSystem {
 public:
  // The kinds of call FailCalls can fail.
  enum class Op : uint8_t { kWrite, kSync, kAllocate, kCreate, kRemove, kRename, kSyncDir };
  enum class CrashKind : uint8_t {
    kProcess,   // kill -9: every call that returned stays
    kPowerCut,  // only what Sync / SyncDir made durable is sure to stay; a prefix of the rest
    kPowerCutAnyOrder,  // as kPowerCut, but any subset of the rest (sectors or writes)
  };

  FaultFileSystem();
  ~FaultFileSystem() override;
  FaultFileSystem(const FaultFileSystem&) = delete;
  FaultFileSystem& operator=(const FaultFileSystem&) = delete;

  Result<std::unique_ptr<File>> Open(const std::string& path, OpenMode mode) override;
  Status Remove(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& dir) override;
  Result<std::vector<std::string>> List(const std::string& dir) override;
  Status CreateDir(const std::string& dir) override;
  bool Exists(const std::string& path) override;

  // The n-th mutating call (n >= 1; counting from the start, not from now)
  // and every one after it fail with "simulated crash" and change nothing.
  // With `tear`, if the n-th call is a WriteAt, it first writes a prefix of
  // its bytes (0 to size-1 of them, chosen by `seed`). Reads keep working.
  // n = 0 cancels a crash that has not happened yet.
  void CrashAtStep(uint64_t n, bool tear = false, uint64_t seed = 0);
  // Whether a call has failed because of CrashAtStep.
  bool crashed() const;
  // What a restarted process sees after `kind` (see the model above); `seed`
  // chooses what a power cut keeps. Afterwards: the crash and any pending
  // FailCalls are cleared (the space limit stays), steps keep counting, and
  // everything is durable (current = durable, no pending writes or names).
  // REQUIRES: every File opened before has been destroyed.
  void Restart(CrashKind kind, uint64_t seed);

  // The next `count` calls of kind `op` fail with strerror(err) (ENOSPC, EIO)
  // and change nothing; count 0 cancels.
  void FailCalls(Op op, int err, uint64_t count);
  // WriteAt and Allocate fail with ENOSPC when the sum of all file sizes
  // would exceed `bytes`; a write inside a file's current size never does.
  // 0 = unlimited.
  void SetSpaceLimit(uint64_t bytes);
  // The unit kPowerCutAnyOrder keeps or drops (a power of two, at least 8:
  // an aligned 8-byte store, a leader or a mark, is never split). A test
  // whose segments are scaled down may scale its sectors down too, so that
  // a commit of a few small writes spans several.
  void SetSectorBytes(uint64_t bytes);

  // WriteAt calls through files opened under a path that contains `part`
  // wait `delay` before they take effect (without holding the file system:
  // other calls go on), to hold a race window open; an empty part: none.
  void DelayWrites(const std::string& part, std::chrono::milliseconds delay);

  // Mutating calls made so far (successful or not).
  uint64_t steps() const;
  // Successful File::Sync and File::WriteAt calls, and the bytes those writes
  // wrote.
  uint64_t syncs() const;
  uint64_t writes() const;
  uint64_t bytes_written() const;

 private:
  struct Inode;
  class FaultFile;
  using Names = std::map<std::string, std::shared_ptr<Inode>>;
  struct Injected {
    int err = 0;
    uint64_t count = 0;
  };
  // Whether a mutating call may proceed (Step()).
  struct Gate {
    Status status;            // not OK: fail the call with it, change nothing
    bool tear_write = false;  // the crash step, with tear: a WriteAt writes a prefix first
  };

  // The helpers below REQUIRE mu_ held.
  // Counts one mutating call; fails it if the crash has come or `op` has an
  // injected error pending.
  Gate Step(std::optional<Op> op, const std::string& what);
  Status NoSpaceFor(uint64_t growth, const std::string& what) const;
  uint64_t TotalBytes() const;
  Status CheckGeneration(uint64_t generation, const std::string& what) const;
  bool DirExists(const std::string& dir) const;
  void PowerCut(uint64_t seed, bool any_order);
  static std::vector<std::byte> SurvivingBytes(const Inode& inode, std::mt19937_64& rng);
  static std::vector<std::byte> SurvivingBytesAnyOrder(const Inode& inode, uint64_t sector, std::mt19937_64& rng);

  // The File calls; each takes mu_.
  Status FileWrite(FaultFile& f, uint64_t offset, std::span<const std::byte> data);
  Status FileRead(FaultFile& f, uint64_t offset, std::span<std::byte> out, size_t* got);
  Status FileSync(FaultFile& f);
  Status FileAllocate(FaultFile& f, uint64_t bytes);
  Result<uint64_t> FileSize(FaultFile& f);

  mutable std::mutex mu_;  // guards everything below, and every Inode
  Names names_;          // the current namespace: path -> file
  Names durable_names_;  // as of the last SyncDir of each directory
  std::set<std::string> dirs_;
  uint64_t generation_ = 0;  // Restart()s so far; Files of older ones are stale
  uint64_t steps_ = 0;
  uint64_t crash_step_ = 0;  // 0: none
  bool crash_tear_ = false;
  uint64_t crash_seed_ = 0;
  bool crashed_ = false;
  std::array<Injected, 7> injected_{};  // by Op
  uint64_t space_limit_ = 0;
  uint64_t sector_bytes_ = 512;
  std::string delay_part_;  // DelayWrites
  std::chrono::milliseconds delay_{0};
  uint64_t syncs_ = 0;
  uint64_t writes_ = 0;
  uint64_t bytes_written_ = 0;
};

}  // namespace kvrdma::test
