// Concurrent stress test of the store and the client read path.
//
// Writer threads update and delete keys through the Store while reader
// threads run the client read path directly on the index and log memory
// (copying with RacyLoad as a NIC would), an injector copies entries in small
// chunks with yields in between (sometimes waiting until the segment under it
// is recycled and its next bytes rewritten) to produce torn reads, and the cleaner thread compacts and
// recycles small segments. Values are self-verifying (key, sequence number,
// pattern), so a wrong or torn value returned to a reader is detected:
// wrong values, stale values and false misses must all be 0.
//
// Environment: KVRDMA_STRESS_READS (reads; default 10M for Full, 300k for
// Short), KVRDMA_STRESS_READERS, KVRDMA_STRESS_WRITERS, KVRDMA_STRESS_INJECTORS.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <thread>
#include <vector>

#include "tests/store/store_test_util.h"

namespace kvrdma::test {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kKeys = 6000;            // in 8192 homes (windows of 128): 73% load
constexpr int kStableKeys = kKeys / 2; // never deleted: a miss on them is a bug
constexpr auto kGrace = std::chrono::milliseconds(20);
constexpr auto kRoundLimit = std::chrono::milliseconds(10);  // < grace (DESIGN.md rule)

uint64_t EnvOr(const char* name, uint64_t def) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : def;
}

std::string KeyName(int k) {
  char b[16];
  std::snprintf(b, sizeof(b), "k%07d", k);
  return b;
}

size_t ValueLen(uint64_t k, uint64_t seq) { return 16 + (k * 7919 + seq * 104729) % 185; }
uint8_t Pattern(uint64_t k, uint64_t seq, size_t i) { return static_cast<uint8_t>(k * 131 + seq * 17 + i * 7); }

void MakeValue(uint64_t k, uint64_t seq, std::string* out) {
  out->resize(ValueLen(k, seq));
  std::memcpy(out->data(), &k, 8);
  std::memcpy(out->data() + 8, &seq, 8);
  for (size_t i = 16; i < out->size(); ++i) (*out)[i] = static_cast<char>(Pattern(k, seq, i));
}

// True if `v` is exactly the value written for key k at some sequence; *seq gets it.
bool CheckValue(uint64_t k, std::span<const std::byte> v, uint64_t* seq) {
  if (v.size() < 16) return false;
  uint64_t key;
  std::memcpy(&key, v.data(), 8);
  std::memcpy(seq, v.data() + 8, 8);
  if (key != k || v.size() != ValueLen(k, *seq)) return false;
  for (size_t i = 16; i < v.size(); ++i) {
    if (static_cast<uint8_t>(v[i]) != Pattern(k, *seq, i)) return false;
  }
  return true;
}

struct Totals {
  std::atomic<uint64_t> reads{0}, hits{0}, misses{0}, restarts{0}, torn{0}, malformed{0}, round_limit{0},
      gave_up{0}, wrong{0}, stale{0}, false_miss{0};
  std::atomic<uint64_t> inj_reads{0}, inj_tears{0}, inj_malformed{0}, inj_wrong_key{0}, inj_values{0},
      inj_waited{0}, inj_wrong{0};
  std::atomic<uint64_t> puts{0}, deletes{0}, full{0};
};

