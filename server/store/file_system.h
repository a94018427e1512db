// The seam under all of the store's file I/O (the durable store, docs/DESIGN.md
// "Durability"). kvserver uses PosixFileSystem(); tests substitute
// FaultFileSystem (tests/store/fault_file_system.h), which keeps files in
// memory, remembers what was synced, and can lose power (drop every write
// and every name change that was not synced), tear the last write at any
// byte, or fail any call (ENOSPC, EIO), as LevelDB's FaultInjectionTestEnv
// does.
//
// Durability contract (what the store relies on, and what FaultFileSystem
// models):
// - A File's bytes written with WriteAt (or WriteMapped) are durable once a later Sync() of
//   that file returns OK. Until then a power cut may keep any subset of them,
//   in any order: a hole, then data (FaultFileSystem's kPowerCut keeps the
//   first k of them in call order, and may tear the next one at any byte;
//   kPowerCutAnyOrder keeps any subset of their sectors, or of the writes).
//   The durable store records, after each sync, where the file's synced
//   bytes end (segment_file.h, the synced bound), so that recovery can tell
//   such a hole from damage.
// - A name created by Open(kCreate), removed by Remove or moved by Rename is
//   durable once a later SyncDir() of its directory returns OK; until then a
//   power cut may undo it (a created file vanishes, a removed one comes back,
//   a renamed one is back under its old name).
// - A process crash (kill -9) loses nothing that a call already returned:
//   the kernel keeps it.
// Nothing here throws; every error is an IOError naming the path (and the
// offset for reads and writes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvrdma {

class File {
 public:
  virtual ~File() = default;
  // Writes all of `data` at `offset` (short writes are retried; an error is
  // IOError "PATH: writing N bytes at OFFSET: strerror").
  virtual Status WriteAt(uint64_t offset, std::span<const std::byte> data) = 0;
  // Writes all of `data` at `offset` as WriteAt does (the bytes are in the
  // file when it returns, and survive kill -9), by copying them into a
  // shared mapping of the file where the file system can map it: no system
  // call per write (the worker's write path under --fsync everysec and no).
  // The mapping covers the file's size at the first call (a segment file is
  // allocated whole before it is written); a write outside it is a WriteAt.
  // A fault on the mapping (a page the kernel cannot read back: an I/O
  // error; the file shrank) is an IOError, never a signal that ends the
  // process. The default is WriteAt (what FaultFileSystem models).
  virtual Status WriteMapped(uint64_t offset, std::span<const std::byte> data) { return WriteAt(offset, data); }
  // Reads up to out.size() bytes at `offset`; *got is what was read (less
  // only at the end of the file).
  virtual Status ReadAt(uint64_t offset, std::span<std::byte> out, size_t* got) = 0;
  // fdatasync: every byte written so far is durable when this returns OK.
  virtual Status Sync() = 0;
  // Reserves disk space for [0, bytes) (fallocate, keeping the size at
  // `bytes`), so that writes inside it cannot fail for want of space. Disk
  // full is IOError whose message contains "No space left on device"
  // (strerror(ENOSPC)).
  virtual Status Allocate(uint64_t bytes) = 0;
  virtual Result<uint64_t> Size() = 0;
  // A hint that the whole file will be read soon (posix_fadvise WILLNEED:
  // the kernel reads it ahead while the caller works on something else).
  virtual void Prefetch() noexcept {}
  const std::string& path() const noexcept { return path_; }

 protected:
  explicit File(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

enum class OpenMode : uint8_t {
  kCreate,    // a new file; IOError if it exists
  kReadWrite, // an existing file
  kReadOnly,  // an existing file (kvserver --verify, recovery)
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  virtual Result<std::unique_ptr<File>> Open(const std::string& path, OpenMode mode) = 0;
  virtual Status Remove(const std::string& path) = 0;
  // Replaces `to` with `from` atomically (rename(2)).
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Makes the names created, removed or renamed in `dir` durable (fsync of
  // the directory).
  virtual Status SyncDir(const std::string& dir) = 0;
  // The names in `dir` (no "." or ".."), sorted.
  virtual Result<std::vector<std::string>> List(const std::string& dir) = 0;
  // Creates `dir` (and its parents) if missing.
  virtual Status CreateDir(const std::string& dir) = 0;
  // Whether `path` exists.
  virtual bool Exists(const std::string& path) = 0;
};

// The real file system (POSIX calls). Thread-safe; one instance per process.
FileSystem& PosixFileSystem();

}  // namespace kvrdma
