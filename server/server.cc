#include "server/server.h"

#include <pthread.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <unordered_set>

#include "common/format/round_clock.h"
#include "common/log.h"
#include "common/protocol/handshake.h"
#include "common/protocol/locks.h"

namespace kvrdma::server {
namespace {

template <typename T = uint8_t>
std::unique_ptr<T, FreeDeleter> AlignedAlloc(size_t bytes, size_t align = 4096) {
  size_t n = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, n);
  if (p != nullptr) std::memset(p, 0, n);
  return std::unique_ptr<T, FreeDeleter>(static_cast<T*>(p));
}

}  // namespace

Server::Server(ServerConfig cfg, std::shared_ptr<Device> device, Backend& backend)
    : cfg_(std::move(cfg)), device_(std::move(device)), backend_(backend) {}

Server::~Server() { Shutdown(); }

Status Server::Start() {
  if (cfg_.credits == 0 || cfg_.credits > 256) return Status::InvalidArgument("--credits must be 1..256");
  if (cfg_.auth_token.size() > kMaxAuthToken) {
    return Status::InvalidArgument("the auth token is longer than " + std::to_string(kMaxAuthToken) + " bytes");
  }
  if (cfg_.message_bytes < 256 || cfg_.message_bytes > (1u << 24)) {
    return Status::InvalidArgument("--message-bytes must be 256..16777216");
  }
  if (cfg_.max_connections == 0) return Status::InvalidArgument("--max-connections must be at least 1");
  if (cfg_.assembly_bytes < cfg_.max_value_bytes) {
    return Status::InvalidArgument("--assembly-mb must hold at least one value of --max-value-bytes");
  }
  KVRDMA_RETURN_IF_ERROR(CheckMessageLimits(cfg_.message_bytes, cfg_.max_key_bytes));
  StoreRegions r = backend_.regions();
  // A GET round younger than the round limit trusts what its window READ
  // named; that is sound only while the store keeps freed segments and move
  // tags longer than that (DESIGN "Reclamation", "Misses while entry refs
  // move"), and a late round's recheck only while kRecheckRoundLimits of it
  // stay below two grace periods ("Why a GET returns a value the key had
  // during the GET", (b)). The limit comes from --grace-ms, the store's grace
  // period from its own config: refuse a pair that breaks it, whoever built
  // them.
  round_limit_us_ = uint64_t{cfg_.grace_period_ms} * 1000 / 2;
  if (round_limit_us_ == 0 || round_limit_us_ > UINT32_MAX ||
      std::chrono::microseconds(round_limit_us_ * kRecheckRoundLimits) >= 2 * r.grace_period) {
    return Status::InvalidArgument(
        "the round limit clients get (" + std::to_string(round_limit_us_) +
        " us, half of --grace-ms) must be above 0 and below two thirds of the store's grace period (" +
        std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(r.grace_period).count()) + " us)");
  }
  auto reg = [&](void* p, size_t n, uint32_t access, const char* what) -> Result<std::unique_ptr<MemoryRegion>> {
    auto mr = device_->RegisterMemory(p, n, access);
    if (!mr.ok()) return Status(mr.status().code(), std::string("registering the ") + what + ": " + mr.status().message());
    return mr;
  };
  auto imr = reg(r.index_base, r.index_bytes, kAccessRemoteRead, "index");
  if (!imr.ok()) return imr.status();
  index_mr_ = std::move(imr).value();
  // Local write too when rendezvous READs land in the log (their local
  // side): no remote access but READ, so no client writes it.
  const bool in_place = backend_.takes_values_in_place();
  auto lmr = reg(r.log_base, r.log_bytes, kAccessRemoteRead | (in_place ? kAccessLocalWrite : 0u), "value log");
  if (!lmr.ok()) return lmr.status();
  log_mr_ = std::move(lmr).value();

  // Lock table: word 0 unused, then cfg_.lock_words lock words, all CAS-able.
  locks_bytes_ = (size_t{cfg_.lock_words} + 8) * 8;
  locks_ = AlignedAlloc<uint64_t>(locks_bytes_);
  if (!locks_) return Status::NoResource("out of memory for the lock table");
  auto kmr = reg(locks_.get(), locks_bytes_, kAccessRemoteAtomic | kAccessRemoteRead, "lock table");
  if (!kmr.ok()) return kmr.status();
  locks_mr_ = std::move(kmr).value();

  // Shared receive queue and its buffers.
  uint32_t depth = std::min(cfg_.srq_depth, device_->info().max_srq_wr);
  size_t recv_bytes = size_t{depth} * cfg_.message_bytes;
  recv_mem_ = AlignedAlloc(recv_bytes);
  if (!recv_mem_) return Status::NoResource("out of memory for receive buffers");
  auto rmr = reg(recv_mem_.get(), recv_bytes, kAccessLocalWrite, "receive buffers");
  if (!rmr.ok()) return rmr.status();
  recv_mr_ = std::move(rmr).value();
  auto srq = device_->CreateSharedReceiveQueue(depth);
  if (!srq.ok()) return srq.status();
  srq_ = std::move(srq).value();
  depth = std::min(depth, srq_->max_wr());
  ReceivePool pool{srq_.get(), recv_mr_.get(), cfg_.message_bytes};
  for (uint32_t i = 0; i < depth; ++i) KVRDMA_RETURN_IF_ERROR(pool.Repost(i));

  // Workers: a CQ each (receives of their connections + reply SENDs).
  assembly_budget_ = std::make_unique<AssemblyBudget>(cfg_.assembly_bytes);
  for (uint32_t w = 0; w < std::max(1u, cfg_.workers); ++w) {
    auto cq = device_->CreateCompletionQueue(depth + 4096);
    if (!cq.ok()) return cq.status();
    LockView lv = lock_view();
    workers_.push_back(std::make_unique<Worker>(w, cfg_, backend_, counters_, *assembly_budget_, pool, lv,
                                                std::move(cq).value()));
    if (in_place) {
      workers_.back()->SetRendezvous(nullptr, log_mr_.get());
    } else {
      const size_t staging = size_t{Worker::kRendezvousSlots} * cfg_.max_value_bytes;
      rendezvous_mem_.push_back(AlignedAlloc(staging));
      if (!rendezvous_mem_.back()) return Status::NoResource("out of memory for rendezvous staging");
      auto smr = reg(rendezvous_mem_.back().get(), staging, kAccessLocalWrite, "rendezvous staging");
      if (!smr.ok()) return smr.status();
      rendezvous_mr_.push_back(std::move(smr).value());
      workers_.back()->SetRendezvous(rendezvous_mr_.back().get(), nullptr);
    }
    workers_.back()->Start();
  }

  auto l = device_->Listen(cfg_.listen, cfg_.port, 1024);
  if (!l.ok()) return l.status();
  listener_ = std::move(l).value();
  KVRDMA_LOG_INFO("listening on %s:%u (device %s, %u workers, %u receive buffers of %u bytes, %u credits)",
                  cfg_.listen.c_str(), listener_->port(), device_->info().name.c_str(),
                  static_cast<unsigned>(workers_.size()), depth, cfg_.message_bytes, cfg_.credits);
  return Status::OK();
}

