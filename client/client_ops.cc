// The client engine: GET and message state machines (see client_impl.h).
#include <cstring>
#include <memory>

#include "client/client_impl.h"
#include "common/log.h"

namespace kvrdma {

const Client::Impl::OpFields Client::Impl::kFreshOpFields{};

Status Client::Impl::CheckKey(std::string_view key) const {
  if (key.empty()) return Status::InvalidArgument("empty key");
  if (key.size() > desc_.max_key_bytes) {
    return Status::TooLarge("key of " + std::to_string(key.size()) + " bytes (server limit " +
                            std::to_string(desc_.max_key_bytes) + ")");
  }
  return Status::OK();
}

// ------------------------------------------------------------- lifecycle

void Client::Impl::NoticeDisconnectWhileIdle(Clock::time_point now) {
  if (in_flight_ != 0 || !broken_.ok() || now - last_idle_check_ < std::chrono::milliseconds(50)) return;
  last_idle_check_ = now;
  conn_->PollCmEvents();
  if (conn_->broken()) FailAll(Status::ConnectionLost("the server closed the connection"));
}

// The common start of every operation: its op state, reset for its kind,
// and the operation's result fields cleared.
[[gnu::always_inline]] inline Client::Impl::OpState& Client::Impl::TakeOpState(Op* op, bool get) {
  const uint32_t idx = free_.back();
  free_.pop_back();
  ++in_flight_;
  OpState& s = op_states_[idx];
  if (get) {
    s.ResetForGet();
  } else {
    s.ResetForMessage();
  }
  s.op = op;
  op->status = Status::OK();
  op->version = 0;
  op->value_bytes = 0;
  const Clock::time_point now = now_;
  busy_until_ = now + busy_poll_.window();
  s.deadline = now + std::chrono::milliseconds(opts_.op_timeout_ms);
  return s;
}

// A failed connection is rebuilt when nothing is in flight on it any more.
// False: the reconnect failed, and the operation ended with its status.
bool Client::Impl::ReconnectBeforeStart(Op* op, bool get) {
  Status reconnect = Reconnect();
  now_ = Clock::now();  // the deadline counts from after the reconnect
  if (reconnect.ok()) return true;
  Finish(TakeOpState(op, get), std::move(reconnect));
  return false;
}

void Client::Impl::FinishAtStart(OpState& s) {
  if (!broken_.ok()) return Finish(s, broken_);
  Finish(s, CheckKey(s.op->key));
}

// Inline into Submit and RunSync, its two callers (a call, and its saved
// registers, less per operation).
[[gnu::always_inline]] inline void Client::Impl::Start(Op* op, std::optional<Opcode> query) {
  const bool keyless = query.has_value();  // a STATS or CLOCK request: no key
  // now_: read by the caller (Submit, RunSync). The 50 ms test first: it
  // skips the call on all but one operation in 50 ms.
  if (in_flight_ == 0 && now_ - last_idle_check_ >= std::chrono::milliseconds(50)) NoticeDisconnectWhileIdle(now_);
  const bool get = !keyless && op->type == Op::Type::kGet;
  if (!broken_.ok() && in_flight_ == 0) [[unlikely]] {
    if (!ReconnectBeforeStart(op, get)) return;
  }
  OpState& s = TakeOpState(op, get);
  if (!broken_.ok() || (!keyless && (op->key.empty() || op->key.size() > desc_.max_key_bytes))) [[unlikely]] {
    return FinishAtStart(s);
  }
  if (get) {
    s.kw = KeyWindowOf(params_, op->key);  // params_ validated at connect, the key above
    return StartGet(s);  // client_get.cc
  }
  StartMessage(s, query);
}

// A PUT, DELETE or query: its request header, then the message queue.
void Client::Impl::StartMessage(OpState& s, std::optional<Opcode> query) {
  Op* op = s.op;
  const bool keyless = query.has_value();
  if (!keyless) {
    // The key travels whole in the first message, with at least one value
    // byte (a fragment without value bytes would make no progress).
    const bool value_bytes = op->type == Op::Type::kPut && !op->value.empty();
    if (kRequestHeaderSize + op->key.size() + (value_bytes ? 1 : 0) > desc_.message_bytes) {
      return Finish(s, Status::TooLarge("key of " + std::to_string(op->key.size()) + " bytes does not fit a " +
                                        std::to_string(desc_.message_bytes) + "-byte message buffer"));
    }
  }
  s.opcode = query ? *query : op->type == Op::Type::kPut ? Opcode::kPut : Opcode::kDelete;
  std::string_view value = s.opcode == Opcode::kPut ? op->value : std::string_view{};
  if (value.size() > desc_.max_value_bytes) {
    return Finish(s, Status::TooLarge("value of " + std::to_string(value.size()) + " bytes (server limit " +
                                      std::to_string(desc_.max_value_bytes) + ")"));
  }
  const bool conditional = !keyless && op->if_version != kAnyVersion;
  if (conditional && s.opcode == Opcode::kDelete && op->if_version == kIfAbsent) {
    return Finish(s, Status::InvalidArgument("a DELETE only if the key has no value deletes nothing"));
  }
  // The size first: it rules out most PUTs (in_flight_ counts this one).
  s.rendezvous = value.size() >= RendezvousMinBytes(in_flight_ > 1) && opts_.rendezvous_bytes > 0 &&
                 rdv_windows_ > 0 && s.opcode == Opcode::kPut &&
                 kRequestHeaderSize + op->key.size() + kRendezvousFieldsBytes <= desc_.message_bytes;
  // Our own write: the old location is stale (a client that never cached one
  // does not hash the key for it).
  if (!keyless && cache_.may_hold_entries()) cache_.Erase(HashKeyBytes(op->key, params_.seed));
  s.hdr.opcode = s.opcode;
  s.hdr.flags = conditional ? kFlagIfVersion : 0;  // SendNextMessage adds FIRST/LAST
  s.hdr.if_version = conditional ? op->if_version : 0;
  if (!keyless && !held_.empty()) s.hdr.lock_token = TokenFor(op->key);
  s.hdr.request_id = next_request_++;
  s.hdr.key_len = keyless ? 0 : static_cast<uint16_t>(op->key.size());
  s.hdr.value_len = static_cast<uint32_t>(value.size());
  s.step = Step::kSending;
  senders_.push_back(IndexOf(s));
}

void Client::Impl::FailAll(const Status& st) {
  if (broken_.ok()) broken_ = st;
  conn_->MarkBroken();
  ready_.clear();
  senders_.clear();
  replies_.clear();
  reads_in_flight_ = msgs_in_flight_ = 0;
  for (OpState& s : op_states_) {
    if (s.step != Step::kFree) Finish(s, st);
  }
}

size_t Client::Impl::Submit(std::span<Op* const> ops) {
  now_ = Clock::now();  // for every operation started here, and for staging their READs
  now_fresh_ = true;
  size_t n = 0;
  for (Op* op : ops) {
    // The CQ is polled only when every op state is taken (completions free
    // them): otherwise completions wait for Poll or Wait, one CQ poll per
    // operation's round trip instead of two.
    if (free_.empty()) PollCompletions();
    if (free_.empty()) break;
    Start(op, std::nullopt);
    ++n;
  }
  Post();
  return n;
}

size_t Client::Impl::Poll(std::span<Op*> done) {
  if (done_head_ == done_len_) Progress();
  size_t n = std::min(done.size(), done_len_ - done_head_);
  for (size_t i = 0; i < n; ++i) done[i] = done_[done_head_ + i];
  done_head_ += n;
  if (done_head_ == done_len_) {  // all handed out: reuse the storage
    done_len_ = 0;
    done_head_ = 0;
  }
  return n;
}

size_t Client::Impl::Wait(std::span<Op*> done, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    size_t n = Poll(done);
    if (n > 0 || (in_flight_ == 0 && done_head_ == done_len_)) return n;
    if (Clock::now() > deadline) return 0;
    IdleWait(deadline);
  }
}

