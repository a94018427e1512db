#include "common/format/read_path.h"

#include <algorithm>
#include <bit>
#include <cstring>

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
  KeyWindow r;
  r.hash = MakeKeyHash(key, p.seed, p.home_count);
  r.read = RemoteRead{r.hash.home * kWordBytes, static_cast<uint32_t>(p.window_words * kWordBytes)};
  return r;
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

// Words [from, n) one at a time: a bit test for a tag, a shift-compare for
// the fingerprint; both are rarely true, so the branches predict well.
void ProbeWords(std::span<const std::byte> window, int from, int n, const KeyHash& kh, const IndexParams& p,
                WindowProbe* out) noexcept {
  const uint64_t fp = kh.fingerprint & kRefFingerprintMask;
  constexpr uint64_t kTagSetWordBit = kTagSetBit << kWordTagShift;
  for (int i = from; i < n; ++i) {
    const uint64_t word = WordAt(window, i);
    if ((word & kTagSetWordBit) != 0 && TagMatches(WordTag(word), kh.tag_nibble)) out->tag_matched = true;
    if ((word >> kRefFingerprintShift) == fp) AddCandidate(word, i, p, out);
  }
}

}  // namespace

namespace detail {
Status ProbeWindowOneWordAtATime(std::span<const std::byte> window, const KeyHash& kh, const IndexParams& p,
                                 WindowProbe* out) noexcept {
  *out = WindowProbe{};
  if (p.window_words == 0 || p.window_words > kMaxWindowWords || window.size() != p.window_words * kWordBytes) {
    return Status::InvalidArgument("window bytes must be window_words * 8");
  }
  ProbeWords(window, 0, static_cast<int>(p.window_words), kh, p, out);
  return Status::OK();
}
}  // namespace detail

Status ProbeWindow(std::span<const std::byte> window, const KeyHash& kh, const IndexParams& p,
                   WindowProbe* out) noexcept {
#if defined(__SSE2__)
  // The hot loop of an uncached GET (128 words), four words at a time. The
  // fingerprint (bits 52..63) and the tag (bits 36..40) both sit in a word's
  // high 32 bits: gather the high halves of four words into one register,
  // compare them with the key's fingerprint and with the two tags that match
  // it, and keep a bit per word. Words whose fingerprint matched are checked
  // one by one (rare). Equal to ProbeWindowOneWordAtATime on every window
  // (ReadPathTest.TheFourWordScanAgreesWithTheOneWordScan); about half the
  // instructions (bench/callgrind/run).
  *out = WindowProbe{};
  if (p.window_words == 0 || p.window_words > kMaxWindowWords || window.size() != p.window_words * kWordBytes) {
    return Status::InvalidArgument("window bytes must be window_words * 8");
  }
  static_assert(kRefFingerprintShift >= 32 && kWordTagShift >= 32, "fingerprint and tag in the high half");
  const int n = static_cast<int>(p.window_words);
  const uint64_t fp = kh.fingerprint & kRefFingerprintMask;
  const __m128i fp_mask = _mm_set1_epi32(static_cast<int>(kRefFingerprintMask << (kRefFingerprintShift - 32)));
  const __m128i fp_want = _mm_set1_epi32(static_cast<int>(fp << (kRefFingerprintShift - 32)));
  constexpr unsigned kTagShiftHi = kWordTagShift - 32;
  const __m128i tag_mask = _mm_set1_epi32(static_cast<int>(((kTagSetBit << 1) - 1) << kTagShiftHi));
  const __m128i tag_key =
      _mm_set1_epi32(static_cast<int>((kTagSetBit | (kh.tag_nibble & kTagNibbleMask)) << kTagShiftHi));
  const __m128i tag_any = _mm_set1_epi32(static_cast<int>((kTagSetBit | kTagAnyKey) << kTagShiftHi));
  uint64_t fp_bits[kMaxWindowWords / 64] = {};
  int tag_bits = 0;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const auto* src = reinterpret_cast<const __m128i*>(window.data() + static_cast<size_t>(i) * kWordBytes);
    const __m128 a = _mm_castsi128_ps(_mm_loadu_si128(src));      // words i, i+1 as 32-bit lanes lo, hi, lo, hi
    const __m128 b = _mm_castsi128_ps(_mm_loadu_si128(src + 1));  // words i+2, i+3
    const __m128i hi = _mm_castps_si128(_mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    const int fp_eq = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(_mm_and_si128(hi, fp_mask), fp_want)));
    const __m128i tag = _mm_and_si128(hi, tag_mask);
    tag_bits |= _mm_movemask_ps(
        _mm_castsi128_ps(_mm_or_si128(_mm_cmpeq_epi32(tag, tag_key), _mm_cmpeq_epi32(tag, tag_any))));
    fp_bits[static_cast<size_t>(i) / 64] |= static_cast<uint64_t>(fp_eq) << (i % 64);
  }
  out->tag_matched = tag_bits != 0;
  for (size_t w = 0; w < kMaxWindowWords / 64; ++w) {
    for (uint64_t bits = fp_bits[w]; bits != 0; bits &= bits - 1) {
      const int word = static_cast<int>(w * 64) + std::countr_zero(bits);
      AddCandidate(WordAt(window, word), word, p, out);
    }
  }
  ProbeWords(window, i, n, kh, p, out);  // the last 0..3 words
  return Status::OK();
#else
  return detail::ProbeWindowOneWordAtATime(window, kh, p, out);
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

EntryView DecodeEntry(std::span<const std::byte> bytes, std::string_view key, uint64_t ref,
                      uint64_t seed, bool require_current) noexcept {
  EntryView v;
  if (bytes.size() < kEntryHeaderBytes) return v;  // kMalformed
  const uint64_t off = RefLogOffset(ref);
  EntryHeader h;
  std::memcpy(&h.guard, bytes.data() + GuardAt(off), sizeof(h.guard));
  std::memcpy(&h.lengths, bytes.data() + LengthsAt(off), sizeof(h.lengths));
  const uint32_t klen = LengthsKey(h.lengths);
  const uint32_t vlen = LengthsValue(h.lengths);
  const bool tomb = LengthsTombstone(h.lengths);
  if (klen == 0 || (tomb && vlen != 0)) return v;
  const size_t total = EntryBytes(klen, vlen);
  // The header's length must map to the ref's size class: a disagreement
  // means the bytes are not the entry the ref was made for (recycled or
  // torn header). A READ of the class's bytes (clamped to the log, which the
  // entry lies within) always covers the entry, so fewer bytes are malformed
  // too; an entry shorter than the READ uses only its `total` bytes.
  if (SizeClassFor(total) != RefSizeClass(ref) || bytes.size() < total) return v;
  v.total_bytes = static_cast<uint32_t>(total);
  if (EntryChecksum(h.lengths, bytes.data() + kEntryKeyOffset, size_t{klen} + vlen, seed) !=
      (h.guard & kGuardChecksumMask)) {
    v.verdict = EntryVerdict::kTorn;
    return v;
  }
  v.superseded = (h.guard & kGuardNotCurrentBit) != 0;
  if (klen != key.size() || std::memcmp(bytes.data() + kEntryKeyOffset, key.data(), klen) != 0) {
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
  v.verdict = EntryVerdict::kValue;
  v.value = bytes.subspan(kEntryKeyOffset + klen, vlen);
  return v;
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
