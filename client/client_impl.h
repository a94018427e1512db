// The client's engine: per-operation state machines over one QP.
//
// GET   one state machine over RDMA READs, in client_get.cc (its header
//         draws it): cached entry | window -> entry (one READ, any size).
// PUT/DELETE/STATS: request messages (fragments for big values) within the
//         server's credits; replies arrive in order (one worker per
//         connection) and are matched FIFO, checked by request id. Whole
//         PUT/DELETEs waiting together share a message (up to
//         kMaxRequestsPerMessage, as many as fit message_bytes), answered by
//         one reply of one record each (protocol 10, messages.h).
//
// Limits: at most max_in_flight (<= kMaxInFlight) operations; READs in flight <= the QP's
// max_rd_atomic; messages in flight <= credits; one fragmented PUT at a time
// (the server reassembles one per connection); rendezvous PUTs <= its
// windows (kRendezvousWindows). All buffers are registered once at connect;
// nothing is allocated per operation (a rendezvous PUT registers its value
// unless it lies in RegisterMemory's memory).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "client/client_internal.h"
#include "client/fixed_ring.h"
#include "client/large_buffer.h"
#include "client/location_cache.h"
#include "common/format/read_path.h"
#include "common/format/round_clock.h"
#include "common/protocol/handshake.h"
#include "common/protocol/messages.h"
#include "common/transport/busy_poll.h"

namespace kvrdma {

// Send work-request ids: the kind in the top 4 bits, a payload below (a GET's
// op state's index, a message's staging buffer's index). Kinds are disjoint by construction.
enum class WrKind : uint8_t {
  kMessage = 1,    // a request message (payload: its staging buffer's index)
  kGetRead = 2,    // a GET's READ (payload: its op state's index)
  kLockTable = 3,  // the one lock-table READ/CAS of a Lock/Unlock step
  kReply = 4,      // a receive for a reply (payload: its reply buffer)
  kWindow = 5,     // the rendezvous window's bind (completes only if it fails) or invalidation (payload: op state)
};
inline constexpr unsigned kWrKindShift = 60;
inline constexpr uint64_t kWrPayloadMask = (uint64_t{1} << kWrKindShift) - 1;
constexpr uint64_t MakeWrId(WrKind k, uint64_t payload) noexcept {
  return (uint64_t{static_cast<uint8_t>(k)} << kWrKindShift) | (payload & kWrPayloadMask);
}
constexpr WrKind WrKindOf(uint64_t wr_id) noexcept { return static_cast<WrKind>(wr_id >> kWrKindShift); }
constexpr uint64_t WrPayload(uint64_t wr_id) noexcept { return wr_id & kWrPayloadMask; }
static_assert(WrKindOf(MakeWrId(WrKind::kMessage, ~uint64_t{0})) == WrKind::kMessage);
static_assert(WrPayload(MakeWrId(WrKind::kGetRead, 63)) == 63);

// Waiting: after the last completion or submitted operation the client polls
// its CQ for its poll window (BusyPoll: ClientOptions::busy_poll_us, growing
// up to busy_poll_max_us while completions keep coming just after it; the
// next completion is likely microseconds away), then sleeps on the CQ's
// completion channel, kSleepSliceMs at a time (to look at deadlines and
// connection-manager events in between). A client that polled forever would take a CPU the
// server's workers and the NIC's software (Soft-RoCE runs in the kernel) may
// need: with two spinning clients on two CPUs, PUTs waited for scheduler
// time slices (issue 12, finding 5).
inline constexpr int kSleepSliceMs = 5;

class Client::Impl {
 public:
  // One clock for everything the client times: GET rounds against the round
  // limit, operation deadlines, back-offs, reconnects and busy polling.
  // RoundClock (CLOCK_BOOTTIME, common/format/round_clock.h): a suspension
  // of the host counts, which the round limit needs and a deadline does not
  // mind (it fires at resume). The engine reads it into now_ (below).
  using Clock = RoundClock;
  static constexpr uint32_t kMaxInFlight = 64;
  // Each in-flight GET's own entry buffer (registered, x kMaxInFlight): 16 KiB
  // holds every exact size class (up to 4092 bytes) and the first 64 coarse
  // ones, so only entries over 16 KiB use the shared large buffer (a range of
  // it each: LargeBufferRanges); 64 op states take 1 MiB of registered
  // memory.
  static constexpr size_t kOpEntryBytes = 16 << 10;
  static_assert(kOpEntryBytes == SizeClassBytes(kFirstCoarseSizeClass + 2 * kSizeClassSteps));
  static_assert(kOpEntryBytes >= kMaxExactEntryBytes);
  // A direct READ (below) for entry READs of at least this many bytes: for
  // shorter ones the copy costs less than hashing two pieces adds (callgrind,
  // a GET of 4 KiB: the copy 414 instructions, XXH3's streaming form ~250
  // more than its one-shot form; at 64 KiB the copy is 65,536: glibc's
  // `rep movsb`, one instruction per byte as callgrind counts).
  static constexpr uint32_t kDirectReadMinBytes = 4096;

