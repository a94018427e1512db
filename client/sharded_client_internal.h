// Private to the client library and its tests: a ShardedClient over a given
// device (tests use the loopback transport).
#pragma once

#include <memory>

#include "common/transport/transport.h"
#include "kvrdma/sharded_client.h"

namespace kvrdma {

class ShardedClientFactory {
 public:
  // Like ShardedClient::Connect, every per-server Client on `device`.
  static Result<std::unique_ptr<ShardedClient>> ConnectWith(std::shared_ptr<Device> device,
                                                            const ShardedClientOptions& options);
};

}  // namespace kvrdma
