// The loopback transport (see loopback_transport.h).
//
// Locking: one mutex per fabric (mu_) guards every piece of fabric state:
// regions, queues, connection links, listeners. The NIC thread holds it while
// it executes a WR, except around fault hooks and between torn-read chunks.
// Completion queues and listener event queues have their own mutex so that
// consumers can wait on them; they are leaves (never held while taking mu_).
#include "common/transport/loopback_transport.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "common/memory/racy_copy.h"

namespace kvrdma {
namespace {

constexpr size_t kReqDataMax = 56;     // IB CM REQ private data via rdma_cm
constexpr size_t kAcceptDataMax = 196;  // REP
constexpr size_t kRejectDataMax = 148;  // REJ

class Fabric;
class LoopDevice;
class LoopConn;
class LoopListener;

std::vector<uint8_t> Padded(std::span<const uint8_t> d, size_t n) {
  std::vector<uint8_t> v(n, 0);
  std::copy(d.begin(), d.end(), v.begin());
  return v;
}

class LoopCq final : public CompletionQueue {
 public:
  void Push(const Completion& c) {
    {
      std::lock_guard<std::mutex> g(mu_);
      q_.push_back(c);
    }
    cv_.notify_all();
  }
  int Poll(std::span<Completion> out) override {
    std::lock_guard<std::mutex> g(mu_);
    size_t n = std::min(out.size(), q_.size());
    for (size_t i = 0; i < n; ++i) {
      out[i] = q_.front();
      q_.pop_front();
    }
    return static_cast<int>(n);
  }
  Status Wait(int timeout_ms) override {
    std::unique_lock<std::mutex> l(mu_);
    auto ready = [&] { return !q_.empty() || woken_; };
    if (timeout_ms < 0) {
      cv_.wait(l, ready);
    } else if (!cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), ready)) {
      return Status::Timeout("no completion");
    }
    woken_ = false;
    return Status::OK();
  }
  void Wake() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      woken_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Completion> q_;
  bool woken_ = false;
};

struct Region {
  uint64_t base;
  size_t len;
  uint32_t access;
  const LoopDevice* owner;
  // A memory window: usable only by a peer of this QP, and never as an lkey.
  // 0 = a memory region.
  uint32_t bound_qpn = 0;
  // A window bound at run time (Connection::BindWindow): the lkey of the
  // region under it, which takes the window with it when deregistered. 0 = none.
  uint32_t parent_lkey = 0;
};

// A memory window's state, by index (rkey >> 8, as rxe finds windows).
struct WindowState {
  const LoopDevice* owner = nullptr;
  uint32_t live_key = 0;  // the rkey it is bound under; 0 = unbound
  uint32_t qpn = 0;       // the QP it is bound to
  bool runtime = false;   // bound by Connection::BindWindow (not at accept)
};

class LoopMw final : public MemoryWindow {
 public:
  LoopMw(std::shared_ptr<LoopDevice> dev, uint32_t rkey) : MemoryWindow(rkey), dev_(std::move(dev)) {}
  ~LoopMw() override;
  LoopDevice& device() { return *dev_; }
  void set_rkey(uint32_t k) noexcept { rkey_ = k; }

 private:
  std::shared_ptr<LoopDevice> dev_;
};

class LoopMr final : public MemoryRegion {
 public:
  LoopMr(std::shared_ptr<LoopDevice> dev, void* addr, size_t len, uint32_t lkey, uint32_t rkey,
         uint32_t access)
      : MemoryRegion(addr, len, lkey, rkey, access), dev_(std::move(dev)) {}
  ~LoopMr() override;

 private:
  std::shared_ptr<LoopDevice> dev_;
};

class LoopSrq final : public SharedReceiveQueue {
 public:
  LoopSrq(Fabric* f, uint32_t max_wr) : fabric_(f), max_wr_(max_wr) {}
  Status PostRecv(std::span<const RecvWr> wrs) override;
  uint32_t max_wr() const noexcept override { return max_wr_; }
  std::deque<RecvWr> q;  // guarded by the fabric's mu_

 private:
  Fabric* fabric_;
  uint32_t max_wr_;
};

struct Handshake {  // a connect in progress, shared by both sides
  std::mutex mu;
  std::condition_variable cv;
  enum class State { kPending, kAccepted, kRejected, kAbandoned } state = State::kPending;
  std::vector<uint8_t> reply;
};

class Fabric final : public LoopbackFabric, public std::enable_shared_from_this<Fabric> {
 public:
  Fabric();
  ~Fabric() override;
  std::shared_ptr<Device> CreateDevice(const std::string& name) override;
  std::shared_ptr<Device> CreateDeviceWithoutWindows(const std::string& name) override;
  void SetFaults(LoopbackFaults f) override {
    std::lock_guard<std::mutex> g(mu_);
    faults_ = std::move(f);
    post_count_ = 0;
  }
  LoopbackStats stats() const override {
    std::lock_guard<std::mutex> g(mu_);
    LoopbackStats s = stats_;
    s.qps = conns.size();
    for (const auto& [index, ws] : windows) s.runtime_windows_bound += ws.runtime && ws.live_key != 0;
    for (const LoopConn* c : conns) s.reads_queued_on_one_qp = std::max(s.reads_queued_on_one_qp, ReadsQueued(*c));
    return s;
  }
  static uint64_t ReadsQueued(const LoopConn& c);
  void InjectQpError(Connection& conn) override;

