// XXH3 built for AVX2, for EntryChecksum's long inputs (common/format/entry.cc
// calls it only where the CPU has AVX2). This file alone is compiled with
// -mavx2 (common/format/CMakeLists.txt), so nothing else in the library uses
// AVX2 instructions unchecked. Debian's libxxhash is built for the baseline
// (SSE2): 1.10 instructions per byte. xxHash's own AVX2 build (-mavx2
// -funroll-loops) takes 0.28, 0.29 with the long hash over two pieces; the
// long hash below keeps XXH3's accumulators in registers and takes 0.235
// (callgrind, 1 MiB inputs; docs/PERFORMANCE.md, stop 40), and 0.204 since it
// sums a block's data apart and adds it swapped once per block (BlockSums;
// stop 53). Hashing from
// memory runs at the memory's speed either way (~9 GB/s here,
// bench/store_bench.cc BM_EntryChecksum).
// The hash is the same function whatever the vector width: XXH3's result
// does not depend on its implementation (tests/store/layout_test.cc checks).
#define XXH_INLINE_ALL  // every xxHash symbol of this file is static: no clash with the library's
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/format/simd.h"

#if !defined(__AVX2__) || XXH_VECTOR != XXH_AVX2
#error "checksum_avx2.cc must be compiled with -mavx2"
#endif

namespace kvrdma::detail {

#if XXH_VERSION_NUMBER == 801
namespace {

// XXH3's eight 64-bit accumulators, two AVX2 registers. xxHash's own AVX2
// accumulate updates an array in memory (each stripe loads and stores it,
// and every input byte may alias it); here they stay in registers for the
// whole input. Per 32 input bytes: load, xor with the secret, shift,
// multiply, shuffle, two adds.
struct Accs {
  __m256i lo;
  __m256i hi;
};

XXH_FORCE_INLINE __m256i AccumulateData(__m256i acc, __m256i data, const xxh_u8* secret) noexcept {
  const __m256i data_key = _mm256_xor_si256(data, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret)));
  // (data_key & 0xffffffff) * (data_key >> 32), per 64-bit lane
  const __m256i product = _mm256_mul_epu32(data_key, _mm256_srli_epi64(data_key, 32));
  const __m256i swapped = _mm256_shuffle_epi32(data, _MM_SHUFFLE(1, 0, 3, 2));
  return _mm256_add_epi64(_mm256_add_epi64(acc, swapped), product);
}

XXH_FORCE_INLINE __m256i AccumulateLane(__m256i acc, const xxh_u8* in, const xxh_u8* secret) noexcept {
  return AccumulateData(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)), secret);
}

// XXH3_accumulate_512: one 64-byte stripe.
XXH_FORCE_INLINE void AccumulateStripe(Accs& acc, const xxh_u8* in, const xxh_u8* secret) noexcept {
  acc.lo = AccumulateLane(acc.lo, in, secret);
  acc.hi = AccumulateLane(acc.hi, in + 32, secret + 32);
  // Each stripe's sums into the accumulators before the next stripe's: left
  // alone, GCC reassociates a block's 32 additions per accumulator into a
  // tree and spills its terms to the stack.
  asm("" : "+x"(acc.lo), "+x"(acc.hi));
}

// The same stripe, and its 64 bytes stored at `out` from the registers they
// were hashed from (HashLongMove): what is stored is what was hashed.
XXH_FORCE_INLINE void AccumulateStripeCopy(Accs& acc, const xxh_u8* in, const xxh_u8* secret, xxh_u8* out) noexcept {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 32));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), lo);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32), hi);
  acc.lo = AccumulateData(acc.lo, lo, secret);
  acc.hi = AccumulateData(acc.hi, hi, secret + 32);
  asm("" : "+x"(acc.lo), "+x"(acc.hi));
}

XXH_FORCE_INLINE __m256i ScrambleLane(__m256i acc, const xxh_u8* secret) noexcept {
  const __m256i prime32 = _mm256_set1_epi32(static_cast<int>(XXH_PRIME32_1));
  const __m256i mixed = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 47));
  const __m256i data_key = _mm256_xor_si256(mixed, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret)));
  const __m256i prod_lo = _mm256_mul_epu32(data_key, prime32);
  const __m256i prod_hi = _mm256_mul_epu32(_mm256_srli_epi64(data_key, 32), prime32);
  return _mm256_add_epi64(prod_lo, _mm256_slli_epi64(prod_hi, 32));
}

// XXH3_scrambleAcc, after each block.
XXH_FORCE_INLINE void Scramble(Accs& acc, const xxh_u8* secret) noexcept {
  acc.lo = ScrambleLane(acc.lo, secret);
  acc.hi = ScrambleLane(acc.hi, secret + 32);
}

