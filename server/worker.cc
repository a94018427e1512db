// The worker thread: completions in, requests copied once, handed on.
#include "server/worker.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/log.h"
#include "common/memory/racy_copy.h"
#include "common/transport/busy_poll.h"

namespace kvrdma::server {
namespace {

constexpr int64_t kExpiryCheckMs = 50;      // how often abandoned assemblies are looked for
// After Stop, the worker serves what arrives until it finds its CQ empty, or
// for this long: clients that send again as soon as they are answered may
// never leave it idle (a stop under a PUT load took 0.1 to 32 s on Soft-RoCE,
// by luck: StopUnderLoadTest). Whatever arrives later is left unanswered;
// the manager then disconnects every client (Server::Shutdown).
constexpr int64_t kStopDrainMs = 200;

}  // namespace

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Status LockView::CheckHeld(uint64_t word, uint8_t key_byte, uint64_t token, uint32_t requester) const {
  const uint64_t now = clock->NowMs();
  if (LockAllows(word, key_byte, token, requester, now)) return Status::OK();
  return Status::Locked("the key is locked by another client (lease ends in " +
                        std::to_string(LockExpiry(word) - now) + " ms)");
}

Worker::Worker(uint32_t index, const ServerConfig& cfg, Backend& backend, ServerCounters& counters,
               AssemblyBudget& assembly_budget, ReceivePool pool, LockView locks,
               std::unique_ptr<CompletionQueue> cq)
    : index_(index),
      cfg_(cfg),
      durable_(backend.durable()),
      backend_(backend),
      counters_(counters),
      assembly_budget_(assembly_budget),
      pool_(pool),
      locks_(locks),
      cq_(std::move(cq)),
      request_(new uint8_t[cfg.message_bytes]) {
  reply_queued_.reserve(wc_.size());
  awaiting_.reserve(64);
}

Worker::~Worker() {
  Stop();
  // The connections' QPs are gone by now (Server::Shutdown destroys them
  // first): no READ writes a place any more, and the store gets each back.
  for (RendezvousSlot& s : rdv_) {
    if (s.busy && log_mr_ != nullptr) backend_.AbandonPut(s.place);
    s.busy = false;
  }
}

void Worker::Start() {
  running_.store(true);
  thread_ = std::thread([this] { Run(); });
}

void Worker::RequestStop() {
  stop_.store(true);
  cq_->Wake();
}

void Worker::Stop() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> g(control_mu_);
    running_.store(false);
  }
  ApplyControl();  // what the thread left; from now on Remove applies at once
}

void Worker::Add(ConnState* c) {
  std::lock_guard<std::mutex> g(control_mu_);
  control_.push_back({true, c});
  control_pending_.store(true, std::memory_order_release);
  cq_->Wake();
}

void Worker::Remove(ConnState* c) {
  bool now;
  {
    std::lock_guard<std::mutex> g(control_mu_);
    control_.push_back({false, c});
    control_pending_.store(true, std::memory_order_release);
    now = !running_.load();
  }
  // No worker thread (stopped, or driven by a test): nobody else applies it.
  if (now) {
    ApplyControl();
  } else {
    cq_->Wake();
  }
}

void Worker::ApplyControl() {
  // A connection about to be removed may have replies queued: post them
  // first (after Remove its state may be freed).
  FlushReplies();
  std::vector<ControlOp> ops;
  {
    std::lock_guard<std::mutex> g(control_mu_);
    ops.swap(control_);
    control_pending_.store(false, std::memory_order_relaxed);
  }
  for (const ControlOp& op : ops) {
    if (op.add) {
      conns_.Insert(op.conn);
      op.conn->pending.assign(cfg_.credits, Completion{});
      ready_.reserve(2 * conns_.all().size() + 2);  // a round appends at most one entry per connection
      reply_queued_.reserve(conns_.all().size() + 1);
    } else {
      conns_.Erase(op.conn);
      if (op.conn->in_ready) {
        ready_.erase(std::find(ready_.begin() + static_cast<ptrdiff_t>(ready_head_), ready_.end(), op.conn));
        op.conn->in_ready = false;
      }
      DropPending(*op.conn);
      OrphanRendezvous(*op.conn);
      op.conn->assembly.Release(assembly_budget_);
      // After this store the manager may free the connection.
      op.conn->released.store(true, std::memory_order_release);
    }
  }
}

ConnState* Worker::FindAfterControl(uint32_t qp_num) {
  if (!control_pending_.load(std::memory_order_acquire)) return nullptr;
  ApplyControl();
  return conns_.Find(qp_num);
}

