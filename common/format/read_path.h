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

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <cstring>
#include <string_view>

#include "common/format/entry.h"
#include "common/format/hash.h"
#include "common/format/entry_ref.h"
#include "common/format/simd.h"
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
[[gnu::always_inline]] inline Status ProbeWindow(std::span<const std::byte> window, const KeyHash& kh, const IndexParams& p,
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
inline int NextCandidate(const WindowProbe& probe, int from) noexcept;

// The candidate in word `word` of the window bytes (as ProbeWindow accepted
// it): its ref and the entry READ.
inline Candidate CandidateAt(std::span<const std::byte> window, int word, const IndexParams& p) noexcept;

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
inline EntryView DecodeEntry(std::span<const std::byte> bytes, std::string_view key, uint64_t ref,
                             uint64_t seed, bool require_current) noexcept;
// The same, and a value of at least kFusedCopyMinBytes (16 KiB) that fits
// `copy_to` is copied there in the pass that checksums it (a GET into the
// caller's buffer: its bytes read once, not once to check and once to
// copy); kValue's value is then copy_to's first bytes. copy_to's bytes are
// written whatever the verdict (another key's value, torn bytes): they
// count only with kValue. It must not overlap `bytes`. Out of line
// (read_path.cc): a large value's pass dwarfs the call, and the small GET's
// inline decode stays as it was.
EntryView DecodeEntryInto(std::span<const std::byte> bytes, std::string_view key, uint64_t ref, uint64_t seed,
                          bool require_current, std::span<std::byte> copy_to) noexcept;
// The same for an entry READ into two places (SendWr::local2): `head` holds
// its first bytes (at least the header), `tail` the rest, as far as it was
// read. Only the checksummed bytes (header, key, value) must be there, not
// the padding; kValue's value may lie in either piece. A GET that READ the
// value into the caller's memory (client_get.cc) decodes with this.
EntryView DecodeEntry(std::span<const std::byte> head, std::span<const std::byte> tail, std::string_view key,
                      uint64_t ref, uint64_t seed, bool require_current) noexcept;

// Status for a verdict: OK, NotFound, Retry.
Status EntryVerdictStatus(EntryVerdict v);

// ---- Inline definitions: the client's GET path runs these on every READ it
// decodes (a call, and the registers it saves, less per step; callgrind).

namespace detail {

inline uint64_t WindowWordAt(std::span<const std::byte> window, int word) noexcept {
  uint64_t w;
  std::memcpy(&w, window.data() + static_cast<size_t>(word) * kWordBytes, kWordBytes);
  return w;
}


// A word whose fingerprint matched: a candidate if its ref is plausible.
inline void AddCandidate(uint64_t word, int i, const IndexParams& p, WindowProbe* out) noexcept {
  const uint64_t ref = WordRef(word);
  if (ref == kEmptyRef) return;
  if (!RefLooksValid(ref) || RefLogOffset(ref) + kEntryHeaderBytes > p.log_bytes) {
    ++out->rejected;
    return;
  }
  out->candidates[static_cast<size_t>(i) / 64] |= uint64_t{1} << (i % 64);
  ++out->count;
}

// Word i: a bit test for a tag, a shift-compare for the fingerprint; both
// are rarely true, so the branches predict well.
inline void ProbeWord(uint64_t word, int i, const KeyHash& kh, const IndexParams& p, WindowProbe* out) noexcept {
  constexpr uint64_t kTagSetWordBit = kTagSetBit << kWordTagShift;
  if ((word & kTagSetWordBit) != 0 && TagMatches(WordTag(word), kh.tag_nibble())) out->tag_matched = true;
  if ((word >> kRefFingerprintShift) == (kh.fingerprint & kRefFingerprintMask)) AddCandidate(word, i, p, out);
}

// Words [from, n) one at a time.
inline void ProbeWords(std::span<const std::byte> window, int from, int n, const KeyHash& kh, const IndexParams& p,
                WindowProbe* out) noexcept {
  for (int i = from; i < n; ++i) ProbeWord(WindowWordAt(window, i), i, kh, p, out);
}

#if defined(__SSE2__)
inline constexpr int kWindowBlockSse2 = 4;
// The SSE2 filter (read_path.cc), as FlagWindowWordsAvx2 with four words per block.
void FlagWindowWordsSse2(const std::byte* words, int blocks, const WindowKeyBits& k, uint64_t flagged[2]) noexcept;
#endif

// ProbeWindowWith once `scan` is known to run on this CPU.
// Inline into ProbeWindow (and ProbeWindowWith, the tests'): with its scan a
// constant there, the switch below folds and the call is saved (~30
// instructions of an uncached GET or a miss, callgrind).
[[gnu::always_inline]] inline Status ProbeWindowScan(WindowScan scan, std::span<const std::byte> window,
                                                     const KeyHash& kh, const IndexParams& p,
                                                     WindowProbe* out) noexcept {
  *out = WindowProbe{};
  if (p.window_words == 0 || p.window_words > kMaxWindowWords || window.size() != p.window_words * kWordBytes) {
    return Status::InvalidArgument("window bytes must be window_words * 8");
  }
  const int n = static_cast<int>(p.window_words);
  // The hot loop of an uncached GET (128 words): a vector filter flags the
  // words that have the key's fingerprint or a tag that matches it (rare: a
  // hit's own word, a collision 1 time in 4096 per word, a recent move),
  // then those words and the last ones that make no whole block are probed
  // one at a time, which decides. Equal to
  // the one-word scan on every window (ReadPathTest.EveryWindowScanAgrees
  // WithTheOneWordScan); bench/callgrind/run counts what each costs.
  static_assert(kRefFingerprintShift >= 32 && kWordTagShift >= 32, "fingerprint and tag in the high half");
  [[maybe_unused]] const detail::WindowKeyBits k{
      static_cast<uint32_t>(kRefFingerprintMask << (kRefFingerprintShift - 32)),
      static_cast<uint32_t>((kh.fingerprint & kRefFingerprintMask) << (kRefFingerprintShift - 32)),
      static_cast<uint32_t>(((kTagSetBit << 1) - 1) << (kWordTagShift - 32)),
      static_cast<uint32_t>((kTagSetBit | (kh.tag_nibble() & kTagNibbleMask)) << (kWordTagShift - 32)),
      static_cast<uint32_t>((kTagSetBit | kTagAnyKey) << (kWordTagShift - 32))};
  int block = 1;
  uint64_t flagged[kMaxWindowWords / 64] = {};
  switch (scan) {
#if KVRDMA_HAVE_AVX2
    case WindowScan::kAvx2:
      block = kWindowBlockAvx2;
      FlagWindowWordsAvx2(window.data(), n / block, k, flagged);
      break;
#endif
#if defined(__SSE2__)
    case WindowScan::kSse2:
      block = kWindowBlockSse2;
      FlagWindowWordsSse2(window.data(), n / block, k, flagged);
      break;
#endif
    case WindowScan::kOneWord: break;
    default: return Status::InvalidArgument("window scan not built");
  }
  static_assert(kMaxWindowWords == 128, "flagged: two 64-bit words");
  for (int half = 0; half < 2; ++half) {
    for (uint64_t bits = flagged[half]; bits != 0; bits &= bits - 1) {
      const int i = half * 64 + std::countr_zero(bits);
      ProbeWord(WindowWordAt(window, i), i, kh, p, out);
    }
  }
  if (n % block != 0 || block == 1) ProbeWords(window, block == 1 ? 0 : n / block * block, n, kh, p, out);
  return Status::OK();
}

// DecodeEntry's work over the entry bytes head || tail; kTwoPieces false:
// tail is empty (one READ's bytes: the common case, kept lean).
template <bool kTwoPieces, bool kCopy = false>
inline EntryView DecodePieces(std::span<const std::byte> head, std::span<const std::byte> tail, std::string_view key,
                 uint64_t ref, uint64_t seed, bool require_current, std::span<std::byte> copy_to = {}) noexcept {
  EntryView v;
  if (head.size() < kEntryHeaderBytes) return v;  // kMalformed
  const uint64_t off = RefLogOffset(ref);
  EntryHeader h;
  std::memcpy(&h.guard, head.data() + GuardAt(off), sizeof(h.guard));
  std::memcpy(&h.lengths, head.data() + LengthsAt(off), sizeof(h.lengths));
  const uint32_t klen = LengthsKey(h.lengths);
  const uint32_t vlen = LengthsValue(h.lengths);
  const bool tomb = LengthsTombstone(h.lengths);
  if (klen == 0 || (tomb && vlen != 0)) return v;
  const size_t total = EntryBytes(klen, vlen);
  const size_t used = kEntryKeyOffset + size_t{klen} + vlen;  // header, key, value: what the checksum covers
  // The header's length must map to the ref's size class: a disagreement
  // means the bytes are not the entry the ref was made for (recycled or
  // torn header). A READ of the class's bytes (clamped to the log, which the
  // entry lies within) always covers the entry, so fewer bytes are malformed
  // too; an entry shorter than the READ uses only its `total` bytes. (A READ
  // in two pieces need not hold the padding after the value.)
  if (SizeClassFor(total) != RefSizeClass(ref) || head.size() + tail.size() < (kTwoPieces ? used : total)) return v;
  v.total_bytes = static_cast<uint32_t>(total);
  // Key and value: a in head, b (two pieces only) in tail.
  const std::span<const std::byte> a =
      kTwoPieces ? head.subspan(kEntryKeyOffset, std::min(head.size(), used) - kEntryKeyOffset)
                 : head.subspan(kEntryKeyOffset, used - kEntryKeyOffset);
  const std::span<const std::byte> b = kTwoPieces ? tail.first(used - kEntryKeyOffset - a.size())
                                                  : std::span<const std::byte>{};
  // A value of kFusedCopyMinBytes or more that fits copy_to is copied there
  // as it is checksummed (one pass over it), whatever the verdict: copy_to's
  // bytes count only with kValue.
  const bool copy = kCopy && !kTwoPieces && vlen >= kFusedCopyMinBytes && vlen <= copy_to.size();
  const uint64_t sum = kTwoPieces ? EntryChecksum(h.lengths, a, b, seed)
                       : copy     ? EntryChecksumCopy(h.lengths, a.data(), a.size(), klen, copy_to.data(), seed)
                                  : EntryChecksum(h.lengths, a.data(), a.size(), seed);
  if (sum != (h.guard & kGuardChecksumMask)) {
    v.verdict = EntryVerdict::kTorn;
    return v;
  }
  v.superseded = (h.guard & kGuardNotCurrentBit) != 0;
  // The key: in head (a direct READ cuts right after it), or across both pieces.
  if (klen != key.size() || !KeyBytesEqual(a.data(), key.data(), std::min<size_t>(klen, a.size())) ||
      (kTwoPieces && klen > a.size() && !KeyBytesEqual(b.data(), key.data() + a.size(), klen - a.size()))) {
    v.verdict = EntryVerdict::kWrongKey;
    return v;
  }
  if (require_current && v.superseded) {
    v.verdict = EntryVerdict::kSuperseded;
    return v;
  }
  if (tomb) {
    v.verdict = EntryVerdict::kTombstone;
    return v;
  }
  if (copy) {
    v.value = copy_to.first(vlen);
  } else if (klen + vlen <= a.size()) {
    v.value = a.subspan(klen, vlen);
  } else if (kTwoPieces && klen >= a.size()) {
    v.value = b.subspan(klen - a.size(), vlen);
  } else {
    return EntryView{};  // a value across both pieces: no one span to hand out (kMalformed)
  }
  v.verdict = EntryVerdict::kValue;
  return v;
}

}  // namespace detail

[[gnu::always_inline]] inline Status ProbeWindow(std::span<const std::byte> window, const KeyHash& kh, const IndexParams& p,
                   WindowProbe* out) noexcept {
#if KVRDMA_HAVE_AVX2
  if (detail::CpuHasAvx2()) return detail::ProbeWindowScan(detail::WindowScan::kAvx2, window, kh, p, out);
#endif
#if defined(__SSE2__)
  return detail::ProbeWindowScan(detail::WindowScan::kSse2, window, kh, p, out);
#else
  return detail::ProbeWindowScan(detail::WindowScan::kOneWord, window, kh, p, out);
#endif
}

inline int NextCandidate(const WindowProbe& probe, int from) noexcept {
  for (int i = std::max(from, 0); i < static_cast<int>(kMaxWindowWords);) {
    const uint64_t bits = probe.candidates[static_cast<size_t>(i) / 64] >> (i % 64);
    if (bits != 0) return i + std::countr_zero(bits);
    i = (i / 64 + 1) * 64;
  }
  return -1;
}

inline Candidate CandidateAt(std::span<const std::byte> window, int word, const IndexParams& p) noexcept {
  Candidate c;
  if (word < 0 || static_cast<size_t>(word) * kWordBytes + kWordBytes > window.size()) return c;
  c.ref = WordRef(detail::WindowWordAt(window, word));
  const uint64_t off = RefLogOffset(c.ref);
  uint64_t len = SizeClassBytes(RefSizeClass(c.ref));
  if (off >= p.log_bytes) return Candidate{};
  if (len > p.log_bytes - off) len = p.log_bytes - off;
  c.entry = RemoteRead{off, static_cast<uint32_t>(len)};
  return c;
}

inline EntryView DecodeEntry(std::span<const std::byte> bytes, std::string_view key, uint64_t ref, uint64_t seed,
                             bool require_current) noexcept {
  return detail::DecodePieces<false>(bytes, {}, key, ref, seed, require_current);
}

}  // namespace kvrdma
