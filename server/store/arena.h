// Arena: one large anonymous mapping for RDMA-visible memory (index or log),
// page-aligned and ready to be registered as one memory region.
//
// Backing, by HugePages mode: kAuto tries MAP_HUGETLB (2 MiB pages), then
// transparent huge pages (madvise(MADV_HUGEPAGE)), then normal pages; kOn
// requires MAP_HUGETLB; kOff uses normal pages. One log line says which.
// Move-only; the destructor unmaps.
#pragma once

#include <cstddef>

#include "common/status.h"
#include "server/store/store_config.h"

namespace kvrdma {

class Arena {
 public:
  enum class Backing { kHugeTlb, kTransparentHuge, kNormal };

  // `name` is for the log line. Memory is zero-filled.
  static Result<Arena> Create(size_t bytes, HugePages mode, const char* name);

  Arena() = default;
  Arena(Arena&& o) noexcept;
  Arena& operator=(Arena&& o) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();

  std::byte* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }          // usable bytes (as requested)
  size_t mapped_size() const noexcept { return mapped_; } // rounded to the page size
  Backing backing() const noexcept { return backing_; }
  static const char* BackingName(Backing b) noexcept;

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
  Backing backing_ = Backing::kNormal;
};

}  // namespace kvrdma