int64_t Worker::caught_up_ms() const {
  return sleeping_.load(std::memory_order_acquire) ? SteadyMs() : caught_up_ms_.load(std::memory_order_relaxed);
}

[[gnu::always_inline]] inline int Worker::Drain(int64_t now_ms) {
  int total = 0;
  for (int polls = 0; polls < 32; ++polls) {
    // Read before the poll: the first poll's is the caller's (read just
    // before), a later one's its own (the poll before it found a full batch).
    const int64_t start_ms = polls == 0 ? now_ms : SteadyMs();
    const int n = cq_->Poll(wc_);
    if (n < 0) {
      KVRDMA_LOG_ERROR("worker %u: polling the completion queue failed", index_);
      break;
    }
    for (int i = 0; i < n; ++i) Dispatch(wc_[i]);
    total += n;
    if (static_cast<size_t>(n) < wc_.size()) {
      // Every completion that arrived before start_ms has been handled.
      caught_up_ms_.store(start_ms, std::memory_order_relaxed);
      break;
    }
  }
  return total;
}

void Worker::Run() {
  pthread_setname_np(pthread_self(), ("kv-worker-" + std::to_string(index_)).c_str());
  // After work, poll for cfg_.busy_poll_us before sleeping on the channel: a
  // time, not a count of polls (4000 polls were milliseconds in an emulated
  // guest, while the clients and Soft-RoCE's kernel work waited for the CPU:
  // issue 12, finding 5).
  // The poll's length adapts (BusyPoll, common/transport/busy_poll.h):
  // from --busy-poll-us up to --busy-poll-max-us while requests keep coming
  // just after it ends.
  using Clock = std::chrono::steady_clock;
  BusyPoll busy_poll(std::chrono::microseconds(cfg_.busy_poll_us),
                     std::chrono::microseconds(cfg_.busy_poll_max_us));
  Clock::time_point busy_until{};  // start asleep
  bool worked = false;              // the last iteration handled completions or served messages
  // The last iteration served messages, and service_start_ holds the end of
  // the last one (ServiceTimer's reading), taken after that work.
  bool served_reading = false;
  int64_t stop_seen_ms = -1;  // the first iteration's reading after Stop: the drain's bound counts from it
  for (;;) {
    if (control_pending_.load(std::memory_order_acquire)) ApplyControl();
    // Abandoned assemblies are looked for every kExpiryCheckMs whether or
    // not the worker is idle: a worker kept busy by other connections must
    // not let a stalled assembly hold its bytes (one clock read per batch).
    // The reading: the end of the last message served if the iteration
    // before served any (its replies were posted after it: the reading is
    // a few microseconds early, and a message costs one clock read, not
    // two), else one of its own.
    const auto now = served_reading ? service_start_ : Clock::now();
    service_start_ = now;  // the first request this iteration serves is timed from here
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
    // After work, the busy poll counts from this reading, the first after
    // that work (one clock read per iteration, not two).
    if (worked) busy_until = now + busy_poll.window();
    if (now_ms - last_expiry_ms_ >= kExpiryCheckMs) {
      ExpireAssemblies(now_ms);
      ExpireRendezvous(now_ms);
    }
    // Everything that arrived is queued on its connection first, so that a
    // round serves every connection with a message waiting, one each: a
    // message waits for at most one message of each other connection per
    // round, however many the others have queued (DESIGN.md, "Fair service").
    const int n = Drain(now_ms);
    const bool serve = HasReady();
    if (serve) ServeRound();
    // A durable store answers a write only after a Commit (--fsync always:
    // a flush, milliseconds on a disk), and the round's replies wait for it:
    // committing after every round paid one flush per message of each
    // connection (a client with 16 PUTs in flight: 16 flushes). Serve the
    // messages already queued first, up to kReplyBatch rounds (so no
    // connection queues more replies than its scratch buffers, nor enters
    // reply_queued_ twice), and make them durable with one Commit. Each
    // round still serves every connection once, in turn.
    for (uint32_t r = 1; durable_ && r < kReplyBatch && HasReady(); ++r) ServeRound();
    worked = n > 0 || serve;
    if (worked) busy_poll.FoundWork();
    // Not after a durable store's Commit (FlushReplies): a flush may take
    // milliseconds, which the busy poll must not lose.
    served_reading = serve && !durable_;
    if (worked) {
      FlushReplies();
      // Stopping: the replies of everything served so far are posted (and,
      // for a durable store, committed first). Past the drain's bound, stop
      // even though more arrived.
      if (stop_.load(std::memory_order_relaxed)) [[unlikely]] {
        if (stop_seen_ms < 0) stop_seen_ms = now_ms;
        if (now_ms - stop_seen_ms >= kStopDrainMs) break;
      }
      continue;
    }
    if (stop_.load(std::memory_order_relaxed)) break;  // nothing left in flight
    // After work, poll briefly (the next request is likely close); then
    // sleep on the completion channel until a completion arrives: a GET-only
    // load sends no messages and must leave kvserver's CPU idle. Stop() and
    // control requests Wake() the wait; it has a timeout only while a
    // fragmented PUT is being reassembled (somewhere), so that an abandoned
    // one expires.
    if (now < busy_until) continue;
    // The last poll found the CQ empty: until the wait returns, everything
    // that arrived has been handled (caught_up_ms() reads now); afterwards,
    // everything that arrived before this iteration's clock read (before
    // that poll: a bound on the safe side, and no clock read of its own).
    sleeping_.store(true, std::memory_order_release);
    const bool woke = cq_->Wait(assembly_budget_.used() > 0 || rdv_busy_ > 0 ? kExpiryCheckMs : -1).ok();
    caught_up_ms_.store(now_ms, std::memory_order_relaxed);
    sleeping_.store(false, std::memory_order_release);
    if (busy_poll.adapts()) busy_poll.Slept(Clock::now() - now, woke);
  }
}

