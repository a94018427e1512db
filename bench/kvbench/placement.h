// Where kvbench's keys live: their names, and which of several servers holds
// each. The placement is ShardedClient's (jump consistent hash of the key's
// placement hash), so a data set kvbench preloads over several servers is
// found by ShardedClient and kvctl, and the other way round.
#pragma once

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "kvrdma/sharded_client.h"

namespace kvrdma::bench {

// Key `id` as `size` bytes: "user", zeros, then the decimal id (truncated to
// its last digits if the key is short).
inline void FormatKey(uint64_t id, size_t size, char* out) {
  char digits[24];
  int n = std::snprintf(digits, sizeof digits, "%" PRIu64, id);
  std::memset(out, '0', size);
  std::memcpy(out, "user", std::min<size_t>(4, size));
  size_t nd = std::min<size_t>(static_cast<size_t>(n), size > 4 ? size - 4 : 0);
  std::memcpy(out + size - nd, digits + n - nd, nd);
}

// The index, among `servers` (>= 1) in command-line order, of the server
// that holds `key`.
inline size_t ServerForKey(std::string_view key, size_t servers) {
  return ShardedClient::PlaceKey(key, servers);
}

}  // namespace kvrdma::bench