  Impl(const ClientOptions& o, std::shared_ptr<Device> dev)
      : opts_(o),
        dev_(std::move(dev)),
        max_in_flight_(std::clamp<uint32_t>(o.max_in_flight, 1, kMaxInFlight)),
        cache_(o.location_cache_entries),
        busy_poll_(std::chrono::microseconds(o.busy_poll_us), std::chrono::microseconds(o.busy_poll_max_us)) {}
  Status Connect();
  // After a failure: drops the connection and its buffers, and connects
  // again (rate-limited with exponential backoff). REQUIRES no operation in flight.
  Status Reconnect();
  // With nothing in flight, reads the connection manager's events (at most
  // every 50 ms): a server that went away while this client was idle is
  // noticed before the next operation is posted on a dead connection, so
  // that operation reconnects instead of failing.
  void NoticeDisconnectWhileIdle(Clock::time_point now);

  size_t Submit(std::span<Op* const> ops);
  size_t Poll(std::span<Op*> done);
  size_t Wait(std::span<Op*> done, int timeout_ms);
  // Runs one operation to completion (the synchronous API).
  // `query`: a STATS or CLOCK request (IsQuery) instead of op->type's.
  void RunSync(Op* op, std::optional<Opcode> query = std::nullopt);
  // Client::RegisterMemory / UnregisterMemory (client.cc).
  Status RegisterMemory(std::span<std::byte> memory);
  Status UnregisterMemory(std::span<std::byte> memory);
  // Runs a STATS or CLOCK request; its reply body.
  Result<std::string> Query(Opcode query);
  Result<std::vector<std::pair<std::string, uint64_t>>> Stats();
  // The lease clock, read by the server when it answers (a CLOCK request).
  Result<uint64_t> ServerClockMs();
  size_t in_flight() const { return in_flight_; }
  size_t max_in_flight() const { return max_in_flight_; }
  // Locks (client_locks.cc).
  Status TryLockOnce(std::string_view key, uint64_t lease_ms, bool* locked_by_other);
  Status Unlock(std::string_view key);
  Status Lock(std::string_view key, uint64_t lease_ms, bool wait);

  ClientOptions opts_;
  std::shared_ptr<Device> dev_;
  ServerDescriptor desc_;
  IndexParams params_;
  ClientStats stats_;
  uint64_t last_version_ = 0;

