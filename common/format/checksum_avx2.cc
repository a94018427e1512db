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
#include <cstring>

#include "common/format/simd.h"

#if !defined(__AVX2__) || XXH_VECTOR != XXH_AVX2
#error "checksum_avx2.cc must be compiled with -mavx2"
#endif

namespace kvrdma::detail {

uint64_t Xxh3Avx2(const void* p, size_t n, uint64_t seed) noexcept { return XXH3_64bits_withSeed(p, n, seed); }

#if XXH_VERSION_NUMBER == 801
namespace {

// XXH3-64 of a || b over 240 bytes: xxHash 0.8.1's long hash
// (XXH3_hashLong_64b_withSeed_internal and XXH3_hashLong_internal_loop, with
// their own building blocks) over the concatenation, each 64-byte stripe
// read where it lies: in a, in b, or copied together where it straddles the
// cut. The streaming form this replaces handled 256 bytes per call, which
// cost 0.299 instructions per byte against the one-shot form's 0.28 (a GET
// READ into the caller's memory checksums its value this way).
uint64_t HashLongOfPieces(const xxh_u8* a, size_t na, const xxh_u8* b, size_t nb, uint64_t seed) noexcept {
  XXH_ALIGN(XXH_SEC_ALIGN) xxh_u8 custom[XXH_SECRET_DEFAULT_SIZE];
  const xxh_u8* secret = XXH3_kSecret;
  if (seed != 0) {
    XXH3_initCustomSecret_avx2(custom, seed);
    secret = custom;
  }
  constexpr size_t kSecretSize = XXH_SECRET_DEFAULT_SIZE;
  constexpr size_t kStripesPerBlock = (kSecretSize - XXH_STRIPE_LEN) / XXH_SECRET_CONSUME_RATE;
  constexpr size_t kBlockLen = XXH_STRIPE_LEN * kStripesPerBlock;
  const size_t len = na + nb;
  XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[XXH_ACC_NB] = XXH3_INIT_ACC;
  XXH_ALIGN(64) xxh_u8 straddle[XXH_STRIPE_LEN];
  // The stripe at offset `at` of a || b.
  auto stripe = [&](size_t at) -> const xxh_u8* {
    if (at + XXH_STRIPE_LEN <= na) return a + at;
    if (at >= na) return b + (at - na);
    const size_t from_a = na - at;
    std::memcpy(straddle, a + at, from_a);
    std::memcpy(straddle + from_a, b, XXH_STRIPE_LEN - from_a);
    return straddle;
  };
  // Stripes [0, n) from offset `at`, secret offset 8 per stripe (XXH3_accumulate):
  // those not wholly in b one at a time, then the rest in one run over b.
  auto accumulate = [&](size_t at, size_t n) {
    size_t i = 0;
    for (; i < n && at + i * XXH_STRIPE_LEN < na; ++i) {
      XXH3_accumulate_512_avx2(acc, stripe(at + i * XXH_STRIPE_LEN), secret + i * XXH_SECRET_CONSUME_RATE);
    }
    if (i < n) {
      XXH3_accumulate(acc, b + (at + i * XXH_STRIPE_LEN - na), secret + i * XXH_SECRET_CONSUME_RATE, n - i,
                      XXH3_accumulate_512_avx2);
    }
  };
  const size_t blocks = (len - 1) / kBlockLen;
  for (size_t n = 0; n < blocks; ++n) {
    const size_t at = n * kBlockLen;
    if (at >= na) {  // the common case: a whole block in b, its stripe count a constant (the loop unrolled)
      XXH3_accumulate(acc, b + (at - na), secret, kStripesPerBlock, XXH3_accumulate_512_avx2);
    } else {
      accumulate(at, kStripesPerBlock);
    }
    XXH3_scrambleAcc_avx2(acc, secret + kSecretSize - XXH_STRIPE_LEN);
  }
  accumulate(blocks * kBlockLen, ((len - 1) - kBlockLen * blocks) / XXH_STRIPE_LEN);
  XXH3_accumulate_512_avx2(acc, stripe(len - XXH_STRIPE_LEN),
                           secret + kSecretSize - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
  return XXH3_mergeAccs(acc, secret + XXH_SECRET_MERGEACCS_START, static_cast<xxh_u64>(len) * XXH_PRIME64_1);
}

}  // namespace
#endif

uint64_t Xxh3Avx2Pieces(const void* a, size_t na, const void* b, size_t nb, uint64_t seed) noexcept {
#if XXH_VERSION_NUMBER == 801
  if (na + nb > XXH3_MIDSIZE_MAX) {
    return HashLongOfPieces(static_cast<const xxh_u8*>(a), na, static_cast<const xxh_u8*>(b), nb, seed);
  }
  // Short: one copy of at most 240 bytes, then the one-shot hash.
  xxh_u8 whole[XXH3_MIDSIZE_MAX];
  if (na != 0) std::memcpy(whole, a, na);
  if (nb != 0) std::memcpy(whole + na, b, nb);
  return XXH3_64bits_withSeed(whole, na + nb, seed);
#else
  XXH3_state_t st;  // 64-aligned by its type; no allocation
  XXH3_INITSTATE(&st);  // what reset reads before it writes (a state not from XXH3_createState)
  XXH3_64bits_reset_withSeed(&st, seed);
  XXH3_64bits_update(&st, a, na);
  XXH3_64bits_update(&st, b, nb);
  return XXH3_64bits_digest(&st);
#endif
}

}  // namespace kvrdma::detail
