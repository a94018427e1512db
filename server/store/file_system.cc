#include "server/store/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "common/log.h"

namespace kvrdma {
namespace {

// "PATH: WHAT: strerror(err)", the shape of every error in this file.
Status PathError(const std::string& path, std::string_view what, int err) {
  std::string m = path;
  m += ": ";
  m += what;
  return Status::FromErrno(m, err);
}

std::string BytesAt(std::string_view verb, uint64_t bytes, uint64_t offset) {
  return std::string(verb) + " " + std::to_string(bytes) + " bytes at " + std::to_string(offset);
}

// A descriptor closed exactly once, for the short-lived ones (directories).
class ScopedFd {
 public:
  explicit ScopedFd(int fd) noexcept : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

int OpenRetrying(const std::string& path, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// A SIGBUS on a shared file mapping means the kernel could not supply the
// page (an I/O error reading it back, or the file shrank under it). A copy
// into a mapping runs under this thread's guard, to which the handler jumps
// back; a SIGBUS anywhere else goes to the disposition found when the
// handler was installed (by default: the process ends, as it would have).
struct BusGuard {
  const std::byte* begin;
  const std::byte* end;
  sigjmp_buf back;
};
thread_local BusGuard* t_bus_guard = nullptr;
struct sigaction g_previous_bus;

void OnBusError(int sig, siginfo_t* info, void* context) {
  BusGuard* g = t_bus_guard;
  const auto* at = static_cast<const std::byte*>(info->si_addr);
  if (g != nullptr && at >= g->begin && at < g->end) siglongjmp(g->back, 1);
  if ((g_previous_bus.sa_flags & SA_SIGINFO) != 0 && g_previous_bus.sa_sigaction != nullptr) {
    g_previous_bus.sa_sigaction(sig, info, context);
    return;
  }
  if ((g_previous_bus.sa_flags & SA_SIGINFO) == 0 && g_previous_bus.sa_handler != SIG_DFL &&
      g_previous_bus.sa_handler != SIG_IGN) {
    g_previous_bus.sa_handler(sig);
    return;
  }
  // The default action: restored, it ends the process when the faulting
  // instruction runs again.
  ::signal(SIGBUS, SIG_DFL);
}

// Copies n bytes in address order: 16 bytes at a time, each store after the
// one before it in program order (the empty asm keeps the compiler from
// merging or reordering them). A process killed during the copy has made
// exactly the stores before the instruction it was stopped at, so a mapping
// of a file keeps a prefix of the bytes: a write torn as recovery expects
// (DESIGN "Durability": a torn tail is cut; a write whose first bytes are
// missing while later ones are there is damage). memcpy promises no order,
// and glibc's (2.36) does not keep one: for `rep movsb` (from ~2-4 KiB) it
// aligns the destination to 64 bytes and stores the bytes before that
// boundary last. kill9_test.sh found a segment file holding a value after
// 40 zero bytes where its leader, header and key belonged, and kvserver
// refused to start; PosixFileSystemTest.AWriteMappedCutByKill9LeavesAPrefix
// OfItsBytes shows the same 40 bytes with memcpy.
void OrderedCopy(std::byte* dst, const std::byte* src, size_t n) noexcept {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    std::memcpy(dst + i, src + i, 16);
    asm volatile("" ::: "memory");
  }
  for (; i < n; ++i) {
    dst[i] = src[i];
    asm volatile("" ::: "memory");
  }
}

// OrderedCopy into a mapping; false if the copy faulted (a prefix of it may
// be in the file: like a write torn by a crash).
bool CopyIntoMapping(std::byte* dst, const std::byte* src, size_t n) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnBusError;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_bus);
  });
  BusGuard g{dst, dst + n, {}};
  if (sigsetjmp(g.back, 1) != 0) {
    t_bus_guard = nullptr;
    return false;
  }
  t_bus_guard = &g;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  OrderedCopy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_bus_guard = nullptr;
  return true;
}

