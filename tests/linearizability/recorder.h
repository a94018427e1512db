// History recorder: concurrent clients (one thread and one Client each) run
// GET, PUT and DELETE on a few keys and record every operation's invocation
// and completion time (steady_clock), the value written or read, and the
// outcome, for the linearizability checker (checker.h).
//
// Each client keeps up to `depth` operations in flight with the
// asynchronous API; an operation's interval runs from just before its
// Submit to just after Poll/Wait handed it back, which contains the real
// one. Values are unique per write: "c<client>-<seq>:" followed by a
// pattern that depends on both, padded to a random length, so a GET can be
// matched to the one PUT that wrote it and a value pieced together from two
// writes matches none.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "kvrdma/client.h"
#include "tests/linearizability/history.h"

namespace kvrdma::lin {

struct RecorderOptions {
  uint32_t clients = 4;
  uint32_t keys = 6;                  // keys "lin-0" .. "lin-<keys-1>"
  uint32_t depth = 1;                 // operations in flight per client
  uint64_t ops_per_client = 4000;     // stop after this many ...
  std::chrono::milliseconds duration{5000};  // ... or after this long
  // Operation mix (the rest are DELETEs).
  double get_fraction = 0.5;
  double put_fraction = 0.35;
  uint32_t max_value_bytes = 1024;    // values are 8 .. this long
  uint64_t seed = 1;
};

struct RecordStats {
  uint64_t ops = 0;
  std::map<std::string, uint64_t> by_type_outcome;  // "GET OK", "PUT UNKNOWN", ...
  std::map<std::string, uint64_t> errors;           // status code name -> count (anything not OK/NotFound)
  uint64_t reconnects = 0;
  double seconds = 0;
};

// Makes a connected client (each recording thread calls it once, and again
// after its client lost the connection).
using ConnectFn = std::function<Result<std::unique_ptr<Client>>()>;

// Records a history. Fails only if a client cannot connect at the start.
// Operations that fail with ConnectionLost or Timeout are recorded with an
// unknown outcome; GETs that fail are recorded too (the checker ignores
// them); other errors are counted in stats->errors and recorded as unknown.
Result<History> RecordHistory(const RecorderOptions& options, const ConnectFn& connect, RecordStats* stats);

}  // namespace kvrdma::lin
