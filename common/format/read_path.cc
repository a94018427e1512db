#include "common/format/read_path.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "common/format/simd.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvrdma {

Status ValidateIndexParams(const IndexParams& p) {
  if (p.home_count < 1 || p.home_count > kMaxHomeCount || !std::has_single_bit(p.home_count)) {
    return Status::InvalidArgument("home_count must be a power of two in [1, 2^40]");
  }
  if (p.window_words < 1 || p.window_words > kMaxWindowWords) {
    return Status::InvalidArgument("window_words must be in [1, 128]");
  }
  if (p.log_bytes == 0 || p.log_bytes > kMaxLogBytes || p.log_bytes % kEntryAlign != 0) {
    return Status::InvalidArgument("log_bytes must be a non-zero multiple of 4 up to 256 GiB");
  }
  return Status::OK();
}

Result<KeyWindow> KeyWindowRead(const IndexParams& p, std::string_view key) {
  KVRDMA_RETURN_IF_ERROR(ValidateIndexParams(p));
  if (key.empty() || key.size() > kMaxKeyBytes) return Status::InvalidArgument("key length");
  return KeyWindowOf(p, key);
}

namespace {
uint64_t WordAt(std::span<const std::byte> window, int word) noexcept {
  uint64_t w;
  std::memcpy(&w, window.data() + static_cast<size_t>(word) * kWordBytes, kWordBytes);
  return w;
}
}  // namespace

namespace {

// A word whose fingerprint matched: a candidate if its ref is plausible.
void AddCandidate(uint64_t word, int i, const IndexParams& p, WindowProbe* out) noexcept {
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
  if ((word & kTagSetWordBit) != 0 && TagMatches(WordTag(word), kh.tag_nibble)) out->tag_matched = true;
  if ((word >> kRefFingerprintShift) == (kh.fingerprint & kRefFingerprintMask)) AddCandidate(word, i, p, out);
}

// Words [from, n) one at a time.
void ProbeWords(std::span<const std::byte> window, int from, int n, const KeyHash& kh, const IndexParams& p,
                WindowProbe* out) noexcept {
  for (int i = from; i < n; ++i) ProbeWord(WordAt(window, i), i, kh, p, out);
}

}  // namespace

#if defined(__SSE2__)
namespace {
// The SSE2 filter (simd.h's FlagWindowWordsAvx2, four words per block): the
// high halves of four words gathered into one register, in word order,
// compared with the key's fingerprint and with the two tags that match it.
constexpr int kWindowBlockSse2 = 4;
void FlagWindowWordsSse2(const std::byte* words, int blocks, const detail::WindowKeyBits& k,
                         uint64_t flagged[2]) noexcept {
  const __m128i fp_mask = _mm_set1_epi32(static_cast<int>(k.fp_mask));
  const __m128i fp_want = _mm_set1_epi32(static_cast<int>(k.fp_want));
  const __m128i tag_mask = _mm_set1_epi32(static_cast<int>(k.tag_mask));
  const __m128i tag_key = _mm_set1_epi32(static_cast<int>(k.tag_key));
  const __m128i tag_any = _mm_set1_epi32(static_cast<int>(k.tag_any));
  for (int b = 0; b < blocks; ++b) {
    const auto* src = reinterpret_cast<const __m128i*>(words + static_cast<size_t>(b) * kWindowBlockSse2 * kWordBytes);
    const __m128 w01 = _mm_castsi128_ps(_mm_loadu_si128(src));      // words 0, 1 as 32-bit lanes lo, hi, lo, hi
    const __m128 w23 = _mm_castsi128_ps(_mm_loadu_si128(src + 1));  // words 2, 3
    const __m128i hi = _mm_castps_si128(_mm_shuffle_ps(w01, w23, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m128i tag = _mm_and_si128(hi, tag_mask);
    const __m128i hit = _mm_or_si128(_mm_cmpeq_epi32(_mm_and_si128(hi, fp_mask), fp_want),
                                     _mm_or_si128(_mm_cmpeq_epi32(tag, tag_key), _mm_cmpeq_epi32(tag, tag_any)));
    const int bits = _mm_movemask_ps(_mm_castsi128_ps(hit));
    if (bits == 0) continue;
    const int first = b * kWindowBlockSse2;
    flagged[first / 64] |= static_cast<uint64_t>(bits) << (first % 64);
  }
}
}  // namespace
#endif

namespace detail {

bool WindowScanAvailable(WindowScan scan) noexcept {
  switch (scan) {
    case WindowScan::kOneWord: return true;
#if defined(__SSE2__)
    case WindowScan::kSse2: return true;
#endif
#if KVRDMA_HAVE_AVX2
    case WindowScan::kAvx2: return CpuHasAvx2();
#endif
    default: return false;
  }
}

namespace {
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
      static_cast<uint32_t>((kTagSetBit | (kh.tag_nibble & kTagNibbleMask)) << (kWordTagShift - 32)),
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
      ProbeWord(WordAt(window, i), i, kh, p, out);
    }
  }
  if (n % block != 0 || block == 1) ProbeWords(window, block == 1 ? 0 : n / block * block, n, kh, p, out);
  return Status::OK();
}
}  // namespace

