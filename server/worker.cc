#include "server/worker.h"

#include <pthread.h>

#include <chrono>
#include <cstring>

#include "common/log.h"

namespace kvrdma::server {
namespace {

constexpr uint64_t kReplyTag = 1ull << 63;  // wr_id of reply SENDs (receives: buffer index)
constexpr uint32_t kSignalEvery = 16;       // selective signaling of inline replies
constexpr int kSpinPolls = 4000;            // empty polls before blocking on the channel
// The slot field of an inline reply's wr_id: its buffer was free at post.
constexpr uint32_t kInlineReply = 0xffffffffu;
// Non-inline replies (STATS) unacknowledged per connection at most: a client
// has one STATS in flight (plus one whose completion is not reaped yet).
constexpr uint32_t kMaxLargePending = 4;

uint64_t PeekRequestId(std::span<const uint8_t> msg) {
  uint64_t id = 0;
  if (msg.size() >= 16) {
    for (int i = 0; i < 8; ++i) id |= uint64_t{msg[8 + i]} << (8 * i);
  }
  return id;
}

}  // namespace

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Status LockView::Check(std::span<const uint8_t> key, uint64_t token) const {
  if (words == nullptr) return Status::OK();
  std::string_view k(reinterpret_cast<const char*>(key.data()), key.size());
  uint64_t word = __atomic_load_n(&words[LockWordIndex(k, seed, slots)], __ATOMIC_ACQUIRE);
  uint64_t now = __atomic_load_n(&words[0], __ATOMIC_ACQUIRE);
  if (LockAllows(word, token, now)) return Status::OK();
  return Status::Locked("the key is locked by another client (lease ends in " +
                        std::to_string(LockExpiry(word) - now) + " ms)");
}

Worker::Worker(uint32_t index, const ServerConfig& cfg, Backend& backend, ServerCounters& counters,
               ReceivePool pool, LockView locks, std::unique_ptr<CompletionQueue> cq,
               std::unique_ptr<MemoryRegion> reply_mr)
    : index_(index),
      cfg_(cfg),
      backend_(backend),
      counters_(counters),
      pool_(pool),
      locks_(locks),
      cq_(std::move(cq)),
      reply_mr_(std::move(reply_mr)) {}

Worker::~Worker() {
  Stop();
  std::lock_guard<std::mutex> g(mu_);
  conns_.clear();
}

void Worker::Start() { thread_ = std::thread([this] { Run(); }); }

void Worker::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void Worker::Add(std::shared_ptr<ConnState> c, uint32_t qp_num) {
  std::lock_guard<std::mutex> g(mu_);
  conns_[qp_num] = std::move(c);
}

void Worker::Remove(uint32_t qp_num) {
  std::shared_ptr<ConnState> gone;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = conns_.find(qp_num);
    if (it == conns_.end()) return;
    gone = std::move(it->second);
    conns_.erase(it);
  }
  // `gone` may be the last reference: the QP is destroyed here, outside mu_.
}

std::shared_ptr<ConnState> Worker::Lookup(uint32_t qp_num) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = conns_.find(qp_num);
  return it == conns_.end() ? nullptr : it->second;
}

void Worker::Run() {
  pthread_setname_np(pthread_self(), ("kv-worker-" + std::to_string(index_)).c_str());
  Completion wc[32];
  int empty = kSpinPolls;  // start asleep
  for (;;) {
    int n = cq_->Poll(wc);
    if (n > 0) {
      for (int i = 0; i < n; ++i) Handle(wc[i]);
      empty = 0;
      continue;
    }
    if (n < 0) KVRDMA_LOG_ERROR("worker %u: polling the completion queue failed", index_);
    if (stop_.load(std::memory_order_relaxed)) break;  // nothing left in flight
    // After work, poll briefly (the next request is likely close); then
    // sleep on the completion channel until a completion arrives: a GET-only
    // load sends no messages and must leave kvserver's CPU idle. A wait that
    // times out (to notice stop_) goes straight back to sleep.
    if (++empty < kSpinPolls) continue;
    (void)cq_->Wait(100);
    empty = kSpinPolls;
  }
}

void Worker::RequestClose(ConnState& cs, ConnState::CloseReason why) {
  cs.qp->MarkBroken();
  auto none = ConnState::CloseReason::kNone;
  cs.close_reason.compare_exchange_strong(none, why, std::memory_order_relaxed);
}