// Inline into HandleNext, its one caller (a call less per message).
[[gnu::always_inline]] inline std::span<const uint8_t> Worker::CopyRequest(ConnState& cs, const Completion& c) {
  uint32_t len;
  // A ring's request: the client wrote it and may write it again at any
  // time; the only read of it is this copy.
  const uint8_t* src = MessageAt(cs, c, &len);
  if (src == nullptr || len == 0) [[unlikely]] {
    RefuseUnreadable(cs, c, src == nullptr, len);
    return {};
  }
  RacyLoad(request_.get(), src, len);  // the ring may be written meanwhile (by design, harmless)
  return {request_.get(), len};
}

// A message CopyRequest cannot read: a ring position or length out of range,
// or no bytes at all (answered like any short request). Out of line, as the
// other error paths of the request path: their messages are built only
// here (inline, the string code made every message save all registers).
void Worker::RefuseUnreadable(ConnState& cs, const Completion& c, bool out_of_range, uint32_t len) {
  counters_.errors.fetch_add(1, std::memory_order_relaxed);
  if (!out_of_range) return ReplyError(cs, 0, Status::InvalidArgument("request shorter than its header (0 bytes)"));
  ReplyError(cs, 0,
             Status::InvalidArgument("ring position " + std::to_string(c.imm >> 24) + " / length " +
                                     std::to_string(len) + " out of range (" + std::to_string(cfg_.credits) +
                                     " positions of " + std::to_string(cfg_.message_bytes) + " bytes)"));
}

void Worker::LogRepostFailure(const Status& st) {
  KVRDMA_LOG_ERROR("worker %u: reposting a receive buffer failed: %s", index_, st.ToString().c_str());
}

// Inline into ServeRound, its one caller (a call less per message).
[[gnu::always_inline]] inline void Worker::HandleNext(ConnState& cs) {
  const Completion c = cs.pending[cs.pending_head];
  if (++cs.pending_head == cs.pending.size()) cs.pending_head = 0;  // a ring: no division per message
  --cs.pending_count;
  std::span<const uint8_t> msg = CopyRequest(cs, c);
  // The request is copied (or answered): its receive buffer is free again.
  if (Status st = pool_.Repost(c.wr_id); !st.ok()) [[unlikely]] LogRepostFailure(st);
  if (!msg.empty()) HandleRequest(cs, msg);
}

void Worker::ServeRound() {
  const size_t end = ready_.size();
  while (ready_head_ < end) {
    ConnState* cs = ready_[ready_head_++];
    if (cs->rendezvous_count > 0 && !cs->qp->broken() && !TakesBehindRendezvous(*cs)) {
      // Waits for the connection's rendezvous PUTs (OnRendezvousRead puts it back).
      cs->in_ready = false;
      continue;
    }
    if (!cs->qp->broken()) HandleNext(*cs);
    if (cs->qp->broken()) {
      DropPending(*cs);
    } else if (cs->pending_count > 0) {
      ready_.push_back(cs);  // within the capacity reserved at Add
      continue;
    }
    cs->in_ready = false;
  }
  ready_.erase(ready_.begin(), ready_.begin() + static_cast<ptrdiff_t>(ready_head_));
  ready_head_ = 0;
}

