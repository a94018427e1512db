// Rendezvous PUTs (protocol 10.1, common/protocol/messages.h): the client
// names a memory window it bound READ-only over its value on its own QP; the
// worker READs the value through the request's own connection, never
// blocking on it, and applies the PUT when the READ completes. Where the
// READ lands:
//
//   in place   (a memory-only store: Backend::takes_values_in_place) the
//              value's own place in the log: BeginPut reserves the entry
//              and writes all of it but the value; no copy follows
//   staging    (a durable store) a slot of the worker's own; the store
//              copies it into the log
//
//   HandleRendezvous   a free slot (else NoResource), the place (in place),
//                      the READ posted (signaled), the connection's next
//                      messages held back but for another rendezvous PUT
//                      (TakesBehindRendezvous: its READ runs while this
//                      one is applied; refused, it is answered in its turn)
//   OnRendezvousRead   the checksum over the server's copy against the
//                      client's (a value changed during the READ: refused,
//                      nothing published), with the same lock check,
//                      condition, store write, durability and reply as any
//                      whole PUT (Apply); a READ that failed abandons its
//                      place
//   ExpireRendezvous   a READ past assembly_timeout_ms closes its
//                      connection (its flushed completion gives the slot
//                      back); a removed connection's slot comes back after
//                      that long even if its completion never does
//
// Either destination is the server's memory, registered for local write
// only: no client can write it (the log's rkey grants remote READ only), and
// the client's window only reaches the client's own memory. A READ writes
// nothing but the value's bytes (its local length is value_len). A place
// stays pinned (the cleaner does not claim its segment) until its READ is
// over: completed, or its QP destroyed (the slot's expiry). Bounds:
// kRendezvousPerConnection READs per connection (its later messages wait,
// and the credits bound those), kRendezvousSlots per worker, a connection's
// second only while fewer than half of them are busy.
#include <string>

#include "common/log.h"
#include "common/memory/racy_copy.h"
#include "server/worker.h"

namespace kvrdma::server {

void Worker::SetRendezvous(MemoryRegion* staging, MemoryRegion* log) {
  rdv_mr_ = staging;
  log_mr_ = backend_.takes_values_in_place() ? log : nullptr;
  rdv_.assign(rdv_mr_ != nullptr || log_mr_ != nullptr ? kRendezvousSlots : 0, RendezvousSlot{});
  for (RendezvousSlot& s : rdv_) s.key.reserve(cfg_.max_key_bytes);
}

void Worker::HandleRendezvous(ConnState& cs, const ParsedRequest& r) {
  const RequestHeader& h = r.header;
  if (rdv_.empty()) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return ReplyError(cs, h.request_id, Status::Unavailable("this server takes no rendezvous PUTs"));
  }
  if (cs.rendezvous_count == kRendezvousPerConnection) {
    // Not reached: ServeRound takes one behind others only below the limit
    // (TakesBehindRendezvous). Kept so that rendezvous_slots is never
    // written past its end whatever changes around it.
    return RequestClose(cs, ConnState::CloseReason::kProtocol);
  }
  uint32_t slot = 0;
  while (slot < rdv_.size() && rdv_[slot].busy) ++slot;
  if (slot == rdv_.size()) {  // never behind another of cs's (TakesBehindRendezvous saw a free slot)
    return ReplyError(cs, h.request_id,
                      Status::NoResource("every rendezvous READ of this worker is in flight: retry later"));
  }
  RendezvousSlot& s = rdv_[slot];
  SendWr w;
  Status refused;
  if (log_mr_ != nullptr) {
    // The entry's place in the log, all of it written but the value; a
    // full log waits for room only if no other connection has a message
    // waiting (as ApplyWrite).
    auto place = backend_.BeginPut(index_, r.key, h.value_len, /*wait_for_space=*/!HasReady());
    if (place.ok()) {
      s.place = *place;
      const uint8_t* value = backend_.PlacedValue(s.place);
      w.local = log_mr_->Slice(static_cast<size_t>(value - static_cast<const uint8_t*>(log_mr_->addr())), h.value_len);
    } else {
      refused = place.status();
    }
  } else {
    // ParseRequest bounded value_len by max_value_bytes: the READ stays inside its slot.
    w.local = rdv_mr_->Slice(size_t{slot} * cfg_.max_value_bytes, h.value_len);
  }
  if (refused.ok()) {
    ++s.generation;
    w.wr_id = kReadTag | (uint64_t{s.generation} << 8) | slot;
    w.opcode = WrOpcode::kRead;
    w.signaled = true;
    w.remote_addr = r.rendezvous.addr;
    w.rkey = r.rendezvous.rkey;
    refused = cs.qp->PostSend({&w, 1});
    if (!refused.ok() && log_mr_ != nullptr) backend_.AbandonPut(s.place);  // nothing was posted
  }
  if (!refused.ok()) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    // Alone: answered now. Behind READs of its connection: in its turn,
    // after theirs (the slot holds its place in the order, no READ).
    if (cs.rendezvous_count == 0) return ReplyError(cs, h.request_id, refused);
  }
  s.busy = true;
  s.refused = std::move(refused);
  s.cs = &cs;
  s.closing = false;
  s.posted_ms = SteadyMs();
  s.header = h;
  s.key.assign(r.key.begin(), r.key.end());
  s.checksum = r.rendezvous.checksum;
  cs.rendezvous_slots[cs.rendezvous_count++] = static_cast<uint8_t>(slot);
  ++rdv_busy_;
}