Status Server::Run() {
  while (!stop_.load()) {
    CloseFailedConnections();
    const int64_t next_refusal_ms = RefuseDelayed(false);  // -1: none held
    const int wait_ms = next_refusal_ms < 0 ? 100 : static_cast<int>(std::min<int64_t>(100, next_refusal_ms));
    auto ev = listener_->NextEvent(wait_ms);
    if (!ev.ok()) {
      if (ev.status().IsTimeout()) continue;
      KVRDMA_LOG_ERROR("connection manager: %s", ev.status().ToString().c_str());
      continue;
    }
    switch (ev->type) {
      case CmEvent::Type::kConnectRequest: OnConnectRequest(std::move(ev->request)); break;
      case CmEvent::Type::kEstablished: break;
      case CmEvent::Type::kDisconnected: OnDisconnected(ev->connection); break;
    }
  }
  Shutdown();
  return Status::OK();
}

void Server::Reject(ConnectRequest& req, const Status& why, RejectReason reason) {
  counters_.request_metrics.CountRejected(reason);
  // A flooder in its back-off may knock hundreds of times a second: its
  // closes were logged, its refusals are counted.
  if (reason == RejectReason::kFlowControlBackoff) {
    KVRDMA_LOG_DEBUG("refusing a client: %s", why.ToString().c_str());
  } else {
    KVRDMA_LOG_WARN("refusing a client: %s", why.ToString().c_str());
  }
  RejectMsg m;
  m.code = why.code();
  m.reason = why.message();
  uint8_t buf[kMaxRejectData];
  size_t n = EncodeReject(m, buf);
  req.Reject({buf, n});
}