void Client::Impl::RunSync(Op* op, std::optional<Opcode> query) {
  while (free_.empty()) {  // async operations hold every op state
    Progress();
    if (free_.empty()) IdleWait(Clock::time_point::max());
  }
  sync_op_ = op;  // Finish hands it back here, not to Poll
  now_ = Clock::now();
  now_fresh_ = true;
  Start(op, query);
  for (;;) {  // other completed operations stay for Poll
    Progress();
    if (sync_op_ == nullptr) break;
    IdleWait(Clock::time_point::max());
  }
  if ((op->status.ok() || op->status.IsVersionMismatch()) && op->type != Op::Type::kGet) last_version_ = op->version;
}

Result<std::string> Client::Impl::Query(Opcode query) {
  Op op;
  std::string body;
  op.result = &body;
  RunSync(&op, query);
  if (!op.status.ok()) return op.status;
  return body;
}

Result<std::vector<std::pair<std::string, uint64_t>>> Client::Impl::Stats() {
  auto body = Query(Opcode::kStats);
  if (!body.ok()) return body.status();
  return DecodeStats({reinterpret_cast<const uint8_t*>(body->data()), body->size()});
}

Result<uint64_t> Client::Impl::ServerClockMs() {
  auto body = Query(Opcode::kClock);
  if (!body.ok()) return body.status();
  return DecodeClock({reinterpret_cast<const uint8_t*>(body->data()), body->size()});
}

