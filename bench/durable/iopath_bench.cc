// kvrdma_iopath_bench: the I/O path of a commit, measured on this machine's
// disk: what DurableLog does (a pwrite, then fdatasync under --fsync always;
// a copy into a shared mapping of the file under everysec and no) against
// io_uring (liburing) doing the same. docs/PERFORMANCE.md, "The I/O path".
//
//   kvrdma_iopath_bench [--dir D] [--bytes 4096,65536] [--syncs 1000] [--writes 100000]
//
// Each commit writes --bytes at the next offset of a 64 MiB file written
// whole with zeros first (as --fsync always's segment files are), wrapping
// around. Synced paths (what --fsync always waits for before it answers):
//   pwrite+fdatasync   two system calls
//   uring write+fsync  one io_uring_submit_and_wait of a WRITE linked to an
//                      FSYNC(DATASYNC): one system call
// Unsynced paths (what everysec and no wait for: the bytes in the kernel):
//   mapping copy       memcpy into a MAP_SHARED mapping (no system call)
//   pwrite             one system call
//   uring write        one io_uring_submit_and_wait of a WRITE
// Prints per path: commits, p50 / p99 / mean latency in us, commits/s.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kFileBytes = size_t{64} << 20;

[[noreturn]] void Die(const char* what, int err) {
  std::fprintf(stderr, "kvrdma_iopath_bench: %s: %s\n", what, std::strerror(err));
  std::exit(1);
}

// Runs commit(off) n times at successive offsets; prints its latencies.
void Measure(const char* name, size_t bytes, int n, const std::function<void(size_t)>& commit) {
  std::vector<double> us(static_cast<size_t>(n));
  size_t off = 0;
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    commit(off);
    us[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    off = off + 2 * bytes > kFileBytes ? 0 : off + bytes;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  double sum = 0;
  for (double u : us) sum += u;
  std::sort(us.begin(), us.end());
  std::printf("%-20s %8zu %8d %10.1f %10.1f %10.1f %12.0f\n", name, bytes, n, us[us.size() / 2],
              us[std::min(us.size() - 1, us.size() * 99 / 100)], sum / n, n / secs);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvrdma_iopath_bench: a commit's I/O path, pwrite/fdatasync and a mapping against io_uring"};
  std::string dir = "/tmp/kvrdma-iopath-bench", sizes = "4096,65536";
  int syncs = 1000, writes = 100000;
  app.add_option("--dir", dir, "Scratch directory (on the disk to measure)")->capture_default_str();
  app.add_option("--bytes", sizes, "Bytes per commit, comma-separated")->capture_default_str();
  app.add_option("--syncs", syncs, "Commits per synced path")->capture_default_str();
  app.add_option("--writes", writes, "Commits per unsynced path")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::system(("mkdir -p '" + dir + "'").c_str());
  const std::string path = dir + "/segment";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) Die("open", errno);
  {
    std::vector<char> zeros(1 << 20, 0);
    for (size_t off = 0; off < kFileBytes; off += zeros.size()) {
      if (pwrite(fd, zeros.data(), zeros.size(), static_cast<off_t>(off)) != static_cast<ssize_t>(zeros.size())) {
        Die("pwrite zeros", errno);
      }
    }
    if (fdatasync(fd) != 0) Die("fdatasync", errno);
  }
  void* map = mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) Die("mmap", errno);
  io_uring ring;
  if (int r = io_uring_queue_init(8, &ring, 0); r < 0) Die("io_uring_queue_init", -r);

  std::printf("%-20s %8s %8s %10s %10s %10s %12s\n", "path", "bytes", "commits", "p50 us", "p99 us", "mean us",
              "commits/s");
  std::stringstream ss(sizes);
  for (std::string item; std::getline(ss, item, ',');) {
    const size_t bytes = std::stoul(item);
    if (bytes == 0 || bytes > kFileBytes / 2) Die("--bytes out of range", EINVAL);
    std::vector<char> buf(bytes, 'k');
    auto pwrite_at = [&](size_t off) {
      if (pwrite(fd, buf.data(), bytes, static_cast<off_t>(off)) != static_cast<ssize_t>(bytes)) Die("pwrite", errno);
    };
    auto uring = [&](size_t off, bool sync) {
      io_uring_sqe* w = io_uring_get_sqe(&ring);
      io_uring_prep_write(w, fd, buf.data(), static_cast<unsigned>(bytes), off);
      if (sync) {
        w->flags |= IOSQE_IO_LINK;
        io_uring_sqe* s = io_uring_get_sqe(&ring);
        io_uring_prep_fsync(s, fd, IORING_FSYNC_DATASYNC);
      }
      const unsigned want = sync ? 2 : 1;
      if (int r = io_uring_submit_and_wait(&ring, want); r < 0) Die("io_uring_submit_and_wait", -r);
      for (unsigned got = 0; got < want; ++got) {
        io_uring_cqe* cqe;
        if (int r = io_uring_wait_cqe(&ring, &cqe); r < 0) Die("io_uring_wait_cqe", -r);
        if (cqe->res < 0) Die("io_uring op", -cqe->res);
        io_uring_cqe_seen(&ring, cqe);
      }
    };
    // The synced and unsynced paths alternate run by run (two rounds), so
    // that the disk's and the host's drift falls on both.
    for (int round = 0; round < 2; ++round) {
      Measure("pwrite+fdatasync", bytes, syncs, [&](size_t off) {
        pwrite_at(off);
        if (fdatasync(fd) != 0) Die("fdatasync", errno);
      });
      Measure("uring write+fsync", bytes, syncs, [&](size_t off) { uring(off, true); });
      Measure("mapping copy", bytes, writes,
              [&](size_t off) { std::memcpy(static_cast<char*>(map) + off, buf.data(), bytes); });
      Measure("pwrite", bytes, writes, pwrite_at);
      Measure("uring write", bytes, writes, [&](size_t off) { uring(off, false); });
    }
  }
  io_uring_queue_exit(&ring);
  munmap(map, kFileBytes);
  close(fd);
  std::system(("rm -rf '" + dir + "'").c_str());
  return 0;
}
