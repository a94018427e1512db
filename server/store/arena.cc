#include "server/store/arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "common/log.h"

namespace kvrdma {

Result<Arena> Arena::Create(size_t bytes, HugePages mode, const char* name) {
  if (bytes == 0) return Status::InvalidArgument("arena of 0 bytes");
  Arena a;
  a.size_ = bytes;
  if (mode != HugePages::kOff) {
    const size_t len = (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) {
      a.data_ = static_cast<std::byte*>(p);
      a.mapped_ = len;
      a.backing_ = Backing::kHugeTlb;
    } else if (mode == HugePages::kOn) {
      return Status::NoResource("huge pages required (huge_pages=on) but MAP_HUGETLB failed: "
                                "reserve some in /proc/sys/vm/nr_hugepages");
    }
  }
  if (a.data_ == nullptr) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t len = (bytes + page - 1) & ~(page - 1);
    if (mode == HugePages::kAuto && len >= kHugePageBytes) {
      len = (len + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
    }
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Status::FromErrno("mmap arena", errno);
    a.data_ = static_cast<std::byte*>(p);
    a.mapped_ = len;
    a.backing_ = Backing::kNormal;
    if (mode == HugePages::kAuto && len >= kHugePageBytes && madvise(p, len, MADV_HUGEPAGE) == 0) {
      a.backing_ = Backing::kTransparentHuge;
    }
  }
  KVRDMA_LOG_INFO("store: %s arena %zu bytes at %p backed by %s", name, a.mapped_,
                  static_cast<void*>(a.data_), BackingName(a.backing_));
  return a;
}

Arena::Arena(Arena&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(o.size_), mapped_(o.mapped_), backing_(o.backing_) {}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    this->~Arena();
    data_ = std::exchange(o.data_, nullptr);
    size_ = o.size_;
    mapped_ = o.mapped_;
    backing_ = o.backing_;
  }
  return *this;
}

Arena::~Arena() {
  if (data_ != nullptr && munmap(data_, mapped_) != 0) {
    KVRDMA_LOG_ERROR("store: munmap arena %p failed (errno %d)", static_cast<void*>(data_), errno);
  }
  data_ = nullptr;
}

const char* Arena::BackingName(Backing b) noexcept {
  switch (b) {
    case Backing::kHugeTlb: return "huge pages (MAP_HUGETLB)";
    case Backing::kTransparentHuge: return "transparent huge pages (madvise)";
    case Backing::kNormal: return "normal pages";
  }
  return "?";
}

}  // namespace kvrdma
