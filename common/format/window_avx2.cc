// The window scan's filter built for AVX2 (simd.h): eight words per step.
// Compiled with -mavx2 and called only where the CPU has AVX2.
#include <immintrin.h>

#include "common/format/simd.h"

#if !defined(__AVX2__)
#error "window_avx2.cc must be compiled with -mavx2"
#endif

namespace kvrdma::detail {

namespace {

struct KeyVectors {
  __m256i fp_mask, fp_want, tag_mask, tag_key, tag_any;
};

// The lanes of the eight words at `src` that have the key's fingerprint or
// a tag that matches the key (all ones), in the order 0 1 4 5 2 3 6 7.
inline __m256i HitsOfBlock(const std::byte* src_bytes, const KeyVectors& k) noexcept {
  const float* src = reinterpret_cast<const float*>(src_bytes);
  // Words 0..3 and 4..7 as 32-bit lanes lo, hi, ...; the shuffle keeps the
  // high halves of all eight.
  const __m256 lo4 = _mm256_loadu_ps(src);
  const __m256 hi4 = _mm256_loadu_ps(src + 8);
  const __m256i hi = _mm256_castps_si256(_mm256_shuffle_ps(lo4, hi4, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m256i tag = _mm256_and_si256(hi, k.tag_mask);
  return _mm256_or_si256(_mm256_cmpeq_epi32(_mm256_and_si256(hi, k.fp_mask), k.fp_want),
                         _mm256_or_si256(_mm256_cmpeq_epi32(tag, k.tag_key), _mm256_cmpeq_epi32(tag, k.tag_any)));
}

// Back to word order (the 64-bit pairs 0 2 1 3), a bit per word of block b.
inline void FlagBlock(__m256i hit, int b, uint64_t flagged[2]) noexcept {
  const int bits = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_permute4x64_epi64(hit, 0xD8)));
  const int first = b * kWindowBlockAvx2;
  flagged[first / 64] |= static_cast<uint64_t>(bits) << (first % 64);
}

// The full filter: fingerprint and tags (a window in which some word has its
// tag's set bit: a key left that word less than tag_ttl ago).
void FlagWindowWordsAndTagsAvx2(const std::byte* words, int blocks, const KeyVectors& kv,
                                uint64_t flagged[2]) noexcept {
  constexpr size_t kBlockBytes = kWindowBlockAvx2 * 8;
  // Two blocks per test: the common case is nothing of the key in sixteen
  // words, one branch for both.
  int b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const __m256i h0 = HitsOfBlock(words + static_cast<size_t>(b) * kBlockBytes, kv);
    const __m256i h1 = HitsOfBlock(words + static_cast<size_t>(b + 1) * kBlockBytes, kv);
    const __m256i any = _mm256_or_si256(h0, h1);
    if (_mm256_testz_si256(any, any)) continue;
    FlagBlock(h0, b, flagged);  // rare
    FlagBlock(h1, b + 1, flagged);
  }
  if (b < blocks) {
    const __m256i h = HitsOfBlock(words + static_cast<size_t>(b) * kBlockBytes, kv);
    if (!_mm256_testz_si256(h, h)) FlagBlock(h, b, flagged);
  }
}

}  // namespace

void FlagWindowWordsAvx2(const std::byte* words, int blocks, const WindowKeyBits& k, uint64_t flagged[2]) noexcept {
  const KeyVectors kv{_mm256_set1_epi32(static_cast<int>(k.fp_mask)), _mm256_set1_epi32(static_cast<int>(k.fp_want)),
                      _mm256_set1_epi32(static_cast<int>(k.tag_mask)), _mm256_set1_epi32(static_cast<int>(k.tag_key)),
                      _mm256_set1_epi32(static_cast<int>(k.tag_any))};
  // First the fingerprints alone, and the OR of every word's high half on
  // the side: five instructions per eight words. A tag matches a key only
  // with its set bit, which a word keeps for tag_ttl after a move (rare), so
  // a window without any set bit needs no tag compares; one with one is
  // scanned again by the full filter, which decides.
  const float* src = reinterpret_cast<const float*>(words);
  __m256i seen = _mm256_setzero_si256();
  int b = 0;
  for (; b + 2 <= blocks; b += 2, src += 2 * 2 * kWindowBlockAvx2) {
    const __m256i hi0 = _mm256_castps_si256(
        _mm256_shuffle_ps(_mm256_loadu_ps(src), _mm256_loadu_ps(src + 8), _MM_SHUFFLE(3, 1, 3, 1)));
    const __m256i hi1 = _mm256_castps_si256(
        _mm256_shuffle_ps(_mm256_loadu_ps(src + 16), _mm256_loadu_ps(src + 24), _MM_SHUFFLE(3, 1, 3, 1)));
    seen = _mm256_or_si256(seen, _mm256_or_si256(hi0, hi1));
    const __m256i h0 = _mm256_cmpeq_epi32(_mm256_and_si256(hi0, kv.fp_mask), kv.fp_want);
    const __m256i h1 = _mm256_cmpeq_epi32(_mm256_and_si256(hi1, kv.fp_mask), kv.fp_want);
    const __m256i any = _mm256_or_si256(h0, h1);
    if (_mm256_testz_si256(any, any)) continue;
    FlagBlock(h0, b, flagged);  // a hit's own word, or a collision (1 in 4096 words)
    FlagBlock(h1, b + 1, flagged);
  }
  if (b < blocks) {
    const __m256i hi = _mm256_castps_si256(
        _mm256_shuffle_ps(_mm256_loadu_ps(src), _mm256_loadu_ps(src + 8), _MM_SHUFFLE(3, 1, 3, 1)));
    seen = _mm256_or_si256(seen, hi);
    const __m256i h = _mm256_cmpeq_epi32(_mm256_and_si256(hi, kv.fp_mask), kv.fp_want);
    if (!_mm256_testz_si256(h, h)) FlagBlock(h, b, flagged);
  }
  // The tag's set bit is the top bit of tag_mask (window.h: tag bit 4).
  const __m256i set_bit = _mm256_set1_epi32(static_cast<int>(k.tag_mask & ~(k.tag_mask >> 1)));
  if (_mm256_testz_si256(seen, set_bit)) return;
  FlagWindowWordsAndTagsAvx2(words, blocks, kv, flagged);
}

}  // namespace kvrdma::detail
