#include "server/data_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "server/store/durable_log.h"
#include "server/store/file_system.h"
#include "server/store/segment_file.h"

namespace kvrdma::server {

DataDirLock::~DataDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

Status DataDirLock::Take(const std::string& dir) {
  KVRDMA_RETURN_IF_ERROR(PosixFileSystem().CreateDir(dir));
  const std::string path = dir + "/" + kLockFileName;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) return Status::FromErrno(path + ": opening the data dir's lock file", errno);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (e == EWOULDBLOCK) return Status::Unavailable(dir + " is in use by another kvserver (" + path + " is locked)");
    return Status::FromErrno(path + ": locking", e);
  }
  return Status::OK();
}

int VerifyDataDir(const std::string& dir) {
  uint64_t damage = 0, warnings = 0;
  auto report = [&](const std::string& m, bool damaged) {
    std::printf("%s: %s\n", damaged ? "DAMAGE" : "warning", m.c_str());
    ++(damaged ? damage : warnings);
  };
  auto sum = DurableLog::Verify(PosixFileSystem(), dir, report);
  if (!sum.ok()) {
    // Not a data dir at all (no meta file), or its meta file is damaged.
    std::printf("%s: %s\n", sum.status().code() == Status::Code::kCorruption ? "DAMAGE" : "error", sum.status().message().c_str());
    return 1;
  }
  std::printf("%s: %llu segment files of %llu bytes, %llu writes (%llu bytes) checked: %s\n", dir.c_str(),
              static_cast<unsigned long long>(sum->files), static_cast<unsigned long long>(sum->segment_bytes),
              static_cast<unsigned long long>(sum->writes), static_cast<unsigned long long>(sum->bytes),
              sum->damaged == 0 ? (warnings == 0 ? "OK" : "OK (see the warnings: a torn tail, or a tail a power cut left unsynced, is cut at start)")
                                : "DAMAGED (kvserver refuses to start on it)");
  return sum->damaged == 0 ? 0 : 1;
}

}  // namespace kvrdma::server