 private:
  enum class Step : uint8_t {
    kFree,
    kGetPost,     // GET: the READs of its phase wait to be posted (credits, large buffer room)
    kGetRead,     // GET: the READs of its phase are in flight
    kSending,     // message op: not all messages sent yet
    kReplies,     // message op: all sent, replies pending
  };
  // What a GET reads (client_get.cc).
  enum class GetPhase : uint8_t {
    kCachedEntry,  // the cached word, then the entry its ref names (two READs, one round trip)
    kWindow,       // the key's window of the index (one READ)
    kEntry,        // candidate `cand`'s entry, its size class's bytes, into the op's
                   // buffer if they fit, else the shared large buffer (UsesLargeBuffer)
    kRecheck,      // a late round's entry was decoded: its word again (one READ)
  };
  // An operation's state: a part every operation uses, then a part for
  // message operations (PUT/DELETE/STATS/CLOCK: steps kSending, kReplies)
  // and one for GETs (kGetPost, kGetRead). An operation reads only the common
  // part and its own kind's, so Start resets just those: the plain fields
  // (OpFields, trivially copyable) by a block copy from a fresh instance
  // (rebuilding the whole state member by member took ~75 instructions per
  // operation), the Status of its kind after them.
  struct OpFields {
    // ---- every operation
    Op* op = nullptr;
    uint8_t index = 0;  // in op_states_ (IndexOf); set once, kept across resets
    Step step = Step::kFree;
    Opcode opcode = Opcode::kPut;  // message ops (kStats for Stats())
    Clock::time_point deadline;
    // The caller's buffer lies in registered memory (Client::RegisterMemory):
    // `registered` is that region (GETs only; UnregisterMemory looks at every
    // operation's). A direct READ is an entry READ in two pieces, header and
    // key into the op buffer and the rest straight into op->buffer
    // (SendWr::local2), so that the value needs no copy.
    const MemoryRegion* registered = nullptr;
    // ---- message operations
    RequestHeader hdr;
    size_t sent = 0;         // value bytes sent
    bool first = true;
    uint32_t outstanding = 0;  // messages awaiting replies
    bool rendezvous = false;   // a rendezvous PUT (ClientOptions::rendezvous_bytes)
    int8_t window = -1;        // rendezvous: its window in rdv_ (bound, or being invalidated)
    // ---- GETs
    RoundClock::time_point round_start;  // of the round (or cached READ) in progress; BOOTTIME (round_clock.h)
    GetPhase phase = GetPhase::kWindow;
    bool window_late = false;       // the last window READ took longer than the round limit
    Clock::time_point not_before;   // kWindow: not posted before (back-off after a matching move tag)
    uint32_t tag_rounds = 0;        // rounds that a matching move tag sent back (the back-off's exponent)
    int16_t cand = -1;              // kEntry: the window word of the candidate being read
    // The candidate's entry needs a range of the large buffer. A round that
    // waited for one past the round limit starts over, and its window READ
    // waits for the range and holds it (StageGet), so that the entry READ
    // follows at once.
    bool wants_large = false;
    uint64_t large_at = 0;          // the range of the large buffer it holds: offset ...
    uint32_t large_len = 0;         // ... and bytes (0: none; HoldLarge, ReleaseLarge)
    uint64_t cached_ref = 0;       // kCachedEntry: the location cache's entry ref ...
    uint64_t cached_word = 0;      // ... and the word of the window that held it
    bool recheck_found = false;    // kRecheck: the decoded entry was a value (else a tombstone),
                                   // handed to the caller with recheck_delivered (DeliverValue)
    uint32_t entry_len = 0;         // bytes of the entry READ
    bool direct = false;            // the entry READ of this phase is a direct READ
    bool direct_refused = false;    // an entry did not fit the buffer: no more direct READs for this GET
    uint32_t restarts = 0;           // rounds thrown away (NewRound with retry)
    uint32_t reads = 0;              // READs this GET posted
    uint32_t rounds = 0;             // window-READ rounds this GET took
    const char* restart_cause = "";  // why the last one was
    // ---- GETs, written before they are read: ResetForGet leaves them as
    // they are (the bytes it copies fall from ~180 to ~90: ~15 instructions
    // a GET). A field whose first use may read it belongs above.
    KeyWindow kw;         // set by Start before StartGet
    WindowProbe probe;    // of the last window READ (its bytes stay in the op buffer's window part); set by
                          // ProbeWindow before NextCandidateOrMiss reads it
    Candidate candidate;  // kEntry, kRecheck: the candidate's entry ref and entry READ (NextCandidateOrMiss)
  };
  static_assert(std::is_trivially_copyable_v<OpFields> && std::is_standard_layout_v<OpFields>);
  // Where the message part and the GET part of OpFields start, and where
  // the GET fields that are reset end.
  static constexpr size_t kMessageFieldsAt = offsetof(OpFields, hdr);
  static constexpr size_t kGetFieldsAt = offsetof(OpFields, round_start);
  static constexpr size_t kGetResetEnd = offsetof(OpFields, kw);
  static_assert(offsetof(OpFields, index) < kMessageFieldsAt && kMessageFieldsAt < kGetFieldsAt &&
                kGetFieldsAt < kGetResetEnd);
  struct OpState : OpFields {
    Status result;             // messages: first error seen
    Status recheck_delivered;  // GETs, kRecheck: the outcome handed to the caller if the recheck confirms it
    // A fresh state for a new GET or message operation (the common part and
    // that kind's); keeps `index`.
    void ResetForGet() {
      CopyFresh(0, kMessageFieldsAt);
      CopyFresh(kGetFieldsAt, kGetResetEnd);
      if (!recheck_delivered.ok()) recheck_delivered = Status::OK();
    }
    void ResetForMessage() {
      CopyFresh(0, kGetFieldsAt);
      if (!result.ok()) result = Status::OK();
    }
    // Everything fresh (ResetEngine).
    void ResetAll() {
      CopyFresh(0, sizeof(OpFields));
      result = Status::OK();
      recheck_delivered = Status::OK();
    }

