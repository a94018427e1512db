// Copies to and from memory that an RDMA peer may read or write at the same
// time (the registered index, log and lock table).
//
// A remote RDMA READ is not atomic against CPU stores: the server writes
// entries while NICs read them, and readers validate what they got (see
// docs/DESIGN.md). In C++ terms that is a data race. These helpers make the
// race explicit and well-defined: under ThreadSanitizer every 8-byte word (or
// byte at unaligned edges) is moved with a relaxed atomic access, so TSan sees
// intended concurrency instead of a bug; in other builds they are memcpy, which
// compiles to the same stores the relaxed atomics would.
//
// Use RacyStore for CPU writes into RDMA-visible memory and RacyLoad where a
// CPU reads such memory the way a NIC would (the loopback transport, tests).
// Single words that are published (index words, superseded words) use
// std::atomic_ref with the orderings documented at the call site instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvrdma {

#if defined(__SANITIZE_THREAD__)
#define KVRDMA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVRDMA_TSAN 1
#endif
#endif

namespace detail {
inline void AtomicCopy(void* dst, const void* src, size_t n, bool racy_dst) noexcept {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  auto racy_byte = [&](size_t i) {
    unsigned char b = racy_dst ? s[i] : __atomic_load_n(s + i, __ATOMIC_RELAXED);
    if (racy_dst) {
      __atomic_store_n(d + i, b, __ATOMIC_RELAXED);
    } else {
      d[i] = b;
    }
  };
  size_t i = 0;
  const unsigned char* racy = racy_dst ? d : s;
  while (i < n && (reinterpret_cast<uintptr_t>(racy + i) & 7) != 0) racy_byte(i++);
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    if (racy_dst) {
      std::memcpy(&w, s + i, 8);
      __atomic_store_n(reinterpret_cast<uint64_t*>(d + i), w, __ATOMIC_RELAXED);
    } else {
      w = __atomic_load_n(reinterpret_cast<const uint64_t*>(s + i), __ATOMIC_RELAXED);
      std::memcpy(d + i, &w, 8);
    }
  }
  while (i < n) racy_byte(i++);
}
}  // namespace detail

// Copy into memory that remote readers may be reading.
inline void RacyStore(void* dst, const void* src, size_t n) noexcept {
#ifdef KVRDMA_TSAN
  detail::AtomicCopy(dst, src, n, /*racy_dst=*/true);
#else
  std::memcpy(dst, src, n);
#endif
}

// Copy out of memory that others may be writing (what a NIC's READ does).
inline void RacyLoad(void* dst, const void* src, size_t n) noexcept {
#ifdef KVRDMA_TSAN
  detail::AtomicCopy(dst, src, n, /*racy_dst=*/false);
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace kvrdma

namespace kvrdma {

// Copy where both sides may be accessed concurrently (a NIC moving bytes
// between two registered regions: the loopback transport).
inline void RacyCopy(void* dst, const void* src, size_t n) noexcept {
#ifdef KVRDMA_TSAN
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  size_t i = 0;
  bool aligned = ((reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(s)) & 7) == 0;
  if (aligned) {
    for (; i + 8 <= n; i += 8) {
      __atomic_store_n(reinterpret_cast<uint64_t*>(d + i),
                       __atomic_load_n(reinterpret_cast<const uint64_t*>(s + i), __ATOMIC_RELAXED),
                       __ATOMIC_RELAXED);
    }
  }
  for (; i < n; ++i) __atomic_store_n(d + i, __atomic_load_n(s + i, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace kvrdma
