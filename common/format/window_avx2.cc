// The window scan's filter built for AVX2 (simd.h): eight words per step.
// Compiled with -mavx2 and called only where the CPU has AVX2.
#include <immintrin.h>

#include "common/format/simd.h"

#if !defined(__AVX2__)
#error "window_avx2.cc must be compiled with -mavx2"
#endif

namespace kvrdma::detail {

void FlagWindowWordsAvx2(const std::byte* words, int blocks, const WindowKeyBits& k, uint64_t flagged[2]) noexcept {
  const __m256i fp_mask = _mm256_set1_epi32(static_cast<int>(k.fp_mask));
  const __m256i fp_want = _mm256_set1_epi32(static_cast<int>(k.fp_want));
  const __m256i tag_mask = _mm256_set1_epi32(static_cast<int>(k.tag_mask));
  const __m256i tag_key = _mm256_set1_epi32(static_cast<int>(k.tag_key));
  const __m256i tag_any = _mm256_set1_epi32(static_cast<int>(k.tag_any));
  for (int b = 0; b < blocks; ++b) {
    const float* src = reinterpret_cast<const float*>(words + static_cast<size_t>(b) * kWindowBlockAvx2 * 8);
    // Words 0..3 and 4..7 as 32-bit lanes lo, hi, ...; the shuffle keeps
    // the high halves of all eight, in the order 0 1 4 5 2 3 6 7.
    const __m256 lo4 = _mm256_loadu_ps(src);
    const __m256 hi4 = _mm256_loadu_ps(src + 8);
    const __m256i hi = _mm256_castps_si256(_mm256_shuffle_ps(lo4, hi4, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m256i tag = _mm256_and_si256(hi, tag_mask);
    const __m256i hit = _mm256_or_si256(
        _mm256_cmpeq_epi32(_mm256_and_si256(hi, fp_mask), fp_want),
        _mm256_or_si256(_mm256_cmpeq_epi32(tag, tag_key), _mm256_cmpeq_epi32(tag, tag_any)));
    if (_mm256_testz_si256(hit, hit)) continue;  // the common case: nothing of the key in these eight words
    // Rare: back to word order (the 64-bit pairs 0 2 1 3), a bit per word.
    const int bits = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_permute4x64_epi64(hit, 0xD8)));
    const int first = b * kWindowBlockAvx2;
    flagged[first / 64] |= static_cast<uint64_t>(bits) << (first % 64);
  }
}

}  // namespace kvrdma::detail