   private:
    void CopyFresh(size_t from, size_t to) {
      const uint8_t i = index;
      std::memcpy(reinterpret_cast<char*>(static_cast<OpFields*>(this)) + from,
                  reinterpret_cast<const char*>(&kFreshOpFields) + from, to - from);
      index = i;
    }
  };
  static const OpFields kFreshOpFields;  // client_ops.cc
  struct PendingReply {
    uint32_t op;  // index into op_states_ (of the message's first request)
    uint64_t request_id;  // of the message's first request
    uint8_t count = 1;    // requests in the message (> 1: several writes, ops below)
    std::array<uint8_t, kMaxRequestsPerMessage> ops;  // their op states, in message order
    // The reply to a message of one request.
    static PendingReply One(uint32_t op, uint64_t request_id) {
      PendingReply p;
      p.op = op;
      p.request_id = request_id;
      return p;
    }
  };
  static_assert(kMaxInFlight <= 256, "an op state index fits PendingReply::ops");
  // Rendezvous PUTs in flight at once on one connection: each holds a window
  // of its own from the bind to the invalidation after its reply. The server
  // READs up to two values of a connection at once (kRendezvousPerConnection)
  // and holds the connection's later messages meanwhile; PUTs already
  // waiting there keep its READs back to back instead of one client round
  // trip apart.
  static constexpr uint32_t kRendezvousWindows = 4;
  struct RendezvousWindow {
    // The value's registration for binding only (no rkey of its own), made
    // for this PUT; null when the value lies in memory the caller registered
    // (RegisterMemory): a registration of exactly the value kept in
    // value_regs_ is bound over instead. Declared before mw: the window goes
    // first (rxe keeps a region with a window bound over it).
    std::unique_ptr<MemoryRegion> mr;
    // The window's copy buffer (ClientOptions::rendezvous_copy_bytes of
    // rdv_copy_mem_), registered for binding only at connect: a value of at
    // most that size outside registered memory is copied here and the
    // window bound over the copy (no registration per PUT). Null: copies off.
    std::unique_ptr<MemoryRegion> copy_mr;
    std::unique_ptr<MemoryWindow> mw;     // null: gone (dropped with a failed PUT) until the reconnect
    const MemoryRegion* bound = nullptr;  // what mw is bound over while owned (mr, copy_mr or a value_regs_ one)
    int32_t owner = -1;                   // op state whose PUT holds it (bound, or being invalidated)
  };

  static uint32_t IndexOf(const OpState& s) { return s.index; }
  uint8_t* Mem(size_t off) { return mem_.get() + off; }
  size_t WindowOff(uint32_t i) const { return op_buffers_off_ + size_t{i} * OpBufferBytes(); }
  size_t EntryOff(uint32_t i) const { return WindowOff(i) + kMaxWindowWords * kWordBytes; }
  // What the GET's last window READ returned (valid until its next one).
  std::span<const std::byte> WindowBytes(const OpState& s) {
    return {reinterpret_cast<const std::byte*>(Mem(WindowOff(IndexOf(s)))), s.kw.read.length};
  }
  static constexpr size_t OpBufferBytes() { return (kMaxWindowWords * kWordBytes + kOpEntryBytes + 63) & ~size_t{63}; }

