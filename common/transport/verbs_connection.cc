// Verbs connections: rdma_cm listener/connect and the QP data path (ibv_wr_*).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/transport/verbs_internal.h"

namespace kvrdma::verbs {
namespace {

// IB encoding of the RNR NAK timer: 12 = 0.64 ms.
constexpr uint8_t kMinRnrTimer = 12;

Status SetNonBlocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return Status::FromErrno("fcntl", errno);
  return Status::OK();
}

// Waits up to timeout_ms (-1 forever) for one CM event on a non-blocking channel.
Result<rdma_cm_event*> WaitCmEvent(rdma_event_channel* ch, int timeout_ms) {
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch, &ev) == 0) return ev;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Status::FromErrno("rdma_get_cm_event", errno);
    pollfd p{ch->fd, POLLIN, 0};
    int r = ::poll(&p, 1, timeout_ms);
    if (r == 0) return Status::Timeout("no connection-manager event");
    if (r < 0 && errno != EINTR) return Status::FromErrno("poll", errno);
  }
}

Status ResolveSockaddr(const std::string& host, uint16_t port, bool passive, sockaddr_storage* out,
                       socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  std::string p = std::to_string(port);
  const char* h = host.empty() ? nullptr : host.c_str();
  if (int rc = getaddrinfo(h, p.c_str(), &hints, &res); rc != 0) {
    return Status::InvalidArgument("cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  std::memcpy(out, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return Status::OK();
}

// The Status for a handshake event that is not the one expected; for a
// rejection, copies the peer's reason bytes to reject_reply.
Status HandshakeFailure(const rdma_cm_event& ev, const std::string& what,
                        std::vector<uint8_t>* reject_reply) {
  std::string m = what + " failed: " + rdma_event_str(ev.event);
  if (ev.event == RDMA_CM_EVENT_REJECTED) {
    if (reject_reply != nullptr && ev.param.conn.private_data != nullptr) {
      const auto* b = static_cast<const uint8_t*>(ev.param.conn.private_data);
      reject_reply->assign(b, b + ev.param.conn.private_data_len);
    }
    // IB CM reject reason 8 = invalid service ID: nobody listens on that port.
    m += ev.status == 8 ? " (nothing listening on that port)" : " (refused by the server)";
  }
  return Status::Unavailable(m);
}

ibv_qp_init_attr_ex QpAttr(VerbsDevice& dev, const QpConfig& cfg, ibv_cq* scq, ibv_cq* rcq, ibv_srq* srq) {
  ibv_qp_init_attr_ex a{};
  a.qp_type = IBV_QPT_RC;
  a.send_cq = scq;
  a.recv_cq = rcq;
  a.srq = srq;
  a.cap.max_send_wr = std::min(cfg.max_send_wr, dev.info().max_qp_wr);
  a.cap.max_recv_wr = srq != nullptr ? 0 : std::min(cfg.max_recv_wr, dev.info().max_qp_wr);
  a.cap.max_send_sge = 2;  // a READ into two places (SendWr::local2)
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = cfg.max_inline;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.pd = dev.pd();
  a.send_ops_flags = IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_RDMA_WRITE |
                     IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
                     IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
  if (cfg.mw_binding.mw != nullptr) a.send_ops_flags |= IBV_QP_EX_WITH_BIND_MW;
  if (cfg.windows) a.send_ops_flags |= IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
  return a;
}

class VerbsConnection final : public Connection {
 public:
  VerbsConnection(std::shared_ptr<VerbsDevice> dev, CmEventChannel channel, CmId id)
      : dev_(std::move(dev)), channel_(std::move(channel)), id_(std::move(id)) {}

  ~VerbsConnection() override {
    if (id_) {
      if (qp_ != nullptr) {
        rdma_disconnect(id_.get());  // no-op error if never connected
        rdma_destroy_qp(id_.get());
        qp_ = nullptr;
      }
      id_->context = nullptr;
      id_.reset();
    }
  }

  // Creates the QP (and own CQs where cfg has none) on id_.
  Status CreateQp(const QpConfig& cfg) {
    uint32_t sdepth = std::min(cfg.max_send_wr, dev_->info().max_qp_wr);
    if (cfg.send_cq == nullptr) {
      auto cq = VerbsCq::Create(dev_, sdepth);
      if (!cq.ok()) return cq.status();
      own_send_cq_ = std::move(cq).value();
    }
    if (cfg.recv_cq == nullptr) {
      auto cq = VerbsCq::Create(dev_, cfg.srq != nullptr ? 16 : cfg.max_recv_wr);
      if (!cq.ok()) return cq.status();
      own_recv_cq_ = std::move(cq).value();
    }
    send_cq_ = cfg.send_cq != nullptr ? cfg.send_cq : own_send_cq_.get();
    recv_cq_ = cfg.recv_cq != nullptr ? cfg.recv_cq : own_recv_cq_.get();
    // Only verbs CQs/SRQs can be attached to a verbs QP.
    auto* scq = dynamic_cast<VerbsCq*>(send_cq_);
    auto* rcq = dynamic_cast<VerbsCq*>(recv_cq_);
    auto* srq = cfg.srq != nullptr ? dynamic_cast<VerbsSrq*>(cfg.srq) : nullptr;
    if (scq == nullptr || rcq == nullptr || (cfg.srq != nullptr && srq == nullptr)) {
      return Status::InvalidArgument("queues of another transport given to a verbs QP");
    }
    ibv_qp_init_attr_ex a = QpAttr(*dev_, cfg, scq->cq(), rcq->cq(), srq != nullptr ? srq->srq() : nullptr);
    if (rdma_create_qp_ex(id_.get(), &a) != 0) return Status::FromErrno("rdma_create_qp_ex", errno);
    qp_ = id_->qp;
    qpx_ = ibv_qp_to_qp_ex(qp_);
    if (qpx_ == nullptr) return Status::Internal("ibv_qp_to_qp_ex returned null");
    max_send_wr_ = a.cap.max_send_wr;
    max_inline_ = a.cap.max_inline_data;
    windows_ = cfg.windows;
    id_->context = this;
    return Status::OK();
  }

  // Posts an unsignaled type-2 bind (REQUIRES: QP in RTS). The NIC executes
  // it before any later work request of this QP, and before the peer can use
  // the rkey as long as the peer learns it afterwards (Accept). A failed
  // bind completes on the send CQ with b.wr_id.
  Status BindMw(const MwBinding& b) { return PostBind(b, b.mw->rkey(), false); }

  Status BindWindow(const MwBinding& b, bool signaled) override {
    if (broken()) return Status::ConnectionLost("connection is broken");
    if (!windows_) return Status::InvalidArgument("QP made without QpConfig::windows");
    auto* mw = dynamic_cast<VerbsMw*>(b.mw);
    if (mw == nullptr) return Status::InvalidArgument("window of another transport");
    // A new key byte per binding: an rkey of an earlier binding names nothing.
    const uint32_t rkey = (mw->rkey() & ~0xffu) | RandomKeyByte(static_cast<uint8_t>(mw->rkey() & 0xff));
    KVRDMA_RETURN_IF_ERROR(PostBind(b, rkey, signaled));
    mw->set_rkey(rkey);
    return Status::OK();
  }

  void set_windows(bool w) { windows_ = w; }

 private:
  Status PostBind(const MwBinding& b, uint32_t rkey, bool signaled) {
    auto* mw = dynamic_cast<VerbsMw*>(b.mw);
    auto* mr = dynamic_cast<const VerbsMr*>(b.region);
    if (mw == nullptr || mr == nullptr) return Status::InvalidArgument("window or region of another transport");
    if (!(mr->access() & kAccessMwBind)) return Status::InvalidArgument("region not registered for window binding");
    ibv_mw_bind_info bi{};
    bi.mr = mr->mr();
    bi.addr = b.addr;
    bi.length = b.length;
    bi.mw_access_flags = ToIbvAccess(b.access) & (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
                                                   IBV_ACCESS_REMOTE_ATOMIC);
    ibv_wr_start(qpx_);
    qpx_->wr_id = b.wr_id;
    qpx_->wr_flags = signaled ? unsigned{IBV_SEND_SIGNALED} : 0u;
    ibv_wr_bind_mw(qpx_, mw->mw(), rkey, &bi);
    if (int rc = ibv_wr_complete(qpx_); rc != 0) {
      if (rc == ENOMEM) return Status::NoResource("send queue full");
      return Status::FromErrno("binding a memory window", rc);
    }
    // The provider names the window by ibv_mw::rkey in the bind it posts,
    // and rxe refuses a bind whose name is not the window's current key
    // (measured on Linux 6.1: every second bind of a window failed with
    // IBV_WC_MW_BIND_ERR while ibv_mw::rkey kept the key of ibv_alloc_mw).
    // The key is the consumer's to track: the next bind names this one.
    mw->mw()->rkey = rkey;
    return Status::OK();
  }

 public:
  // Passive side, before rdma_accept: INIT (refreshed) -> RTR -> RTS with
  // the attributes rdma_cm computes for this connection, what rdma_accept
  // does itself when it owns the transitions; the RNR NAK timer is 12
  // (0.64 ms) instead of rdma_cm's 0 (655 ms).
  Status MoveToRts(uint8_t responder_resources, uint8_t initiator_depth) {
    ibv_qp_attr a{};
    int mask = 0;
    a.qp_state = IBV_QPS_INIT;
    if (rdma_init_qp_attr(id_.get(), &a, &mask) != 0) return Status::FromErrno("rdma_init_qp_attr (INIT)", errno);
    if (int e = ibv_modify_qp(qp_, &a, mask); e != 0) return Status::FromErrno("modifying the QP to INIT", e);
    a = {};
    mask = 0;
    a.qp_state = IBV_QPS_RTR;
    if (rdma_init_qp_attr(id_.get(), &a, &mask) != 0) return Status::FromErrno("rdma_init_qp_attr (RTR)", errno);
    a.max_dest_rd_atomic = responder_resources;
    a.min_rnr_timer = kMinRnrTimer;
    mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    if (int e = ibv_modify_qp(qp_, &a, mask); e != 0) return Status::FromErrno("modifying the QP to RTR", e);
    a = {};
    mask = 0;
    a.qp_state = IBV_QPS_RTS;
    if (rdma_init_qp_attr(id_.get(), &a, &mask) != 0) return Status::FromErrno("rdma_init_qp_attr (RTS)", errno);
    a.max_rd_atomic = initiator_depth;
    mask |= IBV_QP_MAX_QP_RD_ATOMIC;
    if (int e = ibv_modify_qp(qp_, &a, mask); e != 0) return Status::FromErrno("modifying the QP to RTS", e);
    return Status::OK();
  }

  void set_rd_atomic(uint32_t n) { max_rd_atomic_ = n; }
  void set_peer_data(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    peer_data_.assign(b, b + n);
  }
  rdma_cm_id* id() const noexcept { return id_.get(); }

  Status PostSend(std::span<const SendWr> wrs) override;
  Status PostSendList(std::span<const SendWr> wrs);  // ibv_post_send (see there)
  Status PostRecv(std::span<const RecvWr> wrs) override {
    if (broken()) return Status::ConnectionLost("connection is broken");
    return PostRecvChain(wrs, nullptr, qp_);
  }
  uint32_t qp_num() const noexcept override { return qp_->qp_num; }
  bool broken() const noexcept override { return broken_.load(std::memory_order_acquire); }
  void MarkBroken() noexcept override { broken_.store(true, std::memory_order_release); }
  void Disconnect() noexcept override {
    MarkBroken();
    if (id_ && qp_ != nullptr) rdma_disconnect(id_.get());
  }
  void PollCmEvents() noexcept override {
    if (!channel_) return;  // server side: the listener sees our events
    rdma_cm_event* ev = nullptr;
    while (rdma_get_cm_event(channel_.get(), &ev) == 0) {
      if (ev->event == RDMA_CM_EVENT_DISCONNECTED || ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
        MarkBroken();
      }
      rdma_ack_cm_event(ev);
    }
  }

 private:
  std::shared_ptr<VerbsDevice> dev_;
  CmEventChannel channel_;  // client side only (server ids use the listener's)
  std::unique_ptr<VerbsCq> own_send_cq_;
  std::unique_ptr<VerbsCq> own_recv_cq_;
  CmId id_;  // its QP is destroyed in ~VerbsConnection before the id
  ibv_qp* qp_ = nullptr;  // id_->qp (owned by rdma_cm)
  ibv_qp_ex* qpx_ = nullptr;
  bool windows_ = false;  // QpConfig::windows
  std::atomic<bool> broken_{false};
};

// A batch with a READ into two places goes through ibv_post_send instead of
// the ibv_wr_* calls: rxe's ibv_wr_set_sge_list (rdma-core 44, Debian 12)
// sums the first element's length num_sge times, so the READ's length is
// wrong (measured: 56 bytes for 28 + 5000; fixed upstream in 2026, "rxe:
// wr_set_sge_list() summed the SGE lengths with a loop that never advanced").
Status VerbsConnection::PostSendList(std::span<const SendWr> wrs) {
  for (const SendWr& w : wrs) {  // all checked before any is posted, as ibv_wr_abort does below
    if (w.inline_data && w.local.length > max_inline_) {
      return Status::InvalidArgument("inline data longer than the QP's max_inline");
    }
    if (w.local2.length != 0 && (w.opcode != WrOpcode::kRead || w.inline_data)) {
      return Status::InvalidArgument("a second scatter element is for READs only");
    }
  }
  // One chain per 128 WRs (the client's whole batch: 2 x 64 in flight), so
  // that a batch is posted whole or not at all, as with ibv_wr_complete.
  constexpr size_t kChain = 128;
  ibv_send_wr sw[kChain];
  ibv_sge sg[kChain][2];
  for (size_t base = 0; base < wrs.size(); base += kChain) {
    const size_t n = std::min(kChain, wrs.size() - base);
    for (size_t i = 0; i < n; ++i) {
      const SendWr& w = wrs[base + i];
      ibv_send_wr& x = sw[i];
      x = ibv_send_wr{};
      x.wr_id = w.wr_id;
      x.send_flags = (w.signaled ? unsigned{IBV_SEND_SIGNALED} : 0u) | (w.inline_data ? unsigned{IBV_SEND_INLINE} : 0u);
      sg[i][0] = ibv_sge{w.local.addr, w.local.length, w.local.lkey};
      sg[i][1] = ibv_sge{w.local2.addr, w.local2.length, w.local2.lkey};
      x.sg_list = sg[i];
      x.num_sge = w.local2.length != 0 ? 2 : 1;
      switch (w.opcode) {
        case WrOpcode::kRead: x.opcode = IBV_WR_RDMA_READ; break;
        case WrOpcode::kWrite: x.opcode = IBV_WR_RDMA_WRITE; break;
        case WrOpcode::kWriteImm:
          x.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
          x.imm_data = htobe32(w.imm);
          break;
        case WrOpcode::kSend: x.opcode = IBV_WR_SEND; break;
        case WrOpcode::kCompareSwap: x.opcode = IBV_WR_ATOMIC_CMP_AND_SWP; break;
        case WrOpcode::kFetchAdd: x.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; break;
        case WrOpcode::kLocalInv:
          if (!windows_) return Status::InvalidArgument("QP made without QpConfig::windows");
          x.opcode = IBV_WR_LOCAL_INV;
          x.invalidate_rkey = w.rkey;
          x.num_sge = 0;
          break;
        default: return Status::InvalidArgument("not a send-queue opcode");
      }
      if (w.opcode == WrOpcode::kCompareSwap || w.opcode == WrOpcode::kFetchAdd) {
        x.wr.atomic.remote_addr = w.remote_addr;
        x.wr.atomic.rkey = w.rkey;
        x.wr.atomic.compare_add = w.compare_add;
        x.wr.atomic.swap = w.swap;
      } else {
        x.wr.rdma.remote_addr = w.remote_addr;
        x.wr.rdma.rkey = w.rkey;
      }
      x.next = i + 1 < n ? &sw[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(qp_, sw, &bad); rc != 0) {
      return rc == ENOMEM ? Status::NoResource("send queue full") : Status::FromErrno("ibv_post_send", rc);
    }
  }
  return Status::OK();
}

Status VerbsConnection::PostSend(std::span<const SendWr> wrs) {
  if (broken()) return Status::ConnectionLost("connection is broken");
  for (const SendWr& w : wrs) {
    if (w.local2.length != 0) return PostSendList(wrs);
  }
  ibv_wr_start(qpx_);
  for (const SendWr& w : wrs) {
    qpx_->wr_id = w.wr_id;
    qpx_->wr_flags = (w.signaled ? unsigned{IBV_SEND_SIGNALED} : 0u) | (w.inline_data ? unsigned{IBV_SEND_INLINE} : 0u);
    switch (w.opcode) {
      case WrOpcode::kRead: ibv_wr_rdma_read(qpx_, w.rkey, w.remote_addr); break;
      case WrOpcode::kWrite: ibv_wr_rdma_write(qpx_, w.rkey, w.remote_addr); break;
      case WrOpcode::kWriteImm: ibv_wr_rdma_write_imm(qpx_, w.rkey, w.remote_addr, htobe32(w.imm)); break;
      case WrOpcode::kSend: ibv_wr_send(qpx_); break;
      case WrOpcode::kCompareSwap:
        ibv_wr_atomic_cmp_swp(qpx_, w.rkey, w.remote_addr, w.compare_add, w.swap);
        break;
      case WrOpcode::kFetchAdd: ibv_wr_atomic_fetch_add(qpx_, w.rkey, w.remote_addr, w.compare_add); break;
      case WrOpcode::kLocalInv:
        if (!windows_) {
          ibv_wr_abort(qpx_);
          return Status::InvalidArgument("QP made without QpConfig::windows");
        }
        ibv_wr_local_inv(qpx_, w.rkey);
        continue;  // no local memory
      default:
        ibv_wr_abort(qpx_);
        return Status::InvalidArgument("not a send-queue opcode");
    }
    if (w.inline_data) {
      if (w.local.length > max_inline_) {
        ibv_wr_abort(qpx_);
        return Status::InvalidArgument("inline data longer than the QP's max_inline");
      }
      ibv_wr_set_inline_data(qpx_, reinterpret_cast<void*>(w.local.addr), w.local.length);
    } else {
      ibv_wr_set_sge(qpx_, w.local.lkey, w.local.addr, w.local.length);
    }
  }
  int rc = ibv_wr_complete(qpx_);
  if (rc == 0) return Status::OK();
  if (rc == ENOMEM) return Status::NoResource("send queue full");
  return Status::FromErrno("ibv_wr_complete", rc);
}

class VerbsConnectRequest final : public ConnectRequest {
 public:
  VerbsConnectRequest(std::shared_ptr<VerbsDevice> dev, CmId id, const rdma_conn_param& p)
      : dev_(std::move(dev)), id_(std::move(id)) {
    const auto* b = static_cast<const uint8_t*>(p.private_data);
    if (b != nullptr) data_.assign(b, b + p.private_data_len);
    peer_initiator_depth_ = p.initiator_depth;
    peer_responder_resources_ = p.responder_resources;
  }
  ~VerbsConnectRequest() override {
    if (id_) Reject({});
  }
  std::span<const uint8_t> private_data() const noexcept override { return data_; }
  std::string peer_address() const override {
    if (!id_) return {};
    const sockaddr* sa = rdma_get_peer_addr(id_.get());
    char buf[INET6_ADDRSTRLEN] = {};
    if (sa != nullptr && sa->sa_family == AF_INET) {
      auto* in = reinterpret_cast<const sockaddr_in*>(sa);
      if (inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf)) != nullptr) return buf;
    } else if (sa != nullptr && sa->sa_family == AF_INET6) {
      auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
      // An IPv4 client of a dual-stack listener: report the IPv4 address.
      if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
        if (inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], buf, sizeof(buf)) != nullptr) return buf;
      } else if (inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf)) != nullptr) {
        return buf;
      }
    }
    return {};
  }

  Result<std::unique_ptr<Connection>> Accept(const QpConfig& cfg, std::span<const uint8_t> reply,
                                             const std::function<void(Connection&)>& ready) override {
    if (!id_) return Status::InvalidArgument("request already answered");
    if (id_->verbs != dev_->context()) {
      Reject({});
      return Status::Unavailable("connect request arrived on another RDMA device");
    }
    auto conn = std::make_unique<VerbsConnection>(dev_, CmEventChannel(), std::move(id_));
    KVRDMA_RETURN_IF_ERROR(conn->CreateQp(cfg));
    uint32_t rd = std::min<uint32_t>({cfg.max_rd_atomic, dev_->info().max_qp_rd_atom,
                                      dev_->info().max_qp_init_rd_atom});
    rdma_conn_param p{};
    p.private_data = reply.data();
    p.private_data_len = static_cast<uint8_t>(reply.size());
    p.responder_resources = static_cast<uint8_t>(std::min<uint32_t>(rd, peer_initiator_depth_));
    p.initiator_depth = static_cast<uint8_t>(std::min<uint32_t>(rd, peer_responder_resources_));
    p.rnr_retry_count = 7;
    p.retry_count = 7;
    conn->set_rd_atomic(std::max<uint32_t>(1, std::min<uint32_t>(rd, peer_responder_resources_)));
    conn->set_peer_data(data_.data(), data_.size());
    if (ready) ready(*conn);
    if (cfg.mw_binding.mw != nullptr) {
      // The window must be bound before the peer can learn its rkey (the
      // accept reply carries it): a WRITE that overtook the bind would fail
      // on an honest client's first request (measured on Soft-RoCE under
      // load: 1 of 32 connections with a bind posted after rdma_accept). So
      // the QP goes to RTS here, the bind is posted, and rdma_accept only
      // sends the reply: with id->qp unset, librdmacm leaves the QP's
      // transitions to us and takes qp_num and srq from the parameters.
      KVRDMA_RETURN_IF_ERROR(conn->MoveToRts(p.responder_resources, p.initiator_depth));
      KVRDMA_RETURN_IF_ERROR(conn->BindMw(cfg.mw_binding));
      rdma_cm_id* id = conn->id();
      ibv_qp* qp = id->qp;
      p.qp_num = qp->qp_num;
      p.srq = qp->srq != nullptr ? 1 : 0;
      id->qp = nullptr;
      const int rc = rdma_accept(id, &p);
      const int err = errno;
      id->qp = qp;
      if (rc != 0) return Status::FromErrno("rdma_accept", err);
    } else {
      if (rdma_accept(conn->id(), &p) != 0) return Status::FromErrno("rdma_accept", errno);
      // rdma_cm leaves the RNR NAK timer at 0, which tells a client whose
      // SEND found the shared receive queue empty to wait 655 ms before
      // retrying. 12 (0.64 ms) keeps back-pressure from stalling a client.
      ibv_qp_attr qa{};
      ibv_qp_init_attr qi{};
      if (ibv_query_qp(conn->id()->qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_RTS) {
        ibv_qp_attr rnr{};
        rnr.min_rnr_timer = kMinRnrTimer;
        if (int e = ibv_modify_qp(conn->id()->qp, &rnr, IBV_QP_MIN_RNR_TIMER); e != 0) {
          KVRDMA_LOG_DEBUG("setting the RNR timer: %s", std::strerror(e));
        }
      }
    }
    std::unique_ptr<Connection> r = std::move(conn);
    return r;
  }

  void Reject(std::span<const uint8_t> reply) noexcept override {
    if (!id_) return;
    if (rdma_reject(id_.get(), reply.data(), static_cast<uint8_t>(reply.size())) != 0) {
      KVRDMA_LOG_WARN("rdma_reject: %s", std::strerror(errno));
    }
    id_.reset();
  }

 private:
  std::shared_ptr<VerbsDevice> dev_;
  CmId id_;
  std::vector<uint8_t> data_;
  uint8_t peer_initiator_depth_ = 0;
  uint8_t peer_responder_resources_ = 0;
};