// --------------------------------------------------------------- progress

void Client::Impl::Progress() {
  PollCompletions();  // reads the clock into now_ if it found completions
  Post();
}

void Client::Impl::Post() {
  if (!ready_.empty()) StageGets();  // client_get.cc
  now_fresh_ = false;
  if (batch_len_ != 0) FlushBatch();
  if (!senders_.empty()) PumpMessages();
}

void Client::Impl::PollCompletions() {
  if (!broken_.ok()) return;
  std::span<Completion> wc(wc_);
  const int n = cq_->Poll(wc);
  if (n < 0) [[unlikely]] return FailPolled(nullptr);
  if (n > 0) {
    now_ = Clock::now();  // after the poll: the end of the rounds these completions finish
    now_fresh_ = true;
    busy_until_ = now_ + busy_poll_.window();
    busy_poll_.FoundWork();
    idle_polls_ = 0;
  }
  for (int i = 0; i < n && broken_.ok(); ++i) {
    if (wc[i].status != WcStatus::kSuccess) [[unlikely]] return FailPolled(&wc[i]);
    switch (WrKindOf(wc[i].wr_id)) {
      case WrKind::kGetRead: OnGetReadDone(op_states_[WrPayload(wc[i].wr_id) % kMaxInFlight]); break;
      case WrKind::kLockTable: sync_done_ = true; break;
      case WrKind::kMessage: break;  // frees send-queue room only (replies complete messages)
      case WrKind::kReply: OnReply(wc[i]); break;
      case WrKind::kWindow: OnWindowInvalidated(op_states_[WrPayload(wc[i].wr_id) % kMaxInFlight]); break;
    }
  }
  if (n > 0) return;
  // Idle: now and then look at the clock (deadlines are milliseconds away)
  // and at connection-manager events (a server that went away fails what is
  // in flight at once instead of at a timeout).
  ++idle_polls_;
  if (in_flight_ > 0 && idle_polls_ % 64 == 0) CheckDeadlines();
  if (idle_polls_ >= 4096) CheckConnection();
}

// The completion queue failed (c null), or a work request did (c).
void Client::Impl::FailPolled(const Completion* c) {
  FailAll(c == nullptr ? Status::ConnectionLost("completion queue failed") : CompletionStatus(*c));
}

void Client::Impl::CheckConnection() {
  idle_polls_ = 0;
  conn_->PollCmEvents();
  if (conn_->broken() && broken_.ok()) FailAll(Status::ConnectionLost("the server closed the connection"));
}

