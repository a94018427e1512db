// kvrdma_durable_bench: what the durable store costs, on this machine's disk,
// without RDMA (the store as the workers drive it: PUTs, then a Commit per
// batch). docs/PERFORMANCE.md, "Durable store".
//
//   kvrdma_durable_bench writes   --dir D [--workers 2] [--batch 16] [--seconds 3] [--value-bytes 64]
//     PUT throughput and commit latency for memory only, --fsync no,
//     everysec and always; writes per flush with always.
//   kvrdma_durable_bench recovery --dir D --gib 0.25,1,4 [--value-bytes 1000] [--cold] [--runs 3]
//     fills a data dir with that much log, then times `cat` of its files and
//     the store's recovery (each the best of --runs; the files in the page
//     cache, or with --cold the page cache dropped before each), the ratio,
//     and where the best recovery's time went (DurableLog::LoadTimes). --warm:
//     the log's size of memory faulted in and freed before each recovery.
//   kvrdma_durable_bench diskuse  --dir D [--keys 20000] [--seconds 10] [--puts-per-sec R]
//     overwrites a fixed key set at random: disk bytes against live bytes.
#include <CLI/CLI.hpp>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "server/store/store.h"

namespace {

using kvrdma::FsyncMode;
using kvrdma::Store;
using kvrdma::StoreConfig;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

StoreConfig Config(const std::string& dir, FsyncMode mode, uint64_t log_bytes, uint32_t workers) {
  StoreConfig c;
  c.index_homes = uint64_t{1} << 21;
  c.segment_bytes = 8 << 20;
  c.log_bytes = log_bytes;
  c.workers = workers;
  c.huge_pages = kvrdma::HugePages::kAuto;  // as kvserver: transparent huge pages where it can
  c.data_dir = dir;
  c.fsync = mode;
  c.seed = 0x6b7672646d61ull;
  return c;
}

void RemoveDir(const std::string& dir) { std::system(("rm -rf '" + dir + "'").c_str()); }

int Writes(const std::string& root, uint32_t workers, uint32_t batch, double seconds, size_t value_bytes) {
  std::printf("%-9s %10s %12s %12s %12s %14s\n", "fsync", "PUT/s", "commit p50", "commit p99", "flushes", "commits/flush");
  const char* names[] = {"memory", "no", "everysec", "always"};
  for (int m = 0; m < 4; ++m) {
    const std::string dir = root + "/writes-" + names[m];
    RemoveDir(dir);
    StoreConfig c = Config(m == 0 ? "" : dir, m == 1 ? FsyncMode::kNo : m == 2 ? FsyncMode::kEverySec : FsyncMode::kAlways,
                           uint64_t{2} << 30, workers);
    auto s = Store::Open(c);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
      return 1;
    }
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> puts{0};
    std::vector<std::vector<double>> lat(workers);
    std::vector<std::thread> t;
    const auto t0 = Clock::now();
    for (uint32_t w = 0; w < workers; ++w) {
      t.emplace_back([&, w] {
        std::mt19937_64 rng(w);
        std::string value(value_bytes, 'v');
        uint64_t n = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          for (uint32_t b = 0; b < batch; ++b) {
            const std::string key = "k" + std::to_string(rng() % 100000);
            if (!(*s)->Put(w, key, value).ok()) std::abort();
            ++n;
          }
          const auto c0 = Clock::now();
          if (!(*s)->Commit(w).ok()) std::abort();
          lat[w].push_back(Since(c0) * 1e6);
        }
        puts.fetch_add(n);
      });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto& th : t) th.join();
    const double el = Since(t0);
    std::vector<double> all;
    for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
    std::sort(all.begin(), all.end());
    const auto st = (*s)->Stats();
    std::printf("%-9s %10.0f %10.1fus %10.1fus %12llu %14.2f\n", names[m], static_cast<double>(puts.load()) / el,
                all.empty() ? 0.0 : all[all.size() / 2], all.empty() ? 0.0 : all[all.size() * 99 / 100],
                static_cast<unsigned long long>(st.disk.flushes),
                st.disk.flushes == 0 ? 0.0 : static_cast<double>(st.disk.commits_flushed) / static_cast<double>(st.disk.flushes));
    s->reset();
    RemoveDir(dir);
  }
  std::printf("(%u workers, %u PUTs of %zu-byte values per commit, %.0f s each)\n", workers, batch, value_bytes, seconds);
  return 0;
}