  Status CheckKey(std::string_view key) const;
  // Takes a free op state for op (a query, or an operation of op->type).
  void Start(Op* op, std::optional<Opcode> query);
  OpState& TakeOpState(Op* op, bool get);
  [[gnu::cold, gnu::noinline]] bool ReconnectBeforeStart(Op* op, bool get);
  // An operation that cannot start: the connection is broken, or its key is
  // empty or too long.
  [[gnu::cold, gnu::noinline]] void FinishAtStart(OpState& s);
  [[gnu::noinline]] void StartMessage(OpState& s, std::optional<Opcode> query);
  void ResetEngine();
  // Ends an operation: its status, counters, its op state back. Inline (below
  // the class): the GET path ends every GET with it (a call less per GET).
  void Finish(OpState& s, Status st);
  void FailAll(const Status& st);
  // Posting: GET steps go through batch_ and one PostSend per Post;
  // messages through msg_batch_ and one PostSend per PumpMessages.
  // Progress: the completions, then Post. Post: what is ready to be posted
  // (Submit's: what it started; completions wait for the next Poll).
  void Progress();
  void Post();
  void FlushBatch();
  // Error paths kept out of the hot functions (their messages are built
  // only here: inline, the string code made every caller save all its
  // registers and reserve stack on every call).
  [[gnu::cold, gnu::noinline]] void FailPost(Status st);
  [[gnu::cold, gnu::noinline]] void FailPolled(const Completion* c);
  [[gnu::cold, gnu::noinline]] void FinishTimedOutGet(OpState& s);
  [[gnu::cold, gnu::noinline]] static Status ValueDoesNotFit(size_t value_bytes, std::span<std::byte> buffer);
  // A value the decode copied into the result string (DecodeEntryInto):
  // cuts the string to its length. Out of line: the resize's code stays off
  // the small GET's path.
  [[gnu::noinline]] static Status KeepCopiedValue(std::string* result, size_t value_bytes);
  // GET (client_get.cc).
  void StartGet(OpState& s);
  // Stages the READs of every GET in ready_ (those that cannot go now stay).
  void StageGets();
  bool StageGet(OpState& s);
  void PostGetRead(uint32_t idx, const RemoteRegion& region, uint64_t offset, size_t local_off, uint32_t len,
                   bool signaled);
  void OnGetReadDone(OpState& s);
  void NextPhase(OpState& s, GetPhase phase);
  void PumpMessages();
  bool SendNextMessage(OpState& s);
  // The fewest value bytes a rendezvous PUT carries: rendezvous_bytes one
  // at a time, half that while other operations are in flight (their
  // transfers overlap the value's registration; ClientOptions). 0: none is.
  uint32_t RendezvousMinBytes(bool others_in_flight) const noexcept {
    const uint32_t t = opts_.rendezvous_bytes;
    return others_in_flight && t > 1 ? t / 2 : t;
  }
  // A rendezvous PUT's one message: a free window bound over the value
  // (registered for it unless it lies in RegisterMemory's memory), the
  // request naming it (false: every window is another PUT's).
  bool SendRendezvous(OpState& s);
  // Its reply came: invalidate the window; OnWindowInvalidated finishes it.
  void InvalidateWindow(OpState& s);
  void OnWindowInvalidated(OpState& s);
  // A PUT ended without its window invalidated (the connection failed): the
  // window and the value's registration go now, not to be used again
  // before the reconnect.
  void DropWindow(OpState& s);
  // All windows gone (a reconnect).
  void ResetWindows();
  // The region of RegisterMemory's that holds [p, p + n), or null.
  const MemoryRegion* RegisteredRegionOf(const void* p, size_t n) const;
  // The region a rendezvous PUT's window over `value` is bound over: a
  // registration of exactly its bytes, kept in value_regs_ if they lie in
  // registered_ memory (made there on the first PUT of them), else made for
  // this PUT alone into w.mr. The device's error if it refuses.
  // `within`: RegisteredRegionOf(value), which the caller has looked up.
  Result<const MemoryRegion*> ValueRegion(RendezvousWindow& w, std::string_view value, const MemoryRegion* within);
  // Whether a window in flight is bound over `mr`.
  bool WindowBoundOver(const MemoryRegion* mr) const;
  // A whole PUT/DELETE not yet sent that fits one message alone: it may
  // share a message with the ones queued after it.
  bool Packable(const OpState& s) const;
  // Sends the packable operations at the front of senders_ (as many as fit
  // one message, at most kMaxRequestsPerMessage) in one message. False
  // without a credit.
  bool SendWrites();
  // The staging buffer the next message is written into: one per credit,
  // in turn (reused only after its message's reply).
  uint8_t* NextStage();
  // The next message's staging buffer and ring slot, and a buffer's offset in mem_.
  uint32_t NextStageIndex() const { return stage_; }
  size_t StageOff(uint32_t stage) const { return stage_off_ + size_t{stage} * desc_.message_bytes; }
  // Posts (with PumpMessages' batch) the next message, `len` bytes written
  // into NextStage(), and waits for its reply (pr).
  void QueueMessage(size_t len, const PendingReply& pr);
  // The reply to a message of several writes: one record per request.
  void OnRecords(std::span<const uint8_t> reply, const PendingReply& pr);
  // Completions.
  void OnWindow(OpState& s);
  // The next candidate of the window at or after word `from` (kEntry), or
  // the miss rule when there is none.
  void NextCandidateOrMiss(OpState& s, int from);
  // kEntry and kCachedEntry: an entry READ longer than the op buffer holds a
  // range of the large buffer as long as the entry: the READ goes there, or,
  // for a direct READ, only its header and key go to the op buffer, but it
  // still holds the range. The ranges pace large READs: at most the large
  // buffer's bytes (the largest entry) in flight per connection. Sixteen
  // direct READs of 1 MiB in flight at once on Soft-RoCE each took longer
  // than the round limit, then the recheck's, and none completed (0 GETs a
  // second).
  static bool UsesLargeBuffer(const OpState& s) { return s.entry_len > kOpEntryBytes; }
  // Whether the READs of the GET's phase, about to be staged, need a range
  // of entry_len bytes of the large buffer: an entry READ (kEntry,
  // kCachedEntry) that uses it, or the window READ of a round that waited
  // for room past the round limit (wants_large; entry_len is still the last
  // candidate's).
  static bool NeedsLargeRange(const OpState& s) {
    return ((s.phase == GetPhase::kEntry || s.phase == GetPhase::kCachedEntry) && UsesLargeBuffer(s)) ||
           (s.phase == GetPhase::kWindow && s.wants_large);
  }
  // Makes the GET hold a range of `len` bytes of the large buffer (the one
  // it holds, if that long). False: none free now, or a GET ahead of it in
  // this staging pass found none (first come, first served: a GET of the
  // largest entry is not passed over forever by shorter ones).
  bool HoldLarge(OpState& s, uint32_t len);
  // Gives its range back (large_at stays: OnEntry decodes from it before
  // anything is posted again). Inline: every GET's Finish calls it.
  void ReleaseLarge(OpState& s) {
    if (s.large_len == 0) return;
    large_.Give(s.large_at);
    s.large_len = 0;
  }
  // Decides whether the entry READ of entry_len bytes about to be staged is
  // a direct READ (OpState::direct).
  void PlanEntryRead(OpState& s) const;
  // Posts the entry READ of the GET (entry_len bytes at log offset `off`):
  // a direct READ, or into the large or the op buffer.
  void PostEntryRead(uint32_t idx, OpState& s, uint64_t off);
  // Decodes what the entry READ of `ref` brought. *refetch: a direct READ
  // that holds less than the entry (the value is longer than the buffer, or
  // the bytes are not the key's entry): read it again the ordinary way.
  EntryView DecodeEntryRead(OpState& s, uint64_t ref, bool* refetch) {
    if (s.direct) return DecodeDirectRead(s, ref, refetch);
    *refetch = false;
    const uint8_t* bytes = Mem(UsesLargeBuffer(s) ? large_off_ + s.large_at : EntryOff(IndexOf(s)));
    const std::span<const std::byte> entry(reinterpret_cast<const std::byte*>(bytes), s.entry_len);
    // A large value is copied into the caller's buffer, or into a result
    // string already that long (a string reused), as it is checksummed
    // (DeliverValue then finds it in place).
    if (s.entry_len <= kFusedCopyMinBytes) [[likely]] {
      return DecodeEntry(entry, s.op->key, ref, params_.seed, /*require_current=*/false);
    }
    return DecodeLargeEntry(s, entry, ref);
  }
  EntryView DecodeDirectRead(OpState& s, uint64_t ref, bool* refetch);
  // DecodeEntryRead's large entries (out of line: off the small GET's path).
  [[gnu::noinline]] EntryView DecodeLargeEntry(OpState& s, std::span<const std::byte> entry, uint64_t ref);
  void OnEntry(OpState& s);
  // Hands a GET's value to the caller (Op::result, else Op::buffer):
  // TooLarge if it does not fit the buffer.
  Status DeliverValue(OpState& s, std::span<const std::byte> value);
  void OnCachedEntry(OpState& s);
  void OnRecheck(OpState& s);
  // Bytes of the index word `word` of the GET's window in the op buffer (the
  // window READ put it there; kCachedEntry and kRecheck READ it there).
  uint64_t WindowWord(const OpState& s, uint64_t word);
  // Starts the GET over from the window READ; `retry`: what this round read
  // cannot be trusted (`why` names it for a later Timeout message).
  void NewRound(OpState& s, bool retry, const char* why = "");
  bool RoundIsLate(const OpState& s) const;
  void CheckDeadlines();
  void OnReply(const Completion& c);
  void PollCompletions();
  // Called by loops that wait for a completion, after a Progress() that
  // finished nothing they wait for: spins (returns at once) while the client
  // was busy within busy_poll_, else sleeps on the CQ (at most
  // kSleepSliceMs, never past `deadline`).
  void IdleWait(Clock::time_point deadline);
  // Reads connection-manager events; fails everything if the server left.
  void CheckConnection();
  // One compare-and-swap of lock word `index` (common/protocol/locks.h),
  // waited for; returns the word it found.
  Result<uint64_t> CasLockWord(uint64_t index, uint64_t compare, uint64_t swap);
  uint64_t TokenFor(std::string_view key) const;