Status ProbeWindowWith(WindowScan scan, std::span<const std::byte> window, const KeyHash& kh, const IndexParams& p,
                       WindowProbe* out) noexcept {
  if (!WindowScanAvailable(scan)) {
    *out = WindowProbe{};
    return Status::InvalidArgument(scan == WindowScan::kAvx2 ? "this CPU has no AVX2" : "window scan not built");
  }
  return ProbeWindowScan(scan, window, kh, p, out);
}

}  // namespace detail

Status ProbeWindow(std::span<const std::byte> window, const KeyHash& kh, const IndexParams& p,
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

int NextCandidate(const WindowProbe& probe, int from) noexcept {
  for (int i = std::max(from, 0); i < static_cast<int>(kMaxWindowWords);) {
    const uint64_t bits = probe.candidates[static_cast<size_t>(i) / 64] >> (i % 64);
    if (bits != 0) return i + std::countr_zero(bits);
    i = (i / 64 + 1) * 64;
  }
  return -1;
}

Candidate CandidateAt(std::span<const std::byte> window, int word, const IndexParams& p) noexcept {
  Candidate c;
  if (word < 0 || static_cast<size_t>(word) * kWordBytes + kWordBytes > window.size()) return c;
  c.ref = WordRef(WordAt(window, word));
  const uint64_t off = RefLogOffset(c.ref);
  uint64_t len = SizeClassBytes(RefSizeClass(c.ref));
  if (off >= p.log_bytes) return Candidate{};
  if (len > p.log_bytes - off) len = p.log_bytes - off;
  c.entry = RemoteRead{off, static_cast<uint32_t>(len)};
  return c;
}

namespace {
// DecodeEntry's work over the entry bytes head || tail; kTwoPieces false:
// tail is empty (one READ's bytes: the common case, kept lean).
template <bool kTwoPieces>
EntryView Decode(std::span<const std::byte> head, std::span<const std::byte> tail, std::string_view key,
                 uint64_t ref, uint64_t seed, bool require_current) noexcept {
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
  const uint64_t sum =
      kTwoPieces ? EntryChecksum(h.lengths, a, b, seed) : EntryChecksum(h.lengths, a.data(), a.size(), seed);
  if (sum != (h.guard & kGuardChecksumMask)) {
    v.verdict = EntryVerdict::kTorn;
    return v;
  }
  v.superseded = (h.guard & kGuardNotCurrentBit) != 0;
  // The key: in head (a direct READ cuts right after it), or across both pieces.
  if (klen != key.size() || std::memcmp(a.data(), key.data(), std::min<size_t>(klen, a.size())) != 0 ||
      (kTwoPieces && klen > a.size() && std::memcmp(b.data(), key.data() + a.size(), klen - a.size()) != 0)) {
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
  if (klen + vlen <= a.size()) {
    v.value = a.subspan(klen, vlen);
  } else if (kTwoPieces && klen >= a.size()) {
    v.value = b.subspan(klen - a.size(), vlen);
  } else {
    return EntryView{};  // a value across both pieces: no one span to hand out (kMalformed)
  }
  v.verdict = EntryVerdict::kValue;
  return v;
}
}  // namespace

EntryView DecodeEntry(std::span<const std::byte> bytes, std::string_view key, uint64_t ref,
                      uint64_t seed, bool require_current) noexcept {
  return Decode<false>(bytes, {}, key, ref, seed, require_current);
}

EntryView DecodeEntry(std::span<const std::byte> head, std::span<const std::byte> tail, std::string_view key,
                      uint64_t ref, uint64_t seed, bool require_current) noexcept {
  return Decode<true>(head, tail, key, ref, seed, require_current);
}

const char* EntryVerdictName(EntryVerdict v) noexcept {
  switch (v) {
    case EntryVerdict::kValue: return "value";
    case EntryVerdict::kTombstone: return "tombstone";
    case EntryVerdict::kWrongKey: return "wrong-key";
    case EntryVerdict::kTorn: return "torn";
    case EntryVerdict::kMalformed: return "malformed";
    case EntryVerdict::kSuperseded: return "superseded";
  }
  return "?";
}

Status EntryVerdictStatus(EntryVerdict v) {
  switch (v) {
    case EntryVerdict::kValue: return Status::OK();
    case EntryVerdict::kTombstone:
    case EntryVerdict::kWrongKey: return Status::NotFound();
    default: return Status::Retry(EntryVerdictName(v));
  }
}

}  // namespace kvrdma
