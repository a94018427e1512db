#include "common/protocol/messages.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "common/protocol/wire.h"

namespace kvrdma {

void EncodeRequestHeader(const RequestHeader& h, uint8_t* out) noexcept {
  wire::Writer w({out, kRequestHeaderSize});
  w.U8(static_cast<uint8_t>(h.opcode));
  w.U8(h.flags);
  w.U16(h.key_len);
  w.U32(h.value_len);
  w.U64(h.request_id);
  w.U64(h.lock_token);
  w.U32(h.frag_offset);
  w.U32(h.frag_len);
  w.U64(h.if_version);
}

namespace {

using wire::LoadLe;

// The header's fields at their fixed offsets (EncodeRequestHeader) from b,
// which holds kRequestHeaderSize bytes (the caller checked), into *h but its
// opcode, which is returned as sent (the caller checks it).
[[gnu::always_inline]] inline uint8_t DecodeRequestHeader(const uint8_t* b, RequestHeader* h) noexcept {
  h->flags = b[1];
  h->key_len = LoadLe<uint16_t>(b + 2);
  h->value_len = LoadLe<uint32_t>(b + 4);
  h->request_id = LoadLe<uint64_t>(b + 8);
  h->lock_token = LoadLe<uint64_t>(b + 16);
  h->frag_offset = LoadLe<uint32_t>(b + 24);
  h->frag_len = LoadLe<uint32_t>(b + 28);
  h->if_version = LoadLe<uint64_t>(b + 32);
  static_assert(kRequestHeaderSize == 40, "the offsets above are EncodeRequestHeader's");
  return b[0];
}

// One request at the start of msg, into *p (unspecified on error); *used:
// its length. Without MORE it must end msg; with MORE (allowed only in
// ParseMessage) it must be a whole PUT/DELETE with more bytes after it.
// Into the caller's ParsedRequest, not a Result's: ParseMessage parses
// straight into its out array (a Result and a copy cost a small PUT ~60
// server instructions). Always inline: in ParseMessage, the server's one
// parse per message, the call and its saved registers cost a small PUT ~30
// instructions.
Status ParseOneChecked(std::span<const uint8_t> msg, uint32_t max_key, uint32_t max_value, bool allow_more,
                       ParsedRequest* p, size_t* used) noexcept;

[[gnu::always_inline]] inline Status ParseOne(std::span<const uint8_t> msg, uint32_t max_key, uint32_t max_value, bool allow_more,
                ParsedRequest* p, size_t* used) noexcept {
  if (msg.size() < kRequestHeaderSize) [[unlikely]] return ParseOneChecked(msg, max_key, max_value, allow_more, p, used);
  // The header's fields at their offsets (EncodeRequestHeader): the check
  // above covers all kRequestHeaderSize bytes, so no read needs its own.
  RequestHeader& h = p->header;
  const uint8_t op = DecodeRequestHeader(msg.data(), &h);
  // The common request, a whole PUT with no condition, alone in its message
  // (or the last of several), checked in one test: every check below that
  // applies to it (known opcode and flags, if_version 0 without IF_VERSION,
  // key 1..max_key bytes, value within max_value, the fragment at 0 covering
  // the value, the lengths adding up to the message). Anything else takes
  // the checks one by one, which also word the refusal.
  if (op == static_cast<uint8_t>(Opcode::kPut) && h.flags == (kFlagFirst | kFlagLast) && h.if_version == 0 &&
      h.frag_offset == 0 && h.frag_len == h.value_len && h.value_len <= max_value && h.key_len != 0 &&
      h.key_len <= max_key && kRequestHeaderSize + size_t{h.key_len} + h.frag_len == msg.size()) {
    h.opcode = Opcode::kPut;
    p->key = msg.subspan(kRequestHeaderSize, h.key_len);
    p->value = msg.subspan(kRequestHeaderSize + h.key_len);
    p->rendezvous = {};
    *used = msg.size();
    return Status::OK();
  }
  return ParseOneChecked(msg, max_key, max_value, allow_more, p, used);
}

// Every other request: its checks one by one, each wording its refusal. Out
// of line (the strings' code in ParseMessage cost every PUT a full register
// save and a large stack frame). Parses the header again.
[[gnu::noinline]] Status ParseOneChecked(std::span<const uint8_t> msg, uint32_t max_key, uint32_t max_value,
                                         bool allow_more, ParsedRequest* p, size_t* used) noexcept {
  if (msg.size() < kRequestHeaderSize) {
    return Status::InvalidArgument("request shorter than its header (" + std::to_string(msg.size()) + " bytes)");
  }
  RequestHeader& h = p->header;
  const uint8_t op = DecodeRequestHeader(msg.data(), &h);
  if (op < 1 || op > 4) return Status::InvalidArgument("unknown opcode " + std::to_string(op));
  h.opcode = static_cast<Opcode>(op);
  if ((h.flags & ~(kFlagFirst | kFlagLast | kFlagIfVersion | kFlagMore | kFlagRendezvous)) != 0) {
    return Status::InvalidArgument("unknown request flags");
  }
  const bool rendezvous = (h.flags & kFlagRendezvous) != 0;
  if (rendezvous) {
    if (h.opcode != Opcode::kPut || (h.flags & (kFlagFirst | kFlagLast)) != (kFlagFirst | kFlagLast) ||
        (h.flags & kFlagMore) != 0) {
      return Status::InvalidArgument("RENDEZVOUS on anything but a lone whole PUT");
    }
    if (h.value_len == 0) return Status::InvalidArgument("a rendezvous PUT of an empty value");
    if (h.frag_offset != 0 || h.frag_len != kRendezvousFieldsBytes) {
      return Status::InvalidArgument("a rendezvous PUT carries 24 descriptor bytes, no value bytes");
    }
  }
  const bool more = (h.flags & kFlagMore) != 0;
  if (more) {
    if (!allow_more) return Status::InvalidArgument("MORE on a lone request");
    if (IsQuery(h.opcode)) return Status::InvalidArgument("a query with MORE (only PUT/DELETE share a message)");
    if ((h.flags & (kFlagFirst | kFlagLast)) != (kFlagFirst | kFlagLast)) {
      return Status::InvalidArgument("a fragment with MORE (only whole requests share a message)");
    }
  }
  if (h.flags & kFlagIfVersion) {
    if (IsQuery(h.opcode)) return Status::InvalidArgument("a condition on a query");
    if (h.opcode == Opcode::kDelete && h.if_version == 0) {
      return Status::InvalidArgument("a DELETE only if the key has no value");
    }
  } else if (h.if_version != 0) {
    return Status::InvalidArgument("if_version without the IF_VERSION flag");
  }
  bool first = (h.flags & kFlagFirst) != 0;
  bool last = (h.flags & kFlagLast) != 0;
  if (h.opcode != Opcode::kPut) {
    if (!first || !last || h.value_len != 0 || h.frag_len != 0 || h.frag_offset != 0) {
      return Status::InvalidArgument("only PUT carries a value or fragments");
    }
  }
  if (IsQuery(h.opcode)) {
    if (h.key_len != 0) {
      return Status::InvalidArgument(h.opcode == Opcode::kStats ? "STATS takes no key" : "CLOCK takes no key");
    }
  } else if (first && (h.key_len == 0 || h.key_len > max_key)) {
    return h.key_len == 0 ? Status::InvalidArgument("empty key")
                          : Status::TooLarge("key of " + std::to_string(h.key_len) + " bytes (limit " +
                                             std::to_string(max_key) + ")");
  }
  if (h.value_len > max_value) {
    return Status::TooLarge("value of " + std::to_string(h.value_len) + " bytes (limit " +
                            std::to_string(max_value) + ")");
  }
  uint64_t frag_end = uint64_t{h.frag_offset} + h.frag_len;
  if (!rendezvous) {
    if (frag_end > h.value_len) return Status::InvalidArgument("value fragment past the value's end");
    if (first && h.frag_offset != 0) return Status::InvalidArgument("first fragment not at offset 0");
    if (last && frag_end != h.value_len) return Status::InvalidArgument("last fragment does not end the value");
  }
  size_t key_bytes = first ? h.key_len : 0;
  const uint64_t len = uint64_t{kRequestHeaderSize} + key_bytes + h.frag_len;
  if (more ? len >= msg.size() : len != msg.size()) {
    return Status::InvalidArgument(std::string("request lengths do not add up: header ") +
                                   std::to_string(kRequestHeaderSize) + " + key " + std::to_string(key_bytes) +
                                   " + value " + std::to_string(h.frag_len) + (more ? " leave no room for the next of " : " != ") +
                                   std::to_string(msg.size()) + " bytes received");
  }
  wire::Reader r(msg.subspan(kRequestHeaderSize));
  p->key = r.Bytes(key_bytes);
  if (rendezvous) {
    p->value = {};
    p->rendezvous.addr = r.U64();
    p->rendezvous.rkey = r.U32();
    if (r.U32() != 0) return Status::InvalidArgument("a rendezvous PUT's reserved word is not 0");
    p->rendezvous.checksum = r.U64();
  } else {
    p->value = r.Bytes(h.frag_len);
    p->rendezvous = {};
  }
  *used = static_cast<size_t>(len);
  return Status::OK();
}

}  // namespace

void EncodeRendezvous(const RendezvousValue& v, uint8_t* out) noexcept {
  wire::Writer w({out, kRendezvousFieldsBytes});
  w.U64(v.addr);
  w.U32(v.rkey);
  w.U32(0);
  w.U64(v.checksum);
}

Result<ParsedRequest> ParseRequest(std::span<const uint8_t> msg, uint32_t max_key, uint32_t max_value) noexcept {
  size_t used = 0;
  ParsedRequest p;
  if (Status st = ParseOne(msg, max_key, max_value, /*allow_more=*/false, &p, &used); !st.ok()) return st;
  return p;
}

namespace {

// ParseMessage's checks of its n-th request (parsed into *p, or refused
// with st), in their order: the request's own error, then a request that
// may not share a message, then one past out's end (n == out_size).
[[gnu::noinline]] Status CheckInMessage(Status st, const ParsedRequest& p, size_t n, size_t out_size) {
  if (!st.ok()) {
    if (n == 0) return st;  // a lone request's error, as protocol 9 words it
    return Status(st.code(), "request " + std::to_string(n) + " of the message: " + st.message());
  }
  if (n > 0 && (IsQuery(p.header.opcode) || (p.header.flags & kFlagRendezvous) != 0 ||
                (p.header.flags & (kFlagFirst | kFlagLast)) != (kFlagFirst | kFlagLast))) {
    return Status::InvalidArgument("request " + std::to_string(n) +
                                   " of the message: only whole PUT/DELETEs share a message");
  }
  if (n == out_size) {
    return Status::InvalidArgument("more than " + std::to_string(out_size) + " requests in one message");
  }
  return Status::OK();
}

// A request past out's end: parsed into a ParsedRequest of its own (made
// only then: its initialisation is not free), then refused.
[[gnu::cold]] Status RefusePastEnd(std::span<const uint8_t> rest, uint32_t max_key, uint32_t max_value,
                                   size_t n) noexcept {
  ParsedRequest p;
  size_t used = 0;
  Status st = CheckInMessage(ParseOne(rest, max_key, max_value, /*allow_more=*/true, &p, &used), p, n, n);
  return st.ok() ? Status::Internal("a request past the end was not refused") : st;  // n == out_size refuses
}

}  // namespace

Result<size_t> ParseMessage(std::span<const uint8_t> msg, uint32_t max_key, uint32_t max_value,
                            std::span<ParsedRequest> out) noexcept {
  size_t n = 0, off = 0;
  for (;;) {
    if (n == out.size()) return RefusePastEnd(msg.subspan(off), max_key, max_value, n);
    size_t used = 0;
    ParsedRequest& p = out[n];
    if (Status st = ParseOne(msg.subspan(off), max_key, max_value, /*allow_more=*/true, &p, &used); !st.ok() ||
        n > 0) {
      KVRDMA_RETURN_IF_ERROR(CheckInMessage(std::move(st), p, n, out.size()));
    }
    ++n;
    off += used;
    if (!(p.header.flags & kFlagMore)) return n;  // the last one ended the message (ParseOne checked)
  }
}

Result<ParsedReply> ParseReply(std::span<const uint8_t> msg) noexcept {
  // The fixed header is checked for length once and read at its offsets
  // (every PUT's reply comes here: a field-by-field reader checked each one).
  if (msg.size() < kReplyHeaderSize) return Status::Protocol("malformed reply");
  const uint8_t code = msg[0];
  ParsedReply p;
  p.header.flags = msg[1];
  const uint32_t body_len = LoadLe<uint32_t>(msg.data() + 4);
  p.header.request_id = LoadLe<uint64_t>(msg.data() + 8);
  p.header.version = LoadLe<uint64_t>(msg.data() + 16);
  if (body_len > msg.size() - kReplyHeaderSize) return Status::Protocol("malformed reply");
  p.body = msg.subspan(kReplyHeaderSize, body_len);
  if (code > static_cast<uint8_t>(Status::kLastCode)) return Status::Protocol("reply with unknown status");
  p.header.status = static_cast<Status::Code>(code);
  return p;
}

Result<size_t> ParseReplies(std::span<const uint8_t> msg, std::span<ParsedReply> out) noexcept {
  size_t n = 0, off = 0;
  while (off < msg.size()) {
    if (n == out.size()) return Status::Protocol("a reply with more records than requests");
    auto p = ParseReply(msg.subspan(off));
    if (!p.ok()) return p.status();
    out[n++] = *p;
    off += kReplyHeaderSize + p->body.size();
  }
  if (n == 0) return Status::Protocol("an empty reply");
  return n;
}

size_t EncodeStats(std::span<const std::pair<std::string_view, uint64_t>> stats, std::span<uint8_t> out) noexcept {
  wire::Writer w(out);
  w.U16(static_cast<uint16_t>(stats.size()));
  for (const auto& [name, value] : stats) {
    std::string_view n = name.substr(0, 255);
    w.U8(static_cast<uint8_t>(n.size()));
    w.Bytes(n);
    w.U64(value);
  }
  return w.ok() ? w.size() : 0;
}

Result<std::vector<std::pair<std::string, uint64_t>>> DecodeStats(std::span<const uint8_t> body) {
  wire::Reader r(body);
  uint16_t n = r.U16();
  std::vector<std::pair<std::string, uint64_t>> out;
  for (uint16_t i = 0; i < n && r.ok(); ++i) {
    uint8_t len = r.U8();
    auto name = r.Bytes(len);
    uint64_t v = r.U64();
    out.emplace_back(std::string(reinterpret_cast<const char*>(name.data()), name.size()), v);
  }
  if (!r.ok()) return Status::Protocol("malformed STATS reply");
  return out;
}

size_t EncodeClock(uint64_t now_ms, std::span<uint8_t> out) noexcept {
  wire::Writer w(out);
  w.U64(now_ms);
  return w.ok() ? w.size() : 0;
}

Result<uint64_t> DecodeClock(std::span<const uint8_t> body) {
  if (body.size() != kClockReplyBytes) {
    return Status::Protocol("a CLOCK reply of " + std::to_string(body.size()) + " bytes (expected " +
                            std::to_string(kClockReplyBytes) + ")");
  }
  wire::Reader r(body);
  return r.U64();
}

}  // namespace kvrdma
