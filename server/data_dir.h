// kvserver's side of the durable store's data dir: the lock that keeps a
// second kvserver out of it, and --verify.
#pragma once

#include <string>

#include "common/status.h"

namespace kvrdma::server {

// An exclusive flock(2) on DIR/kvrdma.lock (the directory is created if
// missing), held until destroyed: a second kvserver on the same data dir is
// refused at start, naming the dir.
class DataDirLock {
 public:
  DataDirLock() = default;
  ~DataDirLock();
  DataDirLock(const DataDirLock&) = delete;
  DataDirLock& operator=(const DataDirLock&) = delete;
  Status Take(const std::string& dir);

 private:
  int fd_ = -1;
};

// kvserver --data-dir DIR --verify: prints every problem and a summary;
// returns the exit code (0: servable, 1: damaged or not a data dir).
int VerifyDataDir(const std::string& dir);

}  // namespace kvrdma::server