void Server::OnConnectRequest(std::unique_ptr<ConnectRequest> req) {
  auto msg = DecodeConnectRequest(req->private_data());
  if (!msg.ok()) return Reject(*req, msg.status());
  if (!cfg_.auth_token.empty()) {
    // Constant-time compare: how long a refusal takes says nothing of the token.
    const std::string& want = cfg_.auth_token;
    uint8_t diff = static_cast<uint8_t>(msg->auth_len != want.size());
    for (size_t i = 0; i < kMaxAuthToken; ++i) {
      uint8_t a = i < msg->auth_len ? msg->auth[i] : 0;
      uint8_t b = i < want.size() ? static_cast<uint8_t>(want[i]) : 0;
      diff |= static_cast<uint8_t>(a ^ b);
    }
    if (diff != 0) {
      counters_.errors.fetch_add(1);
      return Reject(*req, Status::RemoteAccess("authentication failed: missing or wrong auth token"),
                    RejectReason::kAuth);
    }
  }
  // Before anything is allocated or registered for it.
  std::string peer = req->peer_address();
  RejectReason limit_reason;
  if (Status st = CheckConnectionLimits(peer, &limit_reason); !st.ok()) {
    // An address in its back-off waits for its refusal (kRefusalDelayMaxMs).
    if (limit_reason == RejectReason::kFlowControlBackoff && delayed_refusals_.size() < kDelayedRefusalsMax) {
      const int64_t now = SteadyMs();
      const int64_t until = backoff_.at(peer).until_ms;
      delayed_refusals_.push_back({std::move(req), std::move(st), std::min(until, now + kRefusalDelayMaxMs)});
      return;
    }
    return Reject(*req, st, limit_reason);
  }
  auto cs = std::make_shared<ConnState>();
  cs->id = NextConnectionId();
  if (cs->id == 0) {
    return Reject(*req, Status::ServerFull("no lock owner id is free: every one of the " +
                                           std::to_string(kLockOwnerMax) +
                                           " ids is held by a connection or named by an unexpired lease"));
  }
  cs->peer = std::move(peer);
  cs->put_path = msg->put_path;
  cs->worker = next_worker_++ % workers_.size();
  size_t ring_bytes = size_t{cfg_.credits} * cfg_.message_bytes;
  cs->ring = AlignedAlloc(ring_bytes);
  if (!cs->ring) return Reject(*req, Status::NoResource("server out of memory"));
  // The ring is remotely writable only through a window bound to this
  // connection's QP: the NIC refuses its rkey on any other connection.
  auto mr = device_->RegisterMemory(cs->ring.get(), ring_bytes, kAccessLocalWrite | kAccessMwBind);
  if (!mr.ok()) return Reject(*req, mr.status());
  cs->ring_mr = std::move(mr).value();
  auto mw = device_->CreateMemoryWindow();
  if (!mw.ok()) return Reject(*req, mw.status());
  cs->ring_mw = std::move(mw).value();
  const uint32_t reply_buffers = ReplyBufferCount(cfg_.credits);
  const size_t reply_bytes = ReplyMemoryBytes(cfg_.credits);
  cs->reply_mem = AlignedAlloc(reply_bytes);
  if (!cs->reply_mem) return Reject(*req, Status::NoResource("server out of memory"));
  auto rmr = device_->RegisterMemory(cs->reply_mem.get(), reply_bytes, kAccessLocalWrite);
  if (!rmr.ok()) return Reject(*req, rmr.status());
  cs->reply_mr = std::move(rmr).value();
  cs->replies.busy.assign(reply_buffers, 0);

  StoreRegions r = backend_.regions();
  ServerDescriptor d;
  d.conn_id = cs->id;
  d.index = {index_mr_->base(), index_mr_->length(), index_mr_->rkey()};
  d.index_homes = r.index_homes;
  d.index_window = r.index_window;
  d.hash_seed = r.hash_seed;
  d.log = {log_mr_->base(), log_mr_->length(), log_mr_->rkey()};
  d.locks = {locks_mr_->base(), locks_mr_->length(), locks_mr_->rkey()};
  d.ring = {cs->ring_mr->base(), cs->ring_mr->length(), cs->ring_mw->rkey()};
  d.message_bytes = cfg_.message_bytes;
  d.credits = static_cast<uint16_t>(cfg_.credits);
  d.max_key_bytes = static_cast<uint16_t>(cfg_.max_key_bytes);
  d.max_value_bytes = cfg_.max_value_bytes;
  d.round_limit_us = static_cast<uint32_t>(round_limit_us_);  // checked in Start
  d.lock_words = cfg_.lock_words;
  uint8_t buf[kMaxAcceptData];
  size_t n = EncodeServerDescriptor(d, buf);

  Worker& w = *workers_[cs->worker];
  QpConfig qc;
  qc.send_cq = &w.cq();
  qc.recv_cq = &w.cq();
  qc.srq = srq_.get();
  qc.max_send_wr = 2 * cfg_.credits + 32;  // replies in flight + unsignaled ones not yet reaped
  qc.max_inline = 256;
  qc.mw_binding = MwBinding{cs->ring_mw.get(), cs->ring_mr.get(), cs->ring_mr->base(), ring_bytes,
                            kAccessRemoteWrite, Worker::kMwBindWrId};
  // The worker must know the QP before the client can send on it.
  auto conn = req->Accept(qc, {buf, n}, [&](Connection& c) {
    c.set_user(cs.get());
    cs->qp = &c;
    cs->qp_num = c.qp_num();
    w.Add(cs.get());
  });
  if (!conn.ok()) {
    KVRDMA_LOG_WARN("accepting connection %u failed: %s", cs->id, conn.status().ToString().c_str());
    if (cs->qp != nullptr) Retire(std::move(cs));
    return;
  }
  cs->conn = std::move(conn).value();
  Remember(cs);
  counters_.connections.fetch_add(1);
  counters_.connections_total.fetch_add(1);
  KVRDMA_LOG_DEBUG("connection %u accepted (qp %u, worker %u, put path %s)", cs->id, cs->conn->qp_num(),
                   cs->worker, cs->put_path == PutPath::kSend ? "send" : "write-imm");
}