// Faults in `bytes` of fresh anonymous memory (touching each page), frees
// it, and returns how long the faulting took. Freed, the pages stay backed
// by the host for a while, so the next allocation of that size faults them
// in at what zeroing costs here (a VM whose balloon reports free pages to
// the host otherwise makes every first touch a host fault).
double WarmMemory(uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  const auto t0 = Clock::now();
  for (uint64_t o = 0; o < bytes; o += 4096) static_cast<volatile char*>(p)[o] = 1;
  const double s = Since(t0);
  munmap(p, bytes);
  return s;
}

int Recovery(const std::string& root, const std::string& gibs, size_t value_bytes, bool cold, int runs, bool warm) {
  std::printf("%8s %10s %10s %10s %8s %8s %8s   %s\n", "GiB", "keys", "cat s", "recover s", "ratio", "GB/s", "fault s",
              "reading thread: read s (cpu) | either: check s | other: install s (cpu) + wait s");
  std::stringstream ss(gibs);
  for (std::string g; std::getline(ss, g, ',');) {
    const double gib = std::stod(g);
    const std::string dir = root + "/recovery";
    RemoveDir(dir);
    const uint64_t log_bytes = (static_cast<uint64_t>(gib * (1 << 30)) / (8 << 20) + 8) * (8 << 20);
    uint64_t keys = 0;
    // An index of at least 2 homes per key the log can hold.
    auto recovery_config = [&] {
      StoreConfig c = Config(dir, FsyncMode::kNo, log_bytes + (uint64_t{64} << 20), 1);
      while (c.index_homes < 2 * log_bytes / (value_bytes + 32)) c.index_homes *= 2;
      return c;
    };
    {
      auto s = Store::Open(recovery_config());
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
        return 1;
      }
      std::string value(value_bytes, 'r');
      const uint64_t target = static_cast<uint64_t>(gib * (1 << 30));
      while ((*s)->Stats().log_bytes_live < target) {
        for (int i = 0; i < 1000; ++i) {
          if (!(*s)->Put(0, "key-" + std::to_string(keys++), value).ok()) std::abort();
        }
        if (!(*s)->Commit(0).ok()) std::abort();
      }
    }
    std::system(("sync; cat '" + dir + "'/*.kvseg > /dev/null").c_str());  // in the page cache
    double cat_s = 1e9, rec_s = 1e9, fault_s = warm ? 1e9 : 0;
    kvrdma::DurableLog::LoadTimes times;  // the best recovery's
    // Cold: the page cache dropped before each read (needs root).
    auto drop = [&] {
      if (cold && std::system("sync; echo 3 > /proc/sys/vm/drop_caches") != 0) std::fprintf(stderr, "cannot drop caches\n");
    };
    for (int r = 0; r < runs; ++r) {
      drop();
      auto t0 = Clock::now();
      std::system(("cat '" + dir + "'/*.kvseg > /dev/null").c_str());
      cat_s = std::min(cat_s, Since(t0));
      drop();
      if (warm) fault_s = std::min(fault_s, WarmMemory(log_bytes + (uint64_t{64} << 20)));
      t0 = Clock::now();
      auto s = Store::Open(recovery_config());
      const double el = Since(t0);
      if (!s.ok() || (*s)->Stats().recovered_keys != keys) {
        std::fprintf(stderr, "recovery failed or lost keys\n");
        return 1;
      }
      if (el < rec_s) times = (*s)->Stats().recovery_times;
      rec_s = std::min(rec_s, el);
    }
    auto sec = [](uint64_t ns) { return static_cast<double>(ns) * 1e-9; };
    std::printf("%8.2f %10llu %10.3f %10.3f %8.2f %8.2f %8.3f   %.3f (%.3f) | %.3f | %.3f (%.3f) + %.3f\n", gib,
                static_cast<unsigned long long>(keys), cat_s, rec_s, rec_s / cat_s, gib * 1.073741824 / rec_s, fault_s,
                sec(times.read_ns), sec(times.reader_cpu_ns), sec(times.check_ns), sec(times.install_ns),
                sec(times.install_cpu_ns), sec(times.wait_ns));
    RemoveDir(dir);
  }
  std::printf("(values of %zu bytes; %s; best of %d; recover = Store::Open: read, walk, rebuild the index; %s)\n",
              value_bytes, cold ? "page cache dropped before each read" : "files in the page cache", runs,
              warm ? "--warm: the log's size of memory faulted in (fault s) and freed before each recovery"
                   : "the log's memory as the machine gives it");
  return 0;
}

