// Replies: one per request, posted in request order on the request's own
// connection, from that connection's own reply buffers.
//
// A reply never waits. Replies are queued while the worker handles a batch
// of completions and posted together at its end, one PostSend per
// connection. An inline reply (header + short body) is copied into the work
// request at post time and needs no buffer afterwards. A large
// reply (STATS) holds one of the connection's ReplyBufferCount(credits)
// buffers until its SEND completes; finding the next one still busy means
// the client does not take its replies (DESIGN.md, "Replies"), and that
// connection alone is closed. Nothing here polls the completion queue.
#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/protocol/wire.h"
#include "server/worker.h"

namespace kvrdma::server {
namespace {

constexpr uint32_t kInlineReply = 0xffffffffu;  // wr_id low bits of an inline reply: no buffer
// Selective signaling of inline replies: one in every min(kSignalEvery,
// credits). With at most `credits` apart, any `credits` replies in a row
// include a signaled one, so a client that holds as many replies as its
// credits (all it may have outstanding) always holds one the watchdog
// follows. At one in 16 with 8 credits, a client that sent its 8 requests
// and posted no receive held only unsignaled replies and was never closed
// (bench/fairness, "hold").
constexpr uint32_t kSignalEvery = 16;

}  // namespace

// QueueReply and ReplyWritten: inline into Reply and ReplyEncoded, their
// two callers (a call, and its saved registers, less per reply).
[[gnu::always_inline]] inline uint8_t* Worker::QueueReply(ConnState& cs, size_t len) {
  ConnState::Replies& r = cs.replies;
  const uint32_t buffers = static_cast<uint32_t>(r.busy.size());
  const bool inline_data = len <= cs.qp->max_inline();
  // An inline reply is encoded in the scratch buffer of its place in the
  // queue, after the large-reply buffers (copied into the work request when
  // posted).
  uint32_t buffer = buffers + static_cast<uint32_t>(r.queued.size());
  if (!inline_data) {
    buffer = static_cast<uint32_t>(r.large_sent % buffers);
    if (r.busy[buffer]) {
      counters_.errors.fetch_add(1, std::memory_order_relaxed);
      KVRDMA_LOG_DEBUG("worker %u: connection %u does not take its replies", index_, cs.id);
      RequestClose(cs, ConnState::CloseReason::kProtocol);
      return nullptr;
    }
  }
  SendWr& w = r.queued.emplace_back();  // within the kReplyBatch reserved at accept
  w.wr_id = kReplyTag | (inline_data ? kInlineReply : buffer);
  w.opcode = WrOpcode::kSend;
  w.local = cs.reply_mr->Slice(size_t{buffer} * kMaxReplySize, static_cast<uint32_t>(len));
  w.inline_data = inline_data;
  // Only one inline reply in min(kSignalEvery, credits) asks for a
  // completion (to free send-queue room, and to show the client takes its
  // replies); a large reply always does, to free its buffer.
  w.signaled = !inline_data || ++r.unsignaled >= std::min(kSignalEvery, cfg_.credits);
  if (w.signaled && inline_data) r.unsignaled = 0;
  if (!inline_data) {
    r.busy[buffer] = 1;
    ++r.large_sent;
  }
  if (r.queued.size() == 1) reply_queued_.push_back(&cs);
  return static_cast<uint8_t*>(cs.reply_mr->addr()) + size_t{buffer} * kMaxReplySize;
}

[[gnu::always_inline]] inline void Worker::ReplyWritten(ConnState& cs) {
  if (cs.replies.queued.size() == kReplyBatch) FlushReplies(cs);  // the scratch buffers are all in use
}

void Worker::ReplyError(ConnState& cs, uint64_t request_id, const Status& st, uint64_t version) {
  counters_.request_metrics.CountFailure(st.code());
  ReplyHeader h;
  h.status = st.code();
  h.request_id = request_id;
  h.version = version;
  const std::string& m = st.message();
  // Error texts are cut to what fits inline, so errors never hold a buffer.
  size_t room = cs.qp->max_inline() > kReplyHeaderSize ? cs.qp->max_inline() - kReplyHeaderSize : m.size();
  Reply(cs, h, {reinterpret_cast<const uint8_t*>(m.data()), std::min(m.size(), room)});
}

void Worker::Reply(ConnState& cs, const ReplyHeader& h, std::span<const uint8_t> body) {
  // Encoded straight into the buffer it is sent from (EncodeReply's length:
  // the header and as much of the body as fits kMaxReplySize), not into the
  // stack and copied there.
  const size_t len = kReplyHeaderSize + std::min(body.size(), kMaxReplySize - kReplyHeaderSize);
  uint8_t* buf = QueueReply(cs, len);
  if (buf == nullptr) return;
  EncodeReply(h, body, {buf, kMaxReplySize});  // inline (messages.h)
  ReplyWritten(cs);
}

void Worker::ReplyEncoded(ConnState& cs, std::span<const uint8_t> reply) {
  const size_t len = std::min(reply.size(), kMaxReplySize);
  uint8_t* buf = QueueReply(cs, len);
  if (buf == nullptr) return;
  std::memcpy(buf, reply.data(), len);
  ReplyWritten(cs);
}

void Worker::FlushReplies() {
  for (ConnState* cs : reply_queued_) FlushReplies(*cs);
  reply_queued_.clear();
}

// Posts cs's queued replies in request order with one doorbell (on Soft-RoCE
// one system call for the batch instead of one per reply).
void Worker::CommitWrites() {
  const Status st = backend_.Commit(index_);
  if (!st.ok()) {
    // Applied, but perhaps not durable: the client hears IOError, which
    // (like ConnectionLost) leaves the outcome open; a later Commit writes
    // them again (DESIGN "Durability", "Disk errors").
    KVRDMA_LOG_WARN("worker %u: %zu writes not made durable: %s", index_, awaiting_.size(), st.ToString().c_str());
    for (const Awaiting& a : awaiting_) {
      ConnState::Replies& r = a.cs->replies;
      if (a.queued >= r.queued.size()) continue;
      if (a.records) {
        // A reply of several records, still unposted where w.local says: each
        // OK record becomes IOError in place (no text: the records' lengths
        // stay), the refused ones keep their own status.
        const SendWr& w = r.queued[a.queued];
        auto* rec = reinterpret_cast<uint8_t*>(w.local.addr);
        for (size_t off = 0; off + kReplyHeaderSize <= w.local.length;) {
          if (rec[off] == static_cast<uint8_t>(Status::Code::kOk)) {
            rec[off] = static_cast<uint8_t>(st.code());
            counters_.request_metrics.CountFailure(st.code());
            counters_.errors.fetch_add(1, std::memory_order_relaxed);
          }
          wire::Reader body_len({rec + off + 4, 4});  // the record's body length (messages.cc)
          off += kReplyHeaderSize + body_len.U32();
        }
        continue;
      }
      counters_.request_metrics.CountFailure(st.code());
      counters_.errors.fetch_add(1, std::memory_order_relaxed);
      ReplyHeader h;
      h.status = st.code();
      h.request_id = a.request_id;
      const std::string m = "not made durable: " + st.message();
      const size_t room = a.cs->qp->max_inline() > kReplyHeaderSize ? a.cs->qp->max_inline() - kReplyHeaderSize : 0;
      SendWr& w = r.queued[a.queued];
      const uint32_t buffer = static_cast<uint32_t>(r.busy.size()) + a.queued;
      auto* buf = static_cast<uint8_t*>(a.cs->reply_mr->addr()) + size_t{buffer} * kMaxReplySize;
      const size_t len = EncodeReply(h, {reinterpret_cast<const uint8_t*>(m.data()), std::min(m.size(), room)},
                                     {buf, kMaxReplySize});
      w.local = a.cs->reply_mr->Slice(size_t{buffer} * kMaxReplySize, static_cast<uint32_t>(len));
    }
  }
  awaiting_.clear();
}

void Worker::FlushReplies(ConnState& cs) {
  ConnState::Replies& r = cs.replies;
  if (r.queued.empty()) return;
  // No reply leaves before the writes this worker applied are durable (they
  // may be answered in another connection's queue: one Commit for all).
  if (!awaiting_.empty()) CommitWrites();
  if (Status st = cs.qp->PostSend({r.queued.data(), r.queued.size()}); !st.ok()) {
    // A broken QP, or a send queue full of replies the client does not take.
    KVRDMA_LOG_DEBUG("worker %u: replies to connection %u not sent: %s", index_, cs.id, st.ToString().c_str());
    RequestClose(cs, ConnState::CloseReason::kQpFailed);
  } else {
    // The credits of these replies' messages can come back from now on.
    cs.replies_posted += r.queued.size();
    // The reply watchdog's clock starts here, when the client can take the
    // reply, not when it was queued (a batch may take long).
    uint32_t signaled = 0;
    for (const SendWr& w : r.queued) signaled += w.signaled;
    if (signaled > 0) {
      if (cs.signaled_pending.load(std::memory_order_relaxed) == 0) {
        cs.reply_progress_ms.store(SteadyMs(), std::memory_order_relaxed);
      }
      // Release: a manager that sees this reply pending also sees the time
      // stored above, not the one of a reply that completed long ago.
      cs.signaled_pending.fetch_add(signaled, std::memory_order_release);
    }
  }
  r.queued.clear();
}

void Worker::OnReplySent(const Completion& c) {
  static_assert(kMwBindWrId == (kReplyTag | kInlineReply), "a failed window bind is a failed inline reply");
  ConnState* cs = Find(c.qp_num);
  if (cs == nullptr) return;  // closed meanwhile: its buffers went with it
  const uint32_t buffer = static_cast<uint32_t>(c.wr_id & ~kReplyTag);
  if (buffer < cs->replies.busy.size()) cs->replies.busy[buffer] = 0;
  uint32_t pending = cs->signaled_pending.load(std::memory_order_relaxed);
  if (pending > 0) cs->signaled_pending.store(pending - 1, std::memory_order_relaxed);
  cs->reply_progress_ms.store(SteadyMs(), std::memory_order_relaxed);
  if (c.status != WcStatus::kSuccess) RequestClose(*cs, ConnState::CloseReason::kQpFailed);
}

}  // namespace kvrdma::server