  // --- used by the other loopback classes; REQUIRES mu_ unless noted ---
  uint32_t NewKey() { return next_key_++; }
  // A window's rkey: an index far above the region keys, a random key byte.
  uint32_t NewWindowKey() { return (next_mw_index_++ << 8) | static_cast<uint8_t>(key_rng_()); }
  uint32_t NewQpNum() { return next_qpn_++; }
  std::map<uint32_t, Region> regions;  // by lkey and by rkey
  std::map<uint32_t, WindowState> windows;  // by rkey >> 8
  // A random key byte other than `avoid` (a type-2 bind's key part).
  uint8_t NewKeyByte(uint8_t avoid) {
    uint8_t b = avoid;
    while (b == avoid) b = static_cast<uint8_t>(key_rng_());
    return b;
  }
  // Forgets the binding of window `index` (its rkey answers nowhere after).
  void UnbindWindow(WindowState& ws) {
    if (ws.live_key != 0) regions.erase(ws.live_key);
    ws.live_key = 0;
    ws.qpn = 0;
  }
  std::map<uint16_t, LoopListener*> listeners;
  std::list<LoopConn*> conns;
  void Kick() { cv_.notify_all(); }  // new work or receives (mu_ not required)
  void WaitNotExecuting(std::unique_lock<std::mutex>& l, const LoopConn* c) {
    idle_cv_.wait(l, [&] { return executing_ != c; });
  }
  // Moves a connection into the error state: flushes its queue, breaks the peer.
  void ErrorConnection(LoopConn* c);
  void TellDisconnected(LoopConn* server_side);
  bool CountPostAndMaybeFail();
  // LoopbackFaults::fail_registrations_of (REQUIRES: mu_ held).
  bool FailsRegistrationOf(size_t len) const {
    return faults_.fail_registrations_of != 0 && len >= faults_.fail_registrations_of;
  }
  mutable std::mutex mu_;

 private:
  void Run();
  // Executes the head WR of c. Returns false when it must wait for a receive.
  bool Execute(LoopConn* c, std::unique_lock<std::mutex>& l);
  // What a NIC checks of a READ from c to its peer: the local elements in
  // c's memory for local write, the remote range under the rkey for remote
  // READ through the peer's QP (REQUIRES: mu_ held, a peer).
  WcStatus CheckRead(LoopConn* c, LoopConn& peer, const SendWr& w) const;
  WcStatus DoRead(LoopConn* c, const SendWr& w, std::unique_lock<std::mutex>& l);
  WcStatus ExecuteBind(LoopConn* c, const SendWr& w, const Region& bind);

  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  LoopbackFaults faults_;
  LoopbackStats stats_;
  uint64_t post_count_ = 0;
  uint32_t next_key_ = 0x100;
  uint32_t next_mw_index_ = 0x100000;
  std::mt19937 key_rng_{std::random_device{}()};
  uint32_t next_qpn_ = 0x11;
  const LoopConn* executing_ = nullptr;
  bool stop_ = false;
  std::thread nic_;
};

class LoopDevice final : public Device {
 public:
  LoopDevice(std::shared_ptr<Fabric> f, std::string name, bool memory_windows) : fabric_(std::move(f)) {
    info_.name = std::move(name);
    info_.max_qp_rd_atom = 16;
    info_.max_qp_init_rd_atom = 16;
    info_.atomics_hca_only = true;
    info_.max_srq_wr = 1u << 20;
    info_.max_cqe = 1u << 20;
    info_.max_qp_wr = 1u << 14;
    info_.max_mr_size = ~0ull;
    info_.memory_windows = memory_windows;
  }
  const DeviceInfo& info() const noexcept override { return info_; }
  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t len, uint32_t access) override {
    if (addr == nullptr || len == 0) return Status::InvalidArgument("empty memory region");
    if (access & (kAccessRemoteWrite | kAccessRemoteAtomic)) access |= kAccessLocalWrite;
    std::lock_guard<std::mutex> g(fabric_->mu_);
    if (fabric_->FailsRegistrationOf(len)) {
      return Status::NoResource("ibv_reg_mr of " + std::to_string(len) +
                                " bytes (loopback fault: over the locked-memory limit)");
    }
    uint32_t lkey = fabric_->NewKey();
    Region r{reinterpret_cast<uint64_t>(addr), len, access, this};
    fabric_->regions[lkey] = r;
    // Like rxe: a region without remote rights has no rkey (0) at all.
    uint32_t rkey = 0;
    if (access & (kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic)) {
      rkey = fabric_->NewKey();
      fabric_->regions[rkey] = r;
    }
    std::unique_ptr<MemoryRegion> mr = std::make_unique<LoopMr>(
        std::static_pointer_cast<LoopDevice>(shared_from_this()), addr, len, lkey, rkey, access);
    return mr;
  }
  Result<std::unique_ptr<MemoryWindow>> CreateMemoryWindow() override {
    if (!info_.memory_windows) return Status::InvalidArgument(info_.name + " has no memory windows");
    std::lock_guard<std::mutex> g(fabric_->mu_);
    const uint32_t key = fabric_->NewWindowKey();
    fabric_->windows[key >> 8] = WindowState{this, 0, 0};
    std::unique_ptr<MemoryWindow> w = std::make_unique<LoopMw>(self(), key);
    return w;
  }
  Result<std::unique_ptr<CompletionQueue>> CreateCompletionQueue(uint32_t) override {
    std::unique_ptr<CompletionQueue> cq = std::make_unique<LoopCq>();
    return cq;
  }
  Result<std::unique_ptr<SharedReceiveQueue>> CreateSharedReceiveQueue(uint32_t max_wr) override {
    std::unique_ptr<SharedReceiveQueue> s = std::make_unique<LoopSrq>(fabric_.get(), max_wr);
    return s;
  }
  Result<std::unique_ptr<Listener>> Listen(const std::string& host, uint16_t port, int backlog) override;
  Result<std::unique_ptr<Connection>> Connect(const ConnectOptions& opts, const QpConfig& cfg,
                                              std::span<const uint8_t> private_data,
                                              std::vector<uint8_t>* reject_reply) override;
  Fabric* fabric() const noexcept { return fabric_.get(); }
  std::shared_ptr<LoopDevice> self() { return std::static_pointer_cast<LoopDevice>(shared_from_this()); }

 private:
  std::shared_ptr<Fabric> fabric_;
  DeviceInfo info_;
};

