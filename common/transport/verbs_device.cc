// Verbs device, memory regions, completion queues and shared receive queues.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "common/log.h"
#include "common/transport/verbs_internal.h"
#include "common/transport/verbs_transport.h"

namespace kvrdma {
namespace verbs {

void LogDestroyFailure(const char* what, int err) noexcept {
  KVRDMA_LOG_ERROR("destroy %s failed: %s", what, std::strerror(err));
}

namespace {

WcStatus FromIbvStatus(ibv_wc_status s) noexcept {
  switch (s) {
    case IBV_WC_SUCCESS: return WcStatus::kSuccess;
    case IBV_WC_REM_ACCESS_ERR: return WcStatus::kRemoteAccessError;
    case IBV_WC_REM_INV_REQ_ERR: return WcStatus::kRemoteInvalidRequest;
    case IBV_WC_REM_OP_ERR: return WcStatus::kRemoteOperationError;
    case IBV_WC_LOC_PROT_ERR: return WcStatus::kLocalProtectionError;
    case IBV_WC_LOC_LEN_ERR: return WcStatus::kLocalLengthError;
    case IBV_WC_WR_FLUSH_ERR: return WcStatus::kFlushed;
    case IBV_WC_RETRY_EXC_ERR: return WcStatus::kRetryExceeded;
    case IBV_WC_RNR_RETRY_EXC_ERR: return WcStatus::kRnrRetryExceeded;
    case IBV_WC_MW_BIND_ERR: return WcStatus::kMwBindError;
    default: return WcStatus::kOther;
  }
}

WrOpcode FromIbvOpcode(ibv_wc_opcode op) noexcept {
  switch (op) {
    case IBV_WC_RDMA_READ: return WrOpcode::kRead;
    case IBV_WC_RDMA_WRITE: return WrOpcode::kWrite;
    case IBV_WC_SEND: return WrOpcode::kSend;
    case IBV_WC_COMP_SWAP: return WrOpcode::kCompareSwap;
    case IBV_WC_FETCH_ADD: return WrOpcode::kFetchAdd;
    case IBV_WC_RECV: return WrOpcode::kRecv;
    case IBV_WC_RECV_RDMA_WITH_IMM: return WrOpcode::kRecvWriteImm;
    case IBV_WC_BIND_MW: return WrOpcode::kBindMw;
    case IBV_WC_LOCAL_INV: return WrOpcode::kLocalInv;
    default: return WrOpcode::kSend;
  }
}

}  // namespace

Completion FromIbvWc(const ibv_wc& wc) noexcept {
  Completion c;
  c.wr_id = wc.wr_id;
  c.status = FromIbvStatus(wc.status);
  // The opcode is valid only on success; error completions keep kSend.
  c.opcode = wc.status == IBV_WC_SUCCESS ? FromIbvOpcode(wc.opcode) : WrOpcode::kSend;
  c.has_imm = wc.status == IBV_WC_SUCCESS && (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
  c.imm = c.has_imm ? be32toh(wc.imm_data) : 0;
  c.byte_len = wc.byte_len;
  c.qp_num = wc.qp_num;
  c.vendor_err = wc.vendor_err;
  return c;
}

int ToIbvAccess(uint32_t access) noexcept {
  int a = 0;
  if (access & (kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteAtomic)) a |= IBV_ACCESS_LOCAL_WRITE;
  if (access & kAccessRemoteRead) a |= IBV_ACCESS_REMOTE_READ;
  if (access & kAccessRemoteWrite) a |= IBV_ACCESS_REMOTE_WRITE;
  if (access & kAccessRemoteAtomic) a |= IBV_ACCESS_REMOTE_ATOMIC;
  if (access & kAccessMwBind) a |= IBV_ACCESS_MW_BIND;
  return a;
}

uint8_t RandomKeyByte(uint8_t avoid) noexcept {
  thread_local std::mt19937 rng{std::random_device{}()};
  uint8_t b = avoid;
  while (b == avoid) b = static_cast<uint8_t>(rng());
  return b;
}

Status PostRecvChain(std::span<const RecvWr> wrs, ibv_srq* srq, ibv_qp* qp) {
  constexpr size_t kChain = 32;
  ibv_recv_wr rw[kChain];
  ibv_sge sg[kChain];
  for (size_t base = 0; base < wrs.size(); base += kChain) {
    size_t n = std::min(kChain, wrs.size() - base);
    for (size_t i = 0; i < n; ++i) {
      const RecvWr& w = wrs[base + i];
      sg[i] = ibv_sge{w.local.addr, w.local.length, w.local.lkey};
      rw[i] = ibv_recv_wr{};
      rw[i].wr_id = w.wr_id;
      rw[i].sg_list = &sg[i];
      rw[i].num_sge = 1;
      rw[i].next = i + 1 < n ? &rw[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    int rc = srq != nullptr ? ibv_post_srq_recv(srq, rw, &bad) : ibv_post_recv(qp, rw, &bad);
    if (rc != 0) {
      if (rc == ENOMEM) return Status::NoResource("receive queue full");
      return Status::FromErrno("ibv_post_recv", rc);
    }
  }
  return Status::OK();
}

// ------------------------------------------------------------------ device

Result<std::shared_ptr<VerbsDevice>> VerbsDevice::Open(const std::string& name) {
  auto dev = std::make_shared<VerbsDevice>();
  int n = 0;
  dev->list_.reset(rdma_get_devices(&n));
  if (!dev->list_ || n == 0) {
    return Status::Unavailable(
        "no RDMA device found (no NIC and no Soft-RoCE device; on a machine without RDMA, run "
        "under tools/with-rdma)");
  }
  std::string names;
  int unopened = 0;
  for (int i = 0; i < n; ++i) {
    ibv_context* c = dev->list_.get()[i];
    // librdmacm leaves a device it could not open as a null context (out of
    // device contexts, e.g. while dead processes' resources are still being
    // torn down): skip it, and say so if nothing else matches.
    if (c == nullptr || c->device == nullptr) {
      ++unopened;
      continue;
    }
    const char* dn = ibv_get_device_name(c->device);
    if (name.empty() || name == dn) {
      dev->ctx_ = c;
      break;
    }
    names += names.empty() ? "" : ", ";
    names += dn;
  }
  if (dev->ctx_ == nullptr) {
    const std::string skipped =
        unopened == 0 ? "" : "; " + std::to_string(unopened) + " device(s) could not be opened (out of resources?)";
    return Status::Unavailable("RDMA device '" + name + "' not found (have: " + names + skipped + ")");
  }
  dev->pd_.reset(ibv_alloc_pd(dev->ctx_));
  if (!dev->pd_) return Status::FromErrno("ibv_alloc_pd", errno);
  ibv_device_attr a{};
  if (int rc = ibv_query_device(dev->ctx_, &a); rc != 0) return Status::FromErrno("ibv_query_device", rc);
  dev->info_.name = ibv_get_device_name(dev->ctx_->device);
  dev->info_.max_qp_rd_atom = static_cast<uint32_t>(a.max_qp_rd_atom);
  dev->info_.max_qp_init_rd_atom = static_cast<uint32_t>(a.max_qp_init_rd_atom);
  dev->info_.atomics_hca_only = a.atomic_cap != IBV_ATOMIC_GLOB;
  dev->info_.max_srq_wr = static_cast<uint32_t>(a.max_srq_wr);
  dev->info_.max_cqe = static_cast<uint32_t>(a.max_cqe);
  dev->info_.max_qp_wr = static_cast<uint32_t>(a.max_qp_wr);
  dev->info_.max_mr_size = a.max_mr_size;
  dev->info_.memory_windows =
      a.max_mw > 0 && (a.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
  return dev;
}

Result<std::unique_ptr<kvrdma::MemoryRegion>> VerbsDevice::RegisterMemory(void* addr, size_t len,
                                                                           uint32_t access) {
  IbvMr mr(ibv_reg_mr(pd_.get(), addr, len, ToIbvAccess(access)));
  if (!mr) {
    int err = errno;
    std::string m = "ibv_reg_mr of " + std::to_string(len) + " bytes";
    if (err == ENOMEM || err == EPERM) m += " (locked-memory limit? try: ulimit -l unlimited)";
    return Status::FromErrno(m, err);
  }
  std::unique_ptr<kvrdma::MemoryRegion> r = std::make_unique<VerbsMr>(self(), std::move(mr), access);
  return r;
}

Result<std::unique_ptr<kvrdma::MemoryWindow>> VerbsDevice::CreateMemoryWindow() {
  IbvMw mw(ibv_alloc_mw(pd_.get(), IBV_MW_TYPE_2));
  if (!mw) {
    int err = errno;
    return Status::FromErrno("ibv_alloc_mw (type 2; does " + info_.name + " support memory windows?)", err);
  }
  // A type-2 bind sets the key byte (the low 8 bits) of the rkey; the rest
  // is the window's index. A random byte makes the key one guess in 255.
  uint32_t rkey = (mw->rkey & ~0xffu) | RandomKeyByte(static_cast<uint8_t>(mw->rkey & 0xff));
  std::unique_ptr<kvrdma::MemoryWindow> r = std::make_unique<VerbsMw>(self(), std::move(mw), rkey);
  return r;
}

Result<std::unique_ptr<kvrdma::CompletionQueue>> VerbsDevice::CreateCompletionQueue(uint32_t depth) {
  auto cq = VerbsCq::Create(self(), depth);
  if (!cq.ok()) return cq.status();
  std::unique_ptr<kvrdma::CompletionQueue> r = std::move(cq).value();
  return r;
}

Result<std::unique_ptr<kvrdma::SharedReceiveQueue>> VerbsDevice::CreateSharedReceiveQueue(
    uint32_t max_wr) {
  auto srq = VerbsSrq::Create(self(), max_wr);
  if (!srq.ok()) return srq.status();
  std::unique_ptr<kvrdma::SharedReceiveQueue> r = std::move(srq).value();
  return r;
}

// ---------------------------------------------------------------------- CQ

Result<std::unique_ptr<VerbsCq>> VerbsCq::Create(std::shared_ptr<VerbsDevice> dev, uint32_t depth) {
  std::unique_ptr<VerbsCq> cq(new VerbsCq(dev));
  cq->channel_.reset(ibv_create_comp_channel(dev->context()));
  if (!cq->channel_) return Status::FromErrno("ibv_create_comp_channel", errno);
  int fl = fcntl(cq->channel_->fd, F_GETFL);
  if (fl < 0 || fcntl(cq->channel_->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
    return Status::FromErrno("fcntl(completion channel)", errno);
  }
  int d = static_cast<int>(std::min(depth, dev->info().max_cqe));
  cq->cq_.reset(ibv_create_cq(dev->context(), d, nullptr, cq->channel_.get(), 0));
  if (!cq->cq_) return Status::FromErrno("ibv_create_cq", errno);
  cq->wake_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (cq->wake_.get() < 0) return Status::FromErrno("eventfd", errno);
  return cq;
}

VerbsCq::~VerbsCq() {
  // Drain a pending notification so the channel can be destroyed cleanly.
  void* ctx = nullptr;
  ibv_cq* ev_cq = nullptr;
  while (channel_ && cq_ && ibv_get_cq_event(channel_.get(), &ev_cq, &ctx) == 0) {
    ibv_ack_cq_events(ev_cq, 1);
  }
}

int VerbsCq::PollRaw(Completion* out, int max) {
  ibv_wc wc[16];
  int total = 0;
  while (total < max) {
    int want = std::min(max - total, 16);
    int n = ibv_poll_cq(cq_.get(), want, wc);
    if (n < 0) return total > 0 ? total : -1;
    for (int i = 0; i < n; ++i) out[total + i] = FromIbvWc(wc[i]);
    total += n;
    if (n < want) break;
  }
  return total;
}

int VerbsCq::Poll(std::span<Completion> out) {
  int max = static_cast<int>(out.size());
  int n = 0;
  while (stash_len_ > 0 && n < max) {
    out[n++] = stash_[stash_head_++];
    --stash_len_;
  }
  if (stash_len_ == 0) stash_head_ = 0;
  if (n == max) return n;
  int m = PollRaw(out.data() + n, max - n);
  if (m < 0) return n > 0 ? n : -1;
  return n + m;
}

Status VerbsCq::Wait(int timeout_ms) {
  if (stash_len_ > 0) return Status::OK();
  if (!armed_) {
    if (int rc = ibv_req_notify_cq(cq_.get(), 0); rc != 0) return Status::FromErrno("ibv_req_notify_cq", rc);
    armed_ = true;
    // A completion that arrived before arming raises no event: look again.
    int n = PollRaw(stash_, kStash);
    if (n > 0) {
      stash_len_ = n;
      return Status::OK();
    }
  }
  pollfd p[2] = {{channel_->fd, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
  int r = ::poll(p, 2, timeout_ms);
  if (r < 0) return errno == EINTR ? Status::Timeout("interrupted") : Status::FromErrno("poll", errno);
  if (r == 0) return Status::Timeout("no completion");
  if (p[1].revents & POLLIN) {
    uint64_t n;
    (void)!::read(wake_.get(), &n, sizeof n);  // drained: the next Wait sleeps again
  }
  if (!(p[0].revents & POLLIN)) return Status::OK();
  void* ctx = nullptr;
  ibv_cq* ev_cq = nullptr;
  if (ibv_get_cq_event(channel_.get(), &ev_cq, &ctx) == 0) {
    ibv_ack_cq_events(ev_cq, 1);
    armed_ = false;
  }
  return Status::OK();
}

void VerbsCq::Wake() {
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

// --------------------------------------------------------------------- SRQ

Result<std::unique_ptr<VerbsSrq>> VerbsSrq::Create(std::shared_ptr<VerbsDevice> dev, uint32_t max_wr) {
  std::unique_ptr<VerbsSrq> s(new VerbsSrq(dev));
  ibv_srq_init_attr a{};
  a.attr.max_wr = std::min(max_wr, dev->info().max_srq_wr);
  a.attr.max_sge = 1;
  s->srq_.reset(ibv_create_srq(dev->pd(), &a));
  if (!s->srq_) return Status::FromErrno("ibv_create_srq", errno);
  s->max_wr_ = a.attr.max_wr;
  return s;
}

Status VerbsSrq::PostRecv(std::span<const RecvWr> wrs) { return PostRecvChain(wrs, srq_.get(), nullptr); }

}  // namespace verbs

Result<std::shared_ptr<Device>> OpenVerbsDevice(const std::string& name) {
  auto d = verbs::VerbsDevice::Open(name);
  if (!d.ok()) return d.status();
  std::shared_ptr<Device> r = std::move(d).value();
  return r;
}

std::vector<std::string> ListVerbsDevices() {
  std::vector<std::string> out;
  int n = 0;
  verbs::CmDeviceList list(rdma_get_devices(&n));
  for (int i = 0; list && i < n; ++i) out.emplace_back(ibv_get_device_name(list.get()[i]->device));
  return out;
}

}  // namespace kvrdma