  struct FreeDeleter {
    void operator()(void* p) const noexcept { std::free(p); }
  };
  // Local memory: [staging buffers][reply buffers][large entry buffer][op buffers].
  size_t stage_off_ = 0, reply_off_ = 0, large_off_ = 0, large_cap_ = 0, op_buffers_off_ = 0, scratch_off_ = 0;
  std::unique_ptr<uint8_t, FreeDeleter> mem_;
  std::unique_ptr<MemoryRegion> mr_;
  std::vector<std::unique_ptr<MemoryRegion>> registered_;  // RegisterMemory's; destroyed after conn_
  // Registrations of rendezvous PUT values that lie in registered_ memory,
  // each of exactly one value's bytes, kept for the next PUT of the same
  // bytes (a registration cost 2.6 ms at 64 KiB on Soft-RoCE). Exact, not
  // the whole of registered_: rxe checks a window's READs against its
  // region, not the window (DESIGN "Memory windows bound at run time"), so
  // the region bound over must be the value. The caller keeps registered_
  // memory mapped until UnregisterMemory, which drops these first.
  // Destroyed before registered_, after rdv_.
  struct ValueRegistration {
    const MemoryRegion* within = nullptr;  // the registered_ region it lies in
    std::unique_ptr<MemoryRegion> mr;      // the value's bytes, for window binding only
    uint64_t last_use = 0;                 // rendezvous PUT count when last bound (eviction: the oldest)
  };
  static constexpr size_t kValueRegistrations = 64;
  std::vector<ValueRegistration> value_regs_;
  std::unique_ptr<CompletionQueue> cq_;  // conn_'s send and receive completions; destroyed after conn_
  std::unique_ptr<Connection> conn_;     // destroyed before mr_ and cq_
  // The windows' copy buffers, kRendezvousWindows x rendezvous_copy_bytes,
  // allocated at the first connect that has windows, kept across reconnects
  // (registered per connection: RendezvousWindow::copy_mr). Declared before
  // rdv_: freed after the registrations over it.
  std::unique_ptr<uint8_t, FreeDeleter> rdv_copy_mem_;
  // The connection's memory windows for rendezvous PUTs, one per PUT in
  // flight (none: they are off, or the server is older than 10.1).
  // Destroyed before conn_ (MemoryWindow).
  std::array<RendezvousWindow, kRendezvousWindows> rdv_;
  uint32_t rdv_windows_ = 0;  // of rdv_ that exist (RendezvousWindow::mw set)