constexpr size_t kSecretSize = XXH_SECRET_DEFAULT_SIZE;
constexpr size_t kStripesPerBlock = (kSecretSize - XXH_STRIPE_LEN) / XXH_SECRET_CONSUME_RATE;
constexpr size_t kBlockLen = XXH_STRIPE_LEN * kStripesPerBlock;
// XXH3 prefetches 384 bytes ahead on every stripe; here once per 128 bytes
// (two cache lines, what the L2's adjacent-line prefetcher fetches
// together), half its instructions. From memory, every stripe, every other
// and none all ran at 8.8-9.4 GB/s (BM_EntryChecksum, 64 KiB and 1 MiB).
constexpr size_t kPrefetchAhead = 384;

// A whole block's stripes (AccumulateBlock, AccumulateBlockCopy). Per 32
// input bytes XXH3 adds two terms to its accumulator: the product of the
// data-and-secret's halves, and the data with its two 64-bit halves of each
// 128-bit lane swapped. The swap is a permutation of 64-bit lanes, and the
// sums are lane-wise modulo 2^64, so the sum of the swapped data is the
// swapped sum of the data: a block adds each stripe's data to `data` as it
// is (one add, no shuffle), and the swapped sum to the accumulators once,
// before the scramble (which is not linear). The same result as XXH3's
// order of additions, bit for bit (tests/store/layout_test.cc), with 14
// instructions per 64-byte stripe instead of 16 when it also copies.
struct BlockSums {
  Accs acc;
  Accs data;
};

XXH_FORCE_INLINE __m256i AccumulateProduct(__m256i acc, __m256i data, const xxh_u8* secret) noexcept {
  const __m256i data_key = _mm256_xor_si256(data, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret)));
  return _mm256_add_epi64(acc, _mm256_mul_epu32(data_key, _mm256_srli_epi64(data_key, 32)));
}

// One stripe of a block from the registers lo and hi (its 64 bytes).
XXH_FORCE_INLINE void AccumulateBlockStripe(BlockSums& b, __m256i lo, __m256i hi, const xxh_u8* secret,
                                            bool first) noexcept {
  b.acc.lo = AccumulateProduct(b.acc.lo, lo, secret);
  b.acc.hi = AccumulateProduct(b.acc.hi, hi, secret + 32);
  b.data.lo = first ? lo : _mm256_add_epi64(b.data.lo, lo);
  b.data.hi = first ? hi : _mm256_add_epi64(b.data.hi, hi);
  // Each stripe's sums before the next stripe's (see AccumulateStripe).
  asm("" : "+x"(b.acc.lo), "+x"(b.acc.hi), "+x"(b.data.lo), "+x"(b.data.hi));
}

// The block's swapped data sum into the accumulators, then the scramble.
XXH_FORCE_INLINE void EndBlock(Accs& acc, const BlockSums& b, const xxh_u8* secret) noexcept {
  acc.lo = _mm256_add_epi64(b.acc.lo, _mm256_shuffle_epi32(b.data.lo, _MM_SHUFFLE(1, 0, 3, 2)));
  acc.hi = _mm256_add_epi64(b.acc.hi, _mm256_shuffle_epi32(b.data.hi, _MM_SHUFFLE(1, 0, 3, 2)));
  Scramble(acc, secret + kSecretSize - XXH_STRIPE_LEN);
}

// A whole block at `in`: its 16 stripes unrolled, the secret at constant
// offsets, then the scramble.
XXH_FORCE_INLINE void AccumulateBlock(Accs& acc, const xxh_u8* in, const xxh_u8* secret) noexcept {
  BlockSums b{acc, {}};
#pragma GCC unroll 16
  for (size_t s = 0; s < kStripesPerBlock; ++s) {
    if (s % 2 == 0) XXH_PREFETCH(in + s * XXH_STRIPE_LEN + kPrefetchAhead);
    const xxh_u8* p = in + s * XXH_STRIPE_LEN;
    AccumulateBlockStripe(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)),
                          secret + s * XXH_SECRET_CONSUME_RATE, s == 0);
  }
  EndBlock(acc, b, secret);
}

// XXH3's secret for `seed`: its default for 0, else derived from the seed.
struct Secret {
  explicit Secret(uint64_t seed) noexcept {
    if (seed != 0) {
      XXH3_initCustomSecret_avx2(custom, seed);
      secret = custom;
    }
  }
  XXH_ALIGN(XXH_SEC_ALIGN) xxh_u8 custom[kSecretSize];
  const xxh_u8* secret = XXH3_kSecret;
};

