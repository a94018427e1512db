// The READs of a GET with no client around them: what the device takes for a
// GET's exact READ pattern, on the transport and QP settings the client
// library uses, so that bench/compare can split a GET's latency into what
// the device takes for its READs (this floor) and what the client adds.
//
// perftest's ib_read_lat times one READ at a time. A GET posts other
// patterns (docs/DESIGN.md, "Client: GET path"):
//
//   entry         one READ of the entry's bytes: perftest's own pattern, on
//                 our transport (a check that the QP and the transport add
//                 nothing to perftest's READ)
//   word_entry    a cached GET: an 8-byte READ of the index word and the
//                 entry's READ in one doorbell, only the second signaled
//   window_entry  an uncached GET: a READ of the key's window, then, when it
//                 has completed, the entry's READ
//
// Each pattern runs --iters times, the three interleaved in rounds of
// --round so that the device's drift falls on all three alike; a
// pattern's time is from its first post to its last completion, polling
// without sleeping (as perftest and kvbench --spin do). Prints one line per
// pattern: name, READs, bytes, p50 and p90 in microseconds.
//
// Usage (a real device; loopback with --loopback):
//   tools/with-rdma build/bench/kvrdma_read_floor [--window-bytes 1024] [--entry-bytes 96] [--iters 5000]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/device_pair.h"
#include "client/client_internal.h"

using namespace kvrdma;

namespace {

using Clock = std::chrono::steady_clock;

enum class Pattern { kEntry, kWordEntry, kWindowEntry };
constexpr Pattern kPatterns[] = {Pattern::kEntry, Pattern::kWordEntry, Pattern::kWindowEntry};
const char* PatternName(Pattern p) {
  switch (p) {
    case Pattern::kEntry: return "entry";
    case Pattern::kWordEntry: return "word_entry";
    case Pattern::kWindowEntry: return "window_entry";
  }
  return "?";
}

struct Floor {
  Connection& conn;
  CompletionQueue& cq;
  const MemoryRegion& local;   // the client's buffer: window at 0, entry after it
  const MemoryRegion& remote;  // the server's region: "index" at 0, "log" at half
  uint32_t window_bytes;
  uint32_t entry_bytes;
  uint64_t spread;  // READs at random 64-byte-aligned offsets below this in each half (0: always the first)
  std::mt19937_64 rng{42};
  uint64_t index_at = 0, log_at = 0;  // this run's

  SendWr Read(uint64_t wr_id, uint64_t remote_off, size_t local_off, uint32_t len, bool signaled) const {
    SendWr w;
    w.wr_id = wr_id;
    w.opcode = WrOpcode::kRead;
    w.signaled = signaled;
    w.local = local.Slice(local_off, len);
    w.remote_addr = remote.base() + remote_off;
    w.rkey = remote.rkey();
    return w;
  }
  uint64_t log_off() const { return remote.length() / 2 + log_at; }

  // Posts wrs and polls until the one signaled completion arrives.
  Status PostAndWait(std::span<const SendWr> wrs) {
    KVRDMA_RETURN_IF_ERROR(conn.PostSend(wrs));
    Completion wc[4];
    for (const auto deadline = Clock::now() + std::chrono::seconds(5);;) {
      const int n = cq.Poll(wc);
      if (n < 0) return Status::ConnectionLost("completion queue failed");
      if (n > 0) return CompletionStatus(wc[0]);
      if (Clock::now() > deadline) return Status::Timeout("no completion within 5 s");
    }
  }

