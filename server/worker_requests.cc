// A request, parsed from the worker's own copy and applied, by concern.
#include <cstring>
#include <string>

#include "common/log.h"
#include "server/worker.h"

namespace kvrdma::server {
namespace {

uint64_t PeekRequestId(std::span<const uint8_t> msg) {
  uint64_t id = 0;
  if (msg.size() >= 16) {
    for (int i = 0; i < 8; ++i) id |= uint64_t{msg[8 + i]} << (8 * i);
  }
  return id;
}

// The checks the store runs at its commit point (commit_check.h): the lock
// table's, then a conditional write's version.
struct CommitFence {
  const LockView* locks;
  uint64_t token;
  uint32_t requester;     // the connection's owner id
  bool conditional;       // IF_VERSION
  uint64_t if_version;    // the version required (0: no value)
  uint64_t* current_out;  // on VersionMismatch: the key's current version
  static Status Check(const void* ctx, uint64_t key_hash, uint64_t current_version) {
    auto* f = static_cast<const CommitFence*>(ctx);
    KVRDMA_RETURN_IF_ERROR(f->locks->Check(key_hash, f->token, f->requester));
    if (f->conditional && current_version != f->if_version) [[unlikely]] return Mismatch(f, current_version);
    return Status::OK();
  }
  [[gnu::cold, gnu::noinline]] static Status Mismatch(const CommitFence* f, uint64_t current_version) {
    *f->current_out = current_version;
    return Status::VersionMismatch(current_version == 0 ? "the key has no value"
                                                        : "the key is at version " + std::to_string(current_version));
  }
};

}  // namespace

// Inline into HandleRequest, its one caller (a forwarding call less per PUT).
inline void Worker::HandleWrite(ConnState& cs, const ParsedRequest& r) {
  Apply(cs, r.header, r.key, r.value, r.header.opcode == Opcode::kDelete);
}

void Worker::HandleRequest(ConnState& cs, std::span<const uint8_t> msg) {
  metrics::ServiceTimer service_timer(counters_.request_metrics.service_time(index_), service_start_);
  // Every request of the message is validated before any is applied: a
  // malformed one anywhere refuses the whole message with one error record
  // (to its first request's id), as a malformed lone request always was.
  auto count = ParseMessage(msg, cfg_.max_key_bytes, cfg_.max_value_bytes, parsed_);
  if (cs.rendezvous_count > 0 && !(count.ok() && *count == 1 && (parsed_[0].header.flags & kFlagRendezvous))) {
    // Taken behind the connection's rendezvous PUTs for the RENDEZVOUS flag
    // its bytes had (TakesBehindRendezvous), and not a rendezvous PUT in
    // the copy: the client rewrote it after sending it. Its answer would
    // overtake theirs: the connection closes instead, this unanswered.
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return RequestClose(cs, ConnState::CloseReason::kProtocol);
  }
  if (!count.ok()) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    cs.assembly.Release(assembly_budget_);
    ReplyError(cs, PeekRequestId(msg), count.status());
    return;
  }
  if (*count > 1) return HandleWrites(cs, {parsed_.data(), *count});
  const ParsedRequest* parsed = &parsed_[0];
  const RequestHeader& h = parsed->header;
  const bool whole = (h.flags & kFlagFirst) && (h.flags & kFlagLast);
  if (!whole) return HandleFragment(cs, *parsed);
  // Whole requests may interleave with a fragmented PUT's fragments: they
  // do not touch the assembly.
  if (h.opcode == Opcode::kStats) return HandleStats(cs, h);
  if (h.opcode == Opcode::kClock) return HandleClock(cs, h);
  if (h.flags & kFlagRendezvous) return HandleRendezvous(cs, *parsed);
  HandleWrite(cs, *parsed);
}

void Worker::HandleStats(ConnState& cs, const RequestHeader& h) {
  std::pair<std::string_view, uint64_t> fixed[] = {
      {"connections", counters_.connections.load()},
      {"connections_total", counters_.connections_total.load()},
      {"closed_failed", counters_.closed_failed.load()},
      {"closed_flow_control", counters_.closed_flow_control.load()},
      {"batched_messages", counters_.batched_messages.load()},
      {"batched_requests", counters_.batched_requests.load()},
      {"puts", counters_.puts.load()},
      {"deletes", counters_.deletes.load()},
      {"errors", counters_.errors.load()},
      {"assembly_bytes", assembly_budget_.used()},
      {"rejected_max_connections",
       counters_.request_metrics.rejected(metrics::RequestMetrics::RejectReason::kMaxConnections)},
      {"rejected_max_per_peer", counters_.request_metrics.rejected(metrics::RequestMetrics::RejectReason::kMaxPerPeer)},
      {"rejected_flow_control_backoff",
       counters_.request_metrics.rejected(metrics::RequestMetrics::RejectReason::kFlowControlBackoff)},
  };
  std::vector<std::pair<std::string_view, uint64_t>> s(std::begin(fixed), std::end(fixed));
  backend_.AppendStats(&s);
  uint8_t body[kMaxReplySize - kReplyHeaderSize];
  size_t n = EncodeStats(s, body);
  ReplyHeader rh;
  rh.request_id = h.request_id;
  Reply(cs, rh, {body, n});
}

// The lease clock, read now: a client takes a lock with it (now + lease).
void Worker::HandleClock(ConnState& cs, const RequestHeader& h) {
  uint8_t body[kClockReplyBytes];
  const size_t n = EncodeClock(locks_.clock->NowMs(), body);
  ReplyHeader rh;
  rh.request_id = h.request_id;
  Reply(cs, rh, {body, n});
}

