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

#if defined(__SSE2__)
namespace detail {
// The SSE2 filter (simd.h's FlagWindowWordsAvx2, four words per block): the
// high halves of four words gathered into one register, in word order,
// compared with the key's fingerprint and with the two tags that match it.
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
}  // namespace detail
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


Status ProbeWindowWith(WindowScan scan, std::span<const std::byte> window, const KeyHash& kh, const IndexParams& p,
                       WindowProbe* out) noexcept {
  if (!WindowScanAvailable(scan)) {
    *out = WindowProbe{};
    return Status::InvalidArgument(scan == WindowScan::kAvx2 ? "this CPU has no AVX2" : "window scan not built");
  }
  return ProbeWindowScan(scan, window, kh, p, out);
}

}  // namespace detail

EntryView DecodeEntry(std::span<const std::byte> head, std::span<const std::byte> tail, std::string_view key,
                      uint64_t ref, uint64_t seed, bool require_current) noexcept {
  return detail::DecodePieces<true>(head, tail, key, ref, seed, require_current);
}

EntryView DecodeEntryInto(std::span<const std::byte> bytes, std::string_view key, uint64_t ref, uint64_t seed,
                          bool require_current, std::span<std::byte> copy_to) noexcept {
  return detail::DecodePieces<false, true>(bytes, {}, key, ref, seed, require_current, copy_to);
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
