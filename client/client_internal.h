// Private to the client library and its tests.
#pragma once

#include <memory>

#include "common/transport/transport.h"
#include "kvrdma/client.h"

namespace kvrdma {

// The QP a client connects with, sized for max_in_flight operations: READs
// and messages (credits <= 256) on the send queue, one reply buffer per
// credit, inline sends up to 256 bytes, windows only for rendezvous PUTs.
// kvrdma_read_floor times its READs on the same settings.
inline QpConfig ClientQpConfig(uint32_t max_in_flight, bool windows) {
  QpConfig qc;
  qc.max_send_wr = 2 * max_in_flight + 2 * 256 + 16;
  qc.max_recv_wr = 256;
  qc.max_inline = 256;
  qc.windows = windows;
  return qc;
}

class ClientFactory {
 public:
  // Connect over a given device (tests use the loopback transport).
  static Result<std::unique_ptr<Client>> ConnectWith(std::shared_ptr<Device> device, const ClientOptions& o);
};

}  // namespace kvrdma