void Client::Impl::IdleWait(Clock::time_point deadline) {
  const auto now = Clock::now();
  if (now < busy_until_ || now >= deadline || !broken_.ok()) return;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  const int ms = static_cast<int>(std::min<int64_t>(left, kSleepSliceMs));
  const bool woke = cq_->Wait(ms).ok();
  if (busy_poll_.adapts()) busy_poll_.Slept(Clock::now() - now, woke);
  if (woke) return;  // a completion may be there: the caller polls
  // A whole slice without completions: what the idle polls would have seen.
  if (in_flight_ > 0) CheckDeadlines();
  CheckConnection();
}

void Client::Impl::ResetEngine() {
  for (size_t i = 0; i < op_states_.size(); ++i) {
    op_states_[i].index = static_cast<uint8_t>(i);
    op_states_[i].ResetAll();
  }
  free_.clear();
  for (uint32_t i = max_in_flight_; i > 0; --i) free_.push_back(i - 1);
  ready_.Reserve(kMaxInFlight);
  senders_.Reserve(kMaxInFlight);
  replies_.Reserve(std::max<uint32_t>(desc_.credits, 1));
  batch_len_ = 0;
  msg_batch_.clear();
  msg_batch_.reserve(desc_.credits);
  reads_in_flight_ = msgs_in_flight_ = 0;
  frag_owner_ = -1;
  large_.Reset(large_cap_);
  large_refused_ = false;
  stage_ = 0;
  held_.clear();    // locks belong to the old connection (they lapse with their lease)
  cache_.Clear();   // locations may name another server's memory now
}

Status Client::Impl::Reconnect() {
  auto now = Clock::now();
  if (now < next_reconnect_) {
    return Status::ConnectionLost("connection lost (" + broken_.message() + "); next reconnect attempt in " +
                                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                     next_reconnect_ - now).count()) + " ms");
  }
  ResetWindows();  // before their QP (MemoryWindow)
  conn_.reset();
  cq_.reset();
  mr_.reset();
  mem_.reset();
  ResetEngine();
  Status st = Connect();
  if (st.ok()) {
    broken_ = Status::OK();
    reconnect_backoff_ = std::chrono::milliseconds(0);
    return st;
  }
  reconnect_backoff_ = std::clamp(reconnect_backoff_ * 2, std::chrono::milliseconds(10), std::chrono::milliseconds(2000));
  next_reconnect_ = Clock::now() + reconnect_backoff_;
  ResetWindows();
  conn_.reset();
  mr_.reset();
  mem_.reset();
  broken_ = Status::ConnectionLost("reconnecting failed: " + st.ToString());
  return broken_;
}

void Client::Impl::CheckDeadlines() {
  auto now = Clock::now();
  for (OpState& s : op_states_) {
    if (s.step == Step::kFree || now <= s.deadline) continue;
    if (s.step == Step::kGetPost || (s.step == Step::kSending && s.outstanding == 0 && s.sent == 0 && s.first)) {
      // Nothing of it on the wire: fail just this operation.
      if (s.step == Step::kGetPost) ready_.erase(IndexOf(s));
      if (s.step == Step::kSending) senders_.erase(IndexOf(s));
      Finish(s, Status::Timeout("operation timed out before it could be sent"));
      continue;
    }
    // A READ or a reply that never came: the connection is not usable.
    return FailAll(Status::Timeout("no answer from the server within " + std::to_string(opts_.op_timeout_ms) +
                                   " ms; the connection is abandoned"));
  }
}

// ------------------------------------------------------------- batching

void Client::Impl::FlushBatch() {
  if (batch_len_ == 0) return;
  Status st = conn_->PostSend({batch_.data(), batch_len_});
  batch_len_ = 0;
  if (!st.ok()) [[unlikely]] FailPost(std::move(st));
}

void Client::Impl::FailPost(Status st) {
  FailAll(st.IsConnectionLost() ? st : Status::ConnectionLost(st.ToString()));
}

// --------------------------------------------------------------- messages

