#include "tests/store/fault_file_system.h"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <random>
#include <thread>
#include <utility>

namespace kvrdma::test {
namespace {

using Bytes = std::vector<std::byte>;

// The directory a name operation on `path` changes: everything before the
// last '/' ("" for a bare name).
std::string Parent(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string BytesAt(const std::string& path, std::string_view verb, uint64_t bytes, uint64_t offset) {
  return path + ": " + std::string(verb) + " " + std::to_string(bytes) + " bytes at " + std::to_string(offset);
}

std::string OpenWhat(const std::string& path, OpenMode mode) {
  switch (mode) {
    case OpenMode::kCreate: return path + ": creating";
    case OpenMode::kReadWrite: return path + ": opening for read/write";
    case OpenMode::kReadOnly: return path + ": opening read-only";
  }
  return path + ": opening";
}

// pwrite: `data` at `offset`, zero-filling any gap past the end.
void Apply(Bytes& bytes, uint64_t offset, std::span<const std::byte> data) {
  if (data.empty()) return;  // pwrite of nothing does not extend the file
  if (offset + data.size() > bytes.size()) bytes.resize(offset + data.size());
  std::copy(data.begin(), data.end(), bytes.begin() + static_cast<ptrdiff_t>(offset));
}

}  // namespace

struct FaultFileSystem::Inode {
  struct Write {
    uint64_t offset;
    Bytes bytes;
  };
  Bytes current;               // what reads return
  Bytes durable;               // as of the last successful Sync
  uint64_t allocated = 0;      // the largest Allocate; a power cut keeps the size
  std::vector<Write> unsynced; // WriteAt calls since the last Sync, in order
};

// A handle on an inode (not on a name: a renamed or removed file stays
// readable and writable through it, as with a descriptor). Every call goes
// to the file system, under its mutex (constructed under it too: Open reads
// generation_).
class FaultFileSystem::FaultFile final : public File {
 public:
  FaultFile(FaultFileSystem* fs, std::string path, std::shared_ptr<Inode> inode, bool writable)
      : File(std::move(path)), fs(fs), inode(std::move(inode)), writable(writable), generation(fs->generation_) {}

  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    return fs->FileWrite(*this, offset, data);
  }
  Status ReadAt(uint64_t offset, std::span<std::byte> out, size_t* got) override {
    return fs->FileRead(*this, offset, out, got);
  }
  Status Sync() override { return fs->FileSync(*this); }
  Status Allocate(uint64_t bytes) override { return fs->FileAllocate(*this, bytes); }
  Result<uint64_t> Size() override { return fs->FileSize(*this); }

