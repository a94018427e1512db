// Per-connection state on the server.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/protocol/handshake.h"
#include "common/protocol/messages.h"
#include "common/transport/transport.h"
#include "server/assembly.h"

namespace kvrdma::server {

// Rendezvous PUTs of one connection taken at once (their READs in flight, or
// refused and waiting for their turn to be answered): the next one's READ
// runs while the worker applies the one before (DESIGN.md, "Several at once").
inline constexpr uint32_t kRendezvousPerConnection = 2;

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

// Replies a connection queues in one completion batch before they are posted
// (then the next ones queue again): the inline scratch buffers it needs.
inline constexpr uint32_t kReplyBatch = 8;

// Owned by the connection manager (Server). Its worker refers to it by a raw
// pointer from Worker::Add until it has applied Worker::Remove, then sets
// `released`; only after that does the manager destroy it (deferred free), so
// the worker never takes a reference count or a lock per completion.
struct ConnState {
  uint32_t id = 0;
  uint32_t worker = 0;
  std::string peer;  // the client's address (ConnectRequest::peer_address)
  PutPath put_path = PutPath::kSend;
  // Members are destroyed in reverse declaration order: the ring's window
  // first, then the QP (conn), so the NIC no longer touches the ring or the
  // reply buffers when they go.
  std::unique_ptr<uint8_t, FreeDeleter> ring;  // credits * message_bytes, this connection's only
  std::unique_ptr<MemoryRegion> ring_mr;       // local write + window binding: no usable rkey
  // This connection's reply buffers: ReplyBufferCount(credits) large-reply
  // buffers + kReplyBatch scratch buffers for inline replies queued in one
  // batch, kMaxReplySize each (local only).
  std::unique_ptr<uint8_t, FreeDeleter> reply_mem;
  std::unique_ptr<MemoryRegion> reply_mr;
  std::unique_ptr<Connection> conn;  // set by the manager once Accept returns
  // REMOTE_WRITE over the ring through this connection's QP only (type 2,
  // bound at accept): its rkey is the ring rkey the client gets, and the NIC
  // refuses it on every other QP (docs/SECURITY.md, "Writes"). Declared after
  // conn: it must go before the QP it is bound to (MemoryWindow).
  std::unique_ptr<MemoryWindow> ring_mw;
  // The same connection, published to the worker (Worker::Add) before the
  // accept reaches the client; workers use only this.
  Connection* qp = nullptr;
  uint32_t qp_num = 0;

  // --- touched only by the owning worker ---
  Assembly assembly;  // a PUT arriving in fragments
  // Flow control (DESIGN.md, "Flow control"): messages received and replies
  // posted on this connection. A client sends message k only after it took
  // the reply to message k - credits, which the worker had posted before, so
  // received - replies_posted never exceeds credits for a client that keeps
  // to its credits; the message that would exceed them closes the connection.
  uint64_t received = 0;
  uint64_t replies_posted = 0;
  // Received messages not yet handled, oldest first (at most credits: the
  // limit above): their receive completions, whose SRQ buffers are reposted
  // as each is handled. The worker serves its connections round robin, one
  // message each per round (Worker::ServeRound).
  std::vector<Completion> pending;  // credits entries, sized at accept
  uint32_t pending_head = 0;
  uint32_t pending_count = 0;
  bool in_ready = false;  // on the worker's ready list
  // The connection's rendezvous PUTs taken and not yet answered
  // (Worker::HandleRendezvous), oldest first: the worker's slots they hold,
  // rendezvous_slots[0, rendezvous_count). Their READs complete in this
  // order (one QP's). While there is one, the connection's next message is
  // taken only if it is another rendezvous PUT (up to
  // kRendezvousPerConnection, Worker::TakesBehindRendezvous); any other
  // waits until all are answered: replies stay in request order.
  std::array<uint8_t, kRendezvousPerConnection> rendezvous_slots{};
  uint32_t rendezvous_count = 0;
  struct Replies {
    std::vector<uint8_t> busy;  // per large-reply buffer: its SEND is not completed
    uint64_t large_sent = 0;    // large replies posted (the next uses buffer large_sent % busy.size())
    uint32_t unsignaled = 0;    // inline replies posted since the last signaled one
    // Replies of the current completion batch, posted together when it ends
    // (Worker::FlushReplies): one doorbell per connection per batch. At most
    // kReplyBatch (Worker::ReplyWritten posts a full batch); an inline reply
    // queued as the i-th is encoded in scratch buffer i.
    struct Queued {
      std::array<SendWr, kReplyBatch> wr;
      uint32_t n = 0;
      // REQUIRES: size() < kReplyBatch. The new request is all defaults.
      SendWr& emplace_back() {
        wr[n] = SendWr{};
        return wr[n++];
      }
      uint32_t size() const { return n; }
      bool empty() const { return n == 0; }
      void clear() { n = 0; }
      SendWr* data() { return wr.data(); }
      SendWr& operator[](size_t i) { return wr[i]; }
      const SendWr* begin() const { return wr.data(); }
      const SendWr* end() const { return wr.data() + n; }
    } queued;
  } replies;

  // --- written by the owning worker, read by the connection manager ---
  // Signaled replies posted and not completed, and when the last one was
  // posted with none pending or completed (steady clock, ms): a reply that
  // stays unacknowledged past reply_timeout_ms, counted from its post to the
  // worker's last complete poll of its CQ (Worker::caught_up_ms), closes the
  // connection.
  std::atomic<uint32_t> signaled_pending{0};
  std::atomic<int64_t> reply_progress_ms{0};
  // Set when the connection must end; the manager then closes it.
  // kProtocol: its replies wait for buffers it does not post; kOverCredits:
  // more messages in flight than its credits.
  enum class CloseReason : uint8_t { kNone, kQpFailed, kProtocol, kOverCredits };
  std::atomic<CloseReason> close_reason{CloseReason::kNone};
  // Set by the worker once it has forgotten this connection (Worker::Remove).
  std::atomic<bool> released{false};
};

// Large-reply buffers per connection: twice its credits. A client that
// follows the protocol has at most `credits` replies outstanding, so the
// buffer a reply needs was last used `credits` requests before it had even
// sent this one: finding it still busy means the client does not take its
// replies (DESIGN.md, "Replies").
constexpr uint32_t ReplyBufferCount(uint32_t credits) { return 2 * credits; }
// Bytes of a connection's reply memory: the large-reply buffers, then the
// kReplyBatch inline scratch buffers.
constexpr size_t ReplyMemoryBytes(uint32_t credits) {
  return size_t{ReplyBufferCount(credits) + kReplyBatch} * kMaxReplySize;
}

}  // namespace kvrdma::server
