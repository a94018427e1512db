// XXH3 built for AVX2, for EntryChecksum's long inputs (common/format/entry.cc
// calls it only where the CPU has AVX2). This file alone is compiled with
// -mavx2 (common/format/CMakeLists.txt), so nothing else in the library uses
// AVX2 instructions unchecked. Debian's libxxhash is built for the baseline
// (SSE2): 1.10 instructions per byte against 0.32 here with -mavx2 alone,
// 0.28 with -funroll-loops too (callgrind, 1 MiB inputs; the accumulate
// loop's 16 stripes per block unrolled). Without XXH3's prefetch it would be
// 0.26, but hashing from memory got slower (18.7-22 GB/s against 24-26 GB/s
// over 64 MiB here), so the prefetch stays.
// The hash is the same function whatever the vector width: XXH3's result
// does not depend on its implementation (tests/store/layout_test.cc checks).
#define XXH_INLINE_ALL  // every xxHash symbol of this file is static: no clash with the library's
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

#include "common/format/simd.h"

#if !defined(__AVX2__) || XXH_VECTOR != XXH_AVX2
#error "checksum_avx2.cc must be compiled with -mavx2"
#endif

namespace kvrdma::detail {

uint64_t Xxh3Avx2(const void* p, size_t n, uint64_t seed) noexcept { return XXH3_64bits_withSeed(p, n, seed); }

uint64_t Xxh3Avx2Pieces(const void* a, size_t na, const void* b, size_t nb, uint64_t seed) noexcept {
  XXH3_state_t st;  // 64-aligned by its type; no allocation
  XXH3_INITSTATE(&st);  // what reset reads before it writes (a state not from XXH3_createState)
  XXH3_64bits_reset_withSeed(&st, seed);
  XXH3_64bits_update(&st, a, na);
  XXH3_64bits_update(&st, b, nb);
  return XXH3_64bits_digest(&st);
}

}  // namespace kvrdma::detail
