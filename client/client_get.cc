// The GET path, top to bottom: one state machine per GET over one-sided RDMA
// READs (docs/DESIGN.md, "Client: GET path" and "Why a GET returns a value
// the key had during the GET").
//
// A GET is always in one phase (OpState::phase) and one step: kGetPost (its
// READs wait to be posted: READ credits, or the large buffer) or kGetRead
// (they are in flight; their completion carries WrKind::kGetRead and the op
// state's index).
//
//   StartGet ──cache hit──> kCachedEntry (word + entry, its READ where kEntry's
//      │                        would go) ──word names it──> done
//      │                        └─moved/late/torn/other──┐
//      └──────────────────────> kWindow <─────────────────┴── NewRound
//                                   │ probe: candidates; none: the miss rule
//                                   │ (MissIsProven: done, or another round)
//                                   v
//                               kEntry (candidate word `cand`: one READ of its
//                                   │   size class's bytes, into the op buffer
//                                   │   if they fit, else a range of the shared
//                                   │   large buffer;
//                                   │   a direct READ puts the value straight
//                                   │   into the caller's registered buffer)
//                                   v
//                               done, the next candidate (kEntry), the miss
//                               rule, NewRound, or (a late round) kRecheck:
//                               the word again, done if it still names the entry
//
// Every entry, up to the largest, comes in that one READ: the ref's size
// class covers it (common/format/entry_ref.h), so there is no second entry READ.
// The rule (DESIGN.md, "Why a GET returns a value the key had during the
// GET"): bytes at a log offset are trusted only as the entry an index word
// named, read within a bounded time of that word: the reuse rule. Bytes a
// client wrote can lie at any stale offset (a value may carry a complete,
// checksummed image of another key's entry), so neither a checksum nor the
// NOT-CURRENT bit proves anything on its own. Torn/malformed bytes start a
// new round.
#include <cstring>

#include "client/client_impl.h"