int64_t Server::RefuseDelayed(bool all) {
  if (delayed_refusals_.empty()) return -1;
  const int64_t now = SteadyMs();
  int64_t next = -1;
  size_t kept = 0;
  for (size_t i = 0; i < delayed_refusals_.size(); ++i) {
    DelayedRefusal& d = delayed_refusals_[i];
    if (all || d.at_ms <= now) {
      Reject(*d.req, d.why, RejectReason::kFlowControlBackoff);
      continue;
    }
    next = next < 0 ? d.at_ms - now : std::min(next, d.at_ms - now);
    if (kept != i) delayed_refusals_[kept] = std::move(d);
    ++kept;
  }
  delayed_refusals_.resize(kept);
  return next;
}

Status Server::CheckConnectionLimits(const std::string& peer, RejectReason* reason) {
  // An address whose connections were closed for breaking flow control
  // lately: refused first, whatever else holds, so that a flooder's
  // reconnects cost a refusal and nothing else.
  if (!peer.empty()) {
    if (auto it = backoff_.find(peer); it != backoff_.end()) {
      const int64_t left = it->second.until_ms - SteadyMs();
      if (left > 0) {
        *reason = RejectReason::kFlowControlBackoff;
        // Short: a reject's reason holds 134 bytes (the flag's name last:
        // only the longest IPv6 addresses cut it).
        return Status::Unavailable(std::to_string(it->second.closes) + " connections from " + peer +
                                   " broke flow control: refused for " + std::to_string(left) +
                                   " ms (kvserver --flow-control-backoff-ms)");
      }
    }
  }
  // Live connections; a closed one leaves the count at once (its worker
  // releases its state within a batch).
  if (conns_.size() >= cfg_.max_connections) {
    *reason = RejectReason::kMaxConnections;
    return Status::NoResource("too many connections (limit " + std::to_string(cfg_.max_connections) +
                              ", kvserver --max-connections): retry later");
  }
  // An address the transport could not tell is not limited per peer (it
  // would put every such client under one count).
  if (cfg_.max_connections_per_peer != 0 && !peer.empty()) {
    auto it = peer_conns_.find(peer);
    if (it != peer_conns_.end() && it->second >= cfg_.max_connections_per_peer) {
      *reason = RejectReason::kMaxPerPeer;
      return Status::NoResource("too many connections from " + peer + " (limit " +
                                std::to_string(cfg_.max_connections_per_peer) +
                                ", kvserver --max-connections-per-peer)");
    }
  }
  return Status::OK();
}

