// libFuzzer target: the rdma_cm private data a client decodes (server
// descriptor, reject reason) and a server decodes (connect request). A decoded
// message must re-encode to the same fields.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "common/format/window.h"
#include "common/protocol/handshake.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  if (auto d = kvrdma::DecodeServerDescriptor(in); d.ok()) {
    uint8_t buf[kvrdma::kMaxAcceptData];
    size_t n = kvrdma::EncodeServerDescriptor(*d, buf);
    auto again = kvrdma::DecodeServerDescriptor({buf, n});
    if (!again.ok() || !(*again == *d)) std::abort();
    // What a client relies on before indexing memory with these numbers.
    if (d->index_homes == 0 || (d->index_homes & (d->index_homes - 1)) != 0) std::abort();
    if (d->index_window == 0 || d->index_window > kvrdma::kMaxWindowWords) std::abort();
    if (kvrdma::IndexWords(d->index_homes, d->index_window) * kvrdma::kWordBytes > d->index.length) std::abort();
    if (uint64_t{d->credits} * d->message_bytes > d->ring.length) std::abort();
  }
  if (auto m = kvrdma::DecodeConnectRequest(in); m.ok()) {
    if (m->auth_len > kvrdma::kMaxAuthToken) std::abort();
    uint8_t buf[kvrdma::kMaxRequestData];
    size_t n = kvrdma::EncodeConnectRequest(*m, buf);
    auto again = kvrdma::DecodeConnectRequest({buf, n});
    if (!again.ok() || again->put_path != m->put_path || again->auth_len != m->auth_len) std::abort();
  }
  if (auto r = kvrdma::DecodeReject(in); r.ok()) {
    if (r->reason.size() > size) std::abort();
  }
  return 0;
}