bool Worker::TakesBehindRendezvous(const ConnState& cs) const {
  if (cs.rendezvous_count >= kRendezvousPerConnection || rdv_busy_ >= kRendezvousSlots / 2 || cs.pending_count == 0) {
    return false;
  }
  // The next message's flags, read where it lies (the ring may be written
  // meanwhile): they only choose whether it is taken now. HandleRequest
  // parses the worker's copy and closes the connection if the message taken
  // is not a rendezvous PUT after all.
  uint32_t len;
  const uint8_t* msg = MessageAt(cs, cs.pending[cs.pending_head], &len);
  if (msg == nullptr || len < kRequestHeaderSize) return false;
  uint8_t flags;
  RacyLoad(&flags, msg + 1, 1);
  return (flags & kFlagRendezvous) != 0;
}

void Worker::FreeRendezvousSlot(uint32_t slot) {
  RendezvousSlot& s = rdv_[slot];
  s.busy = false;
  s.cs = nullptr;
  s.refused = Status::OK();
  --rdv_busy_;
}

void Worker::DropRendezvousSlots(ConnState& cs, uint32_t at, uint32_t n) {
  for (uint32_t i = at + n; i < cs.rendezvous_count; ++i) cs.rendezvous_slots[i - n] = cs.rendezvous_slots[i];
  cs.rendezvous_count -= n;
}

void Worker::AnswerRefusedRendezvous(ConnState& cs) {
  uint32_t done = 0;
  while (done < cs.rendezvous_count && !rdv_[cs.rendezvous_slots[done]].refused.ok()) {
    RendezvousSlot& s = rdv_[cs.rendezvous_slots[done]];
    if (!cs.qp->broken()) ReplyError(cs, s.header.request_id, s.refused);  // (a closed one's client takes nothing)
    FreeRendezvousSlot(cs.rendezvous_slots[done]);
    ++done;
  }
  DropRendezvousSlots(cs, 0, done);
}