// Sends what the credits allow, in one PostSend (one doorbell: on Soft-RoCE
// one system call, however many messages).
void Client::Impl::PumpMessages() {
  msg_batch_.clear();
  while (!senders_.empty() && broken_.ok()) {
    OpState& s = op_states_[senders_.front()];
    // Several writes waiting: one message for as many as fit (no waiting for
    // more: only what is already queued when a credit is free).
    if (senders_.size() > 1 && Packable(s) && Packable(op_states_[senders_.at(1)])) {
      if (!SendWrites()) break;
      continue;
    }
    if (!SendNextMessage(s)) break;
    if (s.step == Step::kReplies || s.step == Step::kFree) senders_.pop_front();  // kFree: refused before sending
  }
  if (msg_batch_.empty()) return;
  if (Status st = conn_->PostSend({msg_batch_.data(), msg_batch_.size()}); !st.ok()) {
    FailAll(st.IsConnectionLost() ? st : Status::ConnectionLost(st.ToString()));
  }
  msg_batch_.clear();
}

bool Client::Impl::Packable(const OpState& s) const {
  if (!s.first || IsQuery(s.opcode) || s.rendezvous) return false;
  const size_t value = s.opcode == Opcode::kPut ? s.op->value.size() : 0;
  return kRequestHeaderSize + s.op->key.size() + value <= desc_.message_bytes;
}

bool Client::Impl::SendWrites() {
  if (msgs_in_flight_ >= desc_.credits) return false;
  uint8_t* m = NextStage();
  PendingReply pr;
  pr.count = 0;
  size_t len = 0, prev = 0;
  while (!senders_.empty() && pr.count < kMaxRequestsPerMessage) {
    const uint32_t idx = senders_.front();
    OpState& s = op_states_[idx];
    if (!Packable(s)) break;
    const std::string_view key = s.op->key;
    const std::string_view value = s.opcode == Opcode::kPut ? s.op->value : std::string_view{};
    const size_t need = kRequestHeaderSize + key.size() + value.size();
    if (len + need > desc_.message_bytes) break;
    if (pr.count > 0) m[prev + 1] |= kFlagMore;  // the previous request's flags (header byte 1): one follows
    RequestHeader h = s.hdr;
    h.flags = static_cast<uint8_t>((s.hdr.flags & kFlagIfVersion) | kFlagFirst | kFlagLast);
    h.frag_offset = 0;
    h.frag_len = static_cast<uint32_t>(value.size());
    EncodeRequestHeader(h, m + len);
    std::memcpy(m + len + kRequestHeaderSize, key.data(), key.size());
    if (!value.empty()) std::memcpy(m + len + kRequestHeaderSize + key.size(), value.data(), value.size());
    prev = len;
    len += need;
    if (pr.count == 0) {
      pr.op = idx;
      pr.request_id = h.request_id;
    }
    pr.ops[pr.count++] = static_cast<uint8_t>(idx);
    s.outstanding = 1;
    s.sent = value.size();
    s.first = false;
    s.step = Step::kReplies;
    senders_.pop_front();
  }
  QueueMessage(len, pr);
  return true;
}

uint8_t* Client::Impl::NextStage() { return Mem(StageOff(NextStageIndex())); }

void Client::Impl::QueueMessage(size_t len, const PendingReply& pr) {
  const uint32_t stage = NextStageIndex();
  const size_t off = StageOff(stage);
  replies_.push_back(pr);
  SendWr& w = msg_batch_.emplace_back();  // within the capacity reserved at connect: credits
  w.wr_id = MakeWrId(WrKind::kMessage, stage);
  w.local = mr_->Slice(off, static_cast<uint32_t>(len));
  // A staging buffer is reused only after the reply to its message, which
  // implies the server read it: completions only free send-queue room.
  w.signaled = stage == desc_.credits - 1u;
  if (opts_.put_mode == PutMode::kWriteImm) {
    w.opcode = WrOpcode::kWriteImm;
    w.remote_addr = desc_.ring.addr + size_t{stage} * desc_.message_bytes;
    w.rkey = desc_.ring.rkey;
    w.imm = (stage << 24) | static_cast<uint32_t>(len);
  } else {
    w.opcode = WrOpcode::kSend;
  }
  w.inline_data = len <= conn_->max_inline();
  if (++stage_ == desc_.credits) stage_ = 0;
  ++msgs_in_flight_;
  ++stats_.messages;
}