// pread/pwrite/fdatasync/fallocate/fstat on one descriptor are each atomic
// with respect to the file offset (none uses it), so concurrent calls from
// several threads need no lock here: the kernel orders them.
class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd) : File(std::move(path)), fd_(fd) {}
  ~PosixFile() override {
    if (map_ != nullptr) ::munmap(map_, map_bytes_);
    // A failed close can mean a lost delayed write error (NFS); nobody is
    // left to return it to, so it is logged.
    if (::close(fd_) != 0) KVRDMA_LOG_ERROR("%s: close: %s", path_.c_str(), std::strerror(errno));
  }
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return PathError(path_, BytesAt("writing", data.size(), offset), errno);
      // A regular file never writes 0 of a non-empty buffer; if it did,
      // retrying would loop forever.
      if (n == 0) return Status::IOError(path_ + ": " + BytesAt("writing", data.size(), offset) + ": wrote nothing");
      done += static_cast<size_t>(n);
    }
    return Status::OK();
  }

  Status WriteMapped(uint64_t offset, std::span<const std::byte> data) override {
    std::call_once(map_once_, [this] {
      struct stat st;
      if (::fstat(fd_, &st) != 0 || st.st_size <= 0) return;
      void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
      if (p == MAP_FAILED) {
        KVRDMA_LOG_DEBUG("%s: mmap: %s (written with pwrite)", path_.c_str(), std::strerror(errno));
        return;
      }
      map_ = static_cast<std::byte*>(p);
      map_bytes_ = static_cast<uint64_t>(st.st_size);
    });
    if (map_ == nullptr || data.empty() || offset > map_bytes_ || data.size() > map_bytes_ - offset) {
      return WriteAt(offset, data);
    }
    if (!CopyIntoMapping(map_ + offset, data.data(), data.size())) {
      return Status::IOError(path_ + ": " + BytesAt("writing", data.size(), offset) +
                             " through its mapping: bus error (the page could not be read back, or the file shrank)");
    }
    return Status::OK();
  }

  Status ReadAt(uint64_t offset, std::span<std::byte> out, size_t* got) override {
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return PathError(path_, BytesAt("reading", out.size(), offset), errno);
      if (n == 0) break;  // end of file
      done += static_cast<size_t>(n);
    }
    *got = done;
    return Status::OK();
  }

  Status Sync() override {
    int rc;
    do {
      rc = ::fdatasync(fd_);
    } while (rc != 0 && errno == EINTR);
    return rc == 0 ? Status::OK() : PathError(path_, "syncing", errno);
  }

  Status Allocate(uint64_t bytes) override {
    if (bytes == 0) return Status::OK();  // fallocate refuses len 0 (EINVAL)
    int rc;
    do {
      rc = ::fallocate(fd_, 0, 0, static_cast<off_t>(bytes));
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) return Status::OK();
    int err = errno;
    // Some file systems (tmpfs before 3.5, NFSv3, ZFS on older kernels) do
    // not implement fallocate; posix_fallocate then writes zeros, which
    // reserves the space just as well, only slower.
    if (err == EOPNOTSUPP) err = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
    if (err == 0) return Status::OK();
    return PathError(path_, "allocating " + std::to_string(bytes) + " bytes", err);
  }

  Result<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return PathError(path_, "getting size", errno);
    return static_cast<uint64_t>(st.st_size);
  }

  void Prefetch() noexcept override { (void)::posix_fadvise(fd_, 0, 0, POSIX_FADV_WILLNEED); }

 private:
  const int fd_;
  std::once_flag map_once_;
  std::byte* map_ = nullptr;  // WriteMapped's mapping of [0, map_bytes_), set once
  uint64_t map_bytes_ = 0;
};

std::string_view OpenVerb(OpenMode mode) {
  switch (mode) {
    case OpenMode::kCreate: return "creating";
    case OpenMode::kReadWrite: return "opening for read/write";
    case OpenMode::kReadOnly: return "opening read-only";
  }
  return "opening";
}

int OpenFlags(OpenMode mode) {
  switch (mode) {
    case OpenMode::kCreate: return O_CREAT | O_EXCL | O_RDWR;
    case OpenMode::kReadWrite: return O_RDWR;
    case OpenMode::kReadOnly: return O_RDONLY;
  }
  return O_RDONLY;
}

// mkdir of one directory; an existing directory is fine, an existing file
// of that name is not (ENOTDIR, as mkdir -p says).
int MakeOneDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) == 0) return 0;
  int err = errno;
  if (err != EEXIST) return err;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

class PosixFs final : public FileSystem {
 public:
  Result<std::unique_ptr<File>> Open(const std::string& path, OpenMode mode) override {
    int fd = OpenRetrying(path, OpenFlags(mode), 0600);
    if (fd < 0) return PathError(path, OpenVerb(mode), errno);
    return std::unique_ptr<File>(std::make_unique<PosixFile>(path, fd));
  }

  Status Remove(const std::string& path) override {
    return ::unlink(path.c_str()) == 0 ? Status::OK() : PathError(path, "removing", errno);
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) == 0) return Status::OK();
    return PathError(from, "renaming to " + to, errno);
  }

  Status SyncDir(const std::string& dir) override {
    ScopedFd fd(OpenRetrying(dir, O_RDONLY | O_DIRECTORY));
    if (fd.get() < 0) return PathError(dir, "syncing directory", errno);
    int rc;
    do {
      rc = ::fsync(fd.get());
    } while (rc != 0 && errno == EINTR);
    return rc == 0 ? Status::OK() : PathError(dir, "syncing directory", errno);
  }

  Result<std::vector<std::string>> List(const std::string& dir) override {
    // open + fdopendir rather than opendir, to set O_CLOEXEC ourselves.
    ScopedFd fd(OpenRetrying(dir, O_RDONLY | O_DIRECTORY));
    if (fd.get() < 0) return PathError(dir, "listing", errno);
    DIR* d = ::fdopendir(fd.get());
    if (d == nullptr) return PathError(dir, "listing", errno);
    fd.release();  // closedir closes it now
    std::unique_ptr<DIR, int (*)(DIR*)> owner(d, &::closedir);
    std::vector<std::string> names;
    for (;;) {
      errno = 0;  // readdir returns nullptr both at the end and on error
      const dirent* e = ::readdir(d);
      if (e == nullptr) break;
      std::string_view name = e->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    if (errno != 0) return PathError(dir, "listing", errno);
    std::sort(names.begin(), names.end());
    return names;
  }

  Status CreateDir(const std::string& dir) override {
    // Every prefix ending before a '/', then the whole path: mkdir -p.
    for (size_t slash = dir.find('/', 1); slash != std::string::npos; slash = dir.find('/', slash + 1)) {
      if (dir[slash - 1] == '/') continue;  // "a//b"
      if (int err = MakeOneDir(dir.substr(0, slash)); err != 0) {
        return PathError(dir, "creating directory " + dir.substr(0, slash), err);
      }
    }
    if (int err = MakeOneDir(dir); err != 0) return PathError(dir, "creating directory", err);
    return Status::OK();
  }

  bool Exists(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
  }
};

}  // namespace

FileSystem& PosixFileSystem() {
  // Never destroyed: a thread still closing files while main() returns must
  // not find it gone. It holds no state, so nothing leaks.
  static PosixFs* const fs = new PosixFs();
  return *fs;
}

}  // namespace kvrdma