LoopMr::~LoopMr() {
  Fabric* f = dev_->fabric();
  std::lock_guard<std::mutex> g(f->mu_);
  f->regions.erase(lkey());
  if (rkey() != 0) f->regions.erase(rkey());
  // rxe refuses to deregister a region with windows bound over it; here the
  // windows go with it, so no rkey ever reaches memory that is not registered.
  for (auto& [index, ws] : f->windows) {
    auto it = ws.live_key != 0 ? f->regions.find(ws.live_key) : f->regions.end();
    if (it != f->regions.end() && it->second.parent_lkey == lkey()) f->UnbindWindow(ws);
  }
}

LoopMw::~LoopMw() {
  Fabric* f = dev_->fabric();
  std::lock_guard<std::mutex> g(f->mu_);
  if (auto it = f->windows.find(rkey() >> 8); it != f->windows.end()) {
    f->UnbindWindow(it->second);
    f->windows.erase(it);
  }
}

Status LoopSrq::PostRecv(std::span<const RecvWr> wrs) {
  {
    std::lock_guard<std::mutex> g(fabric_->mu_);
    if (q.size() + wrs.size() > max_wr_) return Status::NoResource("receive queue full");
    q.insert(q.end(), wrs.begin(), wrs.end());
  }
  fabric_->Kick();
  return Status::OK();
}