bool Client::Impl::SendNextMessage(OpState& s) {
  if (msgs_in_flight_ >= desc_.credits) return false;
  if (s.rendezvous) return SendRendezvous(s);
  uint32_t idx = IndexOf(s);
  std::string_view key = IsQuery(s.opcode) ? std::string_view{} : s.op->key;
  std::string_view value = s.opcode == Opcode::kPut ? s.op->value : std::string_view{};
  size_t room = desc_.message_bytes - kRequestHeaderSize - (s.first ? key.size() : 0);
  size_t chunk = std::min(room, value.size() - s.sent);
  bool last = s.sent + chunk == value.size();
  if (s.first && !last) {  // a fragmented PUT: one at a time per connection
    if (frag_owner_ != -1 && frag_owner_ != static_cast<int32_t>(idx)) return false;
    frag_owner_ = static_cast<int32_t>(idx);
  }
  RequestHeader h = s.hdr;
  h.flags = static_cast<uint8_t>((s.hdr.flags & kFlagIfVersion) | (s.first ? kFlagFirst : 0) | (last ? kFlagLast : 0));
  h.frag_offset = static_cast<uint32_t>(s.sent);
  h.frag_len = static_cast<uint32_t>(chunk);
  uint8_t* m = NextStage();
  EncodeRequestHeader(h, m);
  size_t len = kRequestHeaderSize;
  if (s.first && !key.empty()) {
    std::memcpy(m + len, key.data(), key.size());
    len += key.size();
  }
  if (chunk != 0) std::memcpy(m + len, value.data() + s.sent, chunk);
  len += chunk;
  QueueMessage(len, PendingReply::One(idx, h.request_id));
  ++s.outstanding;
  s.sent += chunk;
  s.first = false;
  if (last) {
    s.step = Step::kReplies;
    if (frag_owner_ == static_cast<int32_t>(idx)) frag_owner_ = -1;
  }
  return true;
}

void Client::Impl::OnReply(const Completion& c) {
  const uint64_t i = WrPayload(c.wr_id);
  const uint8_t* buf = Mem(reply_off_ + i * kMaxReplySize);
  auto p = ParseReply({buf, c.byte_len});
  if (replies_.empty()) return FailAll(Status::Protocol("a reply nobody asked for"));
  const PendingReply& front = replies_.front();
  --msgs_in_flight_;
  if (front.count > 1) {
    const PendingReply pr = front;
    replies_.pop_front();
    OnRecords({buf, c.byte_len}, pr);
    if (!broken_.ok()) return;
    RecvWr r{c.wr_id, mr_->Slice(reply_off_ + i * kMaxReplySize, kMaxReplySize)};
    if (Status st = conn_->PostRecv({&r, 1}); !st.ok()) FailAll(Status::ConnectionLost(st.ToString()));
    return;
  }
  // A reply to one request: its op state and request id are all it needs.
  const uint32_t op = front.op;
  const uint64_t request_id = front.request_id;
  replies_.pop_front();
  if (!p.ok()) return FailAll(p.status());
  if (p->header.request_id != request_id) {
    return FailAll(Status::Protocol("reply to request " + std::to_string(p->header.request_id) + ", expected " +
                                    std::to_string(request_id)));
  }
  OpState& s = op_states_[op];
  --s.outstanding;
  if (p->header.status != Status::Code::kOk && s.result.ok()) {
    s.result = Status(p->header.status, std::string(reinterpret_cast<const char*>(p->body.data()), p->body.size()));
  }
  if (!(p->header.flags & kReplyFragmentAck)) {
    s.op->version = p->header.version;
    if (IsQuery(s.opcode) && s.op->result != nullptr) {
      s.op->result->assign(reinterpret_cast<const char*>(p->body.data()), p->body.size());
    }
  }
  RecvWr r{c.wr_id, mr_->Slice(reply_off_ + i * kMaxReplySize, kMaxReplySize)};
  if (Status st = conn_->PostRecv({&r, 1}); !st.ok()) return FailAll(Status::ConnectionLost(st.ToString()));
  if (s.step == Step::kReplies && s.outstanding == 0) {
    if (s.window >= 0) return InvalidateWindow(s);
    Finish(s, std::move(s.result));  // ResetForMessage clears what the move leaves
  }
}