void Worker::OnRendezvousRead(const Completion& c) {
  const uint32_t slot = static_cast<uint32_t>(c.wr_id & 0xff);
  const uint32_t generation = static_cast<uint32_t>((c.wr_id & ~kReadTag) >> 8);
  if (slot >= rdv_.size()) return;
  RendezvousSlot& s = rdv_[slot];
  if (!s.busy || !s.refused.ok() || s.generation != generation) return;  // a slot given back before its completion came
  ConnState* cs = s.cs;
  FreeRendezvousSlot(slot);
  const bool in_place = log_mr_ != nullptr;
  if (cs == nullptr || c.status != WcStatus::kSuccess) {
    if (in_place) backend_.AbandonPut(s.place);  // the READ is over: nothing writes the place any more
    if (cs == nullptr) return;                   // the connection went meanwhile
  }
  // The oldest of cs's (one QP's READs complete in the order they were posted).
  uint32_t at = 0;
  while (at + 1 < cs->rendezvous_count && cs->rendezvous_slots[at] != slot) ++at;
  DropRendezvousSlots(*cs, at, 1);
  if (cs->pending_count > 0 && !cs->in_ready) {  // its next messages may have waited for this one
    cs->in_ready = true;
    ready_.push_back(cs);
  }
  const RequestHeader& h = s.header;
  if (c.status != WcStatus::kSuccess) {
    // A window the client invalidated, or another rkey, range or QP: the
    // READ fails and, as with every remote access error, the QP with it.
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    KVRDMA_LOG_DEBUG("worker %u: connection %u: rendezvous READ failed: %s", index_, cs->id, WcStatusName(c.status));
    ReplyError(*cs, h.request_id, CompletionStatus(c));
    RequestClose(*cs, ConnState::CloseReason::kQpFailed);
    return AnswerRefusedRendezvous(*cs);
  }
  // The server's own copy, which no client can write: in its place in the
  // log, or in the slot (the store copies it into the log). The store
  // checks the client's checksum against the entry checksum it computes
  // over the log's copy (Backend::FinishPut, PutChecked): what is checked is
  // what is stored, in one pass; a value the client changed during the READ
  // is refused there (InvalidArgument, nothing published). (The slot is
  // free, but nothing takes it before Apply returns: its place, key and
  // bytes are read here first.)
  if (in_place) {
    const RendezvousValue placed{s.place, s.checksum};
    Apply(*cs, h, s.key, {backend_.PlacedValue(s.place), h.value_len}, /*is_delete=*/false, &placed);
  } else {
    const RendezvousValue staged{RendezvousValue::kStaged, s.checksum};
    const std::span<const uint8_t> value{static_cast<const uint8_t*>(rdv_mr_->addr()) +
                                             size_t{slot} * cfg_.max_value_bytes,
                                         h.value_len};
    Apply(*cs, h, s.key, value, /*is_delete=*/false, &staged);
  }
  AnswerRefusedRendezvous(*cs);
}

void Worker::ExpireRendezvous(int64_t now_ms) {
  if (rdv_busy_ == 0) return;
  for (uint32_t i = 0; i < rdv_.size(); ++i) {
    RendezvousSlot& s = rdv_[i];
    // (A refused one has no READ: it is answered after the READs before it.)
    if (!s.busy || !s.refused.ok() || now_ms - s.posted_ms <= int64_t{cfg_.assembly_timeout_ms}) continue;
    if (s.cs == nullptr) {
      // Its connection was removed and the READ's completion never came:
      // the QP is destroyed by now (the manager frees a removed connection
      // at once), so nothing writes the slot or the place any more. A
      // completion that still comes finds another generation.
      if (log_mr_ != nullptr) backend_.AbandonPut(s.place);
      FreeRendezvousSlot(i);
    } else if (!s.closing) {
      // The client's side does not answer the READ: its connection closes,
      // which flushes the READ (its completion gives the slot back).
      s.closing = true;
      counters_.errors.fetch_add(1, std::memory_order_relaxed);
      KVRDMA_LOG_DEBUG("worker %u: connection %u: rendezvous READ still in flight after %u ms", index_, s.cs->id,
                       cfg_.assembly_timeout_ms);
      RequestClose(*s.cs, ConnState::CloseReason::kQpFailed);
    }
  }
}

void Worker::OrphanRendezvous(ConnState& cs) {
  for (uint32_t i = 0; i < cs.rendezvous_count; ++i) {
    const uint32_t slot = cs.rendezvous_slots[i];
    RendezvousSlot& s = rdv_[slot];
    if (!s.refused.ok()) {  // no READ: free now
      FreeRendezvousSlot(slot);
      continue;
    }
    s.cs = nullptr;  // busy until its completion, or ExpireRendezvous, gives it back
    s.posted_ms = SteadyMs();
  }
  cs.rendezvous_count = 0;
}

}  // namespace kvrdma::server