void Server::NoteFlowControlClose(const std::string& peer) {
  // An address the transport could not tell is not refused (it would put
  // every such client under one back-off).
  if (cfg_.flow_control_backoff_ms == 0 || peer.empty()) return;
  Backoff& b = backoff_[peer];
  ++b.closes;
  // base, 2 x base, 4 x base ... up to kFlowControlBackoffMaxFactor x base.
  static_assert((kFlowControlBackoffMaxFactor & (kFlowControlBackoffMaxFactor - 1)) == 0);
  const uint32_t shift = std::min<uint32_t>(b.closes - 1, std::countr_zero(kFlowControlBackoffMaxFactor));
  b.until_ms = std::max(b.until_ms, SteadyMs() + (int64_t{cfg_.flow_control_backoff_ms} << shift));
}

void Server::ForgetQuietAddresses(int64_t now_ms) {
  if (backoff_.empty() || now_ms - last_backoff_sweep_ms_ < 1000) return;
  last_backoff_sweep_ms_ = now_ms;
  const int64_t quiet = int64_t{cfg_.flow_control_backoff_ms} * kFlowControlBackoffMaxFactor;
  std::erase_if(backoff_, [&](const auto& e) { return now_ms - e.second.until_ms >= quiet; });
}

void Server::Remember(std::shared_ptr<ConnState> cs) {
  if (!cs->peer.empty()) ++peer_conns_[cs->peer];
  conns_.push_back(std::move(cs));
}

std::shared_ptr<ConnState> Server::Forget(std::vector<std::shared_ptr<ConnState>>::iterator it) {
  std::shared_ptr<ConnState> cs = std::move(*it);
  conns_.erase(it);
  if (auto p = peer_conns_.find(cs->peer); p != peer_conns_.end() && --p->second == 0) peer_conns_.erase(p);
  return cs;
}

uint32_t Server::NextConnectionId() {
  if (next_conn_id_ <= kLockOwnerMax) return next_conn_id_++;  // never handed out
  // Every id was handed out once: reuse one that no live connection holds and
  // no lock word names with a lease that has not ended (the clock only moves
  // forward, so an ended lease stays ended). A connection leaves conns_ only
  // once it is disconnected: its QP executes no more CAS. So the new holder
  // can never mistake a lock word for its own lease (docs/DESIGN.md, "Locks").
  std::unordered_set<uint32_t> taken;
  for (const auto& cs : conns_) taken.insert(cs->id);
  const uint64_t now = clock_.NowMs();
  for (uint32_t i = 1; i <= cfg_.lock_words; ++i) {
    const uint64_t word = __atomic_load_n(&locks_.get()[i], __ATOMIC_ACQUIRE);
    if (word != 0 && LockExpiry(word) > now) taken.insert(LockOwner(word));
  }
  for (uint32_t n = 0; n < kLockOwnerMax; ++n) {
    const uint32_t id = reuse_cursor_;
    reuse_cursor_ = reuse_cursor_ % kLockOwnerMax + 1;
    if (!taken.contains(id)) return id;
  }
  return 0;
}

void Server::OnDisconnected(Connection* c) {
  auto it = std::find_if(conns_.begin(), conns_.end(), [&](const auto& s) { return s->conn.get() == c; });
  if (it == conns_.end()) return;
  std::shared_ptr<ConnState> cs = Forget(it);
  counters_.connections.fetch_sub(1);
  // A worker that closes a connection disconnects it at once: its DISCONNECTED
  // event may come before CloseFailedConnections sees the reason.
  if (const char* why = CountClose(*cs); why != nullptr) {
    KVRDMA_LOG_WARN("closed connection %u: %s", cs->id, why);
  } else {
    counters_.request_metrics.closed_by_client.fetch_add(1, std::memory_order_relaxed);
    KVRDMA_LOG_DEBUG("connection %u closed", cs->id);
  }
  Retire(std::move(cs));
}

