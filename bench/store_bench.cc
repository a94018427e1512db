// Google Benchmark micro-benchmarks of the store and the client read path
// (CPU only): lookup decode, the entry checksum, insert, update, log append,
// cleaner throughput, and the memory overhead per item at 90% index load.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/format/read_path.h"
#include "common/log.h"
#include "common/memory/racy_copy.h"
#include "server/store/store.h"

namespace kvrdma {
namespace {

std::string BenchKey(uint64_t i) {
  char b[32];
  std::snprintf(b, sizeof(b), "key-%012llu", static_cast<unsigned long long>(i));
  return b;
}

std::unique_ptr<Store> OpenStore(StoreConfig c) {
  SetLogLevel(LogLevel::kWarn);
  c.huge_pages = HugePages::kAuto;
  auto s = Store::Open(c);
  if (!s.ok()) {
    std::fprintf(stderr, "Store::Open: %s\n", s.status().ToString().c_str());
    std::abort();
  }
  return std::move(s).value();
}

// Hash + probe of a window copy + entry validation: the CPU part of a GET.
void BM_LookupDecode(benchmark::State& state) {
  const size_t vlen = static_cast<size_t>(state.range(0));
  StoreConfig c;
  c.index_homes = 1 << 19;
  c.log_bytes = 64 << 20;
  c.cleaner_thread = false;
  auto s = OpenStore(c);
  const int n = 10000;
  const std::string value(vlen, 'v');
  for (int i = 0; i < n; ++i) (void)s->Put(0, BenchKey(i), value);
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(BenchKey(i));
  const IndexParams p = s->index_params();
  alignas(64) std::byte window[kMaxWindowWords * kWordBytes];
  std::vector<std::byte> entry(EntryBytes(32, vlen) + 64);
  uint64_t i = 0, hits = 0;
  for (auto _ : state) {
    const std::string& key = keys[i++ % n];
    auto kw = KeyWindowRead(p, key);
    std::memcpy(window, s->index_base() + kw->read.offset, kw->read.length);
    WindowProbe probe;
    const std::span<const std::byte> wspan(window, kw->read.length);
    (void)ProbeWindow(wspan, kw->hash, p, &probe);
    for (int w = NextCandidate(probe, 0); w >= 0; w = NextCandidate(probe, w + 1)) {
      const Candidate cand = CandidateAt(wspan, w, p);
      std::memcpy(entry.data(), s->log_base() + cand.entry.offset, cand.entry.length);
      EntryView v = DecodeEntry(std::span(entry).first(cand.entry.length), key, cand.ref, p.seed, false);
      if (v.verdict == EntryVerdict::kValue) {
        ++hits;
        benchmark::DoNotOptimize(v.value.data());
        break;
      }
    }
  }
  state.counters["hit_ratio"] = static_cast<double>(hits) / static_cast<double>(i);
  state.SetItemsProcessed(static_cast<int64_t>(i));
}
BENCHMARK(BM_LookupDecode)->Arg(16)->Arg(128)->Arg(1024);

// EntryChecksum over `range(0)` bytes, in one piece (range(1) = 0) or cut
// after a 16-byte key (range(1) = 1: a direct READ's key and value), each
// call on the next of as many inputs as fill 256 MiB: hashed from memory,
// not from the cache, as a GET hashes what the NIC has just written.
void BM_EntryChecksum(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const bool two_pieces = state.range(1) != 0;
  const size_t copies = std::max<size_t>(1, (size_t{256} << 20) / n);
  std::vector<std::byte> buf(n * copies);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>(i * 131 + (i >> 11));
  const uint32_t lengths = PackLengths(16, static_cast<uint32_t>(n - 16), false);
  size_t at = 0;
  for (auto _ : state) {
    const std::span<const std::byte> all(buf.data() + at * n, n);
    benchmark::DoNotOptimize(two_pieces ? EntryChecksum(lengths, all.first(16), all.subspan(16), 42)
                                        : EntryChecksum(lengths, all.data(), n, 42));
    if (++at == copies) at = 0;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_EntryChecksum)->Args({4096, 0})->Args({65536, 0})->Args({65536, 1})->Args({1 << 20, 0})->Args({1 << 20, 1});

// A GET's value into the caller's buffer: the entry checksummed, then its
// value copied (fused 0: EntryChecksum, then memcpy), or both in one pass
// (fused 1: EntryChecksumCopy). The entry and the buffer are the same each
// time (in cache as far as they fit: an entry READ just landed; a buffer
// reused).
void BM_EntryChecksumAndCopy(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const bool fused = state.range(1) != 0;
  std::vector<std::byte> entry(n), out(n);
  for (size_t i = 0; i < n; ++i) entry[i] = static_cast<std::byte>(i * 131 + (i >> 11));
  const uint32_t lengths = PackLengths(16, static_cast<uint32_t>(n - 16), false);
  for (auto _ : state) {
    if (fused) {
      benchmark::DoNotOptimize(EntryChecksumCopy(lengths, entry.data(), n, 16, out.data(), 42));
    } else {
      benchmark::DoNotOptimize(EntryChecksum(lengths, entry.data(), n, 42));
      std::memcpy(out.data(), entry.data() + 16, n - 16);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_EntryChecksumAndCopy)->ArgsProduct({{1024, 4096, 8192, 16384, 65536, 1 << 20, 16 << 20}, {0, 1}});

// New keys into an empty store (up to 70% index load, then a fresh store).
void BM_Insert(benchmark::State& state) {
  StoreConfig c;
  c.index_homes = 1 << 20;
  c.log_bytes = 256 << 20;
  c.cleaner_thread = false;
  const uint64_t limit = c.index_homes * 7 / 10;
  auto s = OpenStore(c);
  const std::string value(64, 'v');
  uint64_t i = 0, total = 0;
  for (auto _ : state) {
    if (i == limit) {
      state.PauseTiming();
      s.reset();
      s = OpenStore(c);
      i = 0;
      state.ResumeTiming();
    }
    auto r = s->Put(0, BenchKey(i++), value);
    benchmark::DoNotOptimize(r.ok());
    ++total;
  }
  state.SetItemsProcessed(static_cast<int64_t>(total));
}
BENCHMARK(BM_Insert);

// Updates of existing keys, the cleaner thread reclaiming behind them.
void BM_Update(benchmark::State& state) {
  StoreConfig c;
  c.index_homes = 1 << 19;
  c.log_bytes = 512 << 20;
  c.segment_bytes = 1 << 20;
  c.max_value_bytes = 64 << 10;
  c.grace_period = std::chrono::milliseconds(1);
  auto s = OpenStore(c);
  const int n = 100000;
  const std::string value(static_cast<size_t>(state.range(0)), 'v');
  for (int i = 0; i < n; ++i) (void)s->Put(0, BenchKey(i), value);
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(BenchKey(i));
  uint64_t i = 0, failed = 0;
  for (auto _ : state) {
    auto r = s->Put(0, keys[i++ % n], value);
    failed += !r.ok();
  }
  state.counters["failed"] = static_cast<double>(failed);
  state.SetItemsProcessed(static_cast<int64_t>(i));
  state.SetBytesProcessed(static_cast<int64_t>(i * value.size()));
}
BENCHMARK(BM_Update)->Arg(64)->Arg(1024);

// Log append alone: reserve at a head, write the entry with RacyStore, checksum.
void BM_LogAppend(benchmark::State& state) {
  SetLogLevel(LogLevel::kWarn);
  StoreConfig c;
  c.log_bytes = 64 << 20;
  c.grace_period = std::chrono::nanoseconds(0);
  auto log = ValueLog::Create(c, 1);
  const size_t vlen = static_cast<size_t>(state.range(0));
  // The entry as laid out at an offset of 0 and of 4 mod 8 (entry.h).
  std::vector<std::byte> entry[2] = {std::vector<std::byte>(EntryBytes(16, vlen)),
                                     std::vector<std::byte>(EntryBytes(16, vlen))};
  const std::string key(16, 'k'), value(vlen, 'v');
  EncodeEntry(entry[0], 0, key, value, false, c.seed);
  EncodeEntry(entry[1], 4, key, value, false, c.seed);
  const size_t size = entry[0].size();
  uint64_t n = 0;
  for (auto _ : state) {
    auto off = (*log)->Reserve(0, size, false);
    if (!off.ok()) {  // full: recycle the oldest sealed segment
      const int64_t seg = (*log)->ClaimOldest();
      if (seg >= 0) (*log)->Retire(static_cast<uint32_t>(seg));
      continue;
    }
    std::byte* p = (*log)->data() + *off;
    const std::byte* e = entry[(*off / 4) % 2].data();
    uint32_t lengths;
    std::memcpy(&lengths, e + LengthsAt(*off), sizeof(lengths));
    RacyStore(p + LengthsAt(*off), &lengths, sizeof(lengths));
    RacyStore(p + kEntryKeyOffset, e + kEntryKeyOffset, size - kEntryKeyOffset);
    const uint64_t g = EntryChecksum(lengths, p + kEntryKeyOffset, key.size() + vlen, c.seed);
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p + GuardAt(*off))).store(g, std::memory_order_relaxed);
    ++n;
  }
  state.SetItemsProcessed(static_cast<int64_t>(n));
  state.SetBytesProcessed(static_cast<int64_t>(n * size));
}
BENCHMARK(BM_LogAppend)->Arg(64)->Arg(1024);

// Cleaner: segments below 50% live compacted per second (bytes = segment bytes reclaimed).
void BM_CleanerThroughput(benchmark::State& state) {
  StoreConfig c;
  c.index_homes = 1 << 18;
  c.segment_bytes = 256 << 10;
  c.log_bytes = 256 * c.segment_bytes;
  c.cleaner_thread = false;
  c.grace_period = std::chrono::nanoseconds(0);
  c.clean_live_ratio = 0.5;
  c.max_value_bytes = 64 << 10;
  auto s = OpenStore(c);
  const int n = 20000;
  const std::string value(200, 'v');
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(BenchKey(i));
  std::mt19937_64 rng(3);
  uint64_t cleaned = 0, relocated = 0;
  for (auto _ : state) {
    state.PauseTiming();
    // 4n rewrites of random keys: sealed segments end up partly live.
    for (int i = 0; i < 4 * n; ++i) (void)s->Put(0, keys[rng() % n], value);
    const StoreStats before = s->Stats();
    state.ResumeTiming();
    while (s->RunCleanerOnce() > 0) {
    }
    state.PauseTiming();
    const StoreStats after = s->Stats();
    cleaned += after.segments_cleaned - before.segments_cleaned;
    relocated += after.relocations - before.relocations;
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(cleaned * c.segment_bytes));
  state.counters["segments"] = static_cast<double>(cleaned);
  state.counters["relocated_per_segment"] = cleaned ? static_cast<double>(relocated) / cleaned : 0;
  state.counters["relocations_per_s"] = benchmark::Counter(static_cast<double>(relocated), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CleanerThroughput)->Unit(benchmark::kMillisecond);

// Memory overhead beyond key + value at 90% index load: index bytes per item
// (index region / items) + entry header + padding. Args: key, value length
// (value length 0 = uniformly random 1..256).
void BM_BytesPerItem(benchmark::State& state) {
  const size_t klen = static_cast<size_t>(state.range(0));
  const size_t vlen = static_cast<size_t>(state.range(1));
  StoreConfig c;
  c.index_homes = 1 << 17;
  c.log_bytes = 256 << 20;
  c.cleaner_thread = false;
  c.full_wait = std::chrono::milliseconds(0);
  double overhead = 0, load = 0, index_per_item = 0;
  for (auto _ : state) {
    auto s = OpenStore(c);
    const uint64_t target = c.index_homes * 9 / 10;
    std::mt19937_64 rng(1);
    uint64_t payload = 0;
    std::string key, value;
    for (uint64_t i = 0; i < target; ++i) {
      char kb[64];
      std::snprintf(kb, sizeof(kb), "%0*llx", static_cast<int>(klen), static_cast<unsigned long long>(i));
      key = kb;
      value.assign(vlen ? vlen : 1 + rng() % 256, 'v');
      if (s->Put(0, key, value).ok()) payload += key.size() + value.size();
    }
    const StoreStats st = s->Stats();
    load = static_cast<double>(st.items) / static_cast<double>(st.index_homes);
    index_per_item = static_cast<double>(st.index_bytes) / static_cast<double>(st.items);
    overhead = index_per_item + static_cast<double>(st.log_bytes_live - payload) / static_cast<double>(st.items);
  }
  state.counters["index_load"] = load;
  state.counters["index_B_per_item"] = index_per_item;
  state.counters["overhead_B_per_item"] = overhead;
}
BENCHMARK(BM_BytesPerItem)->Args({16, 32})->Args({16, 100})->Args({10, 0})->Args({24, 1000})
    ->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvrdma

BENCHMARK_MAIN();