// The long hash's first and last steps: the accumulators' initial values,
// and their merge into the 64-bit result.
XXH_FORCE_INLINE Accs InitialAccs() noexcept {
  XXH_ALIGN(XXH_ACC_ALIGN) const xxh_u64 words[XXH_ACC_NB] = XXH3_INIT_ACC;
  return {_mm256_load_si256(reinterpret_cast<const __m256i*>(words)),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(words + 4))};
}

XXH_FORCE_INLINE uint64_t MergeAccs(const Accs& acc, const xxh_u8* secret, size_t len) noexcept {
  XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 words[XXH_ACC_NB];
  _mm256_store_si256(reinterpret_cast<__m256i*>(words), acc.lo);
  _mm256_store_si256(reinterpret_cast<__m256i*>(words + 4), acc.hi);
  return XXH3_mergeAccs(words, secret + XXH_SECRET_MERGEACCS_START, static_cast<xxh_u64>(len) * XXH_PRIME64_1);
}

// AccumulateBlock over the bytes at `in`, which it also stores at `out`
// from the registers it hashes them from.
XXH_FORCE_INLINE void AccumulateBlockCopy(Accs& acc, const xxh_u8* in, const xxh_u8* secret, xxh_u8* out) noexcept {
  BlockSums b{acc, {}};
#pragma GCC unroll 16
  for (size_t s = 0; s < kStripesPerBlock; ++s) {
    if (s % 2 == 0) XXH_PREFETCH(in + s * XXH_STRIPE_LEN + kPrefetchAhead);
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + s * XXH_STRIPE_LEN));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + s * XXH_STRIPE_LEN + 32));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + s * XXH_STRIPE_LEN), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + s * XXH_STRIPE_LEN + 32), hi);
    AccumulateBlockStripe(b, lo, hi, secret + s * XXH_SECRET_CONSUME_RATE, s == 0);
  }
  EndBlock(acc, b, secret);
}

