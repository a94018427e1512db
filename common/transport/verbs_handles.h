// Move-only RAII handles for every libibverbs / librdmacm object kvrdma uses.
//
// Each handle owns one object and destroys it exactly once. A failed destroy
// is logged (with errno) and never throws: it usually means a child object is
// still alive, i.e. a destruction-order bug. Owners declare members in
// creation order so that destruction runs QP -> CQ/SRQ -> MR -> PD -> context
// (see rdma-core's rc_pingpong for the canonical order).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <unistd.h>

#include <utility>

namespace kvrdma::verbs {

// A file descriptor of our own (an eventfd), closed exactly once.
class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const noexcept { return fd_; }

 private:
  int fd_ = -1;
};

// Logs "destroy <what> failed: <strerror(err)>".
void LogDestroyFailure(const char* what, int err) noexcept;

template <typename T, int (*Destroy)(T*), const char* kName>
class Handle {
 public:
  Handle() noexcept = default;
  explicit Handle(T* p) noexcept : p_(p) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  T* get() const noexcept { return p_; }
  T* operator->() const noexcept { return p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  T* release() noexcept { return std::exchange(p_, nullptr); }
  void reset(T* p = nullptr) noexcept {
    if (p_ != nullptr) {
      int rc = Destroy(p_);
      // verbs calls return an errno value; rdma_cm calls return -1 + errno.
      if (rc != 0) LogDestroyFailure(kName, rc > 0 ? rc : errno);
    }
    p_ = p;
  }

 private:
  T* p_ = nullptr;
};

namespace detail {
inline int DestroyEventChannel(rdma_event_channel* c) {
  rdma_destroy_event_channel(c);
  return 0;
}
inline int DestroyDeviceList(ibv_context** l) {
  rdma_free_devices(l);
  return 0;
}
// ibv_dealloc_mw is a static inline in verbs.h: wrap it for external linkage.
inline int DeallocMw(ibv_mw* mw) { return ibv_dealloc_mw(mw); }
inline constexpr char kEventChannel[] = "rdma_event_channel";
inline constexpr char kCmId[] = "rdma_cm_id";
inline constexpr char kDeviceList[] = "rdma device list";
inline constexpr char kPd[] = "protection domain";
inline constexpr char kCompChannel[] = "completion channel";
inline constexpr char kCq[] = "completion queue";
inline constexpr char kSrq[] = "shared receive queue";
inline constexpr char kQp[] = "queue pair";
inline constexpr char kMr[] = "memory region";
inline constexpr char kMw[] = "memory window";
}  // namespace detail

using CmEventChannel = Handle<rdma_event_channel, detail::DestroyEventChannel, detail::kEventChannel>;
// An rdma_cm_id. Its QP (if any) is a separate QueuePair handle destroyed first.
using CmId = Handle<rdma_cm_id, rdma_destroy_id, detail::kCmId>;
// The contexts librdmacm opened (rdma_get_devices); they live as long as this.
using CmDeviceList = Handle<ibv_context*, detail::DestroyDeviceList, detail::kDeviceList>;
using IbvPd = Handle<ibv_pd, ibv_dealloc_pd, detail::kPd>;
using IbvCompChannel = Handle<ibv_comp_channel, ibv_destroy_comp_channel, detail::kCompChannel>;
using IbvCq = Handle<ibv_cq, ibv_destroy_cq, detail::kCq>;
using IbvSrq = Handle<ibv_srq, ibv_destroy_srq, detail::kSrq>;
// A QP created with ibv_create_qp_ex (so ibv_qp_to_qp_ex works for ibv_wr_*).
using IbvQp = Handle<ibv_qp, ibv_destroy_qp, detail::kQp>;
using IbvMr = Handle<ibv_mr, ibv_dereg_mr, detail::kMr>;
// A memory window; deallocate it before the MR it is bound over.
using IbvMw = Handle<ibv_mw, detail::DeallocMw, detail::kMw>;

}  // namespace kvrdma::verbs
