// A condition a write must still satisfy at its commit point.
//
// Store::Put/Delete evaluate it under the key's window lock, after the log
// space is reserved (which may block) and immediately before the entry is
// published, so nothing between the check and the publication can wait. The
// workers pass the lock-table check here: an old lock holder's write cannot
// land after the next holder's (DESIGN.md, "Lock fencing"); and a
// conditional write's version condition, which the store cannot be bypassed
// on: `current_version` is the version of the key's value at that instant
// (0 when it has none: absent or a tombstone). `key_hash` is the key's hash
// (hash.h, the store's seed), which the store has computed already: the
// lock table's place comes from it (common/protocol/locks.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace kvrdma {

struct CommitCheck {
  // OK lets the write commit; any other status aborts it and is returned.
  Status (*fn)(const void* ctx, uint64_t key_hash, uint64_t current_version) = nullptr;
  const void* ctx = nullptr;
  Status operator()(uint64_t key_hash, uint64_t current_version) const {
    return fn == nullptr ? Status::OK() : fn(ctx, key_hash, current_version);
  }
};

}  // namespace kvrdma
