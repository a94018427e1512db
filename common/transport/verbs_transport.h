// The verbs transport: rdma_cm for connections, libibverbs for data.
#pragma once

#include <memory>
#include <string>

#include "common/transport/transport.h"

namespace kvrdma {

// Opens an RDMA device through librdmacm. `name` picks it by name (e.g.
// "rxe0", "mlx5_0"); empty picks the first. Unavailable when the host has no
// RDMA device (hint: run under tools/with-rdma).
Result<std::shared_ptr<Device>> OpenVerbsDevice(const std::string& name);

// Names of the RDMA devices librdmacm sees (empty when none).
std::vector<std::string> ListVerbsDevices();

}  // namespace kvrdma