class VerbsListener final : public Listener {
 public:
  VerbsListener(std::shared_ptr<VerbsDevice> dev, CmEventChannel ch, CmId id, uint16_t port)
      : dev_(std::move(dev)), channel_(std::move(ch)), id_(std::move(id)), port_(port) {}

  uint16_t port() const noexcept override { return port_; }

  Result<CmEvent> NextEvent(int timeout_ms) override {
    for (;;) {
      auto r = WaitCmEvent(channel_.get(), timeout_ms);
      if (!r.ok()) return r.status();
      rdma_cm_event* ev = r.value();
      CmEvent out;
      bool deliver = true;
      auto* conn = static_cast<VerbsConnection*>(ev->id->context);
      switch (ev->event) {
        case RDMA_CM_EVENT_CONNECT_REQUEST:
          out.type = CmEvent::Type::kConnectRequest;
          out.request = std::make_unique<VerbsConnectRequest>(dev_, CmId(ev->id), ev->param.conn);
          break;
        case RDMA_CM_EVENT_ESTABLISHED:
          out.type = CmEvent::Type::kEstablished;
          out.connection = conn;
          deliver = conn != nullptr;
          break;
        case RDMA_CM_EVENT_DISCONNECTED:
        case RDMA_CM_EVENT_REJECTED:
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_UNREACHABLE:
          out.type = CmEvent::Type::kDisconnected;
          out.connection = conn;
          KVRDMA_LOG_DEBUG("listener: %s (status %d) on qp %u", rdma_event_str(ev->event), ev->status,
                           conn != nullptr ? conn->qp_num() : 0u);
          if (conn != nullptr) conn->MarkBroken();
          deliver = conn != nullptr;
          break;
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
          KVRDMA_LOG_ERROR("RDMA device removed");
          deliver = false;
          break;
        default:  // TIMEWAIT_EXIT, ADDR_CHANGE, ...: nothing to do
          deliver = false;
          break;
      }
      rdma_ack_cm_event(ev);
      if (deliver) return out;
    }
  }