  const uint32_t max_in_flight_;
  LocationCache cache_;
  std::array<OpState, kMaxInFlight> op_states_;
  // Free op state indexes, a stack (never more than max_in_flight_).
  struct FreeList {
    std::array<uint32_t, kMaxInFlight> ids;
    uint32_t n = 0;
    bool empty() const { return n == 0; }
    uint32_t back() const { return ids[n - 1]; }
    void pop_back() { --n; }
    void push_back(uint32_t i) { ids[n++] = i; }
    void clear() { n = 0; }
  };
  FreeList free_;
  FixedRing<uint32_t> ready_;             // GETs waiting to post (READ budget / large buffer room); <= op states
  FixedRing<uint32_t> senders_;           // message ops with messages left to send; <= op states
  FixedRing<PendingReply> replies_;       // in send order; <= credits
  // Completed operations: done_[done_head_, done_len_) not yet handed out.
  // done_'s size only grows (PushDone): within it an operation is one store.
  std::vector<Op*> done_;
  size_t done_len_ = 0;
  size_t done_head_ = 0;
  void PushDone(Op* op) {
    if (done_len_ == done_.size()) [[unlikely]] done_.resize(std::max<size_t>(2 * done_.size(), kMaxInFlight));
    done_[done_len_++] = op;
  }
  Op* sync_op_ = nullptr;                 // RunSync's operation: Finish clears this instead of queueing it
  std::array<Completion, 32> wc_;         // PollCompletions' buffer (not re-initialised per poll)
  std::array<SendWr, 2 * kMaxInFlight> batch_;
  size_t batch_len_ = 0;
  std::vector<SendWr> msg_batch_;         // PumpMessages' messages, posted together (<= credits)
  uint32_t reads_in_flight_ = 0;
  uint32_t msgs_in_flight_ = 0;
  uint32_t in_flight_ = 0;
  int32_t frag_owner_ = -1;  // op state sending a fragmented PUT
  LargeBufferRanges<kMaxInFlight> large_;  // the large buffer's ranges that GETs hold (OpState::large_at)
  bool large_refused_ = false;  // in this staging pass (Post) a GET found no room in the large buffer
  uint64_t next_request_ = 1;
  uint32_t stage_ = 0;       // the next message's staging buffer (messages sent, modulo credits)
  Status broken_;            // set once the connection failed
  Clock::time_point next_reconnect_{};
  std::chrono::milliseconds reconnect_backoff_{0};
  // The clock as the engine last read it: once per step instead of at each
  // use (a read costs 25-40 instructions; an uncached GET made eight).
  // Submit and RunSync read it before they start operations, PollCompletions
  // after a poll that found completions (before handling them), Progress
  // before staging GETs if nothing else read it during this call. For the
  // round limit this is sound: a round starts at a reading taken before its
  // READ is posted (staging precedes FlushBatch) and ends at one taken after
  // its completion was polled, so a round can only look longer than it was.
  Clock::time_point now_{};
  bool now_fresh_ = false;  // now_ was read during this Submit/RunSync/Progress, before anything was posted
  uint32_t idle_polls_ = 0;  // empty polls since the last CM event check
  Clock::time_point busy_until_{};  // spin (do not sleep) until then; see kSleepSliceMs
  BusyPoll busy_poll_;  // the poll window (common/transport/busy_poll.h)
  Clock::time_point last_idle_check_{};  // see NoticeDisconnectWhileIdle
  bool sync_done_ = false;   // the lock-table WR completed
  // Locks this client holds: key -> the lock word it installed (its token).
  // Heterogeneous lookup: a PUT of a key while locks are held finds its
  // token without building a std::string.
  struct HeldKeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view k) const noexcept { return std::hash<std::string_view>{}(k); }
  };
  std::unordered_map<std::string, uint64_t, HeldKeyHash, std::equal_to<>> held_;
};

