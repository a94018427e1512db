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

}  // namespace

void FlagWindowWordsAvx2(const std::byte* words, int blocks, const WindowKeyBits& k, uint64_t flagged[2]) noexcept {
  const KeyVectors kv{_mm256_set1_epi32(static_cast<int>(k.fp_mask)), _mm256_set1_epi32(static_cast<int>(k.fp_want)),
                      _mm256_set1_epi32(static_cast<int>(k.tag_mask)), _mm256_set1_epi32(static_cast<int>(k.tag_key)),
                      _mm256_set1_epi32(static_cast<int>(k.tag_any))};
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

}  // namespace kvrdma::detail
