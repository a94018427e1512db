// Private to the client library and its tests.
#pragma once

#include <memory>

#include "common/transport/transport.h"
#include "kvrdma/client.h"

namespace kvrdma {

class ClientFactory {
 public:
  // Connect over a given device (tests use the loopback transport).
  static Result<std::unique_ptr<Client>> ConnectWith(std::shared_ptr<Device> device, const ClientOptions& o);
};

}  // namespace kvrdma