void Worker::DropPending(ConnState& cs) {
  for (; cs.pending_count > 0; --cs.pending_count) {
    const Completion& c = cs.pending[cs.pending_head];
    cs.pending_head = (cs.pending_head + 1) % static_cast<uint32_t>(cs.pending.size());
    if (Status st = pool_.Repost(c.wr_id); !st.ok()) {
      KVRDMA_LOG_ERROR("worker %u: reposting a receive buffer failed: %s", index_, st.ToString().c_str());
    }
  }
}

void Worker::ExpireAssemblies(int64_t now_ms) {
  last_expiry_ms_ = now_ms;
  for (ConnState* c : conns_.all()) {
    // The timeout counts from the assembly's last fragment: one whose
    // fragments keep coming is never dropped, however long the value.
    if (c->assembly.active() && now_ms - c->assembly.last_fragment_ms() > int64_t{cfg_.assembly_timeout_ms}) {
      KVRDMA_LOG_DEBUG("worker %u: connection %u abandoned a fragmented PUT", index_, c->id);
      c->assembly.Release(assembly_budget_);
      counters_.errors.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void Worker::RequestClose(ConnState& cs, ConnState::CloseReason why) {
  auto none = ConnState::CloseReason::kNone;
  // The reason first: the manager may learn of the disconnect below (its
  // DISCONNECTED event) before its next CloseFailedConnections, and counts
  // the close by this reason.
  cs.close_reason.compare_exchange_strong(none, why, std::memory_order_release);
  // Disconnect now, not at the manager's next pass (up to ~100 ms later):
  // meanwhile a flooding client's every message was still received, polled
  // and reposted here, in turn with the honest clients' messages. The QP
  // stops receiving and the client learns at once; the manager still owns
  // the connection and frees it after Remove.
  if (!cs.qp->broken()) cs.qp->Disconnect();
}

void Worker::OnReceive(const Completion& c) {
  ConnState* cs = Find(c.qp_num);
  // More messages in flight than credits: the client sent this one before
  // taking the reply to the message `credits` before it (that reply was not
  // even posted yet). Its messages would hold SRQ buffers and worker turns
  // that other connections are owed: it is closed (DropReceive).
  if (c.status != WcStatus::kSuccess || cs == nullptr || cs->qp->broken() ||
      cs->received - cs->replies_posted >= cfg_.credits || cs->pending_count >= cs->pending.size()) [[unlikely]] {
    return DropReceive(c, cs);
  }
  ++cs->received;
  // head and count are both below the ring's size (checked above): one
  // wrap at most, no division per message.
  size_t slot = size_t{cs->pending_head} + cs->pending_count;
  if (slot >= cs->pending.size()) slot -= cs->pending.size();
  cs->pending[slot] = c;
  ++cs->pending_count;
  if (!cs->in_ready) {
    cs->in_ready = true;
    ready_.push_back(cs);
  }
}

// A receive that is not queued: its QP failed, its connection is gone or
// broken, or the client sent more messages than its credits (closed). The
// buffer goes back to the SRQ.
void Worker::DropReceive(const Completion& c, ConnState* cs) {
  if (c.status != WcStatus::kSuccess) {
    // A receive consumed by a QP that failed.
    if (c.status != WcStatus::kFlushed) {
      KVRDMA_LOG_WARN("worker %u: receive failed on qp %u: %s", index_, c.qp_num, WcStatusName(c.status));
      if (cs != nullptr) RequestClose(*cs, ConnState::CloseReason::kQpFailed);
    }
  } else if (cs != nullptr && !cs->qp->broken()) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    KVRDMA_LOG_DEBUG("worker %u: connection %u sent more messages than its %u credits", index_, cs->id,
                     cfg_.credits);
    RequestClose(*cs, ConnState::CloseReason::kOverCredits);
  }
  if (Status st = pool_.Repost(c.wr_id); !st.ok()) LogRepostFailure(st);
}

const uint8_t* Worker::MessageAt(const ConnState& cs, const Completion& c, uint32_t* len) const {
  if (c.opcode != WrOpcode::kRecvWriteImm) {
    *len = std::min(c.byte_len, cfg_.message_bytes);
    return pool_.Buffer(c.wr_id);
  }
  const uint32_t pos = c.imm >> 24;
  *len = c.imm & 0xffffff;
  if (pos >= cfg_.credits || *len > cfg_.message_bytes) return nullptr;
  return cs.ring.get() + size_t{pos} * cfg_.message_bytes;
}

}  // namespace kvrdma::server