// ----------------------------------------------------- rendezvous PUTs

bool Client::Impl::SendRendezvous(OpState& s) {
  const uint32_t idx = IndexOf(s);
  if (rdv_windows_ == 0) {  // all dropped with a failed connection since this PUT started: fragments
    s.rendezvous = false;
    return SendNextMessage(s);
  }
  int32_t wi = 0;
  while (wi < static_cast<int32_t>(kRendezvousWindows) && (rdv_[wi].mw == nullptr || rdv_[wi].owner != -1)) ++wi;
  if (wi == static_cast<int32_t>(kRendezvousWindows)) return false;  // every window is another PUT's: after the first
  RendezvousWindow& w = rdv_[wi];
  const std::string_view value = s.op->value;
  // The window covers exactly the value, READ only, through this
  // connection's QP: the only remote access to it. The memory is only read.
  // Where the value lies in memory the caller did not register and fits
  // the window's copy buffer, the window is bound over a copy of it there
  // (registered at connect: no registration per PUT). Otherwise the region
  // it is bound over is exactly the value (rxe checks READs against the
  // region), with no rkey of its own (ValueRegion).
  const MemoryRegion* region = nullptr;
  const char* bytes = value.data();  // what the window exposes: the value, or its copy
  const MemoryRegion* within = RegisteredRegionOf(value.data(), value.size());
  if (w.copy_mr != nullptr && value.size() <= w.copy_mr->length() && within == nullptr) {
    std::memcpy(w.copy_mr->addr(), value.data(), value.size());
    region = w.copy_mr.get();
    bytes = static_cast<const char*>(w.copy_mr->addr());
    ++stats_.rendezvous_copies;
  } else {
    auto reg = ValueRegion(w, value, within);
    if (!reg.ok()) {  // e.g. over the locked-memory limit: the value goes in fragments, as it would without windows
      if (stats_.rendezvous_fallbacks++ == 0) {
        KVRDMA_LOG_WARN("a rendezvous PUT of %zu bytes goes in fragments: registering its value failed (%s); "
                        "ClientStats::rendezvous_fallbacks counts such PUTs",
                        value.size(), reg.status().ToString().c_str());
      }
      s.rendezvous = false;
      return SendNextMessage(s);
    }
    region = *reg;
  }
  const uint64_t addr = reinterpret_cast<uint64_t>(bytes);
  const MwBinding b{w.mw.get(), region, addr, value.size(), kAccessRemoteRead, MakeWrId(WrKind::kWindow, idx)};
  // Posted now, ahead of the request (queued in msg_batch_, posted after):
  // the NIC binds before it sends the request that names the rkey.
  if (Status st = conn_->BindWindow(b, /*signaled=*/false); !st.ok()) {
    w.mr.reset();
    FailAll(st.IsConnectionLost() ? st : Status::ConnectionLost(st.ToString()));
    return false;
  }
  w.owner = static_cast<int32_t>(idx);
  w.bound = region;
  s.window = static_cast<int8_t>(wi);
  RequestHeader h = s.hdr;
  h.flags = static_cast<uint8_t>((s.hdr.flags & kFlagIfVersion) | kFlagFirst | kFlagLast | kFlagRendezvous);
  h.frag_offset = 0;
  h.frag_len = kRendezvousFieldsBytes;
  uint8_t* m = NextStage();
  EncodeRequestHeader(h, m);
  size_t len = kRequestHeaderSize;
  std::memcpy(m + len, s.op->key.data(), s.op->key.size());
  len += s.op->key.size();
  const RendezvousValue rv{addr, w.mw->rkey(),
                           RendezvousChecksum({reinterpret_cast<const uint8_t*>(s.op->key.data()), s.op->key.size()},
                                              {reinterpret_cast<const uint8_t*>(bytes), value.size()},
                                              desc_.hash_seed)};
  EncodeRendezvous(rv, m + len);
  len += kRendezvousFieldsBytes;
  QueueMessage(len, PendingReply::One(idx, h.request_id));
  ++s.outstanding;
  s.sent = value.size();
  s.first = false;
  s.step = Step::kReplies;
  ++stats_.rendezvous_puts;
  return true;
}