[[gnu::always_inline]] inline void Client::Impl::Finish(OpState& s, Status st) {
  Op* op = s.op;
  const uint32_t idx = IndexOf(s);
  if (s.step == Step::kGetPost || s.step == Step::kGetRead) {
    if (st.ok()) {
      ++stats_.get_hits;
      stats_.get_hit_reads += s.reads;
    } else if (st.IsNotFound()) {
      ++stats_.get_misses;
      stats_.get_miss_rounds += s.rounds;
    }
    ReleaseLarge(s);  // only GETs hold ranges of the large buffer
  } else {
    if (st.ok() && s.step == Step::kReplies) {
      if (s.opcode == Opcode::kPut) ++stats_.puts;
      if (s.opcode == Opcode::kDelete) ++stats_.deletes;
    }
    if (frag_owner_ == static_cast<int32_t>(idx)) frag_owner_ = -1;
    if (s.window >= 0) DropWindow(s);  // not invalidated: not usable again
  }
  op->status = std::move(st);
  s.step = Step::kFree;
  s.op = nullptr;
  free_.push_back(idx);
  --in_flight_;
  if (op == sync_op_) {
    sync_op_ = nullptr;  // RunSync is waiting for exactly this one
  } else {
    PushDone(op);
  }
}

}  // namespace kvrdma