namespace kvrdma {

void Client::Impl::StartGet(OpState& s) {
  s.round_start = RoundClock::time_point{};  // set when its first READ is posted (StageGet)
  // A buffer in registered memory (Client::RegisterMemory): direct READs.
  if (s.op->result == nullptr && !registered_.empty() && !s.op->buffer.empty()) {
    s.registered = RegisteredRegionOf(s.op->buffer.data(), s.op->buffer.size());
  }
  const LocationCache::Location loc = cache_.Lookup(s.kw.hash.hash);
  s.cached_ref = loc.confirmed ? loc.ref : 0;
  s.cached_word = loc.word;
  s.phase = s.cached_ref != 0 ? GetPhase::kCachedEntry : GetPhase::kWindow;
  s.step = Step::kGetPost;
  s.not_before = Clock::time_point{};
  s.tag_rounds = 0;
  ++stats_.gets;
  ready_.push_back(IndexOf(s));
}

// Post's first step: every ready GET's READs into batch_, in ready_'s order.
// StageGet is inlined here, its one caller (a call, and its saved
// registers, less per READ staged).
void Client::Impl::StageGets() {
  if (!now_fresh_) now_ = Clock::now();  // before anything is posted: StageGet's round start
  large_refused_ = false;
  for (size_t n = ready_.size(); n > 0 && broken_.ok(); --n) {
    uint32_t idx = ready_.front();
    ready_.pop_front();
    if (!StageGet(op_states_[idx])) ready_.push_back(idx);
  }
}

// Posts the READs of the GET's phase into batch_. False: not now (READ
// credits, or room in the large buffer); the GET stays in ready_.
[[gnu::always_inline]] inline bool Client::Impl::StageGet(OpState& s) {
  const uint32_t idx = IndexOf(s);
  const Clock::time_point now = now_;  // read before anything of this Progress is posted
  if (now > s.deadline) [[unlikely]] {
    FinishTimedOutGet(s);
    return true;
  }
  if (s.phase == GetPhase::kCachedEntry) {
    const uint64_t len = SizeClassBytes(RefSizeClass(s.cached_ref));
    s.direct = false;
    // The cached READ goes into the op buffer, or a range of the large one.
    // OnEntry caches only refs whose READ fits one of them; anything else
    // cannot be: treat it as stale and take the index path.
    if (RefLogOffset(s.cached_ref) + len > desc_.log.length || (len > kOpEntryBytes && len > large_cap_) ||
        s.cached_word >= params_.window_words) {
      cache_.Erase(s.kw.hash.hash);
      s.phase = GetPhase::kWindow;
    } else {
      s.entry_len = static_cast<uint32_t>(len);
    }
  }
  if (s.phase == GetPhase::kWindow && now < s.not_before) return false;  // backing off (NextCandidateOrMiss)
  // Every step posts one READ but kCachedEntry, which posts two.
  const uint32_t reads = s.phase == GetPhase::kCachedEntry ? 2 : 1;
  if (reads_in_flight_ + reads > std::max<uint32_t>(conn_->max_rd_atomic(), 2)) return false;
  if (NeedsLargeRange(s)) {
    // A cached round starts when its READs are posted: waiting for room
    // does not age it.
    if (!HoldLarge(s, s.entry_len)) return false;  // released in On(Cached)Entry, NextCandidateOrMiss, NewRound, Finish
    if (s.phase == GetPhase::kEntry && RoundIsLate(s)) {
      // It waited for room (other GETs' large READs) past the round limit:
      // its READ now would need the recheck, which ages the same way (with
      // 16 GETs of 1 MiB in flight on one connection none completed). Read
      // the window again instead, its range held from that READ on, so that
      // its entry READ follows at once.
      NewRound(s, /*retry=*/false);
      return true;
    }
  }
  switch (s.phase) {
    case GetPhase::kCachedEntry:
      // The word first, then the entry, in one doorbell: the QP's READs run
      // in order at the server, so the entry's bytes are read after the word.
      s.round_start = now;  // entry_len: set above, <= the buffer it goes to
      PlanEntryRead(s);
      PostGetRead(idx, desc_.index, s.kw.read.offset + s.cached_word * kWordBytes,
                  WindowOff(idx) + s.cached_word * kWordBytes, kWordBytes, false);
      PostEntryRead(idx, s, RefLogOffset(s.cached_ref));
      break;
    case GetPhase::kWindow:
      s.round_start = now;
      ++stats_.get_rounds;
      ++s.rounds;
      PostGetRead(idx, desc_.index, s.kw.read.offset, WindowOff(idx), s.kw.read.length, true);
      break;
    case GetPhase::kEntry:  // entry_len and direct: set by NextCandidateOrMiss, <= the buffer it names
      PostEntryRead(idx, s, s.candidate.entry.offset);
      break;
    case GetPhase::kRecheck:  // the candidate's word, where the window READ put it
      PostGetRead(idx, desc_.index, s.kw.read.offset + uint64_t(s.cand) * kWordBytes,
                  WindowOff(idx) + size_t(s.cand) * kWordBytes, kWordBytes, true);
      break;
  }
  s.step = Step::kGetRead;
  reads_in_flight_ += reads;
  stats_.reads += reads;
  s.reads += reads;
  return true;
}

void Client::Impl::FinishTimedOutGet(OpState& s) {
  Finish(s, Status::Timeout("GET found no consistent read within " + std::to_string(opts_.op_timeout_ms) + " ms: " +
                            std::to_string(s.restarts) + " restarts" +
                            (s.restarts != 0 ? std::string(", the last after ") + s.restart_cause : std::string()) +
                            (NeedsLargeRange(s) ? "; it was waiting for room in the large-entry buffer" : "")));
}

[[gnu::always_inline]] inline void Client::Impl::PostGetRead(uint32_t idx, const RemoteRegion& region, uint64_t offset,
                                                            size_t local_off, uint32_t len, bool signaled) {
  // Every field a READ uses, set (the others are left as they are: a READ
  // ignores imm, compare_add and swap).
  SendWr& w = batch_[batch_len_++];
  w.wr_id = MakeWrId(WrKind::kGetRead, idx);
  w.opcode = WrOpcode::kRead;
  w.signaled = signaled;
  w.inline_data = false;
  w.local = mr_->Slice(local_off, len);
  w.local2 = Sge{};
  w.remote_addr = region.addr + offset;
  w.rkey = region.rkey;
}

void Client::Impl::PlanEntryRead(OpState& s) const {
  // Header and key into the op buffer, then at least one byte for the buffer.
  const size_t head = kEntryKeyOffset + s.op->key.size();
  s.direct = s.registered != nullptr && !s.direct_refused && s.entry_len >= kDirectReadMinBytes && s.entry_len > head;
}

[[gnu::always_inline]] inline void Client::Impl::PostEntryRead(uint32_t idx, OpState& s, uint64_t off) {
  if (!s.direct) {
    return PostGetRead(idx, desc_.log, off, UsesLargeBuffer(s) ? large_off_ + s.large_at : EntryOff(idx), s.entry_len,
                       true);
  }
  const uint32_t head = static_cast<uint32_t>(kEntryKeyOffset + s.op->key.size());
  ++stats_.direct_reads;
  PostGetRead(idx, desc_.log, off, EntryOff(idx), head, true);
  const std::span<std::byte> buf = s.op->buffer;
  batch_[batch_len_ - 1].local2 = s.registered->Slice(
      static_cast<size_t>(reinterpret_cast<uint64_t>(buf.data()) - s.registered->base()),
      static_cast<uint32_t>(std::min<size_t>(s.entry_len - head, buf.size())));
}

EntryView Client::Impl::DecodeDirectRead(OpState& s, uint64_t ref, bool* refetch) {
  *refetch = false;
  const auto* bytes = reinterpret_cast<const std::byte*>(Mem(EntryOff(IndexOf(s))));  // header and key
  const size_t head = kEntryKeyOffset + s.op->key.size();
  const std::span<const std::byte> tail = s.op->buffer.first(std::min<size_t>(s.entry_len - head, s.op->buffer.size()));
  // Whether the header's key and value fit what was read (the value may be
  // longer than the buffer, or these bytes another key's entry or torn):
  // if not, only an ordinary READ of the whole entry can tell which.
  uint32_t lengths;
  std::memcpy(&lengths, bytes + LengthsAt(RefLogOffset(ref)), sizeof lengths);
  if (size_t{LengthsKey(lengths)} + LengthsValue(lengths) > head - kEntryKeyOffset + tail.size()) {
    *refetch = true;
    s.direct_refused = true;
    return {};
  }
  return DecodeEntry({bytes, head}, tail, s.op->key, ref, params_.seed, /*require_current=*/false);
}

void Client::Impl::OnGetReadDone(OpState& s) {
  if (s.step != Step::kGetRead) return;
  // One completion per step: kCachedEntry's word READ is unsignaled, and the
  // entry READ's completion implies it.
  reads_in_flight_ -= s.phase == GetPhase::kCachedEntry ? 2 : 1;
  switch (s.phase) {
    case GetPhase::kCachedEntry: return OnCachedEntry(s);
    case GetPhase::kWindow: return OnWindow(s);
    case GetPhase::kEntry: return OnEntry(s);
    case GetPhase::kRecheck: return OnRecheck(s);
  }
}

uint64_t Client::Impl::WindowWord(const OpState& s, uint64_t word) {
  uint64_t w;
  std::memcpy(&w, Mem(WindowOff(IndexOf(s)) + word * kWordBytes), sizeof w);
  return w;
}

// Posts the GET's next phase (from a completion handler).
void Client::Impl::NextPhase(OpState& s, GetPhase phase) {
  s.phase = phase;
  s.step = Step::kGetPost;
  ready_.push_back(IndexOf(s));
}

bool Client::Impl::HoldLarge(OpState& s, uint32_t len) {
  if (s.large_len >= len) return true;
  ReleaseLarge(s);
  if (large_refused_) return false;  // a GET ahead of this one is waiting for room
  const std::optional<uint64_t> at = large_.Take(len);
  if (!at) {
    large_refused_ = true;
    return false;
  }
  s.large_at = *at;
  s.large_len = len;
  return true;
}

void Client::Impl::NewRound(OpState& s, bool retry, const char* why) {
  // A range of the large buffer stays held only by a GET that waits to READ into it.
  if (!s.wants_large) ReleaseLarge(s);
  if (retry) {
    ++stats_.get_retries;
    ++s.restarts;
    s.restart_cause = why;
  }
  NextPhase(s, GetPhase::kWindow);
}

[[gnu::always_inline]] inline void Client::Impl::OnCachedEntry(OpState& s) {
  // Accepted only when the word READ just before the entry still named it
  // and the round took less than the round limit: the entry was the key's
  // current one when the word was read, and its segment cannot have been
  // reused before the entry READ (DESIGN.md, "Location cache"). A checksum
  // and a clear NOT-CURRENT bit alone prove nothing at an old location: the
  // bytes there may be another client's value.
  ReleaseLarge(s);  // its bytes stay until we return: nothing posts before then
  const bool named = WordRef(WindowWord(s, s.cached_word)) == s.cached_ref && !RoundIsLate(s);
  bool refetch = false;  // a direct READ short of the entry: the index path reads it whole
  EntryView v = named ? DecodeEntryRead(s, s.cached_ref, &refetch) : EntryView{};
  if (v.verdict == EntryVerdict::kValue) {
    ++stats_.cache_hits;
    return Finish(s, DeliverValue(s, v.value));
  }
  if (v.verdict == EntryVerdict::kTombstone) {
    cache_.Erase(s.kw.hash.hash);
    return Finish(s, Status::NotFound());
  }
  // Moved, late, recycled, torn or another key: the index path decides (and
  // refreshes the cache).
  ++stats_.cache_stale;
  cache_.Erase(s.kw.hash.hash);
  NewRound(s, /*retry=*/false);
}

[[gnu::always_inline]] inline void Client::Impl::OnWindow(OpState& s) {
  if (Status st = ProbeWindow(WindowBytes(s), s.kw.hash, params_, &s.probe); !st.ok()) return Finish(s, st);
  // The miss rule needs the window READ's own round time (the entry READs of
  // fingerprint collisions that may follow do not count).
  s.window_late = RoundIsLate(s);
  NextCandidateOrMiss(s, 0);
}

[[gnu::always_inline]] inline void Client::Impl::NextCandidateOrMiss(OpState& s, int from) {
  s.cand = static_cast<int16_t>(NextCandidate(s.probe, from));
  if (s.cand >= 0) {
    s.candidate = CandidateAt(WindowBytes(s), s.cand, params_);
    // One READ of its size class's bytes (clamped to the log): the whole
    // entry. Those that fit go into the op buffer, the others into the
    // large buffer, which holds the largest entry the server accepts; a
    // class beyond that is no entry of this server.
    s.entry_len = s.candidate.entry.length;
    if (s.entry_len > kOpEntryBytes && s.entry_len > large_cap_) {
      return NewRound(s, /*retry=*/true, "a ref whose size class exceeds the server's largest entry");
    }
    // A range of the large buffer, if it needs one, is taken in StageGet, in
    // ready_'s order, within the round limit.
    PlanEntryRead(s);
    s.wants_large = UsesLargeBuffer(s);
    if (!s.wants_large) ReleaseLarge(s);  // held since the window READ, but the entry fits the op buffer
    return NextPhase(s, GetPhase::kEntry);
  }
  s.wants_large = false;  // no candidate: nothing to READ into it (NewRound or Finish releases it)
  // No ref of the key in its window. Real only if no move of the key can
  // have passed the READ: no tag matches the key and the round took less
  // than the round limit (DESIGN.md, "Misses while entry refs move"); else read the
  // window again.
  if (MissIsProven(s.probe, !s.window_late)) return Finish(s, Status::NotFound());
  if (s.probe.tag_matched) {
    // A tag stays until the server expires it (the grace period): reading
    // the window again at once would only repeat this round. Back off,
    // doubling from 25 us to 1 ms, so that keys made to hop (a client can
    // choose keys that fill a window) cost a reader a few READs per
    // millisecond, not a flood.
    const int64_t backoff_us = std::min<int64_t>(int64_t{25} << std::min<uint32_t>(s.tag_rounds, 6), 1000);
    s.not_before = now_ + std::chrono::microseconds(backoff_us);
    ++s.tag_rounds;
  }
  NewRound(s, /*retry=*/false);
}

bool Client::Impl::RoundIsLate(const OpState& s) const {
  return now_ - s.round_start > std::chrono::microseconds(desc_.round_limit_us);  // now_: read after the poll
}

[[gnu::always_inline]] inline void Client::Impl::OnEntry(OpState& s) {
  // Its range of the large buffer is given back, but holds its bytes until
  // we return: nothing posts before then.
  ReleaseLarge(s);
  const Candidate& c = s.candidate;
  bool refetch = false;
  EntryView v = DecodeEntryRead(s, c.ref, &refetch);
  // A direct READ that holds less than the entry: this candidate's entry
  // once more, read whole the ordinary way (direct READs are off for this GET).
  if (refetch) return NextCandidateOrMiss(s, s.cand);
  // Within the round limit the window READ of this round vouches for the
  // entry (the reuse rule). A round that outlived it (a large value on a busy
  // link) proves nothing yet: its key's value or tombstone is accepted only
  // if the word READ again still names it (kRecheck); anything else (another
  // key's bytes, torn or malformed ones) may be what the reuse of the
  // entry's segment left there, so neither the next candidate nor the miss
  // rule may use this round: start over.
  if (RoundIsLate(s)) {
    if (v.verdict != EntryVerdict::kValue && v.verdict != EntryVerdict::kTombstone) {
      return NewRound(s, /*retry=*/true, "the round outlived the round limit and its entry was not the key's");
    }
    s.recheck_found = v.verdict == EntryVerdict::kValue;
    if (s.recheck_found) s.recheck_delivered = DeliverValue(s, v.value);  // the GET's outcome if the recheck confirms it
    cache_.Erase(s.kw.hash.hash);
    return NextPhase(s, GetPhase::kRecheck);
  }
  switch (v.verdict) {
    case EntryVerdict::kValue: {
      // Its READ fit the op buffer or the large one (NextCandidateOrMiss), as
      // the cached READ will. A large entry's location is READ from the
      // cache only once two GETs in a row found the same ref (confirmed): a
      // cached READ of a stale location costs the whole entry for nothing,
      // and a key rewritten between its GETs (a large value under updates)
      // would pay that every time.
      const bool confirmed = !UsesLargeBuffer(s) || cache_.Lookup(s.kw.hash.hash).ref == c.ref;
      cache_.Insert(s.kw.hash.hash, {c.ref, static_cast<uint64_t>(s.cand), confirmed});
      return Finish(s, DeliverValue(s, v.value));
    }
    case EntryVerdict::kTombstone:
      cache_.Erase(s.kw.hash.hash);
      return Finish(s, Status::NotFound());
    case EntryVerdict::kWrongKey:  // a fingerprint collision: the next candidate
      return NextCandidateOrMiss(s, s.cand + 1);
    default:           // torn, malformed
      return NewRound(s, /*retry=*/true,
                      v.verdict == EntryVerdict::kTorn ? "a torn entry READ (a writer was changing it)"
                                                       : "a malformed entry READ");
  }
}

// A late round's entry decoded (its value is in the result already): it is
// the key's entry only if its word, READ after it, still names it within
// kRecheckRoundLimits round limits of the round's start. Were the bytes not the
// entry the window READ named, its segment was reused after that READ (a
// grace period later at least) and the word names the offset again only
// after another reuse (one more grace period): more time than this allows
// (DESIGN.md, "Why a GET returns a value the key had during the GET").
void Client::Impl::OnRecheck(OpState& s) {
  const auto limit = std::chrono::microseconds(uint64_t{desc_.round_limit_us} * kRecheckRoundLimits);
  if (WordRef(WindowWord(s, static_cast<uint64_t>(s.cand))) != s.candidate.ref ||
      now_ - s.round_start > limit) {
    return NewRound(s, /*retry=*/true, "a late round whose entry ref had moved or that took too long");
  }
  return Finish(s, s.recheck_found ? std::move(s.recheck_delivered) : Status::NotFound());
}

[[gnu::always_inline]] inline Status Client::Impl::DeliverValue(OpState& s, std::span<const std::byte> value) {
  Op* op = s.op;
  op->value_bytes = value.size();
  if (op->result != nullptr) {
    // Copied there by the decode (a large value into a string at least that
    // long): only its length is set.
    if (value.data() == reinterpret_cast<const std::byte*>(op->result->data())) [[unlikely]] {
      return KeepCopiedValue(op->result, value.size());
    }
    // clear + append: within the string's capacity a plain copy (assign's
    // _M_replace checks for overlap first: ~35 more instructions a GET).
    op->result->clear();
    op->result->append(reinterpret_cast<const char*>(value.data()), value.size());
    return Status::OK();
  }
  if (value.size() > op->buffer.size()) [[unlikely]] return ValueDoesNotFit(value.size(), op->buffer);
  // A direct READ or the decode (DecodeEntryInto) put it there already.
  if (!value.empty() && value.data() != op->buffer.data()) std::memcpy(op->buffer.data(), value.data(), value.size());
  return Status::OK();
}

EntryView Client::Impl::DecodeLargeEntry(OpState& s, std::span<const std::byte> entry, uint64_t ref) {
  std::string* r = s.op->result;
  return DecodeEntryInto(entry, s.op->key, ref, params_.seed, /*require_current=*/false,
                         r == nullptr ? s.op->buffer : std::as_writable_bytes(std::span(r->data(), r->size())));
}

Status Client::Impl::KeepCopiedValue(std::string* result, size_t value_bytes) {
  result->resize(value_bytes);  // not longer than it was: no byte written but the terminator
  return Status::OK();
}

Status Client::Impl::ValueDoesNotFit(size_t value_bytes, std::span<std::byte> buffer) {
  return Status::TooLarge("value of " + std::to_string(value_bytes) + " bytes does not fit the buffer of " +
                          std::to_string(buffer.size()) + " bytes" +
                          (buffer.data() == nullptr ? " (a GET Op needs a result string or a buffer)" : ""));
}

}  // namespace kvrdma
