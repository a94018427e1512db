// The client engine: GET and message state machines (see client_impl.h).
#include <cstring>

#include "client/client_impl.h"

namespace kvrdma {
namespace {
}  // namespace

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

void Client::Impl::Start(Op* op, bool stats) {
  // A failed connection is rebuilt when nothing is in flight on it any more.
  NoticeDisconnectWhileIdle(Clock::now());
  Status reconnect;
  if (!broken_.ok() && in_flight_ == 0) reconnect = Reconnect();
  uint32_t idx = free_.back();
  free_.pop_back();
  ++in_flight_;
  Slot& s = slots_[idx];
  s = Slot{};
  s.op = op;
  op->status = Status::OK();
  op->version = 0;
  s.deadline = Clock::now() + std::chrono::milliseconds(opts_.op_timeout_ms);
  if (!reconnect.ok()) return Finish(s, reconnect);
  if (!broken_.ok()) return Finish(s, broken_);
  if (!stats) {
    if (Status st = CheckKey(op->key); !st.ok()) return Finish(s, st);
  }
  if (!stats && op->type != Op::Type::kGet) {
    // The key travels whole in the first message, with at least one value
    // byte (a fragment without value bytes would make no progress).
    const bool value_bytes = op->type == Op::Type::kPut && !op->value.empty();
    if (kRequestHeaderSize + op->key.size() + (value_bytes ? 1 : 0) > desc_.slot_size) {
      return Finish(s, Status::TooLarge("key of " + std::to_string(op->key.size()) + " bytes does not fit a " +
                                        std::to_string(desc_.slot_size) + "-byte request slot"));
    }
  }
  if (!stats && op->type == Op::Type::kGet) {
    if (op->result == nullptr) return Finish(s, Status::InvalidArgument("GET without a result string"));
    auto br = CandidateBucketReads(params_, op->key);
    if (!br.ok()) return Finish(s, br.status());
    s.br = *br;
    s.round_start = Clock::now();
    s.step = Step::kReady;
    if ((s.cached_slot = cache_.Lookup(s.br.hash.hash)) != 0) s.next = Slot::Next::kCached;
    ++stats_.gets;
    ready_.push_back(idx);
    return;
  }
  s.opcode = stats ? Opcode::kStats : op->type == Op::Type::kPut ? Opcode::kPut : Opcode::kDelete;
  std::string_view value = s.opcode == Opcode::kPut ? op->value : std::string_view{};
  if (value.size() > desc_.max_value_bytes) {
    return Finish(s, Status::TooLarge("value of " + std::to_string(value.size()) + " bytes (server limit " +
                                      std::to_string(desc_.max_value_bytes) + ")"));
  }
  if (!stats) cache_.Erase(HashKeyBytes(op->key, params_.seed));  // our own write: the old location is stale
  s.hdr.opcode = s.opcode;
  if (!stats && !held_.empty()) s.hdr.lock_token = TokenFor(op->key);
  s.hdr.request_id = next_request_++;
  s.hdr.key_len = stats ? 0 : static_cast<uint16_t>(op->key.size());
  s.hdr.value_len = static_cast<uint32_t>(value.size());
  s.step = Step::kSending;
  senders_.push_back(idx);
}

void Client::Impl::Finish(Slot& s, Status st) {
  Op* op = s.op;
  if (st.ok()) {
    if (s.opcode == Opcode::kPut && s.step == Step::kReplies) ++stats_.puts;
    if (s.opcode == Opcode::kDelete && s.step == Step::kReplies) ++stats_.deletes;
  }
  op->status = std::move(st);
  uint32_t idx = SlotOf(s);
  if (big_owner_ == static_cast<int32_t>(idx)) big_owner_ = -1;
  if (frag_owner_ == static_cast<int32_t>(idx)) frag_owner_ = -1;
  s.step = Step::kFree;
  s.op = nullptr;
  free_.push_back(idx);
  --in_flight_;
  done_.push_back(op);
}

void Client::Impl::FailAll(const Status& st) {
  if (broken_.ok()) broken_ = st;
  conn_->MarkBroken();
  ready_.clear();
  senders_.clear();
  replies_.clear();
  reads_in_flight_ = msgs_in_flight_ = 0;
  for (Slot& s : slots_) {
    if (s.step != Step::kFree) Finish(s, st);
  }
}

size_t Client::Impl::Submit(std::span<Op* const> ops) {
  size_t n = 0;
  for (Op* op : ops) {
    if (free_.empty()) break;
    Start(op, false);
    ++n;
  }
  Progress();
  return n;
}

size_t Client::Impl::Poll(std::span<Op*> done) {
  if (done_.empty()) Progress();
  size_t n = std::min(done.size(), done_.size());
  for (size_t i = 0; i < n; ++i) done[i] = done_[i];
  done_.erase(done_.begin(), done_.begin() + static_cast<ptrdiff_t>(n));
  return n;
}

size_t Client::Impl::Wait(std::span<Op*> done, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (uint32_t spins = 0;; ++spins) {
    size_t n = Poll(done);
    if (n > 0 || (in_flight_ == 0 && done_.empty())) return n;
    if ((spins & 255) == 0 && Clock::now() > deadline) return 0;
  }
}

void Client::Impl::RunSync(Op* op, bool stats) {
  while (free_.empty()) Progress();  // async operations hold every slot
  Start(op, stats);
  Progress();
  for (;;) {
    for (size_t i = 0; i < done_.size(); ++i) {
      if (done_[i] == op) {  // other completed operations stay for Poll
        done_.erase(done_.begin() + static_cast<ptrdiff_t>(i));
        if (op->status.ok() && op->type != Op::Type::kGet) last_version_ = op->version;
        return;
      }
    }
    Progress();
  }
}

Result<std::vector<std::pair<std::string, uint64_t>>> Client::Impl::Stats() {
  Op op;
  std::string body;
  op.result = &body;
  RunSync(&op, /*stats=*/true);
  if (!op.status.ok()) return op.status;
  return DecodeStats({reinterpret_cast<const uint8_t*>(body.data()), body.size()});
}

// --------------------------------------------------------------- progress

void Client::Impl::Progress() {
  PollCompletions();
  for (size_t n = ready_.size(); n > 0 && broken_.ok(); --n) {
    uint32_t idx = ready_.front();
    ready_.pop_front();
    if (!StageGet(slots_[idx])) ready_.push_back(idx);
  }
  FlushBatch();
  PumpMessages();
}

void Client::Impl::PollCompletions() {
  if (!broken_.ok()) return;
  Completion wc[32];
  int n = conn_->PollSend(wc);
  bool progress = n > 0;
  for (int i = 0; i < n; ++i) {
    if (wc[i].status != WcStatus::kSuccess) return FailAll(CompletionStatus(wc[i]));
    if (wc[i].wr_id == kSyncTag) {
      sync_done_ = true;
    } else if (wc[i].wr_id & kReadTag) {
      OnReadDone(slots_[wc[i].wr_id & 0xffff]);
    }
  }
  if (n < 0) return FailAll(Status::ConnectionLost("completion queue failed"));
  if (msgs_in_flight_ > 0) {  // replies come only to messages
    n = conn_->recv_cq().Poll(wc);
    progress |= n > 0;
    for (int i = 0; i < n && broken_.ok(); ++i) {
      if (wc[i].status != WcStatus::kSuccess) return FailAll(CompletionStatus(wc[i]));
      OnReply(wc[i]);
    }
  }
  if (progress) return;
  // Idle: now and then look at the clock (deadlines are milliseconds away)
  // and at connection-manager events (a server that went away fails what is
  // in flight at once instead of at a timeout).
  ++idle_polls_;
  if (in_flight_ > 0 && idle_polls_ % 64 == 0) CheckDeadlines();
  if (idle_polls_ >= 4096) {
    idle_polls_ = 0;
    conn_->PollCmEvents();
    if (conn_->broken() && broken_.ok()) FailAll(Status::ConnectionLost("the server closed the connection"));
  }
}

void Client::Impl::ResetEngine() {
  for (Slot& s : slots_) s = Slot{};
  free_.clear();
  for (uint32_t i = max_in_flight_; i > 0; --i) free_.push_back(i - 1);
  ready_.clear();
  senders_.clear();
  replies_.clear();
  batch_len_ = 0;
  reads_in_flight_ = msgs_in_flight_ = 0;
  frag_owner_ = big_owner_ = -1;
  seq_ = 0;
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
  conn_.reset();
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
  conn_.reset();
  mr_.reset();
  mem_.reset();
  broken_ = Status::ConnectionLost("reconnecting failed: " + st.ToString());
  return broken_;
}

void Client::Impl::CheckDeadlines() {
  auto now = Clock::now();
  for (Slot& s : slots_) {
    if (s.step == Step::kFree || now <= s.deadline) continue;
    if (s.step == Step::kReady || (s.step == Step::kSending && s.outstanding == 0 && s.sent == 0 && s.first)) {
      // Nothing of it on the wire: fail just this operation.
      if (s.step == Step::kReady) std::erase(ready_, SlotOf(s));
      if (s.step == Step::kSending) std::erase(senders_, SlotOf(s));
      Finish(s, Status::Timeout("operation timed out before it could be sent"));
      continue;
    }
    // A READ or a reply that never came: the connection is not usable.
    return FailAll(Status::Timeout("no answer from the server within " + std::to_string(opts_.op_timeout_ms) +
                                   " ms; the connection is abandoned"));
  }
}

// -------------------------------------------------------------------- GET

bool Client::Impl::StageGet(Slot& s) {
  uint32_t idx = SlotOf(s);
  auto now = Clock::now();
  if (now > s.deadline) {
    Finish(s, Status::Timeout(
                  "GET found no consistent read within " + std::to_string(opts_.op_timeout_ms) + " ms: " +
                  std::to_string(s.restarts) + " restarts" +
                  (s.restarts != 0 ? std::string(", the last after ") + s.restart_cause : std::string()) +
                  (s.big || s.next == Slot::Next::kBigEntry ? "; waiting for the large-entry buffer" : "")));
    return true;
  }
  uint32_t budget = std::max<uint32_t>(conn_->max_rd_atomic(), kCandidateBuckets);
  uint32_t need = s.next == Slot::Next::kBuckets ? kCandidateBuckets : 1;
  if (reads_in_flight_ + need > budget) return false;
  if (s.next == Slot::Next::kBigEntry) {
    if (big_owner_ != -1 && big_owner_ != static_cast<int32_t>(idx)) return false;
    big_owner_ = static_cast<int32_t>(idx);
    s.big = true;
  }
  if (s.next == Slot::Next::kCached) {
    uint64_t off = SlotLogOffset(s.cached_slot);
    uint32_t len = std::min<uint32_t>(static_cast<uint32_t>(SlotReadBytes(s.cached_slot)), kSlotEntryBytes);
    if (off + len > desc_.log.length) {  // cannot be: treat as stale
      cache_.Erase(s.br.hash.hash);
      s.next = Slot::Next::kBuckets;
      need = kCandidateBuckets;
      if (reads_in_flight_ + need > budget) return false;
    } else {
      s.round_start = now;
      s.entry_len = len;
      s.cached_read = true;
      SendWr& w = batch_[batch_len_++];
      w = SendWr{};
      w.wr_id = kReadTag | idx;
      w.opcode = WrOpcode::kRead;
      w.local = mr_->Slice(EntryOff(idx), len);
      w.remote_addr = desc_.log.addr + off;
      w.rkey = desc_.log.rkey;
      s.step = Step::kEntry;
      reads_in_flight_ += 1;
      stats_.reads += 1;
      return true;
    }
  }
  if (s.next == Slot::Next::kBuckets) {
    // A round must finish within the server's GET deadline, so what it READs
    // cannot have been recycled under it (DESIGN.md): a late round starts over.
    if (now - s.round_start > std::chrono::microseconds(desc_.get_deadline_us)) s.miss = MissCheck{};
    s.round_start = now;
    ++stats_.get_rounds;
    for (size_t b = 0; b < kCandidateBuckets; ++b) {
      SendWr& w = batch_[batch_len_++];
      w = SendWr{};
      w.wr_id = kReadTag | idx;
      w.opcode = WrOpcode::kRead;
      w.signaled = b + 1 == kCandidateBuckets;  // READs complete in order: the last one covers both
      w.local = mr_->Slice(BucketOff(idx) + b * kBucketBytes, kBucketBytes);
      w.remote_addr = desc_.index.addr + s.br.reads[b].offset;
      w.rkey = desc_.index.rkey;
    }
    s.step = Step::kBuckets;
  } else {
    const SlotCandidate& c = s.probe.candidates[s.cand];
    SendWr& w = batch_[batch_len_++];
    w = SendWr{};
    w.wr_id = kReadTag | idx;
    w.opcode = WrOpcode::kRead;
    if (s.next == Slot::Next::kEntry) s.entry_len = std::min<uint32_t>(c.entry.length, kSlotEntryBytes);
    w.local = mr_->Slice(s.big ? big_off_ : EntryOff(idx), s.entry_len);
    w.remote_addr = desc_.log.addr + c.entry.offset;
    w.rkey = desc_.log.rkey;
    s.step = Step::kEntry;
  }
  reads_in_flight_ += need;
  stats_.reads += need;
  return true;
}

void Client::Impl::FlushBatch() {
  if (batch_len_ == 0) return;
  Status st = conn_->PostSend({batch_.data(), batch_len_});
  batch_len_ = 0;
  if (!st.ok()) FailAll(st.IsConnectionLost() ? st : Status::ConnectionLost(st.ToString()));
}

void Client::Impl::OnReadDone(Slot& s) {
  if (s.step == Step::kBuckets) {
    reads_in_flight_ -= kCandidateBuckets;
    OnBuckets(s);
  } else if (s.step == Step::kEntry) {
    reads_in_flight_ -= 1;
    OnEntry(s);
  }
}

void Client::Impl::OnBuckets(Slot& s) {
  uint32_t idx = SlotOf(s);
  const auto* b = reinterpret_cast<const std::byte*>(Mem(BucketOff(idx)));
  if (Status st = ProbeBuckets({b, kBucketBytes}, {b + kBucketBytes, kBucketBytes}, s.br.hash, params_, &s.probe);
      !st.ok()) {
    return Finish(s, st);
  }
  s.cand = 0;
  if (s.probe.count == 0) return Miss(s);
  s.next = Slot::Next::kEntry;
  s.step = Step::kReady;
  ready_.push_back(idx);
}

void Client::Impl::Miss(Slot& s) {
  // Nothing in either bucket: real only if a second round sees the same
  // bucket versions (no key was moved between the buckets meanwhile).
  if (s.miss.ConfirmMiss(s.probe)) return Finish(s, Status::NotFound());
  NewRound(s, /*retry=*/false);
}

void Client::Impl::NewRound(Slot& s, bool retry, const char* why) {
  if (retry) {
    ++stats_.get_retries;
    ++s.restarts;
    s.restart_cause = why;
    s.miss = MissCheck{};
  }
  s.next = Slot::Next::kBuckets;
  s.step = Step::kReady;
  ready_.push_back(SlotOf(s));
}

void Client::Impl::OnCachedEntry(Slot& s) {
  s.cached_read = false;
  const auto* bytes = reinterpret_cast<const std::byte*>(Mem(EntryOff(SlotOf(s))));
  // Accepted only when current: checksum, key, and the NOT-CURRENT bit clear.
  // The server clears it only after a slot of the key names the entry and
  // sets it before the slot moves away, so a clear bit proves the entry was
  // the key's current one when the READ read it, however old the cached
  // location and whatever became of its segment since (DESIGN.md, "Location
  // cache"). No deadline is needed.
  EntryView v = DecodeEntry({bytes, s.entry_len}, s.op->key, s.cached_slot, params_.seed, /*require_current=*/true);
  if (v.verdict == EntryVerdict::kValue) {
    ++stats_.cache_hits;
    s.op->result->assign(reinterpret_cast<const char*>(v.value.data()), v.value.size());
    return Finish(s, Status::OK());
  }
  if (v.verdict == EntryVerdict::kTombstone) {
    cache_.Erase(s.br.hash.hash);
    return Finish(s, Status::NotFound());
  }
  // Not current, recycled, torn, another key, or too long for one READ: the
  // index path decides (and refreshes the cache).
  ++stats_.cache_stale;
  cache_.Erase(s.br.hash.hash);
  NewRound(s, /*retry=*/false);
}

bool Client::Impl::RoundIsLate(const Slot& s) const {
  return Clock::now() - s.round_start > std::chrono::microseconds(desc_.get_deadline_us);
}

void Client::Impl::OnEntry(Slot& s) {
  uint32_t idx = SlotOf(s);
  if (s.cached_read) return OnCachedEntry(s);
  const SlotCandidate& c = s.probe.candidates[s.cand];
  const auto* bytes = reinterpret_cast<const std::byte*>(Mem(s.big ? big_off_ : EntryOff(idx)));
  EntryView v = DecodeEntry({bytes, s.entry_len}, s.op->key, c.slot, params_.seed, /*require_current=*/false);
  auto release_big = [&] {
    if (s.big) big_owner_ = -1;
    s.big = false;
  };
  if (v.verdict == EntryVerdict::kNeedMore) {
    release_big();
    if (s.next == Slot::Next::kBigEntry || v.total_bytes > big_cap_ ||
        c.entry.offset + v.total_bytes > desc_.log.length) {
      return NewRound(s, /*retry=*/true, "an implausible entry header (torn)");
    }
    s.entry_len = v.total_bytes;
    s.next = Slot::Next::kBigEntry;
    s.step = Step::kReady;
    ready_.push_back(idx);
    return;
  }
  // Within the deadline the slot READ of this round vouches for the entry
  // (the reuse rule). A round that outlived it (a large value on a busy
  // link) is still sound when the entry's NOT-CURRENT bit was clear: the
  // entry was the key's current one when READ, whatever the slot said.
  if (RoundIsLate(s) && (v.superseded || v.verdict == EntryVerdict::kWrongKey)) {
    release_big();
    return NewRound(s, /*retry=*/true, "the round outlived the GET deadline and its entry was no longer current");
  }
  switch (v.verdict) {
    case EntryVerdict::kValue:
      s.op->result->assign(reinterpret_cast<const char*>(v.value.data()), v.value.size());
      release_big();
      cache_.Insert(s.br.hash.hash, c.slot);
      return Finish(s, Status::OK());
    case EntryVerdict::kTombstone:
      release_big();
      cache_.Erase(s.br.hash.hash);
      return Finish(s, Status::NotFound());
    case EntryVerdict::kWrongKey:
      release_big();
      if (++s.cand < s.probe.count) {
        s.next = Slot::Next::kEntry;
        s.step = Step::kReady;
        ready_.push_back(idx);
        return;
      }
      return Miss(s);  // only fingerprint collisions: the key is not in these buckets
    default:           // torn, malformed, superseded
      release_big();
      return NewRound(s, /*retry=*/true, v.verdict == EntryVerdict::kTorn ? "a torn entry READ (a writer was changing it)"
                                                                          : "a malformed entry READ");
  }
}

// --------------------------------------------------------------- messages

void Client::Impl::PumpMessages() {
  while (!senders_.empty() && broken_.ok()) {
    Slot& s = slots_[senders_.front()];
    if (!SendNextMessage(s)) break;
    if (s.step == Step::kReplies) senders_.pop_front();
  }
}

bool Client::Impl::SendNextMessage(Slot& s) {
  if (msgs_in_flight_ >= desc_.credits) return false;
  uint32_t idx = SlotOf(s);
  std::string_view key = s.opcode == Opcode::kStats ? std::string_view{} : s.op->key;
  std::string_view value = s.opcode == Opcode::kPut ? s.op->value : std::string_view{};
  size_t room = desc_.slot_size - kRequestHeaderSize - (s.first ? key.size() : 0);
  size_t chunk = std::min(room, value.size() - s.sent);
  bool last = s.sent + chunk == value.size();
  if (s.first && !last) {  // a fragmented PUT: one at a time per connection
    if (frag_owner_ != -1 && frag_owner_ != static_cast<int32_t>(idx)) return false;
    frag_owner_ = static_cast<int32_t>(idx);
  }
  RequestHeader h = s.hdr;
  h.flags = static_cast<uint8_t>((s.first ? kFlagFirst : 0) | (last ? kFlagLast : 0));
  h.frag_offset = static_cast<uint32_t>(s.sent);
  h.frag_len = static_cast<uint32_t>(chunk);
  uint32_t stage = static_cast<uint32_t>(seq_ % desc_.credits);
  size_t off = stage_off_ + size_t{stage} * desc_.slot_size;
  uint8_t* m = Mem(off);
  EncodeRequestHeader(h, m);
  size_t len = kRequestHeaderSize;
  if (s.first && !key.empty()) {
    std::memcpy(m + len, key.data(), key.size());
    len += key.size();
  }
  if (chunk != 0) std::memcpy(m + len, value.data() + s.sent, chunk);
  len += chunk;

  SendWr w;
  w.wr_id = seq_;
  w.local = mr_->Slice(off, static_cast<uint32_t>(len));
  // A staging buffer is reused only after the reply to its message, which
  // implies the server read it: completions only reap send-queue slots.
  w.signaled = seq_ % desc_.credits == desc_.credits - 1u;
  if (opts_.put_mode == PutMode::kWriteImm) {
    w.opcode = WrOpcode::kWriteImm;
    w.remote_addr = desc_.ring.addr + size_t{stage} * desc_.slot_size;
    w.rkey = desc_.ring.rkey;
    w.imm = (stage << 24) | static_cast<uint32_t>(len);
  } else {
    w.opcode = WrOpcode::kSend;
  }
  w.inline_data = len <= conn_->max_inline();
  if (Status st = conn_->PostSend({&w, 1}); !st.ok()) {
    FailAll(st.IsConnectionLost() ? st : Status::ConnectionLost(st.ToString()));
    return false;
  }
  ++seq_;
  ++msgs_in_flight_;
  ++stats_.messages;
  ++s.outstanding;
  replies_.push_back({idx, h.request_id});
  s.sent += chunk;
  s.first = false;
  if (last) {
    s.step = Step::kReplies;
    if (frag_owner_ == static_cast<int32_t>(idx)) frag_owner_ = -1;
  }
  return true;
}

void Client::Impl::OnReply(const Completion& c) {
  uint64_t i = c.wr_id;
  const uint8_t* buf = Mem(reply_off_ + i * kMaxReplySize);
  auto p = ParseReply({buf, c.byte_len});
  if (replies_.empty()) return FailAll(Status::Protocol("a reply nobody asked for"));
  PendingReply pr = replies_.front();
  replies_.pop_front();
  --msgs_in_flight_;
  if (!p.ok()) return FailAll(p.status());
  if (p->header.request_id != pr.request_id) {
    return FailAll(Status::Protocol("reply to request " + std::to_string(p->header.request_id) + ", expected " +
                                    std::to_string(pr.request_id)));
  }
  Slot& s = slots_[pr.slot];
  --s.outstanding;
  if (p->header.status != Status::Code::kOk && s.result.ok()) {
    s.result = Status(p->header.status, std::string(reinterpret_cast<const char*>(p->body.data()), p->body.size()));
  }
  if (!(p->header.flags & kReplyFragmentAck)) {
    s.op->version = p->header.version;
    if (s.opcode == Opcode::kStats && s.op->result != nullptr) {
      s.op->result->assign(reinterpret_cast<const char*>(p->body.data()), p->body.size());
    }
  }
  RecvWr r{i, mr_->Slice(reply_off_ + i * kMaxReplySize, kMaxReplySize)};
  if (Status st = conn_->PostRecv({&r, 1}); !st.ok()) return FailAll(Status::ConnectionLost(st.ToString()));
  if (s.step == Step::kReplies && s.outstanding == 0) Finish(s, s.result);
}

}  // namespace kvrdma