const char* Server::CountClose(const ConnState& cs) {
  switch (cs.close_reason.load(std::memory_order_acquire)) {
    case ConnState::CloseReason::kQpFailed:
      counters_.closed_failed.fetch_add(1, std::memory_order_relaxed);
      return "its queue pair failed";
    case ConnState::CloseReason::kProtocol:
      counters_.closed_flow_control.fetch_add(1, std::memory_order_relaxed);
      NoteFlowControlClose(cs.peer);
      return "it does not take its replies";
    case ConnState::CloseReason::kOverCredits:
      counters_.closed_flow_control.fetch_add(1, std::memory_order_relaxed);
      NoteFlowControlClose(cs.peer);
      return "more messages in flight than its credits";
    case ConnState::CloseReason::kNone: break;
  }
  return nullptr;
}

void Server::Retire(std::shared_ptr<ConnState> cs) {
  workers_[cs->worker]->Remove(cs.get());
  retiring_.push_back(std::move(cs));
  FreeReleased();
}

void Server::FreeReleased() {
  // Destroyed here, on the manager's thread: the QP first (ConnState order).
  std::erase_if(retiring_, [](const auto& c) { return c->released.load(std::memory_order_acquire); });
}

void Server::CloseFailedConnections() {
  const int64_t now = SteadyMs();
  if (now - last_close_check_ms_ < 20) return;
  last_close_check_ms_ = now;
  FreeReleased();
  ForgetQuietAddresses(now);
  for (auto it = conns_.begin(); it != conns_.end();) {
    ConnState& cs = **it;
    const char* why = CountClose(cs);
    // Judged on what the worker has seen: a reply posted at P and still
    // pending when the worker last emptied its CQ (caught_up_ms) was not
    // taken for that long. A worker busy with other connections' requests
    // delays its own evidence, never the client's.
    if (why == nullptr && cfg_.reply_timeout_ms != 0 && cs.signaled_pending.load(std::memory_order_acquire) > 0 &&
        workers_[cs.worker]->caught_up_ms() - cs.reply_progress_ms.load(std::memory_order_relaxed) >
            int64_t{cfg_.reply_timeout_ms}) {
      why = "replies unacknowledged (more requests than credits, or no receive buffers posted)";
      counters_.errors.fetch_add(1, std::memory_order_relaxed);
      counters_.closed_flow_control.fetch_add(1, std::memory_order_relaxed);
      NoteFlowControlClose(cs.peer);
    }
    if (why == nullptr) {
      ++it;
      continue;
    }
    KVRDMA_LOG_WARN("closing connection %u: %s", cs.id, why);
    // The client sees DISCONNECTED now instead of at its operation timeout.
    cs.conn->Disconnect();
    counters_.connections.fetch_sub(1);
    const auto index = it - conns_.begin();
    std::shared_ptr<ConnState> gone = Forget(it);
    it = conns_.begin() + index;
    Retire(std::move(gone));
  }
}

void Server::Shutdown() {
  // No connect request is answered from here on (this thread no longer
  // takes events); the delayed ones are refused with their reason.
  (void)RefuseDelayed(true);
  // All workers drain at once (each bounded, Worker::Stop), then are joined.
  for (auto& w : workers_) w->RequestStop();
  for (auto& w : workers_) w->Stop();
  for (auto& cs : conns_) cs->conn->Disconnect();
  // The workers are stopped: they refer to no connection any more. The
  // connections' rdma_cm ids are the listener's children, on its event
  // channel: destroyed before it (after it, each destroy failed with EBADF).
  conns_.clear();
  peer_conns_.clear();
  backoff_.clear();
  retiring_.clear();
  listener_.reset();
  workers_.clear();  // CQs
  rendezvous_mr_.clear();
  rendezvous_mem_.clear();
  assembly_budget_.reset();
  srq_.reset();
  recv_mr_.reset();
  recv_mem_.reset();
  locks_mr_.reset();
  locks_.reset();
  log_mr_.reset();
  index_mr_.reset();
}

}  // namespace kvrdma::server