void Worker::Handle(const Completion& c) {
  if (c.wr_id & kReplyTag) {  // a signaled (or flushed) reply SEND completed
    uint32_t slot = static_cast<uint32_t>(c.wr_id & ~kReplyTag);
    const bool large = slot < kReplySlots;
    if (large) reply_busy_[slot] = false;
    if (auto cs = Lookup(c.qp_num)) {
      if (large && cs->large_pending > 0) --cs->large_pending;
      uint32_t pending = cs->signaled_pending.load(std::memory_order_relaxed);
      if (pending > 0) cs->signaled_pending.store(pending - 1, std::memory_order_relaxed);
      cs->reply_progress_ms.store(SteadyMs(), std::memory_order_relaxed);
      if (c.status != WcStatus::kSuccess) RequestClose(*cs, ConnState::CloseReason::kQpFailed);
    }
    return;
  }
  uint64_t buf = c.wr_id;
  if (c.status != WcStatus::kSuccess) {
    // A receive consumed by a QP that failed: the buffer goes back to the SRQ.
    if (c.status != WcStatus::kFlushed) {
      KVRDMA_LOG_WARN("worker %u: receive failed on qp %u: %s", index_, c.qp_num, WcStatusName(c.status));
      if (auto cs = Lookup(c.qp_num)) RequestClose(*cs, ConnState::CloseReason::kQpFailed);
    }
    (void)pool_.Repost(buf);
    return;
  }
  std::shared_ptr<ConnState> cs = Lookup(c.qp_num);
  if (cs && !cs->qp->broken()) {
    if (c.opcode == WrOpcode::kRecvWriteImm) {
      uint32_t slot = c.imm >> 24;
      uint32_t len = c.imm & 0xffffff;
      if (slot >= cfg_.credits || len > cfg_.slot_bytes) {
        counters_.errors.fetch_add(1, std::memory_order_relaxed);
        ReplyError(*cs, 0,
                   Status::InvalidArgument("ring slot " + std::to_string(slot) + " / length " + std::to_string(len) +
                                           " out of range (" + std::to_string(cfg_.credits) + " slots of " +
                                           std::to_string(cfg_.slot_bytes) + " bytes)"));
      } else {
        HandleMessage(*cs, {cs->ring.get() + size_t{slot} * cfg_.slot_bytes, len});
      }
    } else {
      HandleMessage(*cs, {pool_.Buffer(buf), c.byte_len});
    }
  }
  if (Status st = pool_.Repost(buf); !st.ok()) {
    KVRDMA_LOG_ERROR("worker %u: reposting a receive buffer failed: %s", index_, st.ToString().c_str());
  }
}