class LoopListener final : public Listener {
 public:
  LoopListener(std::shared_ptr<LoopDevice> dev, uint16_t port) : dev_(std::move(dev)), port_(port) {}
  ~LoopListener() override;
  uint16_t port() const noexcept override { return port_; }
  Result<CmEvent> NextEvent(int timeout_ms) override {
    std::unique_lock<std::mutex> l(mu_);
    auto ready = [&] { return !events_.empty(); };
    if (timeout_ms < 0) {
      cv_.wait(l, ready);
    } else if (!cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), ready)) {
      return Status::Timeout("no connection-manager event");
    }
    CmEvent e = std::move(events_.front());
    events_.pop_front();
    return e;
  }
  void Push(CmEvent e) {
    {
      std::lock_guard<std::mutex> g(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_all();
  }
  // Drops queued events that name c (it is being destroyed).
  void Forget(const Connection* c) {
    std::lock_guard<std::mutex> g(mu_);
    std::erase_if(events_, [&](const CmEvent& e) { return e.connection == c; });
  }
  LoopDevice& device() { return *dev_; }
  std::set<LoopConn*> members;  // accepted connections; guarded by the fabric's mu_

 private:
  std::shared_ptr<LoopDevice> dev_;
  uint16_t port_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<CmEvent> events_;
};

class LoopConn final : public Connection {
 public:
  LoopConn(std::shared_ptr<LoopDevice> dev, const QpConfig& cfg) : dev_(std::move(dev)), fabric_(dev_->fabric()) {
    if (cfg.send_cq == nullptr) own_send_cq_ = std::make_unique<LoopCq>();
    if (cfg.recv_cq == nullptr) own_recv_cq_ = std::make_unique<LoopCq>();
    send_cq_ = cfg.send_cq != nullptr ? cfg.send_cq : own_send_cq_.get();
    recv_cq_ = cfg.recv_cq != nullptr ? cfg.recv_cq : own_recv_cq_.get();
    srq_ = static_cast<LoopSrq*>(cfg.srq);
    max_send_wr_ = std::min(cfg.max_send_wr, dev_->info().max_qp_wr);
    max_recv_wr_ = cfg.max_recv_wr;
    max_inline_ = cfg.max_inline;
    windows_ = cfg.windows;
    max_rd_atomic_ = std::max<uint32_t>(1, std::min<uint32_t>(cfg.max_rd_atomic, dev_->info().max_qp_rd_atom));
    std::lock_guard<std::mutex> g(fabric_->mu_);
    qpn_ = fabric_->NewQpNum();
  }
  ~LoopConn() override {
    {
      std::unique_lock<std::mutex> l(fabric_->mu_);
      fabric_->WaitNotExecuting(l, this);
      fabric_->conns.remove(this);
      // Windows bound to this QP die with it.
      for (auto& [index, ws] : fabric_->windows) {
        if (ws.qpn == qpn_) fabric_->UnbindWindow(ws);
      }
      std::erase_if(fabric_->regions, [&](const auto& kv) { return kv.second.bound_qpn == qpn_; });
      if (listener != nullptr) {
        listener->members.erase(this);
        listener->Forget(this);
      }
      LoopConn* peer = this->peer;
      if (peer != nullptr) {
        peer->peer = nullptr;
        if (!peer->broken()) fabric_->ErrorConnection(peer);
        fabric_->TellDisconnected(peer);
      }
    }
  }

  Status PostSend(std::span<const SendWr> wrs) override {
    std::unique_lock<std::mutex> l(fabric_->mu_);
    if (broken()) return Status::ConnectionLost("connection is broken");
    if (fabric_->CountPostAndMaybeFail()) return Status::IOError("injected post failure");
    if (sq.size() + wrs.size() > max_send_wr_) return Status::NoResource("send queue full");
    for (const SendWr& w : wrs) {
      if (w.opcode == WrOpcode::kRecv || w.opcode == WrOpcode::kRecvWriteImm || w.opcode == WrOpcode::kBindMw) {
        return Status::InvalidArgument("not a send-queue opcode");
      }
      if (w.opcode == WrOpcode::kLocalInv && !windows_) {
        return Status::InvalidArgument("QP made without QpConfig::windows");
      }
      if (w.inline_data && w.local.length > max_inline_) {
        return Status::InvalidArgument("inline data longer than the QP's max_inline");
      }
      if (w.local2.length != 0 && (w.opcode != WrOpcode::kRead || w.inline_data)) {
        return Status::InvalidArgument("a second scatter element is for READs only");
      }
    }
    for (const SendWr& w : wrs) {
      Queued q{w, {}};
      if (w.inline_data) {  // the bytes are taken now, as a NIC takes inline data
        const auto* p = reinterpret_cast<const uint8_t*>(w.local.addr);
        q.inline_bytes.assign(p, p + w.local.length);
      }
      sq.push_back(std::move(q));
    }
    l.unlock();
    fabric_->Kick();
    return Status::OK();
  }
  Status BindWindow(const MwBinding& b, bool signaled) override {
    auto* mw = dynamic_cast<LoopMw*>(b.mw);
    if (mw == nullptr || b.region == nullptr) return Status::InvalidArgument("window or region of another transport");
    std::unique_lock<std::mutex> l(fabric_->mu_);
    if (broken()) return Status::ConnectionLost("connection is broken");
    if (!windows_) return Status::InvalidArgument("QP made without QpConfig::windows");
    if (fabric_->CountPostAndMaybeFail()) return Status::IOError("injected post failure");
    if (sq.size() + 1 > max_send_wr_) return Status::NoResource("send queue full");
    const uint32_t rkey = (mw->rkey() & ~0xffu) | fabric_->NewKeyByte(static_cast<uint8_t>(mw->rkey() & 0xff));
    Queued q;
    q.wr.wr_id = b.wr_id;
    q.wr.opcode = WrOpcode::kBindMw;
    q.wr.signaled = signaled;
    q.wr.rkey = rkey;
    // The NIC checks the region when the bind executes (Execute): by its
    // lkey, so a region deregistered meanwhile fails the bind.
    q.bind = Region{b.addr, b.length, b.access & (kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic),
                    dev_.get(), qpn_, b.region->lkey()};
    sq.push_back(std::move(q));
    mw->set_rkey(rkey);
    l.unlock();
    fabric_->Kick();
    return Status::OK();
  }
  Status PostRecv(std::span<const RecvWr> wrs) override {
    if (srq_ != nullptr) return Status::InvalidArgument("this connection receives through an SRQ");
    {
      std::lock_guard<std::mutex> g(fabric_->mu_);
      if (broken()) return Status::ConnectionLost("connection is broken");
      if (rq.size() + wrs.size() > max_recv_wr_) return Status::NoResource("receive queue full");
      rq.insert(rq.end(), wrs.begin(), wrs.end());
    }
    fabric_->Kick();
    return Status::OK();
  }
  uint32_t qp_num() const noexcept override { return qpn_; }
  bool broken() const noexcept override { return broken_.load(std::memory_order_acquire); }
  void MarkBroken() noexcept override { broken_.store(true, std::memory_order_release); }
  void Disconnect() noexcept override {
    std::lock_guard<std::mutex> g(fabric_->mu_);
    if (!broken()) fabric_->ErrorConnection(this);
    if (peer != nullptr) {
      if (!peer->broken()) fabric_->ErrorConnection(peer);
      fabric_->TellDisconnected(peer);
    }
  }

  void set_peer_data(std::vector<uint8_t> d) { peer_data_ = std::move(d); }
  std::deque<RecvWr>& recv_queue() { return srq_ != nullptr ? srq_->q : rq; }
  LoopDevice& device() { return *dev_; }

  // --- guarded by the fabric's mu_ ---
  struct Queued {
    SendWr wr;
    std::vector<uint8_t> inline_bytes;
    Region bind{};  // kBindMw: the window's range, rights, QP and region (parent_lkey)
  };
  std::deque<Queued> sq;
  std::deque<RecvWr> rq;
  LoopConn* peer = nullptr;
  LoopListener* listener = nullptr;  // server side: where our events go
  // The connection manager told this side DISCONNECTED (once, like rdma_cm:
  // whatever state the QPs are in). Guarded by the fabric's mutex.
  bool cm_disconnected = false;

 private:
  std::shared_ptr<LoopDevice> dev_;
  Fabric* fabric_;
  std::unique_ptr<LoopCq> own_send_cq_;
  std::unique_ptr<LoopCq> own_recv_cq_;
  LoopSrq* srq_ = nullptr;
  uint32_t max_recv_wr_ = 0;
  uint32_t qpn_ = 0;
  bool windows_ = false;  // QpConfig::windows
  std::atomic<bool> broken_{false};
};

LoopListener::~LoopListener() {
  std::lock_guard<std::mutex> g(dev_->fabric()->mu_);
  dev_->fabric()->listeners.erase(port_);
  for (LoopConn* c : members) c->listener = nullptr;
}

class LoopConnectRequest final : public ConnectRequest {
 public:
  LoopConnectRequest(LoopListener* l, std::shared_ptr<Handshake> hs, LoopConn* client, std::vector<uint8_t> d,
                     std::string peer)
      : listener_(l), hs_(std::move(hs)), client_(client), data_(std::move(d)), peer_(std::move(peer)) {}
  ~LoopConnectRequest() override { Reject({}); }
  std::span<const uint8_t> private_data() const noexcept override { return data_; }
  std::string peer_address() const override { return peer_; }

  Result<std::unique_ptr<Connection>> Accept(const QpConfig& cfg, std::span<const uint8_t> reply,
                                             const std::function<void(Connection&)>& ready) override {
    if (reply.size() > kAcceptDataMax) return Status::InvalidArgument("accept private data over 196 bytes");
    if (answered_) return Status::InvalidArgument("request already answered");
    KVRDMA_RETURN_IF_ERROR(CheckBinding(cfg.mw_binding));
    answered_ = true;
    auto conn = std::make_unique<LoopConn>(listener_->device().self(), cfg);
    conn->set_peer_data(data_);
    if (cfg.mw_binding.mw != nullptr) {  // bound before the client can learn the rkey
      const MwBinding& b = cfg.mw_binding;
      Fabric* f = listener_->device().fabric();
      std::lock_guard<std::mutex> g(f->mu_);
      f->regions[b.mw->rkey()] =
          Region{b.addr, b.length, b.access & (kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic),
                 &listener_->device(), conn->qp_num(), b.region->lkey()};
      f->windows[b.mw->rkey() >> 8] = WindowState{&listener_->device(), b.mw->rkey(), conn->qp_num()};
    }
    if (ready) ready(*conn);
    std::lock_guard<std::mutex> hg(hs_->mu);
    if (hs_->state != Handshake::State::kPending) return Status::Unavailable("the client gave up");
    {
      std::lock_guard<std::mutex> g(listener_->device().fabric()->mu_);
      conn->peer = client_;
      client_->peer = conn.get();
      conn->listener = listener_;
      listener_->members.insert(conn.get());
      listener_->device().fabric()->conns.push_back(conn.get());
      listener_->device().fabric()->conns.push_back(client_);
    }
    hs_->state = Handshake::State::kAccepted;
    hs_->reply = Padded(reply, kAcceptDataMax);
    hs_->cv.notify_all();
    listener_->Push(CmEvent{CmEvent::Type::kEstablished, nullptr, conn.get()});
    std::unique_ptr<Connection> r = std::move(conn);
    return r;
  }
  // What a NIC checks when it executes a bind: same device, a region that
  // allows binding (and local write for remote write), the range inside it.
  Status CheckBinding(const MwBinding& b) {
    if (b.mw == nullptr) return Status::OK();
    auto* mw = dynamic_cast<LoopMw*>(b.mw);
    if (mw == nullptr || &mw->device() != &listener_->device()) {
      return Status::InvalidArgument("memory window of another device");
    }
    const MemoryRegion* mr = b.region;
    if (mr == nullptr || !(mr->access() & kAccessMwBind)) {
      return Status::InvalidArgument("region not registered for window binding");
    }
    if ((b.access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(mr->access() & kAccessLocalWrite)) {
      return Status::InvalidArgument("a writable window needs a region with local write");
    }
    if (b.length == 0 || b.addr < mr->base() || b.length > mr->length() || b.addr - mr->base() > mr->length() - b.length) {
      return Status::InvalidArgument("window outside its region");
    }
    return Status::OK();
  }
  void Reject(std::span<const uint8_t> reply) noexcept override {
    if (answered_) return;
    answered_ = true;
    std::lock_guard<std::mutex> hg(hs_->mu);
    if (hs_->state != Handshake::State::kPending) return;
    hs_->state = Handshake::State::kRejected;
    hs_->reply = Padded(reply.first(std::min(reply.size(), kRejectDataMax)), kRejectDataMax);
    hs_->cv.notify_all();
  }

 private:
  LoopListener* listener_;
  std::shared_ptr<Handshake> hs_;
  LoopConn* client_;  // valid while hs_ is pending (the client waits)
  std::vector<uint8_t> data_;
  std::string peer_;  // the connecting device's name
  bool answered_ = false;
};

Result<std::unique_ptr<Listener>> LoopDevice::Listen(const std::string&, uint16_t port, int) {
  std::lock_guard<std::mutex> g(fabric_->mu_);
  if (port == 0) {
    port = 40000;
    while (fabric_->listeners.count(port) != 0) ++port;
  }
  if (fabric_->listeners.count(port) != 0) {
    return Status::IOError("port " + std::to_string(port) + " already in use");
  }
  auto l = std::make_unique<LoopListener>(self(), port);
  fabric_->listeners[port] = l.get();
  std::unique_ptr<Listener> r = std::move(l);
  return r;
}

Result<std::unique_ptr<Connection>> LoopDevice::Connect(const ConnectOptions& opts, const QpConfig& cfg,
                                                        std::span<const uint8_t> private_data,
                                                        std::vector<uint8_t>* reject_reply) {
  if (private_data.size() > kReqDataMax) return Status::InvalidArgument("connect private data over 56 bytes");
  if (!info_.memory_windows && (cfg.windows || cfg.mw_binding.mw != nullptr)) {
    return Status::InvalidArgument("creating a QP that binds memory windows on " + info_.name + ": not supported");
  }
  auto conn = std::make_unique<LoopConn>(self(), cfg);
  auto hs = std::make_shared<Handshake>();
  {
    std::lock_guard<std::mutex> g(fabric_->mu_);
    auto it = fabric_->listeners.find(opts.port);
    if (it == fabric_->listeners.end()) {
      return Status::Unavailable("connect to port " + std::to_string(opts.port) +
                                 " failed: nothing listening on that port");
    }
    it->second->Push(CmEvent{CmEvent::Type::kConnectRequest,
                             std::make_unique<LoopConnectRequest>(it->second, hs, conn.get(),
                                                                  Padded(private_data, kReqDataMax), info_.name),
                             nullptr});
  }
  std::unique_lock<std::mutex> hl(hs->mu);
  bool done = hs->cv.wait_for(hl, std::chrono::milliseconds(opts.timeout_ms),
                              [&] { return hs->state != Handshake::State::kPending; });
  if (!done) {
    hs->state = Handshake::State::kAbandoned;
    return Status::Timeout("connect to port " + std::to_string(opts.port) + " timed out");
  }
  if (hs->state == Handshake::State::kRejected) {
    if (reject_reply != nullptr) *reject_reply = hs->reply;
    return Status::Unavailable("connect failed: REJECTED (refused by the server)");
  }
  conn->set_peer_data(hs->reply);
  std::unique_ptr<Connection> r = std::move(conn);
  return r;
}

// ------------------------------------------------------------------ fabric

Fabric::Fabric() { nic_ = std::thread([this] { Run(); }); }

Fabric::~Fabric() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  nic_.join();
}

std::shared_ptr<Device> Fabric::CreateDevice(const std::string& name) {
  return std::make_shared<LoopDevice>(shared_from_this(), name, true);
}

std::shared_ptr<Device> Fabric::CreateDeviceWithoutWindows(const std::string& name) {
  return std::make_shared<LoopDevice>(shared_from_this(), name, false);
}

bool Fabric::CountPostAndMaybeFail() {
  ++post_count_;
  return faults_.fail_post_number != 0 && post_count_ == faults_.fail_post_number;
}

void Fabric::ErrorConnection(LoopConn* c) {
  c->MarkBroken();
  auto& scq = static_cast<LoopCq&>(c->send_cq());
  for (auto& q : c->sq) {  // flushed WRs complete even when unsignaled
    Completion fc;
    fc.wr_id = q.wr.wr_id;
    fc.status = WcStatus::kFlushed;
    fc.opcode = q.wr.opcode;
    fc.qp_num = c->qp_num();
    scq.Push(fc);
    ++stats_.flushed;
  }
  c->sq.clear();
  auto& rcq = static_cast<LoopCq&>(c->recv_cq());
  for (auto& r : c->rq) {  // a private receive queue is flushed too (an SRQ is not)
    Completion fc;
    fc.wr_id = r.wr_id;
    fc.status = WcStatus::kFlushed;
    fc.opcode = WrOpcode::kRecv;
    fc.qp_num = c->qp_num();
    rcq.Push(fc);
  }
  c->rq.clear();
}

uint64_t Fabric::ReadsQueued(const LoopConn& c) {
  return static_cast<uint64_t>(
      std::count_if(c.sq.begin(), c.sq.end(), [](const LoopConn::Queued& q) { return q.wr.opcode == WrOpcode::kRead; }));
}

void Fabric::InjectQpError(Connection& conn) {
  auto* c = dynamic_cast<LoopConn*>(&conn);
  if (c == nullptr) return;
  std::lock_guard<std::mutex> g(mu_);
  if (!c->broken()) ErrorConnection(c);
  if (c->peer != nullptr) {
    if (!c->peer->broken()) ErrorConnection(c->peer);
    TellDisconnected(c->peer);
  }
}

// Queues the disconnected event for a server-side connection, once. Under
// mu_, so that neither the listener nor the connection can be destroyed
// between the decision and the push (~LoopListener and ~LoopConn take mu_).
void Fabric::TellDisconnected(LoopConn* server_side) {
  if (server_side->cm_disconnected) return;
  server_side->cm_disconnected = true;
  if (server_side->listener != nullptr) {
    server_side->listener->Push(CmEvent{CmEvent::Type::kDisconnected, nullptr, server_side});
  }
}

void Fabric::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    bool progress = false;
    bool pending = false;
    // The first connection whose next WR can run; one waiting for a
    // receive (RNR) does not hold up the others, as on a real fabric.
    LoopConn* ran = nullptr;
    for (LoopConn* c : conns) {
      if (c->sq.empty()) continue;
      pending = true;
      executing_ = c;
      const bool done = Execute(c, l);  // false (RNR) returns with the lock held throughout
      executing_ = nullptr;
      idle_cv_.notify_all();
      if (done) {
        ran = c;
        progress = true;
        break;  // the list may have changed while the lock was dropped
      }
    }
    if (!progress) {
      // Waiting for work, or for a receive (RNR): re-check now and then.
      cv_.wait_for(l, pending ? std::chrono::microseconds(200) : std::chrono::milliseconds(50));
    } else if (auto pos = std::find(conns.begin(), conns.end(), ran); pos != conns.end()) {
      conns.splice(conns.end(), conns, pos);  // round robin
    }
  }
}