 private:
  std::shared_ptr<VerbsDevice> dev_;
  CmEventChannel channel_;
  CmId id_;
  uint16_t port_;
};

}  // namespace

Result<std::unique_ptr<Listener>> VerbsDevice::Listen(const std::string& host, uint16_t port, int backlog) {
  CmEventChannel ch(rdma_create_event_channel());
  if (!ch) return Status::FromErrno("rdma_create_event_channel", errno);
  KVRDMA_RETURN_IF_ERROR(SetNonBlocking(ch->fd));
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(ch.get(), &raw, nullptr, RDMA_PS_TCP) != 0) return Status::FromErrno("rdma_create_id", errno);
  CmId id(raw);
  sockaddr_storage sa{};
  socklen_t len = 0;
  std::string h = host == "0.0.0.0" ? "" : host;
  KVRDMA_RETURN_IF_ERROR(ResolveSockaddr(h, port, true, &sa, &len));
  if (rdma_bind_addr(id.get(), reinterpret_cast<sockaddr*>(&sa)) != 0) {
    return Status::FromErrno("rdma_bind_addr " + (host.empty() ? std::string("*") : host) + ":" +
                                 std::to_string(port),
                             errno);
  }
  if (rdma_listen(id.get(), backlog) != 0) return Status::FromErrno("rdma_listen", errno);
  uint16_t bound = be16toh(rdma_get_src_port(id.get()));
  std::unique_ptr<Listener> l = std::make_unique<VerbsListener>(self(), std::move(ch), std::move(id), bound);
  return l;
}