int DiskUse(const std::string& root, uint64_t keys, double seconds, double rate) {
  const std::string dir = root + "/diskuse";
  RemoveDir(dir);
  StoreConfig c = Config(dir, FsyncMode::kEverySec, uint64_t{512} << 20, 1);
  c.cleaner_thread = true;
  auto s = Store::Open(c);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
    return 1;
  }
  std::mt19937_64 rng(1);
  std::string value(200, 'd');
  const auto t0 = Clock::now();
  uint64_t puts = 0;
  double worst = 0;
  std::printf("%8s %12s %14s %12s %8s %10s\n", "t s", "PUTs", "live MiB", "disk MiB", "ratio", "cleaned");
  for (int tick = 1; Since(t0) < seconds; ++tick) {
    const auto until = t0 + std::chrono::duration<double>(seconds * tick / 10);
    while (Clock::now() < until) {
      for (int i = 0; i < 100; ++i) {
        auto r = (*s)->Put(0, "key-" + std::to_string(rng() % keys), value);
        if (!r.ok()) {
          std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
          return 1;
        }
        ++puts;
      }
      (void)(*s)->Commit(0);
      if (rate > 0) {  // paced: a load a kvserver on this device could carry
        std::this_thread::sleep_until(t0 + std::chrono::duration<double>(static_cast<double>(puts) / rate));
      }
    }
    const auto st = (*s)->Stats();
    const double live = static_cast<double>(st.log_bytes_live) / (1 << 20);
    const double disk = static_cast<double>(st.disk.segments_on_disk) * ((8 << 20) + 4096) / (1 << 20);
    worst = std::max(worst, disk / live);
    std::printf("%8.1f %12llu %14.1f %12.1f %8.2f %10llu\n", Since(t0), static_cast<unsigned long long>(puts), live, disk,
                disk / live, static_cast<unsigned long long>(st.segments_cleaned));
  }
  std::printf("worst disk/live: %.2f (%llu keys of 200-byte values, 8 MiB segments, cleaner at its defaults, %s)\n",
              worst, static_cast<unsigned long long>(keys), rate > 0 ? (std::to_string(static_cast<long>(rate)) + " PUT/s").c_str() : "as fast as it goes");
  s->reset();
  RemoveDir(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvrdma_durable_bench: the durable store's costs on this machine's disk (no RDMA)"};
  std::string dir = "/tmp/kvrdma-durable-bench", gibs = "0.25,1";
  uint32_t workers = 2, batch = 16;
  double seconds = 3;
  size_t value_bytes = 64;
  uint64_t keys = 20000;
  app.add_option("--dir", dir, "Scratch directory (removed and recreated)")->capture_default_str();
  app.require_subcommand(1);
  auto* w = app.add_subcommand("writes", "PUT/s and commit latency per --fsync mode");
  w->add_option("--workers", workers)->capture_default_str();
  w->add_option("--batch", batch, "PUTs per commit (a worker's round)")->capture_default_str();
  w->add_option("--seconds", seconds)->capture_default_str();
  w->add_option("--value-bytes", value_bytes)->capture_default_str();
  auto* r = app.add_subcommand("recovery", "recovery time against cat of the same files");
  r->add_option("--gib", gibs, "Log sizes to recover, comma-separated")->capture_default_str();
  r->add_option("--value-bytes", value_bytes)->capture_default_str();
  bool cold = false;
  r->add_flag("--cold", cold, "Drop the page cache before each read (root)");
  int runs = 3;
  bool warm = false;
  r->add_flag("--warm", warm, "Fault in and free the log's size of memory before each recovery (fault s)");
  r->add_option("--runs", runs, "cat and recover this many times each, alternately; the best of each")->capture_default_str();
  auto* d = app.add_subcommand("diskuse", "disk bytes against live bytes under overwrites");
  d->add_option("--keys", keys)->capture_default_str();
  d->add_option("--seconds", seconds)->capture_default_str();
  double rate = 0;
  d->add_option("--puts-per-sec", rate, "Pace the PUTs (0: as fast as they go)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  kvrdma::SetLogLevel(kvrdma::LogLevel::kWarn);
  std::system(("mkdir -p '" + dir + "'").c_str());
  if (w->parsed()) return Writes(dir, workers, batch, seconds, value_bytes);
  if (r->parsed()) return Recovery(dir, gibs, value_bytes == 64 ? 1000 : value_bytes, cold, runs, warm);
  return DiskUse(dir, keys, seconds, rate);
}
