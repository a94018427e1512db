// libFuzzer target: what a server worker decodes from untrusted bytes (a
// request in a message buffer: a receive buffer or the ring's) and what a client decodes from a
// reply. Must never crash, hang, read out of bounds or return spans outside
// the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "common/protocol/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  auto r = kvrdma::ParseRequest(in, 1023, 1u << 20);
  if (r.ok()) {
    // Spans lie inside the input and the lengths add up exactly.
    auto inside = [&](std::span<const uint8_t> s) {
      return s.empty() || (s.data() >= data && s.data() + s.size() <= data + size);
    };
    if (!inside(r->key) || !inside(r->value)) std::abort();
    if (kvrdma::kRequestHeaderSize + r->key.size() + r->value.size() != size) std::abort();
    if (r->value.size() != r->header.frag_len) std::abort();
  }
  auto rep = kvrdma::ParseReply(in);
  if (rep.ok()) {
    if (!rep->body.empty() && (rep->body.data() < data || rep->body.data() + rep->body.size() > data + size)) {
      std::abort();
    }
    (void)kvrdma::DecodeStats(rep->body);
  }
  (void)kvrdma::DecodeStats(in);
  return 0;
}
