// kvserver's metrics in the Prometheus text format: what GET /metrics
// returns (docs/DESIGN.md, "Metrics", lists every family).
//
// Rendering reads only atomics the request path writes with relaxed stores
// (ServerCounters, RequestMetrics, the store's per-head counters and segment
// states) and the lock table's words; it takes no lock a worker takes, so a
// scrape never delays a request. Values from different fields are not one
// snapshot.
#pragma once

#include <string>

#include "server/config.h"
#include "server/store/store.h"
#include "server/worker.h"

namespace kvrdma::server::metrics {

struct MetricsSources {
  const ServerConfig* config = nullptr;    // required
  const ServerCounters* counters = nullptr;  // required
  const Store* store = nullptr;            // optional: store gauges and cleaner counters
  LockView locks;                          // optional (words null): lock-table gauges
};

std::string RenderMetrics(const MetricsSources& s);

// "InvalidArgument" -> "invalid_argument" (label values of status codes).
std::string SnakeCase(std::string_view camel);

}  // namespace kvrdma::server::metrics
