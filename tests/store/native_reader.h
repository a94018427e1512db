// A GET done the way a client does it over RDMA, but on local memory: copy
// the key's index window and then the entry with RacyLoad (what a NIC's READ
// does to memory the server is changing), and decide with the pure read-path
// functions. Used by the store tests and the stress test.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "common/format/read_path.h"
#include "common/format/round_clock.h"
#include "common/memory/racy_copy.h"
#include "common/status.h"

namespace kvrdma::test {

struct ReadCounters {
  uint64_t gets = 0;
  uint64_t rounds = 0;          // window rounds
  uint64_t miss_rounds = 0;     // rounds repeated because a miss was not proven (tag, round limit)
  uint64_t restarts = 0;        // GETs restarted (torn / malformed / round limit)
  uint64_t torn = 0;            // checksum failures seen
  uint64_t malformed = 0;       // lengths disagreeing with the ref
  uint64_t wrong_key = 0;       // fingerprint collisions
  uint64_t round_limit = 0;     // restarts because a round outlived the round limit
  uint64_t entry_reads = 0;     // entry READs (one per candidate fetched: never a second one)
  uint64_t entry_read_bytes = 0;  // bytes those READs fetched
};

struct NativeGetResult {
  std::span<const std::byte> value;  // into the caller's buffer
  uint64_t log_offset = 0;
  uint64_t ref = 0;
};

// REQUIRES: buf.size() >= SizeClassBytes of the largest entry's size class. Returns OK, NotFound, or Retry
// after `max_attempts` restarts. `slow_window` copies the window a word at a
// time, last word first, yielding in between (tests: a slow NIC that reads a
// hop's destination before its source, the order the move tag guards).
inline Status NativeGet(const IndexParams& p, const std::byte* index, const std::byte* log,
                        std::string_view key, std::vector<std::byte>& buf, NativeGetResult* out,
                        ReadCounters* c, std::chrono::nanoseconds round_limit = std::chrono::seconds(1),
                        int max_attempts = 1000, bool slow_window = false) {
  using Clock = RoundClock;  // as the client times its rounds (round_clock.h)
  auto kw = KeyWindowRead(p, key);
  if (!kw.ok()) return kw.status();
  ++c->gets;
  alignas(64) std::byte window[kMaxWindowWords * kWordBytes];
  const std::span<const std::byte> wspan(window, kw->read.length);
  for (int attempt = 0; attempt < max_attempts; ++attempt) {
    bool restart = false;
    for (int round = 0; round < 16 && !restart; ++round) {
      const auto start = Clock::now();
      ++c->rounds;
      const std::byte* src = index + kw->read.offset;
      if (slow_window) {
        for (size_t at = kw->read.length; at > 0; at -= kWordBytes) {
          RacyLoad(window + at - kWordBytes, src + at - kWordBytes, kWordBytes);
          std::this_thread::yield();  // a slow NIC: widen the race window
        }
      } else {
        RacyLoad(window, src, kw->read.length);
      }
#ifndef KVRDMA_TSAN  // (TSan does not model fences; the checksum catches what it would order)
      std::atomic_thread_fence(std::memory_order_acquire);  // later READs see what the ref published
#endif
      const bool late = Clock::now() - start > round_limit;
      WindowProbe probe;
      KVRDMA_RETURN_IF_ERROR(ProbeWindow(wspan, kw->hash, p, &probe));
      for (int w = NextCandidate(probe, 0); w >= 0 && !restart; w = NextCandidate(probe, w + 1)) {
        const Candidate cand = CandidateAt(wspan, w, p);
        // One READ of the size class's bytes covers the entry (a buffer
        // shorter than that READ makes it malformed: see REQUIRES).
        const size_t len = std::min<size_t>(cand.entry.length, buf.size());
        ++c->entry_reads;
        c->entry_read_bytes += len;
        RacyLoad(buf.data(), log + cand.entry.offset, len);
        const EntryView v = DecodeEntry(std::span(buf).first(len), key, cand.ref, p.seed, false);
        switch (v.verdict) {
          case EntryVerdict::kWrongKey: ++c->wrong_key; continue;
          case EntryVerdict::kTorn: ++c->torn; restart = true; continue;
          case EntryVerdict::kValue:
          case EntryVerdict::kTombstone:
            if (Clock::now() - start > round_limit) {
              ++c->round_limit;
              restart = true;
              continue;
            }
            out->value = v.value;
            out->log_offset = cand.entry.offset;
            out->ref = cand.ref;
            return v.verdict == EntryVerdict::kValue ? Status::OK() : Status::NotFound();
          default: ++c->malformed; restart = true; continue;
        }
      }
      if (restart) break;
      if (MissIsProven(probe, !late)) return Status::NotFound();
      ++c->miss_rounds;  // a tag matched, or the round was late: read the window again
    }
    ++c->restarts;
  }
  return Status::Retry("GET kept racing writers");
}

}  // namespace kvrdma::test
