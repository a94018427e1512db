// Private to the verbs transport (verbs_device.cc, verbs_connection.cc).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "common/transport/transport.h"
#include "common/transport/verbs_handles.h"

namespace kvrdma::verbs {

class VerbsDevice final : public Device {
 public:
  static Result<std::shared_ptr<VerbsDevice>> Open(const std::string& name);

  const DeviceInfo& info() const noexcept override { return info_; }
  Result<std::unique_ptr<kvrdma::MemoryRegion>> RegisterMemory(void* addr, size_t len,
                                                                uint32_t access) override;
  Result<std::unique_ptr<kvrdma::MemoryWindow>> CreateMemoryWindow() override;
  Result<std::unique_ptr<kvrdma::CompletionQueue>> CreateCompletionQueue(uint32_t depth) override;
  Result<std::unique_ptr<kvrdma::SharedReceiveQueue>> CreateSharedReceiveQueue(
      uint32_t max_wr) override;
  Result<std::unique_ptr<Listener>> Listen(const std::string& host, uint16_t port,
                                           int backlog) override;
  Result<std::unique_ptr<Connection>> Connect(const ConnectOptions& opts, const QpConfig& cfg,
                                              std::span<const uint8_t> private_data,
                                              std::vector<uint8_t>* reject_reply) override;

  ibv_context* context() const noexcept { return ctx_; }
  ibv_pd* pd() const noexcept { return pd_.get(); }
  std::shared_ptr<VerbsDevice> self() {
    return std::static_pointer_cast<VerbsDevice>(shared_from_this());
  }

  VerbsDevice() = default;

 private:
  // Creation order = declaration order; destruction runs backwards.
  CmDeviceList list_;
  ibv_context* ctx_ = nullptr;  // owned by list_
  IbvPd pd_;
  DeviceInfo info_;
};

// A CQ with its completion channel. Wait() arms the CQ and re-polls into a
// small stash that the next Poll() returns first, so nothing is missed.
class VerbsCq final : public kvrdma::CompletionQueue {
 public:
  static Result<std::unique_ptr<VerbsCq>> Create(std::shared_ptr<VerbsDevice> dev, uint32_t depth);
  ~VerbsCq() override;
  int Poll(std::span<Completion> out) override;
  Status Wait(int timeout_ms) override;
  void Wake() override;
  ibv_cq* cq() const noexcept { return cq_.get(); }

 private:
  explicit VerbsCq(std::shared_ptr<VerbsDevice> dev) : dev_(std::move(dev)) {}
  int PollRaw(Completion* out, int max);

  std::shared_ptr<VerbsDevice> dev_;
  IbvCompChannel channel_;
  IbvCq cq_;
  UniqueFd wake_;  // eventfd: Wake() makes it readable, Wait() polls it with the channel
  static constexpr int kStash = 16;
  Completion stash_[kStash];
  int stash_head_ = 0;
  int stash_len_ = 0;
  bool armed_ = false;
};

class VerbsSrq final : public kvrdma::SharedReceiveQueue {
 public:
  static Result<std::unique_ptr<VerbsSrq>> Create(std::shared_ptr<VerbsDevice> dev, uint32_t max_wr);
  Status PostRecv(std::span<const RecvWr> wrs) override;
  uint32_t max_wr() const noexcept override { return max_wr_; }
  ibv_srq* srq() const noexcept { return srq_.get(); }

 private:
  explicit VerbsSrq(std::shared_ptr<VerbsDevice> dev) : dev_(std::move(dev)) {}
  std::shared_ptr<VerbsDevice> dev_;
  IbvSrq srq_;
  uint32_t max_wr_ = 0;
};

class VerbsMr final : public kvrdma::MemoryRegion {
 public:
  VerbsMr(std::shared_ptr<VerbsDevice> dev, IbvMr mr, uint32_t access)
      : kvrdma::MemoryRegion(mr->addr, mr->length, mr->lkey, mr->rkey, access),
        dev_(std::move(dev)),
        mr_(std::move(mr)) {}
  ibv_mr* mr() const noexcept { return mr_.get(); }

 private:
  std::shared_ptr<VerbsDevice> dev_;  // keeps the PD alive
  IbvMr mr_;
};

// A type-2 memory window (ibv_alloc_mw). rkey() is the key it will have once
// bound: the allocated key's index with a random key byte.
class VerbsMw final : public kvrdma::MemoryWindow {
 public:
  VerbsMw(std::shared_ptr<VerbsDevice> dev, IbvMw mw, uint32_t rkey)
      : kvrdma::MemoryWindow(rkey), dev_(std::move(dev)), mw_(std::move(mw)) {}
  ibv_mw* mw() const noexcept { return mw_.get(); }
  void set_rkey(uint32_t k) noexcept { rkey_ = k; }

 private:
  std::shared_ptr<VerbsDevice> dev_;  // keeps the PD alive
  IbvMw mw_;
};

// Converts a work completion.
Completion FromIbvWc(const ibv_wc& wc) noexcept;
// Posts receive WRs in chains of at most 32 (shared by SRQ and QP).
Status PostRecvChain(std::span<const RecvWr> wrs, ibv_srq* srq, ibv_qp* qp);
// IBV_ACCESS_* bits for our AccessFlags (remote write/atomic imply local write).
int ToIbvAccess(uint32_t access) noexcept;
// A random byte other than `avoid` (the key part of a type-2 window's rkey).
uint8_t RandomKeyByte(uint8_t avoid) noexcept;

}  // namespace kvrdma::verbs