// XXH3-64 (xxHash 0.8.1's long hash, len > 240) of the bytes B[0, len) that
// are base[0, from) followed by src[0, len - from), while it copies src to
// dst[0, len - from), reading src once: each 64-byte stripe that starts at
// or after `from` is loaded from src, stored at dst and hashed from the same
// registers. The stripes before (the key's, and the one the key's end falls
// in) are hashed from base, and the value's bytes they hold, at most 63, are
// copied first; the bytes after the last whole stripe are copied before the
// last stripe is hashed from base. Two uses:
//   a GET's decode: base = the entry READ (key and value), src = its value,
//     dst = the caller's buffer (base holds all of B);
//   a store's write: base = the entry's key in the log, src = the value,
//     dst = its place in the log right after the key (base + from): what
//     the log holds is what was hashed, every byte of it.
uint64_t HashLongMove(const xxh_u8* base, size_t len, size_t from, const xxh_u8* src, xxh_u8* dst,
                      uint64_t seed) noexcept {
  Secret key(seed);
  const xxh_u8* const secret = key.secret;
  Accs acc = InitialAccs();
  const size_t blocks = (len - 1) / kBlockLen;
  const size_t last_stripes = ((len - 1) - kBlockLen * blocks) / XXH_STRIPE_LEN;
  const size_t covered = blocks * kBlockLen + last_stripes * XXH_STRIPE_LEN;  // the loop's stripes: [0, covered)
  // The first stripe moved: the first that starts at or after `from`, if
  // one of the loop's does.
  const size_t first = std::min(covered, (from + XXH_STRIPE_LEN - 1) / XXH_STRIPE_LEN * XXH_STRIPE_LEN);
  const bool moves = first < covered;
  // The value's bytes before it (all of them when no stripe moves).
  std::memcpy(dst, src, (moves ? first : len) - from);
  // Stripes [0, n) from offset `at` of B, one at a time.
  auto stripes = [&](size_t at, size_t n) {
    for (size_t i = 0; i < n; ++i, at += XXH_STRIPE_LEN) {
      const xxh_u8* secret_i = secret + i * XXH_SECRET_CONSUME_RATE;
      if (at >= first) {
        AccumulateStripeCopy(acc, src + (at - from), secret_i, dst + (at - from));
      } else {
        AccumulateStripe(acc, base + at, secret_i);
      }
    }
  };
  size_t n = 0;
  for (; n < blocks && (n + 1) * kBlockLen <= first; ++n) AccumulateBlock(acc, base + n * kBlockLen, secret);
  for (; n < blocks && n * kBlockLen < first; ++n) {  // the block `first` falls in, if not at its start
    stripes(n * kBlockLen, kStripesPerBlock);
    Scramble(acc, secret + kSecretSize - XXH_STRIPE_LEN);
  }
  for (; n < blocks; ++n) {
    AccumulateBlockCopy(acc, src + (n * kBlockLen - from), secret, dst + (n * kBlockLen - from));
  }
  stripes(blocks * kBlockLen, last_stripes);
  // The bytes after the last whole stripe, then XXH3's last stripe (from
  // base, which in a store's write must hold them by now).
  if (moves) std::memcpy(dst + (covered - from), src + (covered - from), len - covered);
  AccumulateStripe(acc, base + len - XXH_STRIPE_LEN, secret + kSecretSize - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
  return MergeAccs(acc, secret, len);
}

// XXH3-64 of a || b over 240 bytes: xxHash 0.8.1's long hash
// (XXH3_hashLong_64b_withSeed_internal and XXH3_hashLong_internal_loop) over
// the concatenation, each 64-byte stripe read where it lies: in a, in b, or
// copied together where it straddles the cut (a GET READ into the caller's
// memory checksums its key and value this way). With nb = 0 it is the
// one-shot hash of a.
uint64_t HashLongOfPieces(const xxh_u8* a, size_t na, const xxh_u8* b, size_t nb, uint64_t seed) noexcept {
  Secret key(seed);
  const xxh_u8* const secret = key.secret;
  const size_t len = na + nb;
  Accs acc = InitialAccs();
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
  // Stripes [0, n) of a block from offset `at`: those not wholly in b one
  // at a time, then the rest in one run over b.
  auto accumulate = [&](size_t at, size_t n) {
    size_t i = 0;
    for (; i < n && at + i * XXH_STRIPE_LEN < na; ++i) {
      AccumulateStripe(acc, stripe(at + i * XXH_STRIPE_LEN), secret + i * XXH_SECRET_CONSUME_RATE);
    }
    if (i == n) return;
    const xxh_u8* in = b + (at + i * XXH_STRIPE_LEN - na);
    for (; i < n; ++i, in += XXH_STRIPE_LEN) AccumulateStripe(acc, in, secret + i * XXH_SECRET_CONSUME_RATE);
  };
  const size_t blocks = (len - 1) / kBlockLen;
  size_t n = 0;
  // Blocks wholly in a, then the one the cut falls in (if any), then those wholly in b.
  for (; n < blocks && (n + 1) * kBlockLen <= na; ++n) AccumulateBlock(acc, a + n * kBlockLen, secret);
  for (; n < blocks && n * kBlockLen < na; ++n) {
    accumulate(n * kBlockLen, kStripesPerBlock);
    Scramble(acc, secret + kSecretSize - XXH_STRIPE_LEN);
  }
  for (; n < blocks; ++n) AccumulateBlock(acc, b + (n * kBlockLen - na), secret);
  accumulate(blocks * kBlockLen, ((len - 1) - kBlockLen * blocks) / XXH_STRIPE_LEN);
  AccumulateStripe(acc, stripe(len - XXH_STRIPE_LEN), secret + kSecretSize - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
  return MergeAccs(acc, secret, len);
}

}  // namespace
#endif

uint64_t Xxh3Avx2(const void* p, size_t n, uint64_t seed) noexcept {
#if XXH_VERSION_NUMBER == 801
  if (n > XXH3_MIDSIZE_MAX) return HashLongOfPieces(static_cast<const xxh_u8*>(p), n, nullptr, 0, seed);
#endif
  return XXH3_64bits_withSeed(p, n, seed);
}

uint64_t Xxh3Avx2Copy(const void* p, size_t n, size_t from, void* dst, uint64_t seed) noexcept {
  const auto* in = static_cast<const xxh_u8*>(p);
#if XXH_VERSION_NUMBER == 801
  if (n > XXH3_MIDSIZE_MAX) return HashLongMove(in, n, from, in + from, static_cast<xxh_u8*>(dst), seed);
#endif
  if (n > from) std::memcpy(dst, in + from, n - from);
  return XXH3_64bits_withSeed(p, n, seed);
}

uint64_t Xxh3Avx2CopyIn(void* base, size_t n, size_t from, const void* src, uint64_t seed) noexcept {
  auto* b = static_cast<xxh_u8*>(base);
#if XXH_VERSION_NUMBER == 801
  if (n > XXH3_MIDSIZE_MAX) return HashLongMove(b, n, from, static_cast<const xxh_u8*>(src), b + from, seed);
#endif
  if (n > from) std::memcpy(b + from, src, n - from);
  return XXH3_64bits_withSeed(base, n, seed);
}

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
