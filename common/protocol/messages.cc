#include "common/protocol/messages.h"

#include <algorithm>

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

// One request at the start of msg; *used: its length. Without MORE it must
// end msg; with MORE (allowed only in ParseMessage) it must be a whole
// PUT/DELETE with more bytes after it.
Result<ParsedRequest> ParseOne(std::span<const uint8_t> msg, uint32_t max_key, uint32_t max_value, bool allow_more,
                               size_t* used) noexcept {
  if (msg.size() < kRequestHeaderSize) {
    return Status::InvalidArgument("request shorter than its header (" + std::to_string(msg.size()) + " bytes)");
  }
  wire::Reader r(msg);
  ParsedRequest p;
  RequestHeader& h = p.header;
  uint8_t op = r.U8();
  h.flags = r.U8();
  h.key_len = r.U16();
  h.value_len = r.U32();
  h.request_id = r.U64();
  h.lock_token = r.U64();
  h.frag_offset = r.U32();
  h.frag_len = r.U32();
  h.if_version = r.U64();
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
  p.key = r.Bytes(key_bytes);
  if (rendezvous) {
    p.rendezvous.addr = r.U64();
    p.rendezvous.rkey = r.U32();
    if (r.U32() != 0) return Status::InvalidArgument("a rendezvous PUT's reserved word is not 0");
    p.rendezvous.checksum = r.U64();
  } else {
    p.value = r.Bytes(h.frag_len);
  }
  *used = static_cast<size_t>(len);
  return p;
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
  return ParseOne(msg, max_key, max_value, /*allow_more=*/false, &used);
}

Result<size_t> ParseMessage(std::span<const uint8_t> msg, uint32_t max_key, uint32_t max_value,
                            std::span<ParsedRequest> out) noexcept {
  size_t n = 0, off = 0;
  for (;;) {
    size_t used = 0;
    auto p = ParseOne(msg.subspan(off), max_key, max_value, /*allow_more=*/true, &used);
    if (!p.ok()) {
      if (n == 0) return p.status();  // a lone request's error, as protocol 9 words it
      return Status(p.status().code(), "request " + std::to_string(n) + " of the message: " + p.status().message());
    }
    if (n > 0 && (IsQuery(p->header.opcode) || (p->header.flags & kFlagRendezvous) != 0 ||
                  (p->header.flags & (kFlagFirst | kFlagLast)) != (kFlagFirst | kFlagLast))) {
      return Status::InvalidArgument("request " + std::to_string(n) +
                                     " of the message: only whole PUT/DELETEs share a message");
    }
    if (n == out.size()) {
      return Status::InvalidArgument("more than " + std::to_string(out.size()) + " requests in one message");
    }
    out[n++] = *p;
    off += used;
    if (!(p->header.flags & kFlagMore)) return n;  // the last one ended the message (ParseOne checked)
  }
}

size_t EncodeReply(const ReplyHeader& h, std::span<const uint8_t> body, std::span<uint8_t> out) noexcept {
  size_t room = std::min(out.size(), kMaxReplySize);
  if (room < kReplyHeaderSize) return 0;
  size_t n = std::min(body.size(), room - kReplyHeaderSize);
  wire::Writer w(out.first(room));
  w.U8(static_cast<uint8_t>(h.status));
  w.U8(h.flags);
  w.U16(0);
  w.U32(static_cast<uint32_t>(n));
  w.U64(h.request_id);
  w.U64(h.version);
  w.Bytes(body.first(n));
  return w.size();
}

Result<ParsedReply> ParseReply(std::span<const uint8_t> msg) noexcept {
  wire::Reader r(msg);
  ParsedReply p;
  uint8_t code = r.U8();
  p.header.flags = r.U8();
  r.U16();
  uint32_t body_len = r.U32();
  p.header.request_id = r.U64();
  p.header.version = r.U64();
  p.body = r.Bytes(body_len);
  if (!r.ok()) return Status::Protocol("malformed reply");
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