void Worker::HandleMessage(ConnState& cs, std::span<const uint8_t> msg) {
  metrics::ServiceTimer service_timer(counters_.request_metrics.service_time(index_));
  auto parsed = ParseRequest(msg, cfg_.max_key_bytes, cfg_.max_value_bytes);
  if (!parsed.ok()) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    cs.assembling = false;
    ReplyError(cs, PeekRequestId(msg), parsed.status());
    return;
  }
  const RequestHeader& h = parsed->header;
  ReplyHeader rh;
  rh.request_id = h.request_id;
  Status st;
  switch (h.opcode) {
    case Opcode::kStats: {
      std::vector<std::pair<std::string_view, uint64_t>> s = {
          {"connections", counters_.connections.load()},
          {"connections_total", counters_.connections_total.load()},
          {"closed_failed", counters_.closed_failed.load()},
          {"closed_flow_control", counters_.closed_flow_control.load()},
          {"puts", counters_.puts.load()},
          {"deletes", counters_.deletes.load()},
          {"errors", counters_.errors.load()},
      };
      backend_.AppendStats(&s);
      uint8_t body[kMaxReplySize - kReplyHeaderSize];
      size_t n = EncodeStats(s, body);
      Reply(cs, rh, {body, n});
      return;
    }
    case Opcode::kDelete:
      st = locks_.Check(parsed->key, h.lock_token);
      if (st.ok()) st = backend_.Delete(index_, parsed->key, &rh.version);
      if (st.ok()) counters_.deletes.fetch_add(1, std::memory_order_relaxed);
      break;
    case Opcode::kPut: {
      bool first = h.flags & kFlagFirst, last = h.flags & kFlagLast;
      if (first && last) {
        st = locks_.Check(parsed->key, h.lock_token);
        if (st.ok()) st = backend_.Put(index_, parsed->key, parsed->value, &rh.version);
      } else {
        if (first) {
          cs.assembling = true;
          cs.asm_request = h.request_id;
          cs.asm_key.assign(parsed->key.begin(), parsed->key.end());
          cs.asm_value.resize(h.value_len);
          cs.asm_received = 0;
        } else if (!cs.assembling || cs.asm_request != h.request_id || h.frag_offset != cs.asm_received) {
          cs.assembling = false;
          counters_.errors.fetch_add(1, std::memory_order_relaxed);
          ReplyError(cs, h.request_id, Status::InvalidArgument("value fragment out of order"));
          return;
        }
        if (!parsed->value.empty()) {
          std::memcpy(cs.asm_value.data() + h.frag_offset, parsed->value.data(), parsed->value.size());
        }
        cs.asm_received += h.frag_len;
        if (!last) {
          rh.flags = kReplyFragmentAck;
          Reply(cs, rh, {});
          return;
        }
        cs.assembling = false;
        st = locks_.Check(cs.asm_key, h.lock_token);
        if (st.ok()) st = backend_.Put(index_, cs.asm_key, cs.asm_value, &rh.version);
      }
      if (st.ok()) counters_.puts.fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  if (!st.ok()) {
    if (!st.IsNotFound() && st.code() != Status::Code::kLocked) {
      counters_.errors.fetch_add(1, std::memory_order_relaxed);
    }
    ReplyError(cs, h.request_id, st);
    return;
  }
  Reply(cs, rh, {});
}

void Worker::ReplyError(ConnState& cs, uint64_t request_id, const Status& st) {
  counters_.request_metrics.CountFailure(st.code());
  ReplyHeader h;
  h.status = st.code();
  h.request_id = request_id;
  const std::string& m = st.message();
  Reply(cs, h, {reinterpret_cast<const uint8_t*>(m.data()), m.size()});
}

void Worker::Reply(ConnState& cs, const ReplyHeader& h, std::span<const uint8_t> body) {
  const bool inline_data = kReplyHeaderSize + body.size() <= cs.qp->max_inline();
  if (!inline_data && cs.large_pending >= kMaxLargePending) {
    // Its earlier large replies are not acknowledged: the client is not
    // receiving (more requests than credits). It must not hold more of the
    // worker's reply buffers, which every connection shares.
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    KVRDMA_LOG_DEBUG("worker %u: connection %u does not take its replies", index_, cs.id);
    RequestClose(cs, ConnState::CloseReason::kProtocol);
    return;
  }
  // Find a free reply buffer (busy ones wait for their signaled completion).
  for (uint32_t tries = 0; reply_busy_[next_reply_]; ++tries) {
    next_reply_ = (next_reply_ + 1) % kReplySlots;
    if (tries >= kReplySlots) {
      Completion wc[16];
      int n = cq_->Poll(wc);
      for (int i = 0; i < n; ++i) Handle(wc[i]);
      tries = 0;
    }
  }
  uint32_t slot = next_reply_;
  next_reply_ = (next_reply_ + 1) % kReplySlots;
  auto* buf = static_cast<uint8_t*>(reply_mr_->addr()) + size_t{slot} * kMaxReplySize;
  size_t len = EncodeReply(h, body, {buf, kMaxReplySize});
  SendWr w;
  w.wr_id = kReplyTag | (inline_data ? kInlineReply : slot);
  w.opcode = WrOpcode::kSend;
  w.local = reply_mr_->Slice(size_t{slot} * kMaxReplySize, static_cast<uint32_t>(len));
  w.inline_data = inline_data;
  // Inline data is copied at post time, so the buffer is free at once; only
  // every kSignalEvery-th inline reply asks for a completion (to free send
  // queue slots, and to show the client takes its replies). A non-inline
  // reply holds its buffer until it completes.
  w.signaled = !w.inline_data || ++cs.unsignaled >= kSignalEvery;
  if (w.signaled) {
    cs.unsignaled = 0;
    reply_busy_[slot] = !w.inline_data;
  }
  if (Status st = cs.qp->PostSend({&w, 1}); !st.ok()) {
    // A broken QP, or a send queue full of replies the client does not take.
    reply_busy_[slot] = false;
    KVRDMA_LOG_DEBUG("worker %u: reply to connection %u not sent: %s", index_, cs.id, st.ToString().c_str());
    RequestClose(cs, ConnState::CloseReason::kQpFailed);
    return;
  }
  if (w.signaled) {
    if (cs.signaled_pending.load(std::memory_order_relaxed) == 0) {
      cs.reply_progress_ms.store(SteadyMs(), std::memory_order_relaxed);
    }
    // Release: a manager that sees this reply pending also sees the time
    // stored above, not the one of a reply that completed long ago.
    cs.signaled_pending.fetch_add(1, std::memory_order_release);
    if (!w.inline_data) ++cs.large_pending;
  }
}

}  // namespace kvrdma::server