  FaultFileSystem* const fs;
  const std::shared_ptr<Inode> inode;
  const bool writable;        // not kReadOnly: writes fail with EBADF, as with O_RDONLY
  const uint64_t generation;  // fs->generation_ when opened
};

FaultFileSystem::FaultFileSystem() = default;
FaultFileSystem::~FaultFileSystem() = default;

FaultFileSystem::Gate FaultFileSystem::Step(std::optional<Op> op, const std::string& what) {
  ++steps_;
  if (crash_step_ != 0 && steps_ >= crash_step_) {
    Gate g{Status::IOError(what + ": simulated crash")};
    g.tear_write = crash_tear_ && steps_ == crash_step_;
    crashed_ = true;
    return g;
  }
  if (op.has_value()) {
    Injected& inj = injected_[static_cast<size_t>(*op)];
    if (inj.count > 0) {
      --inj.count;
      return {Status::FromErrno(what, inj.err)};
    }
  }
  return {};
}

uint64_t FaultFileSystem::TotalBytes() const {
  uint64_t total = 0;
  for (const auto& [path, inode] : names_) total += inode->current.size();
  return total;
}

Status FaultFileSystem::NoSpaceFor(uint64_t growth, const std::string& what) const {
  if (space_limit_ == 0 || growth == 0 || TotalBytes() + growth <= space_limit_) return Status::OK();
  return Status::FromErrno(what, ENOSPC);
}

Status FaultFileSystem::CheckGeneration(uint64_t generation, const std::string& what) const {
  return generation == generation_ ? Status::OK() : Status::FromErrno(what, ESTALE);
}

bool FaultFileSystem::DirExists(const std::string& dir) const { return dir.empty() || dirs_.count(dir) != 0; }

Result<std::unique_ptr<File>> FaultFileSystem::Open(const std::string& path, OpenMode mode) {
  std::lock_guard lock(mu_);
  const std::string what = OpenWhat(path, mode);
  if (mode != OpenMode::kCreate) {
    auto it = names_.find(path);
    if (it == names_.end()) return Status::FromErrno(what, dirs_.count(path) != 0 ? EISDIR : ENOENT);
    return std::unique_ptr<File>(
        std::make_unique<FaultFile>(this, path, it->second, mode == OpenMode::kReadWrite));
  }
  Gate g = Step(Op::kCreate, what);
  if (!g.status.ok()) return g.status;
  if (names_.count(path) != 0 || dirs_.count(path) != 0) return Status::FromErrno(what, EEXIST);
  if (!DirExists(Parent(path))) return Status::FromErrno(what, ENOENT);
  auto inode = std::make_shared<Inode>();
  names_[path] = inode;
  return std::unique_ptr<File>(std::make_unique<FaultFile>(this, path, std::move(inode), true));
}

Status FaultFileSystem::Remove(const std::string& path) {
  std::lock_guard lock(mu_);
  const std::string what = path + ": removing";
  KVRDMA_RETURN_IF_ERROR(Step(Op::kRemove, what).status);
  if (names_.erase(path) == 0) return Status::FromErrno(what, dirs_.count(path) != 0 ? EISDIR : ENOENT);
  return Status::OK();
}

Status FaultFileSystem::Rename(const std::string& from, const std::string& to) {
  std::lock_guard lock(mu_);
  const std::string what = from + ": renaming to " + to;
  KVRDMA_RETURN_IF_ERROR(Step(Op::kRename, what).status);
  auto it = names_.find(from);
  if (it == names_.end() || !DirExists(Parent(to))) return Status::FromErrno(what, ENOENT);
  if (dirs_.count(to) != 0) return Status::FromErrno(what, EISDIR);
  if (from == to) return Status::OK();
  std::shared_ptr<Inode> inode = it->second;
  names_.erase(it);
  names_[to] = std::move(inode);
  return Status::OK();
}

Status FaultFileSystem::SyncDir(const std::string& dir) {
  std::lock_guard lock(mu_);
  const std::string what = dir + ": syncing directory";
  KVRDMA_RETURN_IF_ERROR(Step(Op::kSyncDir, what).status);
  if (!DirExists(dir)) return Status::FromErrno(what, ENOENT);
  // The durable entries of `dir` become its current ones; other
  // directories' pending operations stay pending.
  std::erase_if(durable_names_, [&](const auto& e) { return Parent(e.first) == dir; });
  for (const auto& [path, inode] : names_) {
    if (Parent(path) == dir) durable_names_[path] = inode;
  }
  return Status::OK();
}

Result<std::vector<std::string>> FaultFileSystem::List(const std::string& dir) {
  std::lock_guard lock(mu_);
  if (!DirExists(dir)) return Status::FromErrno(dir + ": listing", ENOENT);
  const size_t skip = dir.empty() ? 0 : dir.size() + 1;
  std::set<std::string> names;  // sorted, and a name that is both (cannot be) counted once
  for (const auto& [path, inode] : names_) {
    if (Parent(path) == dir) names.insert(path.substr(skip));
  }
  for (const std::string& d : dirs_) {
    if (Parent(d) == dir && d != dir) names.insert(d.substr(skip));
  }
  return std::vector<std::string>(names.begin(), names.end());
}

Status FaultFileSystem::CreateDir(const std::string& dir_in) {
  std::lock_guard lock(mu_);
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string what = dir_in + ": creating directory";
  KVRDMA_RETURN_IF_ERROR(Step(std::nullopt, what).status);
  // Every prefix ending before a '/', then the whole path: mkdir -p.
  std::vector<std::string> made;
  for (size_t slash = dir.find('/', 1); slash != std::string::npos; slash = dir.find('/', slash + 1)) {
    if (dir[slash - 1] != '/') made.push_back(dir.substr(0, slash));
  }
  made.push_back(dir);
  for (const std::string& d : made) {
    if (names_.count(d) != 0) return Status::FromErrno(what, ENOTDIR);
  }
  dirs_.insert(made.begin(), made.end());
  return Status::OK();
}

bool FaultFileSystem::Exists(const std::string& path) {
  std::lock_guard lock(mu_);
  return names_.count(path) != 0 || dirs_.count(path) != 0;
}

Status FaultFileSystem::FileWrite(FaultFile& f, uint64_t offset, std::span<const std::byte> data) {
  std::chrono::milliseconds delay{0};
  {
    std::lock_guard lock(mu_);
    if (!delay_part_.empty() && f.path().find(delay_part_) != std::string::npos) delay = delay_;
  }
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
  std::lock_guard lock(mu_);
  const std::string what = BytesAt(f.path(), "writing", data.size(), offset);
  KVRDMA_RETURN_IF_ERROR(CheckGeneration(f.generation, what));
  Gate g = Step(Op::kWrite, what);
  if (g.tear_write && f.writable && !data.empty()) {
    // The crash hits in the middle of the write: some of its bytes reached
    // the page cache (a strict prefix), then the call failed.
    const size_t torn = std::mt19937_64(crash_seed_)() % data.size();
    Apply(f.inode->current, offset, data.first(torn));
    if (torn > 0) f.inode->unsynced.push_back({offset, Bytes(data.begin(), data.begin() + torn)});
  }
  KVRDMA_RETURN_IF_ERROR(g.status);
  if (!f.writable) return Status::FromErrno(what, EBADF);
  const uint64_t end = offset + data.size();
  const uint64_t size = f.inode->current.size();
  if (!data.empty()) KVRDMA_RETURN_IF_ERROR(NoSpaceFor(end > size ? end - size : 0, what));
  Apply(f.inode->current, offset, data);
  if (!data.empty()) f.inode->unsynced.push_back({offset, Bytes(data.begin(), data.end())});
  ++writes_;
  bytes_written_ += data.size();
  return Status::OK();
}

Status FaultFileSystem::FileRead(FaultFile& f, uint64_t offset, std::span<std::byte> out, size_t* got) {
  std::lock_guard lock(mu_);
  KVRDMA_RETURN_IF_ERROR(CheckGeneration(f.generation, BytesAt(f.path(), "reading", out.size(), offset)));
  const Bytes& bytes = f.inode->current;
  const size_t n = offset >= bytes.size() ? 0 : std::min<uint64_t>(out.size(), bytes.size() - offset);
  // Nothing to copy past the end: offset may lie beyond the bytes (even of an
  // empty file, whose data() is null: no pointer arithmetic on it).
  if (n > 0) std::copy_n(bytes.begin() + static_cast<ptrdiff_t>(offset), n, out.begin());
  *got = n;
  return Status::OK();
}

Status FaultFileSystem::FileSync(FaultFile& f) {
  std::lock_guard lock(mu_);
  const std::string what = f.path() + ": syncing";
  KVRDMA_RETURN_IF_ERROR(CheckGeneration(f.generation, what));
  KVRDMA_RETURN_IF_ERROR(Step(Op::kSync, what).status);
  f.inode->durable = f.inode->current;
  f.inode->unsynced.clear();
  ++syncs_;
  return Status::OK();
}

Status FaultFileSystem::FileAllocate(FaultFile& f, uint64_t bytes) {
  std::lock_guard lock(mu_);
  const std::string what = f.path() + ": allocating " + std::to_string(bytes) + " bytes";
  KVRDMA_RETURN_IF_ERROR(CheckGeneration(f.generation, what));
  KVRDMA_RETURN_IF_ERROR(Step(Op::kAllocate, what).status);
  if (!f.writable) return Status::FromErrno(what, EBADF);
  const uint64_t size = f.inode->current.size();
  KVRDMA_RETURN_IF_ERROR(NoSpaceFor(bytes > size ? bytes - size : 0, what));
  if (bytes > size) f.inode->current.resize(bytes);
  f.inode->allocated = std::max(f.inode->allocated, bytes);
  return Status::OK();
}

Result<uint64_t> FaultFileSystem::FileSize(FaultFile& f) {
  std::lock_guard lock(mu_);
  KVRDMA_RETURN_IF_ERROR(CheckGeneration(f.generation, f.path() + ": getting size"));
  return static_cast<uint64_t>(f.inode->current.size());
}

// What a power cut leaves of a file: its durable bytes, the first k of its
// unsynced writes (k uniform in 0..n), a torn prefix of the next one, and at
// least its allocated size. rng() % m rather than a distribution: the
// standard fixes mt19937_64's output, not the distributions', so a seed means
// the same outcome with every standard library.
std::vector<std::byte> FaultFileSystem::SurvivingBytes(const Inode& inode, std::mt19937_64& rng) {
  Bytes bytes = inode.durable;
  const size_t n = inode.unsynced.size();
  const size_t k = rng() % (n + 1);
  for (size_t i = 0; i < k; ++i) Apply(bytes, inode.unsynced[i].offset, inode.unsynced[i].bytes);
  if (k < n) {
    const Inode::Write& w = inode.unsynced[k];
    const size_t torn = w.bytes.empty() ? 0 : rng() % w.bytes.size();
    Apply(bytes, w.offset, std::span<const std::byte>(w.bytes).first(torn));
  }
  if (bytes.size() < inode.allocated) bytes.resize(inode.allocated);
  return bytes;
}

// kPowerCutAnyOrder: per file, a prefix (as above, one time in four), a
// random subset of the sectors the unsynced writes touched (two in four),
// or a random subset of the writes (one in four).
std::vector<std::byte> FaultFileSystem::SurvivingBytesAnyOrder(const Inode& inode, uint64_t sector,
                                                               std::mt19937_64& rng) {
  const uint64_t how = rng() % 4;  // 0: a prefix, 1: writes, 2 and 3: sectors
  if (how == 0 || inode.unsynced.empty()) return SurvivingBytes(inode, rng);
  Bytes bytes = inode.durable;
  if (how >= 2) {
    // Sectors: a kept sector is as the page cache holds it now (every write
    // applied), a dropped one as the last Sync left it.
    Bytes now = inode.durable;
    std::set<uint64_t> sectors;
    for (const Inode::Write& w : inode.unsynced) {
      Apply(now, w.offset, w.bytes);
      for (uint64_t s = w.offset / sector; s * sector < w.offset + w.bytes.size(); ++s) sectors.insert(s);
    }
    for (const uint64_t s : sectors) {
      if (rng() % 2 == 0) continue;
      const uint64_t from = s * sector, to = std::min<uint64_t>(now.size(), from + sector);
      if (from < to) Apply(bytes, from, std::span<const std::byte>(now).subspan(from, to - from));
    }
  } else {
    for (const Inode::Write& w : inode.unsynced) {
      if (rng() % 2 == 0) Apply(bytes, w.offset, w.bytes);
    }
  }
  if (bytes.size() < inode.allocated) bytes.resize(inode.allocated);
  return bytes;
}

void FaultFileSystem::PowerCut(uint64_t seed, bool any_order) {
  // One generator for all files, in path order, so that a seed names one
  // outcome of the whole disk.
  std::mt19937_64 rng(seed);
  std::set<const Inode*> done;  // a file under two durable names is cut once
  for (const auto& [path, inode] : durable_names_) {
    if (!done.insert(inode.get()).second) continue;
    inode->current = any_order ? SurvivingBytesAnyOrder(*inode, sector_bytes_, rng) : SurvivingBytes(*inode, rng);
  }
  names_ = durable_names_;
}

void FaultFileSystem::Restart(CrashKind kind, uint64_t seed) {
  std::lock_guard lock(mu_);
  if (kind != CrashKind::kProcess) PowerCut(seed, kind == CrashKind::kPowerCutAnyOrder);
  // After a reboot (or once the killed process is gone and the kernel has
  // written back) everything on disk is durable: the new baseline.
  for (const auto& [path, inode] : names_) {
    inode->durable = inode->current;
    inode->unsynced.clear();
  }
  durable_names_ = names_;
  ++generation_;
  crash_step_ = 0;
  crash_tear_ = false;
  crashed_ = false;
  injected_ = {};
}

void FaultFileSystem::CrashAtStep(uint64_t n, bool tear, uint64_t seed) {
  std::lock_guard lock(mu_);
  crash_step_ = n;
  crash_tear_ = tear;
  crash_seed_ = seed;
}

bool FaultFileSystem::crashed() const {
  std::lock_guard lock(mu_);
  return crashed_;
}

void FaultFileSystem::FailCalls(Op op, int err, uint64_t count) {
  std::lock_guard lock(mu_);
  injected_[static_cast<size_t>(op)] = {err, count};
}

void FaultFileSystem::DelayWrites(const std::string& part, std::chrono::milliseconds delay) {
  std::lock_guard lock(mu_);
  delay_part_ = part;
  delay_ = delay;
}

void FaultFileSystem::SetSectorBytes(uint64_t bytes) {
  std::lock_guard lock(mu_);
  sector_bytes_ = bytes;
}

void FaultFileSystem::SetSpaceLimit(uint64_t bytes) {
  std::lock_guard lock(mu_);
  space_limit_ = bytes;
}

uint64_t FaultFileSystem::steps() const {
  std::lock_guard lock(mu_);
  return steps_;
}

uint64_t FaultFileSystem::syncs() const {
  std::lock_guard lock(mu_);
  return syncs_;
}

uint64_t FaultFileSystem::writes() const {
  std::lock_guard lock(mu_);
  return writes_;
}

uint64_t FaultFileSystem::bytes_written() const {
  std::lock_guard lock(mu_);
  return bytes_written_;
}

}  // namespace kvrdma::test
