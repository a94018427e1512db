// libFuzzer target: what a server worker decodes from untrusted bytes (a
// request in a message buffer: a receive buffer or the ring's) and what a client decodes from a
// reply. Must never crash, hang, read out of bounds or return spans outside
// the input.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "common/protocol/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  auto inside = [&](std::span<const uint8_t> s) {
    return s.empty() || (s.data() >= data && s.data() + s.size() <= data + size);
  };
  auto r = kvrdma::ParseRequest(in, 1023, 1u << 20);
  if (r.ok()) {
    // Spans lie inside the input and the lengths add up exactly.
    if (!inside(r->key) || !inside(r->value)) std::abort();
    if (kvrdma::kRequestHeaderSize + r->key.size() + r->value.size() != size) std::abort();
    if (r->value.size() != r->header.frag_len) std::abort();
  }
  // A message of several requests (protocol 10): every request inside the
  // input, back to back, exactly filling it; only whole PUT/DELETEs when more
  // than one.
  std::array<kvrdma::ParsedRequest, kvrdma::kMaxRequestsPerMessage> all;
  auto n = kvrdma::ParseMessage(in, 1023, 1u << 20, all);
  if (n.ok()) {
    if (*n == 0 || *n > all.size()) std::abort();
    size_t total = 0;
    for (size_t i = 0; i < *n; ++i) {
      const auto& p = all[i];
      if (!inside(p.key) || !inside(p.value)) std::abort();
      if (p.value.size() != p.header.frag_len) std::abort();
      if (((p.header.flags & kvrdma::kFlagMore) != 0) != (i + 1 < *n)) std::abort();
      if (*n > 1 && (kvrdma::IsQuery(p.header.opcode) || (p.header.flags & 3) != 3)) std::abort();
      total += kvrdma::kRequestHeaderSize + p.key.size() + p.value.size();
    }
    if (total != size) std::abort();
    if (*n == 1 && !r.ok()) std::abort();  // a lone request parses alike either way
  }
  if (r.ok() && !(n.ok() && *n == 1)) std::abort();
  auto rep = kvrdma::ParseReply(in);
  if (rep.ok()) {
    if (!rep->body.empty() && (rep->body.data() < data || rep->body.data() + rep->body.size() > data + size)) {
      std::abort();
    }
    (void)kvrdma::DecodeStats(rep->body);
  }
  std::array<kvrdma::ParsedReply, kvrdma::kMaxRequestsPerMessage> recs;
  auto m = kvrdma::ParseReplies(in, recs);
  if (m.ok()) {
    size_t total = 0;
    for (size_t i = 0; i < *m; ++i) {
      if (!inside(recs[i].body)) std::abort();
      total += kvrdma::kReplyHeaderSize + recs[i].body.size();
    }
    if (total != size) std::abort();
  }
  (void)kvrdma::DecodeStats(in);
  return 0;
}