void Client::Impl::InvalidateWindow(OpState& s) {
  SendWr w;
  w.wr_id = MakeWrId(WrKind::kWindow, IndexOf(s));
  w.opcode = WrOpcode::kLocalInv;
  w.rkey = rdv_[s.window].mw->rkey();
  w.signaled = true;
  if (Status st = conn_->PostSend({&w, 1}); !st.ok()) {
    FailAll(st.IsConnectionLost() ? st : Status::ConnectionLost(st.ToString()));
  }
}

void Client::Impl::OnWindowInvalidated(OpState& s) {
  if (s.window < 0 || rdv_[s.window].owner != static_cast<int32_t>(IndexOf(s)) || s.step != Step::kReplies) {
    return FailAll(Status::Protocol("a window invalidation nobody posted"));
  }
  // The server's READ of the value ended before its reply; now no rkey
  // names the value any more: it may be deregistered and handed back.
  RendezvousWindow& w = rdv_[s.window];
  w.owner = -1;
  w.bound = nullptr;
  w.mr.reset();
  s.window = -1;
  Finish(s, std::move(s.result));
}

void Client::Impl::ResetWindows() {
  for (RendezvousWindow& w : rdv_) {
    w.mw.reset();  // first: a window may be bound over mr or copy_mr
    w.mr.reset();
    w.copy_mr.reset();
    w.bound = nullptr;
    w.owner = -1;
  }
  rdv_windows_ = 0;
}

void Client::Impl::DropWindow(OpState& s) {
  RendezvousWindow& w = rdv_[s.window];
  s.window = -1;
  w.owner = -1;
  w.bound = nullptr;
  w.mw.reset();  // unbinds; this window is not used again until the connection is rebuilt
  w.mr.reset();
  w.copy_mr.reset();
  --rdv_windows_;
}

void Client::Impl::OnRecords(std::span<const uint8_t> reply, const PendingReply& pr) {
  std::array<ParsedReply, kMaxRequestsPerMessage> rec;
  auto n = ParseReplies(reply, rec);
  if (!n.ok()) return FailAll(n.status());
  auto text = [](const ParsedReply& r) {
    return std::string_view(reinterpret_cast<const char*>(r.body.data()), r.body.size());
  };
  if (*n == 1 && rec[0].header.status != Status::Code::kOk && rec[0].header.request_id == pr.request_id) {
    // The whole message refused (a malformed request: nothing applied).
    const Status st(rec[0].header.status, text(rec[0]));
    for (uint8_t i = 0; i < pr.count; ++i) Finish(op_states_[pr.ops[i]], st);
    return;
  }
  if (*n != pr.count) {
    return FailAll(Status::Protocol("a reply of " + std::to_string(*n) + " records to a message of " +
                                    std::to_string(pr.count) + " requests"));
  }
  for (uint8_t i = 0; i < pr.count; ++i) {
    const uint64_t want = op_states_[pr.ops[i]].hdr.request_id;
    if (rec[i].header.request_id != want) {
      return FailAll(Status::Protocol("reply record for request " + std::to_string(rec[i].header.request_id) +
                                      ", expected " + std::to_string(want)));
    }
  }
  for (uint8_t i = 0; i < pr.count; ++i) {
    OpState& s = op_states_[pr.ops[i]];
    s.outstanding = 0;
    s.op->version = rec[i].header.version;
    Finish(s, rec[i].header.status == Status::Code::kOk ? Status::OK() : Status(rec[i].header.status, text(rec[i])));
  }
}

}  // namespace kvrdma
