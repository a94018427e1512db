// Linearizability checker for a key-value history (history.h): every key is
// an independent register with values and "absent", so the history is split
// by key (linearizability is compositional) and each key is searched on its
// own, keys in parallel.
//
// The search per key is the Wing & Gong depth-first search over linearization
// points, in Lowe's list form with memoization: events (invocations and
// completions) sit in one list in time order; the search linearizes any
// operation whose invocation precedes the first pending completion (the
// real-time order allows nothing else), and backtracks when it meets a
// completion whose operation it has not linearized. A (set of linearized
// operations, register state) pair already explored is never explored
// again, which bounds the work by the number of such pairs; the set is kept
// in a compact form (the first operation not yet linearized, plus the few
// linearized ones after it), so the memo costs a few words per state.
//
// Unknown-outcome writes have no completion: they may be linearized anywhere
// after their invocation, and the search succeeds as soon as every operation
// with a known outcome is linearized (an unknown write left over "never
// happened").
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tests/linearizability/history.h"

namespace kvrdma::lin {

enum class Verdict : uint8_t {
  kLinearizable,
  kViolation,
  kGaveUp,  // the memo outgrew CheckOptions::max_memo_bytes (no verdict)
};

std::string_view VerdictName(Verdict v);

struct CheckOptions {
  // Keys checked at once (threads); 0 = std::thread::hardware_concurrency().
  unsigned threads = 0;
  // Memory for memoized states per key; past it the key's verdict is kGaveUp.
  size_t max_memo_bytes = size_t{512} << 20;
};

struct KeyResult {
  std::string key;
  Verdict verdict = Verdict::kLinearizable;
  size_t ops = 0;           // operations of this key that constrain (GETs without answer dropped)
  size_t unknown = 0;       // of which writes with unknown outcome
  uint64_t states = 0;      // distinct (linearized set, state) pairs explored
  uint64_t backtracks = 0;
  std::string explanation;  // kViolation: why (the deepest point the search reached)
};

struct CheckResult {
  Verdict verdict = Verdict::kLinearizable;  // the worst over the keys
  size_t ops = 0;
  std::vector<KeyResult> keys;  // in key order
  double seconds = 0;
};

// Checks a whole history. Operations of all keys, in any order.
CheckResult CheckHistory(std::span<const HistoryOp> history, const CheckOptions& options = {});

// Checks the operations of one key (all must have the same key).
KeyResult CheckKey(std::span<const HistoryOp> ops, const CheckOptions& options = {});

// Given a non-linearizable history of one key, returns a small sub-history
// that is still not linearizable and that the original implies: a truncation
// at a completion time; then everything before the last quiescent instant
// replaced by concurrent writes (client kPrefixClient) that can leave the
// register in exactly the states it could; then relaxations (dropping GETs,
// turning writes into unknown-outcome writes, dropping unknown writes nothing
// depends on). So a violation of the result is a violation of the input.
// Stops improving after `budget_seconds`.
History MinimizeViolation(std::span<const HistoryOp> ops, double budget_seconds = 10.0,
                          const CheckOptions& options = {});

}  // namespace kvrdma::lin