  Status Run(Pattern p) {
    if (spread != 0) {
      index_at = rng() % (spread / 64) * 64;
      log_at = rng() % (spread / 64) * 64;
    }
    switch (p) {
      case Pattern::kEntry: {
        const SendWr w = Read(1, log_off(), window_bytes, entry_bytes, true);
        return PostAndWait({&w, 1});
      }
      case Pattern::kWordEntry: {
        const SendWr w[2] = {Read(2, index_at + 8, 8, 8, false), Read(3, log_off(), window_bytes, entry_bytes, true)};
        return PostAndWait(w);
      }
      case Pattern::kWindowEntry: {
        const SendWr window = Read(4, index_at, 0, window_bytes, true);
        KVRDMA_RETURN_IF_ERROR(PostAndWait({&window, 1}));
        const SendWr entry = Read(5, log_off(), window_bytes, entry_bytes, true);
        return PostAndWait({&entry, 1});
      }
    }
    return Status::InvalidArgument("no such pattern");
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Times a GET's READ patterns with no client around them (one READ of an entry; a cached GET's word and "
      "entry READs in one doorbell; an uncached GET's window READ, then its entry READ), on the client "
      "library's QP settings: the floor bench/compare sets kvbench's GET latency against."};
  uint32_t window_bytes = 1024;
  uint32_t entry_bytes = 96;
  int iters = 5000;
  int round = 500;
  size_t region_mb = 64;
  size_t spread_mb = 0;
  bool loopback = false;
  app.add_option("--window-bytes", window_bytes, "bytes of the window READ (kvserver's index window)")
      ->check(CLI::Range(8u, 1u << 20));
  app.add_option("--entry-bytes", entry_bytes, "bytes of the entry READ (the entry's size class)")
      ->check(CLI::Range(8u, 1u << 20));
  app.add_option("--iters", iters, "timed runs of each pattern (perftest's -n)")->check(CLI::Range(1, 10000000));
  app.add_option("--round", round, "runs of one pattern before the next (the patterns interleave)")
      ->check(CLI::Range(1, 10000000));
  app.add_option("--region-mb", region_mb, "MiB the server registers (READs go to its start and its middle)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--spread-mb", spread_mb,
                 "READ at random offsets over this many MiB of each half, as GETs of many keys do (0: always the "
                 "same addresses, as perftest)")
      ->check(CLI::Range(0, 32768));
  app.add_flag("--loopback", loopback, "the loopback transport instead of a device");
  CLI11_PARSE(app, argc, argv);
  if (size_t{window_bytes} + (spread_mb << 20) > region_mb << 19 ||
      size_t{entry_bytes} + (spread_mb << 20) > region_mb << 19) {
    std::fprintf(stderr, "--window-bytes and --entry-bytes, past --spread-mb, must fit half of --region-mb\n");
    return 2;
  }

  std::unique_ptr<CompletionQueue> cq;  // outlives the QPs in e
  bench::DevicePair e;
  Status st = bench::OpenDevicePair(loopback, e);
  // The client library's QP (ClientQpConfig, with ClientOptions' default
  // max_in_flight), one CQ for both directions as the client's, windows
  // where the device has them (rendezvous PUTs on, the default).
  QpConfig qc;
  if (st.ok()) {
    qc = ClientQpConfig(ClientOptions{}.max_in_flight, e.client_dev->info().memory_windows);
    auto c = e.client_dev->CreateCompletionQueue(qc.max_send_wr + qc.max_recv_wr);
    if (c.ok()) cq = std::move(c).value();
    st = c.status();
  }
  qc.send_cq = qc.recv_cq = cq.get();
  if (st.ok()) st = bench::ConnectPair(e, qc, QpConfig{});
  if (!st.ok()) {
    std::fprintf(stderr, "kvrdma_read_floor: %s\n", st.ToString().c_str());
    return st.code() == Status::Code::kInvalidArgument ? 2 : 1;
  }
  std::vector<std::byte> remote_bytes(region_mb << 20, std::byte{0x5a});
  std::vector<std::byte> local_bytes(size_t{window_bytes} + entry_bytes);
  auto remote = e.server_dev->RegisterMemory(remote_bytes.data(), remote_bytes.size(), kAccessRemoteRead);
  auto local = e.client_dev->RegisterMemory(local_bytes.data(), local_bytes.size(), kAccessLocalWrite);
  if (!remote.ok() || !local.ok()) {
    std::fprintf(stderr, "kvrdma_read_floor: register: %s\n",
                 (!remote.ok() ? remote.status() : local.status()).ToString().c_str());
    return 1;
  }
  Floor f{*e.client, *cq, **local, **remote, window_bytes, entry_bytes, uint64_t{spread_mb} << 20};

  std::vector<double> us[std::size(kPatterns)];
  for (auto& v : us) v.reserve(static_cast<size_t>(iters));
  // Untimed warm-up: a round of each.
  for (Pattern p : kPatterns) {
    for (int i = 0; i < round && st.ok(); ++i) st = f.Run(p);
  }
  for (int done = 0; done < iters && st.ok(); done += round) {
    for (size_t k = 0; k < std::size(kPatterns) && st.ok(); ++k) {
      for (int i = 0; i < std::min(round, iters - done) && st.ok(); ++i) {
        const auto t0 = Clock::now();
        st = f.Run(kPatterns[k]);
        us[k].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
    }
  }
  if (!st.ok()) {
    std::fprintf(stderr, "kvrdma_read_floor: %s\n", st.ToString().c_str());
    return 1;
  }
  std::printf("%-13s %5s %12s %10s %10s\n", "pattern", "reads", "bytes", "p50_us", "p90_us");
  const std::string bytes[] = {std::to_string(entry_bytes), "8+" + std::to_string(entry_bytes),
                               std::to_string(window_bytes) + "," + std::to_string(entry_bytes)};
  const int reads[] = {1, 2, 2};
  for (size_t k = 0; k < std::size(kPatterns); ++k) {
    std::printf("%-13s %5d %12s %10.2f %10.2f\n", PatternName(kPatterns[k]), reads[k], bytes[k].c_str(),
                bench::Percentile(us[k], 0.5), bench::Percentile(us[k], 0.9));
  }
  return 0;
}
