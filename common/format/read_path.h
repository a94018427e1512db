// The client read path as pure functions over bytes: no I/O, no allocation,
// safe on arbitrary input (every length and offset is bounds-checked), so the
// client runs them on what its RDMA READs returned and fuzzers run them on
// garbage.
//
// A GET (docs/DESIGN.md, "Index words and windows"):
//   1. KeyWindowRead(params, key)             -> one {8 * home, 8 * window} READ
//                                                of the index
//   2. ProbeWindow(window bytes, hash)        -> words whose ref has the key's
//                                                fingerprint + whether a move
//                                                tag matches the key
//   3. for each candidate (NextCandidate, CandidateAt): READ its entry (the
//      size class's bytes clamped to the log: the whole entry in one READ),
//      DecodeEntry(entry bytes, key, ref)    -> value / tombstone / wrong key
//                                                (next candidate) / retry
//                                                (torn, malformed, superseded)
//   4. nothing matched: MissIsProven(probe, the window READ's round time)
//      decides whether the miss is real or another round is needed.
// The whole sequence must finish within the round limit (<= the server's
// grace period), else it restarts from step 1.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/format/entry.h"
#include "common/format/hash.h"
#include "common/format/entry_ref.h"
#include "common/format/window.h"
#include "common/status.h"

namespace kvrdma {

// What a client learns from the server at connect time.
struct IndexParams {
  uint64_t home_count = 0;    // homes: a power of two >= 1
  uint64_t window_words = 0;  // words per window: 1..kMaxWindowWords
  uint64_t seed = 0;          // XXH3 seed for keys and checksums
  uint64_t log_bytes = 0;     // size of the value-log region
};

// InvalidArgument unless the parameters describe a usable index and log.
Status ValidateIndexParams(const IndexParams& p);

struct RemoteRead {
  uint64_t offset = 0;  // from the start of the region
  uint32_t length = 0;
};

struct KeyWindow {
  KeyHash hash;
  RemoteRead read;  // the key's window, in the index region
};

// (a) The window READ for `key`. InvalidArgument on bad params or key length.
Result<KeyWindow> KeyWindowRead(const IndexParams& p, std::string_view key);
// The same without the checks, for a caller that made them once (the client
// validates the parameters at connect and each key's length).
// REQUIRES: ValidateIndexParams(p).ok(), 1 <= key.size() <= kMaxKeyBytes.
// Inline: every GET starts with it (a call less).
inline KeyWindow KeyWindowOf(const IndexParams& p, std::string_view key) noexcept {
  KeyWindow r;
  r.hash = MakeKeyHash(key, p.seed, p.home_count);
  r.read = RemoteRead{r.hash.home * kWordBytes, static_cast<uint32_t>(p.window_words * kWordBytes)};
  return r;
}

struct Candidate {
  uint64_t ref = 0;  // the ref as read (tag bits cleared)
  RemoteRead entry;   // READ for the entry (clamped to the log)
};

struct WindowProbe {
  // Bit i (word i of the window): a plausible ref with the key's fingerprint.
  std::array<uint64_t, kMaxWindowWords / 64> candidates{};
  uint8_t count = 0;         // candidates set
  uint8_t rejected = 0;      // fingerprint matched, ref implausible (skipped)
  bool tag_matched = false;  // a word's move tag matches the key (window.h)
};

// (b) Probes the window bytes READ for `kh`: the span must be exactly
// p.window_words * 8 bytes (InvalidArgument otherwise). Refs that point
// outside the log or carry an impossible size class are skipped (`rejected`).
Status ProbeWindow(std::span<const std::byte> window, const KeyHash& kh, const IndexParams& p,
                   WindowProbe* out) noexcept;

namespace detail {
// How ProbeWindow scans a window: one word at a time (the reference, and
// what it does where SSE2 is not available), or a vector filter over blocks
// of 4 (SSE2) or 8 (AVX2, where the CPU has it) words. ProbeWindow takes the
// widest available; tests run each against the reference.
enum class WindowScan : uint8_t { kOneWord, kSse2, kAvx2 };
bool WindowScanAvailable(WindowScan scan) noexcept;
// ProbeWindow with that scan (InvalidArgument if it is not available).
Status ProbeWindowWith(WindowScan scan, std::span<const std::byte> window, const KeyHash& kh, const IndexParams& p,
                       WindowProbe* out) noexcept;
}  // namespace detail

// The first candidate word at or after `from`, or -1.
int NextCandidate(const WindowProbe& probe, int from) noexcept;

// The candidate in word `word` of the window bytes (as ProbeWindow accepted
// it): its ref and the entry READ.
Candidate CandidateAt(std::span<const std::byte> window, int word, const IndexParams& p) noexcept;

// Step 4: a GET that found no value of k in its window tells a real miss
// from a key that moved inside the window while the READ ran (the READ
// copies the words at unordered instants). Every move tags the word it
// leaves for tag_ttl (> the round limit D), so (DESIGN.md, (M)):
//
//   a window READ that found no ref of k and no tag matching k, in a round
//   that completed within D of being posted (on the client's clock), proves
//   k absent at the instant the READ was posted.
//
// Otherwise the client reads the window again (a new round).
inline bool MissIsProven(const WindowProbe& probe, bool round_within_limit) noexcept {
  return round_within_limit && !probe.tag_matched;
}

enum class EntryVerdict : uint8_t {
  kValue,       // valid entry of this key: value is the key's value
  kTombstone,   // valid entry of this key: the key is deleted (NotFound)
  kWrongKey,    // a valid entry of another key (fingerprint collision): next candidate
  kTorn,        // checksum mismatch: READ raced a write or recycling: retry the GET
  kMalformed,   // impossible lengths, lengths that disagree with the ref's size
                // class, or fewer bytes than the entry: retry
  kSuperseded,  // valid, but superseded and the caller required the current entry: retry
};
const char* EntryVerdictName(EntryVerdict v) noexcept;

struct EntryView {
  EntryVerdict verdict = EntryVerdict::kMalformed;
  bool superseded = false;      // the guard's superseded bit as read
  uint32_t total_bytes = 0;     // entry length (<= the bytes given) unless kMalformed
  std::span<const std::byte> value;  // kValue: points into the caller's bytes
};

// (c) Validates entry bytes READ at the location of `ref` for `key`.
// Never returns kValue unless the checksum matched and the key is equal.
// `require_current`: reject a superseded entry (the one-READ cached-location
// GET; the index path does not need it, see DESIGN.md). `ref` without tag
// bits (Candidate::ref); its location says where the header's words
// sit (entry.h) and its size class how long the entry is.
EntryView DecodeEntry(std::span<const std::byte> bytes, std::string_view key, uint64_t ref,
                      uint64_t seed, bool require_current) noexcept;
// The same for an entry READ into two places (SendWr::local2): `head` holds
// its first bytes (at least the header), `tail` the rest, as far as it was
// read. Only the checksummed bytes (header, key, value) must be there, not
// the padding; kValue's value may lie in either piece. A GET that READ the
// value into the caller's memory (client_get.cc) decodes with this.
EntryView DecodeEntry(std::span<const std::byte> head, std::span<const std::byte> tail, std::string_view key,
                      uint64_t ref, uint64_t seed, bool require_current) noexcept;

// Status for a verdict: OK, NotFound, Retry.
Status EntryVerdictStatus(EntryVerdict v);

}  // namespace kvrdma