// durable: the store keeps its segments in files (a temporary data dir,
// --fsync no), the writers commit every few writes, and the cleaner removes
// compacted segments' files: the concurrency of DurableLog (flusher, marks,
// barriers) under the same load, for ThreadSanitizer.
void RunStress(uint64_t target_reads, uint64_t min_tears, bool durable = false) {
  const int readers = static_cast<int>(EnvOr("KVRDMA_STRESS_READERS", 2));
  const int writers = static_cast<int>(EnvOr("KVRDMA_STRESS_WRITERS", 2));
  StoreConfig c;
  c.index_homes = 8192;
  c.segment_bytes = 16 << 10;
  c.log_bytes = 256 * c.segment_bytes;
  c.workers = static_cast<uint32_t>(writers);
  c.huge_pages = HugePages::kOff;
  c.grace_period = kGrace;
  c.max_value_bytes = 1024;
  c.cleaner_thread = true;
  c.cleaner_interval = std::chrono::microseconds(200);
  c.min_free_segments = 16;
  c.full_wait = std::chrono::milliseconds(2000);
  std::string dir;
  if (durable) {
    char tmpl[] = "/tmp/kvrdma-stress-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
    c.data_dir = dir + "/data";
    c.fsync = FsyncMode::kNo;
    c.mark_wait = std::chrono::milliseconds(200);
  }
  struct RemoveDir {
    std::string d;
    ~RemoveDir() {
      if (!d.empty()) std::system(("rm -rf " + d).c_str());
    }
  } remove_dir{dir};
  auto store = OpenOrDie(c);
  ASSERT_TRUE(store);
  Store& s = *store;
  const IndexParams params = s.index_params();

  // floor[k]: sequence number of the last completed write (put or delete) of k.
  std::vector<std::atomic<uint64_t>> floor(kKeys);
  std::vector<uint64_t> next_seq(kKeys, 1);
  std::string val;
  for (int k = 0; k < kKeys; ++k) {
    MakeValue(k, 1, &val);
    ASSERT_TRUE(s.Put(0, KeyName(k), val).ok()) << k;
    floor[k].store(1);
    next_seq[k] = 2;
  }
  Totals t;
  std::atomic<bool> stop{false}, stop_readers{false};
  const auto t0 = Clock::now();

  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(100 + w);
      std::string v;
      int writes_since_commit = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        // Worker w owns the keys k with k % writers == w.
        const int k = static_cast<int>(rng() % (kKeys / writers)) * writers + w;
        if (k >= kKeys) continue;
        const uint64_t seq = next_seq[k]++;
        const bool del = k >= kStableKeys && rng() % 2 == 0;
        Status st;
        if (del) {
          st = s.Delete(static_cast<uint32_t>(w), KeyName(k)).status();
          if (st.IsNotFound()) st = Status::OK();
          t.deletes.fetch_add(1, std::memory_order_relaxed);
        } else {
          MakeValue(k, seq, &v);
          st = s.Put(static_cast<uint32_t>(w), KeyName(k), v).status();
          t.puts.fetch_add(1, std::memory_order_relaxed);
        }
        // A worker commits once per round of requests: here every 8 writes.
        if (durable && ++writes_since_commit == 8) {
          writes_since_commit = 0;
          if (Status c = s.Commit(static_cast<uint32_t>(w)); !c.ok()) ADD_FAILURE() << c.ToString();
        }
        if (st.ok()) {
          floor[k].store(seq, std::memory_order_release);
        } else {
          // ServerFull (log or index momentarily full): the old state stands.
          t.full.fetch_add(1, std::memory_order_relaxed);
          ASSERT_EQ(st.code(), Status::Code::kServerFull) << st.ToString();
        }
      }
    });
  }
  for (int r = 0; r < readers; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(200 + r);
      std::vector<std::byte> buf(4096);
      ReadCounters rc;
      uint64_t reads = 0, hits = 0, misses = 0, gave_up = 0, wrong = 0, stale = 0, false_miss = 0;
      while (!stop_readers.load(std::memory_order_relaxed)) {
        for (int batch = 0; batch < 256; ++batch) {
          const int k = static_cast<int>(rng() % kKeys);
          const std::string key = KeyName(k);
          const uint64_t fl = floor[k].load(std::memory_order_acquire);
          NativeGetResult res;
          Status st = NativeGet(params, s.index_base(), s.log_base(), key, buf, &res, &rc, kRoundLimit);
          ++reads;
          if (st.ok()) {
            ++hits;
            uint64_t seq = 0;
            if (!CheckValue(k, res.value, &seq)) {
              ++wrong;
            } else if (seq < fl) {
              ++stale;
            }
          } else if (st.IsNotFound()) {
            ++misses;
            if (k < kStableKeys) ++false_miss;
          } else {
            ++gave_up;
          }
        }
        t.reads.fetch_add(256, std::memory_order_relaxed);
      }
      t.hits += hits;
      t.misses += misses;
      t.gave_up += gave_up;
      t.wrong += wrong;
      t.stale += stale;
      t.false_miss += false_miss;
      t.restarts += rc.restarts;
      t.torn += rc.torn;
      t.malformed += rc.malformed;
      t.round_limit += rc.round_limit;
      (void)reads;
    });
  }
  const int injectors = static_cast<int>(EnvOr("KVRDMA_STRESS_INJECTORS", 4));
  for (int inj = 0; inj < injectors; ++inj) threads.emplace_back([&, inj] {  // injectors: very slow NICs
    std::mt19937_64 rng(300 + inj);
    alignas(64) std::byte window[kMaxWindowWords * kWordBytes];
    std::vector<std::byte> buf(4096);
    while (!stop.load(std::memory_order_relaxed)) {
      const int k = static_cast<int>(rng() % kKeys);
      const std::string key = KeyName(k);
      auto kw = KeyWindowRead(params, key);
      RacyLoad(window, s.index_base() + kw->read.offset, kw->read.length);
      WindowProbe probe;
      if (!ProbeWindow({window, kw->read.length}, kw->hash, params, &probe).ok() || probe.count == 0) continue;
      const Candidate cand = CandidateAt({window, kw->read.length}, NextCandidate(probe, 0), params);
      const size_t len = std::min<size_t>(cand.entry.length, buf.size());
      const std::byte* src = s.log_base() + cand.entry.offset;
      const uint64_t gen = s.SegmentGeneration(cand.entry.offset);
      const bool wait_for_reuse = rng() % 2 == 0;
      for (size_t done = 0; done < len;) {
        const size_t n = std::min<size_t>(len - done, 8 * (1 + rng() % 8));
        RacyLoad(buf.data() + done, src + done, n);
        done += n;
        if (wait_for_reuse && done == n) {
          // Holds the READ open until `done_waiting` (polled every 200 us)
          // or 400 ms pass (or the run stops).
          const auto hold = [&](auto done_waiting) {
            const auto until = Clock::now() + std::chrono::milliseconds(400);
            while (!done_waiting() && Clock::now() < until && !stop.load(std::memory_order_relaxed)) {
              std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
          };
          // The bytes the READ copies next, as they are now.
          const size_t m = std::min<size_t>(len - done, 8);
          std::byte old_next[8];
          RacyLoad(old_next, src + done, m);
          // Until the segment is recycled (on a loaded machine under
          // ThreadSanitizer 100 ms once saw no reuse in 60 s, and no tear).
          const auto reused = [&] { return s.SegmentGeneration(cand.entry.offset) != gen; };
          hold(reused);
          // Then until a writer has written over the next bytes the READ
          // will copy: a reused segment fills from its start, and under
          // ThreadSanitizer on a loaded machine a fixed 0-2 ms let 1,137
          // READs held across a reuse finish on the old bytes, and none tore
          // in 120 s (CI on e1fe198).
          if (reused() && m != 0) {
            hold([&] {
              std::byte now_bytes[8];
              RacyLoad(now_bytes, src + done, m);
              return std::memcmp(now_bytes, old_next, m) != 0;
            });
          }
          t.inj_waited.fetch_add(1, std::memory_order_relaxed);
        }
        std::this_thread::yield();
      }
      t.inj_reads.fetch_add(1, std::memory_order_relaxed);
      const EntryView v = DecodeEntry(std::span(buf).first(len), key, cand.ref, params.seed, false);
      uint64_t seq;
      switch (v.verdict) {
        case EntryVerdict::kTorn: t.inj_tears.fetch_add(1, std::memory_order_relaxed); break;
        case EntryVerdict::kMalformed: t.inj_malformed.fetch_add(1, std::memory_order_relaxed); break;
        case EntryVerdict::kWrongKey: t.inj_wrong_key.fetch_add(1, std::memory_order_relaxed); break;
        case EntryVerdict::kValue:
          t.inj_values.fetch_add(1, std::memory_order_relaxed);
          if (!CheckValue(k, v.value, &seq)) t.inj_wrong.fetch_add(1, std::memory_order_relaxed);
          break;
        default: break;
      }
    }
  });
  // Run until the readers did their reads and the injectors saw some tears
  // (or the tear wait passed), then stop everyone. A run that asks for one
  // tear (Short, under ThreadSanitizer, where it fails without one) waits up
  // to 120 s: it usually sees its tear in 5-15 s, and one CI run on this bed
  // saw none in 60, with 571 READs held open for a reuse that seldom came
  // within their 400 ms. The runs that count tears stop at 60 s.
  const auto tear_wait = std::chrono::seconds(min_tears == 1 ? 120 : 60);
  while (t.reads.load() < target_reads ||
         (t.inj_tears.load() < min_tears && Clock::now() - t0 < tear_wait)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop_readers.store(true);
  for (int i = 0; i < readers; ++i) threads[writers + i].join();
  stop.store(true);
  for (size_t i = 0; i < threads.size(); ++i) {
    if (i < static_cast<size_t>(writers) || i >= static_cast<size_t>(writers + readers)) threads[i].join();
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const StoreStats st = s.Stats();
  std::printf(
      "stress: %.1f s, %d writers, %d readers, %d injectors, cleaner thread\n"
      "  readers : reads %llu, hits %llu, misses %llu, restarts %llu (checksum failures %llu, malformed %llu, "
      "round limit %llu), gave up %llu\n"
      "            WRONG VALUES %llu, STALE VALUES %llu, FALSE MISSES %llu\n"
      "  injector: reads %llu (held open across reuse %llu), detected tears (checksum failures) %llu, "
      "malformed/recycled %llu, wrong key %llu, valid values %llu, WRONG VALUES %llu\n"
      "  writers : puts %llu, deletes %llu, server-full %llu\n"
      "  store   : items %llu, tombstones %llu, index moves %llu, cleaner runs %llu, segments cleaned %llu, "
      "relocations %llu, segments free %llu / used %llu\n",
      secs, writers, readers, injectors, (unsigned long long)t.reads.load(), (unsigned long long)t.hits.load(),
      (unsigned long long)t.misses.load(), (unsigned long long)t.restarts.load(),
      (unsigned long long)t.torn.load(), (unsigned long long)t.malformed.load(),
      (unsigned long long)t.round_limit.load(), (unsigned long long)t.gave_up.load(),
      (unsigned long long)t.wrong.load(), (unsigned long long)t.stale.load(),
      (unsigned long long)t.false_miss.load(), (unsigned long long)t.inj_reads.load(),
      (unsigned long long)t.inj_waited.load(), (unsigned long long)t.inj_tears.load(),
      (unsigned long long)t.inj_malformed.load(), (unsigned long long)t.inj_wrong_key.load(),
      (unsigned long long)t.inj_values.load(), (unsigned long long)t.inj_wrong.load(),
      (unsigned long long)t.puts.load(), (unsigned long long)t.deletes.load(), (unsigned long long)t.full.load(),
      (unsigned long long)st.items, (unsigned long long)st.tombstones, (unsigned long long)st.index_moves,
      (unsigned long long)st.cleaner_runs, (unsigned long long)st.segments_cleaned,
      (unsigned long long)st.relocations, (unsigned long long)st.segments_free,
      (unsigned long long)st.segments_used);
  std::fflush(stdout);
  EXPECT_GE(t.reads.load(), target_reads);
  EXPECT_EQ(t.wrong.load(), 0u);
  EXPECT_EQ(t.stale.load(), 0u);
  EXPECT_EQ(t.false_miss.load(), 0u);
  EXPECT_EQ(t.inj_wrong.load(), 0u);
  EXPECT_EQ(t.gave_up.load(), 0u);
  if (min_tears > 0) {
    EXPECT_GT(t.inj_tears.load(), 0u) << "the injector produced no torn reads";
  }
  EXPECT_GT(st.segments_cleaned, 0u);
  EXPECT_GT(st.relocations, 0u);
  // Final state: every stable key has its last written value.
  std::vector<std::byte> buf(4096);
  ReadCounters rc;
  for (int k = 0; k < kStableKeys; ++k) {
    NativeGetResult res;
    ASSERT_TRUE(NativeGet(params, s.index_base(), s.log_base(), KeyName(k), buf, &res, &rc).ok()) << k;
    uint64_t seq = 0;
    ASSERT_TRUE(CheckValue(k, res.value, &seq));
    ASSERT_EQ(seq, floor[k].load());
  }
}

// A tiny index (128 homes, windows of 16: 143 words) at ~91% load: a writer
// deletes and re-inserts volatile keys, which keeps hopping the stable keys
// inside their windows, while readers GET the stable keys copying each
// window a word at a time, last word first, with a yield between words (a
// hop's destination is read before its source). Without the move tag some of
// those GETs would report NotFound for a key present throughout; with it:
// none (DESIGN.md, "Misses while entry refs move").
void RunDisplacement(uint64_t target_reads) {
  StoreConfig c;
  c.index_homes = 128;
  c.index_window = 16;
  c.segment_bytes = 4096;
  c.log_bytes = 128 * c.segment_bytes;
  c.workers = 1;
  c.huge_pages = HugePages::kOff;
  c.grace_period = kGrace;
  c.max_value_bytes = 1024;
  c.cleaner_interval = std::chrono::microseconds(200);
  c.min_free_segments = 16;
  c.full_wait = std::chrono::milliseconds(2000);
  auto store = OpenOrDie(c);
  ASSERT_TRUE(store);
  Store& s = *store;
  const IndexParams params = s.index_params();
  constexpr size_t kStable = 110, kAll = 130;
  std::vector<int> stable, volatile_keys;
  std::string v;
  for (int k = 0; stable.size() + volatile_keys.size() < kAll && k < 100000; ++k) {
    MakeValue(k, 1, &v);
    if (!s.Put(0, KeyName(k), v).ok()) continue;
    (stable.size() < kStable ? stable : volatile_keys).push_back(k);
  }
  ASSERT_EQ(stable.size(), kStable);
  ASSERT_EQ(stable.size() + volatile_keys.size(), kAll);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, false_miss{0}, wrong{0}, rounds{0}, miss_rounds{0};
  std::thread writer([&] {
    // Replace the oldest volatile key by a new one: new keys land in full
    // windows and hop the stable keys.
    std::deque<int> vol(volatile_keys.begin(), volatile_keys.end());
    int next = 100000;
    std::string val;
    while (!stop.load(std::memory_order_relaxed)) {
      if (!vol.empty() && vol.size() >= volatile_keys.size()) {
        (void)s.Delete(0, KeyName(vol.front()));
        vol.pop_front();
      }
      MakeValue(next, 1, &val);
      if (s.Put(0, KeyName(next), val).ok()) vol.push_back(next);
      ++next;
    }
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(10 + r);
      std::vector<std::byte> buf(4096);
      ReadCounters rc;
      while (reads.load(std::memory_order_relaxed) < target_reads) {
        const int k = stable[rng() % stable.size()];
        NativeGetResult res;
        Status st = NativeGet(params, s.index_base(), s.log_base(), KeyName(k), buf, &res, &rc, kRoundLimit, 1000,
                              /*slow_window=*/true);
        uint64_t seq;
        if (st.IsNotFound()) false_miss.fetch_add(1, std::memory_order_relaxed);
        if (st.ok() && !CheckValue(k, res.value, &seq)) wrong.fetch_add(1, std::memory_order_relaxed);
        reads.fetch_add(1, std::memory_order_relaxed);
      }
      rounds += rc.rounds;
      miss_rounds += rc.miss_rounds;
    });
  }
  for (auto& t : readers) t.join();
  stop = true;
  writer.join();
  const StoreStats st = s.Stats();
  std::printf("displacement: reads %llu, window rounds %llu (%llu repeated for a tag or the round limit), index moves %llu, "
              "false misses %llu, wrong %llu\n",
              (unsigned long long)reads.load(), (unsigned long long)rounds.load(),
              (unsigned long long)miss_rounds.load(), (unsigned long long)st.index_moves,
              (unsigned long long)false_miss.load(), (unsigned long long)wrong.load());
  EXPECT_GT(st.index_moves, 100u);
  EXPECT_EQ(false_miss.load(), 0u);
  EXPECT_EQ(wrong.load(), 0u);
}

TEST(StoreStress, Full) { RunStress(EnvOr("KVRDMA_STRESS_READS", 10'000'000), 50); }
// Short runs under ThreadSanitizer only (CI's tsan label), for races: one
// tear is enough to know the injector and the readers' checksum path ran
// concurrently (Full counts 50). Waiting for 3 took up to 58 s of the CI's
// 20 minutes when the two cores were shared; tears are rare under TSan.
TEST(StoreStress, Short) { RunStress(EnvOr("KVRDMA_STRESS_READS", 300'000), 1); }
TEST(StoreStress, FullDurable) { RunStress(EnvOr("KVRDMA_STRESS_READS", 2'000'000), 10, /*durable=*/true); }
// The durable form is here for the flusher and the marks beside the cleaner
// and the readers (ThreadSanitizer), not for tears (Short's): its slower
// writers reuse segments seldom under ThreadSanitizer, and on a loaded
// machine it saw 2 tears in 60 s, or none.
TEST(StoreStress, ShortDurable) { RunStress(EnvOr("KVRDMA_STRESS_READS", 300'000), 0, /*durable=*/true); }
TEST(StoreStress, FullDisplacement) { RunDisplacement(EnvOr("KVRDMA_STRESS_READS", 1'000'000)); }
TEST(StoreStress, ShortDisplacement) { RunDisplacement(EnvOr("KVRDMA_STRESS_READS", 100'000)); }

}  // namespace
}  // namespace kvrdma::test