void Worker::HandleFragment(ConnState& cs, const ParsedRequest& r) {
  const RequestHeader& h = r.header;
  const int64_t now_ms = SteadyMs();
  Status st = (h.flags & kFlagFirst) ? cs.assembly.Begin(h, r.key, r.value, assembly_budget_, now_ms)
                                     : cs.assembly.Extend(h, r.value, assembly_budget_, now_ms);
  if (!st.ok()) {
    if (st.code() != Status::Code::kNoResource) counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return ReplyError(cs, h.request_id, st);
  }
  if (!(h.flags & kFlagLast)) {
    ReplyHeader rh;
    rh.request_id = h.request_id;
    rh.flags = kReplyFragmentAck;
    return Reply(cs, rh, {});
  }
  if (!cs.assembly.complete()) {  // cannot happen after ParseRequest + Extend; never trust it
    cs.assembly.Release(assembly_budget_);
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return ReplyError(cs, h.request_id, Status::InvalidArgument("last fragment before the value is complete"));
  }
  // The FIRST's key, token and condition, not whatever the LAST claims.
  RequestHeader whole = h;
  whole.lock_token = cs.assembly.token();
  whole.flags = static_cast<uint8_t>((h.flags & ~kFlagIfVersion) | cs.assembly.condition_flags());
  whole.if_version = cs.assembly.if_version();
  Apply(cs, whole, cs.assembly.key(), cs.assembly.value(), /*is_delete=*/false);
  cs.assembly.Release(assembly_budget_);
}

// Inline into Apply and HandleWrites, its two callers (a call with seven
// arguments less per write).
[[gnu::always_inline]] inline Status Worker::ApplyWrite(ConnState& cs, const RequestHeader& h,
                                                        std::span<const uint8_t> key, std::span<const uint8_t> value,
                                                        bool is_delete, uint64_t* version, const RendezvousValue* rdv) {
  uint64_t current = 0;
  const CommitFence fence{&locks_, h.lock_token, cs.id, (h.flags & kFlagIfVersion) != 0, h.if_version, &current};
  const CommitCheck check{&CommitFence::Check, &fence};
  *version = 0;
  // A full log: wait for room only if no other connection has a message
  // waiting for this worker; else answer ServerFull now and keep serving
  // (DESIGN.md, "Fair service").
  const bool wait_for_space = !HasReady();
  Status st = is_delete        ? backend_.Delete(index_, key, check, wait_for_space, version)
               : rdv == nullptr ? backend_.Put(index_, key, value, check, wait_for_space, version)
               : rdv->place != RendezvousValue::kStaged
                   ? backend_.FinishPut(index_, rdv->place, key, static_cast<uint32_t>(value.size()), rdv->checksum,
                                        check, version)
                   : backend_.PutChecked(index_, key, value, rdv->checksum, check, wait_for_space, version);
  if (st.ok()) {
    (is_delete ? counters_.deletes : counters_.puts).fetch_add(1, std::memory_order_relaxed);
    return st;
  }
  if (!st.IsNotFound() && st.code() != Status::Code::kLocked && !st.IsVersionMismatch()) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
  }
  *version = st.IsVersionMismatch() ? current : 0;
  return st;
}

void Worker::Apply(ConnState& cs, const RequestHeader& h, std::span<const uint8_t> key,
                   std::span<const uint8_t> value, bool is_delete, const RendezvousValue* rdv) {
  ReplyHeader rh;
  rh.request_id = h.request_id;
  Status st = ApplyWrite(cs, h, key, value, is_delete, &rh.version, rdv);
  if (!st.ok()) return ReplyError(cs, h.request_id, st, rh.version);
  // A durable store answers only once the write is durable: the reply
  // waits in the queue for the worker's next Commit (CommitWrites).
  if (durable_) {
    awaiting_.push_back(Awaiting{&cs, static_cast<uint32_t>(cs.replies.queued.size()), h.request_id, false});
  }
  Reply(cs, rh, {});
}

// The requests apply in order, each with its own checks (lock, condition,
// room) and its own record; under a durable store they share the worker's
// next Commit with everything else of the round, and the reply waits for it.
void Worker::HandleWrites(ConnState& cs, std::span<const ParsedRequest> reqs) {
  counters_.batched_messages.fetch_add(1, std::memory_order_relaxed);
  counters_.batched_requests.fetch_add(reqs.size(), std::memory_order_relaxed);
  size_t len = 0;
  bool applied = false;
  for (const ParsedRequest& r : reqs) {
    ReplyHeader rh;
    rh.request_id = r.header.request_id;
    Status st = ApplyWrite(cs, r.header, r.key, r.value, r.header.opcode == Opcode::kDelete, &rh.version);
    rh.status = st.code();
    applied |= st.ok();
    if (!st.ok()) counters_.request_metrics.CountFailure(st.code());
    const std::string& m = st.message();
    const size_t text = std::min(m.size(), kMaxBatchErrorText);
    // kMaxRequestsPerMessage records of at most kMaxBatchErrorText bytes
    // fit records_ (messages.h static_assert): never cut here.
    len += EncodeReply(rh, {reinterpret_cast<const uint8_t*>(m.data()), text}, std::span(records_).subspan(len));
  }
  if (durable_ && applied) {
    awaiting_.push_back(
        Awaiting{&cs, static_cast<uint32_t>(cs.replies.queued.size()), reqs[0].header.request_id, true});
  }
  ReplyEncoded(cs, {records_.data(), len});
}

}  // namespace kvrdma::server
