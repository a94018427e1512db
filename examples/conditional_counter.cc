// conditional_counter: read-modify-write with conditional writes, the
// primitive the server enforces (locks taken by RDMA CAS are advisory: any
// client can CAS a lock word; see docs/SECURITY.md). Each run adds N to a
// counter; run several at once and no increment is lost.
//
//   conditional_counter HOST[:PORT] [KEY] [N]     prints the counter's final value
//
// The pattern: learn the key's version, read its value, write the new value
// only if the version is still the same. A failed conditional write reports
// the current version; reading after learning it keeps value and version
// together (a write in between changes the version, and the next attempt
// fails and retries).
#include <kvrdma/client.h>
#include <kvrdma/sharded_client.h>  // only for ParseServerAddress

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: conditional_counter HOST[:PORT] [KEY] [N]\n");
    return 2;
  }
  kvrdma::ClientOptions o;
  if (!kvrdma::ShardedClient::ParseServerAddress(argv[1], &o.host, &o.port).ok()) {
    std::fprintf(stderr, "conditional_counter: bad address '%s'\n", argv[1]);
    return 2;
  }
  const std::string key = argc > 2 ? argv[2] : "example:counter";
  const long n = argc > 3 ? std::atol(argv[3]) : 100;
  auto c = kvrdma::Client::Connect(o);
  if (!c.ok()) {
    std::fprintf(stderr, "conditional_counter: %s\n", c.status().ToString().c_str());
    return 1;
  }
  kvrdma::Client& kv = **c;
  uint64_t version = kvrdma::kIfAbsent;  // first guess: the counter does not exist yet
  std::string value;                     // its value at `version` ("" = 0)
  long retries = 0;
  for (long i = 0; i < n; ++i) {
    for (;;) {
      const long next = (value.empty() ? 0 : std::atol(value.c_str())) + 1;
      kvrdma::Status st = kv.Put(key, std::to_string(next), version);
      if (st.ok()) {
        version = kv.last_version();
        value = std::to_string(next);
        break;
      }
      if (!st.IsVersionMismatch()) {
        std::fprintf(stderr, "conditional_counter: put: %s\n", st.ToString().c_str());
        return 1;
      }
      ++retries;
      version = kv.last_version();  // first the current version (0: absent) ...
      st = kv.Get(key, &value);     // ... then the value, which is at least that new
      if (st.IsNotFound()) {
        value.clear();
      } else if (!st.ok()) {
        std::fprintf(stderr, "conditional_counter: get: %s\n", st.ToString().c_str());
        return 1;
      }
    }
  }
  std::printf("%s = %s (version %llu, %ld conflicts retried)\n", key.c_str(), value.c_str(),
              static_cast<unsigned long long>(version), retries);
  return 0;
}