Result<std::unique_ptr<Connection>> VerbsDevice::Connect(const ConnectOptions& opts, const QpConfig& cfg,
                                                         std::span<const uint8_t> private_data,
                                                         std::vector<uint8_t>* reject_reply) {
  CmEventChannel ch(rdma_create_event_channel());
  if (!ch) return Status::FromErrno("rdma_create_event_channel", errno);
  KVRDMA_RETURN_IF_ERROR(SetNonBlocking(ch->fd));
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(ch.get(), &raw, nullptr, RDMA_PS_TCP) != 0) return Status::FromErrno("rdma_create_id", errno);
  CmId id(raw);
  sockaddr_storage sa{};
  socklen_t len = 0;
  KVRDMA_RETURN_IF_ERROR(ResolveSockaddr(opts.host, opts.port, false, &sa, &len));
  std::string where = opts.host + ":" + std::to_string(opts.port);
  // One step of the handshake: wait for `want`; anything else is a failure.
  auto expect = [&](rdma_event_channel* c, rdma_cm_event_type want, const char* step,
                    VerbsConnection* conn) -> Status {
    auto r = WaitCmEvent(c, opts.timeout_ms);
    if (!r.ok()) {
      return r.status().IsTimeout() ? Status::Timeout(std::string(step) + " to " + where + " timed out")
                                    : r.status();
    }
    rdma_cm_event* ev = r.value();
    Status st;
    if (ev->event != want) {
      st = HandshakeFailure(*ev, std::string(step) + " to " + where, reject_reply);
    } else if (conn != nullptr) {
      conn->set_peer_data(ev->param.conn.private_data, ev->param.conn.private_data_len);
    }
    rdma_ack_cm_event(ev);
    return st;
  };
  sockaddr_storage src{};
  socklen_t src_len = 0;
  if (!opts.source.empty()) KVRDMA_RETURN_IF_ERROR(ResolveSockaddr(opts.source, 0, false, &src, &src_len));
  if (rdma_resolve_addr(id.get(), opts.source.empty() ? nullptr : reinterpret_cast<sockaddr*>(&src),
                        reinterpret_cast<sockaddr*>(&sa), opts.timeout_ms) != 0) {
    return Status::FromErrno("rdma_resolve_addr " + where, errno);
  }
  KVRDMA_RETURN_IF_ERROR(expect(ch.get(), RDMA_CM_EVENT_ADDR_RESOLVED, "address resolution", nullptr));
  if (rdma_resolve_route(id.get(), opts.timeout_ms) != 0) return Status::FromErrno("rdma_resolve_route", errno);
  KVRDMA_RETURN_IF_ERROR(expect(ch.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, "route resolution", nullptr));
  if (id->verbs != ctx_) {
    return Status::Unavailable(where + " is reached through RDMA device " +
                               ibv_get_device_name(id->verbs->device) + ", not " + info_.name);
  }
  rdma_cm_id* idp = id.get();
  auto conn = std::make_unique<VerbsConnection>(self(), std::move(ch), std::move(id));
  KVRDMA_RETURN_IF_ERROR(conn->CreateQp(cfg));
  uint32_t rd = std::min<uint32_t>({cfg.max_rd_atomic, info_.max_qp_rd_atom, info_.max_qp_init_rd_atom});
  conn->set_rd_atomic(rd);
  rdma_conn_param p{};
  p.private_data = private_data.data();
  p.private_data_len = static_cast<uint8_t>(private_data.size());
  p.responder_resources = static_cast<uint8_t>(rd);
  p.initiator_depth = static_cast<uint8_t>(rd);
  p.retry_count = 7;
  p.rnr_retry_count = 7;  // 7 = retry forever while the server has no receive posted
  if (rdma_connect(idp, &p) != 0) return Status::FromErrno("rdma_connect " + where, errno);
  KVRDMA_RETURN_IF_ERROR(expect(idp->channel, RDMA_CM_EVENT_ESTABLISHED, "connect", conn.get()));
  std::unique_ptr<Connection> r = std::move(conn);
  return r;
}

}  // namespace kvrdma::verbs