// The region `key` names for an access of [addr, addr + len) needing `need`.
// via_qpn: for a remote access, the responder's QP (a window answers only
// there); 0 for a local SGE (an lkey, never a window).
const Region* FindRegion(const std::map<uint32_t, Region>& m, uint32_t key, const LoopDevice* owner,
                         uint64_t addr, uint64_t len, uint32_t need, uint32_t via_qpn = 0) {
  auto it = m.find(key);
  if (it == m.end() || it->second.owner != owner) return nullptr;
  const Region& r = it->second;
  if (r.bound_qpn != 0 && r.bound_qpn != via_qpn) return nullptr;
  if (addr < r.base || len > r.len || addr - r.base > r.len - len) return nullptr;
  if ((r.access & need) != need) return nullptr;
  return &r;
}

// What a NIC checks when a bind executes: a window of this device that is
// unbound (type 2), a region still registered with window binding, local
// write under a writable window, the range inside the region, not empty.
WcStatus Fabric::ExecuteBind(LoopConn* c, const SendWr& w, const Region& b) {
  auto it = windows.find(w.rkey >> 8);
  auto mr = regions.find(b.parent_lkey);
  if (it == windows.end() || it->second.owner != &c->device() || it->second.live_key != 0 ||
      mr == regions.end() || mr->second.owner != &c->device() || mr->second.bound_qpn != 0 ||
      !(mr->second.access & kAccessMwBind)) {
    return WcStatus::kMwBindError;
  }
  const Region& r = mr->second;
  if (((b.access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(r.access & kAccessLocalWrite)) ||
      b.len == 0 || b.base < r.base || b.len > r.len || b.base - r.base > r.len - b.len) {
    return WcStatus::kMwBindError;
  }
  regions[w.rkey] = b;
  it->second.live_key = w.rkey;
  it->second.qpn = c->qp_num();
  it->second.runtime = true;
  return WcStatus::kSuccess;
}

WcStatus Fabric::CheckRead(LoopConn* c, LoopConn& peer, const SendWr& w) const {
  const LoopDevice* me = &c->device();
  if (!FindRegion(regions, w.local.lkey, me, w.local.addr, w.local.length, kAccessLocalWrite) ||
      (w.local2.length != 0 &&
       !FindRegion(regions, w.local2.lkey, me, w.local2.addr, w.local2.length, kAccessLocalWrite))) {
    return WcStatus::kLocalProtectionError;
  }
  if (!FindRegion(regions, w.rkey, &peer.device(), w.remote_addr, uint64_t{w.local.length} + w.local2.length,
                  kAccessRemoteRead, peer.qp_num())) {
    return WcStatus::kRemoteAccessError;
  }
  return WcStatus::kSuccess;
}

WcStatus Fabric::DoRead(LoopConn* c, const SendWr& w, std::unique_lock<std::mutex>& l) {
  const auto* src = reinterpret_cast<const uint8_t*>(w.remote_addr);
  const size_t total = size_t{w.local.length} + w.local2.length;
  // Byte `at` of the READ lands in local, then local2; a chunk never spans both.
  const auto copy = [&](size_t at, size_t n) {
    if (at < w.local.length) {
      RacyCopy(reinterpret_cast<uint8_t*>(w.local.addr) + at, src + at, n);
    } else {
      RacyCopy(reinterpret_cast<uint8_t*>(w.local2.addr) + (at - w.local.length), src + at, n);
    }
  };
  size_t chunk = faults_.read_chunk_bytes == 0 ? total : faults_.read_chunk_bytes;
  for (size_t done = 0; done < total;) {
    size_t n = std::min(chunk, total - done);
    size_t at = faults_.read_descending ? total - done - n : done;
    // Cut at the boundary between the two elements.
    if (at < w.local.length && at + n > w.local.length) {
      if (faults_.read_descending) {
        n = at + n - w.local.length;
        at = w.local.length;
      } else {
        n = w.local.length - at;
      }
    }
    copy(at, n);
    done += n;
    if (done < total && faults_.between_read_chunks) {
      auto hook = faults_.between_read_chunks;
      l.unlock();
      hook(w, done);
      l.lock();
      // The lock was dropped: as a NIC checks each packet of a READ's
      // response, a READ whose QP or peer broke, or whose memory went (a
      // window unbound or destroyed, a region deregistered) meanwhile ends
      // here. After ibv_dealloc_mw or ibv_dereg_mr returns, no DMA touches
      // the memory: its owner may free it (a client's rendezvous PUT that
      // failed frees the value's window and hands the value back).
      if (c->broken()) return WcStatus::kFlushed;
      LoopConn* peer = c->peer;
      if (peer == nullptr || peer->broken()) return WcStatus::kRetryExceeded;
      if (WcStatus st = CheckRead(c, *peer, w); st != WcStatus::kSuccess) return st;
    }
  }
  return WcStatus::kSuccess;
}

bool Fabric::Execute(LoopConn* c, std::unique_lock<std::mutex>& l) {
  LoopConn::Queued q = c->sq.front();
  const SendWr& w = q.wr;
  LoopConn* peer = c->peer;
  const LoopDevice* me = &c->device();
  const LoopDevice* them = peer != nullptr ? &peer->device() : nullptr;
  bool needs_recv = w.opcode == WrOpcode::kSend || w.opcode == WrOpcode::kWriteImm;
  if (peer != nullptr && needs_recv && peer->recv_queue().empty()) return false;  // RNR: wait
  if (faults_.hold_wr && !c->broken() && faults_.hold_wr(w)) return false;       // a slow responder: later
  c->sq.pop_front();

  WcStatus st = WcStatus::kSuccess;
  if (faults_.fail_wr) {
    auto hook = faults_.fail_wr;
    l.unlock();
    st = hook(w);
    l.lock();
  }
  if (faults_.wr_delay.count() > 0) {
    l.unlock();
    std::this_thread::sleep_for(faults_.wr_delay);
    l.lock();
  }
  if (c->broken()) {  // broken while the lock was dropped
    st = WcStatus::kFlushed;
  } else if (peer == nullptr || peer->broken()) {
    st = WcStatus::kRetryExceeded;  // the peer is gone: no ACK will ever come
  }
  const uint8_t* local_src = q.inline_bytes.empty() ? reinterpret_cast<const uint8_t*>(w.local.addr)
                                                     : q.inline_bytes.data();
  bool local_ok_src = w.inline_data || w.local.length == 0 ||
                      FindRegion(regions, w.local.lkey, me, w.local.addr, w.local.length, 0) != nullptr;
  Completion rc;  // the receive completion at the peer, if any
  bool deliver_recv = false;
  if (st == WcStatus::kSuccess) {
    switch (w.opcode) {
      case WrOpcode::kRead:
        ++stats_.reads;
        st = CheckRead(c, *peer, w);
        if (st == WcStatus::kSuccess) st = DoRead(c, w, l);
        break;
      case WrOpcode::kWrite:
      case WrOpcode::kWriteImm:
        ++stats_.writes;
        if (!local_ok_src) {
          st = WcStatus::kLocalProtectionError;
        } else if (!FindRegion(regions, w.rkey, them, w.remote_addr, w.local.length, kAccessRemoteWrite, peer->qp_num())) {
          st = WcStatus::kRemoteAccessError;
        } else {
          RacyCopy(reinterpret_cast<void*>(w.remote_addr), local_src, w.local.length);
          if (w.opcode == WrOpcode::kWriteImm) {
            RecvWr r = peer->recv_queue().front();
            peer->recv_queue().pop_front();
            rc.wr_id = r.wr_id;
            rc.opcode = WrOpcode::kRecvWriteImm;
            rc.has_imm = true;
            rc.imm = w.imm;
            rc.byte_len = w.local.length;
            deliver_recv = true;
          }
        }
        break;
      case WrOpcode::kSend: {
        ++stats_.sends;
        RecvWr r = peer->recv_queue().front();
        peer->recv_queue().pop_front();
        rc.wr_id = r.wr_id;
        rc.opcode = WrOpcode::kRecv;
        rc.byte_len = w.local.length;
        deliver_recv = true;
        if (!local_ok_src) {
          st = WcStatus::kLocalProtectionError;
          deliver_recv = false;
          peer->recv_queue().push_front(r);
        } else if (w.local.length > r.local.length ||
                   !FindRegion(regions, r.local.lkey, them, r.local.addr, w.local.length, kAccessLocalWrite)) {
          st = WcStatus::kRemoteInvalidRequest;  // the receiver sees a local length/protection error
          rc.status = WcStatus::kLocalLengthError;
        } else {
          RacyCopy(reinterpret_cast<void*>(r.local.addr), local_src, w.local.length);
        }
        break;
      }
      case WrOpcode::kCompareSwap:
      case WrOpcode::kFetchAdd: {
        ++stats_.atomics;
        if (w.local.length != 8 ||
            !FindRegion(regions, w.local.lkey, me, w.local.addr, 8, kAccessLocalWrite)) {
          st = WcStatus::kLocalProtectionError;
        } else if (w.remote_addr % 8 != 0) {
          st = WcStatus::kRemoteInvalidRequest;
        } else if (!FindRegion(regions, w.rkey, them, w.remote_addr, 8, kAccessRemoteAtomic, peer->qp_num())) {
          st = WcStatus::kRemoteAccessError;
        } else {
          auto* word = reinterpret_cast<uint64_t*>(w.remote_addr);
          uint64_t old;
          if (w.opcode == WrOpcode::kCompareSwap) {
            old = w.compare_add;
            __atomic_compare_exchange_n(word, &old, w.swap, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
          } else {
            old = __atomic_fetch_add(word, w.compare_add, __ATOMIC_SEQ_CST);
          }
          RacyStore(reinterpret_cast<void*>(w.local.addr), &old, 8);
        }
        break;
      }
      case WrOpcode::kBindMw: st = ExecuteBind(c, w, q.bind); break;
      case WrOpcode::kLocalInv: {
        // As rxe: the window named by the key's index, bound under exactly
        // this key, to this QP; anything else is a local QP operation error.
        auto it = windows.find(w.rkey >> 8);
        if (it == windows.end() || it->second.owner != me || it->second.live_key != w.rkey ||
            it->second.qpn != c->qp_num()) {
          st = WcStatus::kOther;
        } else {
          UnbindWindow(it->second);
          ++stats_.invalidations;
        }
        break;
      }
      default: st = WcStatus::kOther; break;
    }
  }
  if (deliver_recv) {
    rc.qp_num = peer->qp_num();
    static_cast<LoopCq&>(peer->recv_cq()).Push(rc);
  }
  if (st != WcStatus::kSuccess || w.signaled) {
    Completion sc;
    sc.wr_id = w.wr_id;
    sc.status = st;
    sc.opcode = w.opcode;
    sc.byte_len = w.opcode == WrOpcode::kRead ? w.local.length + w.local2.length : 0;
    sc.qp_num = c->qp_num();
    static_cast<LoopCq&>(c->send_cq()).Push(sc);
  }
  if (st != WcStatus::kSuccess && st != WcStatus::kFlushed) {
    ++stats_.errors;
    ErrorConnection(c);
    // An access violation also moves the responder's QP to the error state.
    if (peer != nullptr && (st == WcStatus::kRemoteAccessError || st == WcStatus::kRemoteInvalidRequest)) {
      if (!peer->broken()) ErrorConnection(peer);
    }
  } else if (st == WcStatus::kFlushed) {
    ++stats_.flushed;
  }
  return true;
}

}  // namespace

std::shared_ptr<LoopbackFabric> LoopbackFabric::Create() { return std::make_shared<Fabric>(); }

}  // namespace kvrdma
