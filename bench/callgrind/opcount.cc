// opcount: one kind of operation, N warm-up then N measured, over the
// loopback transport, for `valgrind --tool=callgrind` (bench/callgrind/run).
//
// The client thread counts only its own work: collection is on
// (CALLGRIND_TOGGLE_COLLECT acts on the calling thread) only around the
// client's Submit and Poll calls, and the driver waits (uncounted) for the
// fabric to execute what the client posted before each Poll, so no empty
// poll is counted and each Poll finds the completion it waits for. The
// server's worker sleeps on its completion channel at once (busy_poll_us =
// busy_poll_max_us = 0), so its count is the request's work plus one
// wake-up. The other threads (the loopback "NIC", the server's acceptor,
// cleaner, clock) are counted in their own files; bench/callgrind/run
// attributes them.
#include <valgrind/callgrind.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/client_internal.h"
#include "common/format/entry.h"
#include "common/transport/loopback_transport.h"
#include "server/server.h"
#include "server/store/entry_leader.h"
#include "server/store_backend.h"

namespace kvrdma {
namespace {

enum class Kind { kGetUncached, kGetCached, kGetMiss, kPut };

struct Args {
  Kind kind = Kind::kGetUncached;
  uint32_t ops = 1000;
  uint32_t key_bytes = 16;
  uint32_t value_bytes = 32;
  // Where a GET's value goes: a string (Op::result), the caller's buffer
  // (Op::buffer), or a buffer in registered memory (a direct READ).
  enum class Into : uint8_t { kString, kBuffer, kRegistered } into = Into::kString;
  int64_t rendezvous_bytes = -1;  // ClientOptions::rendezvous_bytes; -1: the library's default
};

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto val = [&](const char* name) -> const char* {
      size_t n = std::strlen(name);
      return s.compare(0, n, name) == 0 ? s.c_str() + n : nullptr;
    };
    if (const char* v = val("--op=")) {
      std::string k = v;
      if (k == "get_uncached") a->kind = Kind::kGetUncached;
      else if (k == "get_cached") a->kind = Kind::kGetCached;
      else if (k == "get_miss") a->kind = Kind::kGetMiss;
      else if (k == "put") a->kind = Kind::kPut;
      else return false;
    } else if (const char* v = val("--ops=")) {
      a->ops = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (const char* v = val("--key-bytes=")) {
      a->key_bytes = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (const char* v = val("--value-bytes=")) {
      a->value_bytes = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (const char* v = val("--into=")) {
      std::string k = v;
      if (k == "string") a->into = Args::Into::kString;
      else if (k == "buffer") a->into = Args::Into::kBuffer;
      else if (k == "registered") a->into = Args::Into::kRegistered;
      else return false;
    } else if (const char* v = val("--rendezvous-bytes=")) {
      a->rendezvous_bytes = static_cast<int64_t>(std::strtoul(v, nullptr, 10));
    } else {
      return false;
    }
  }
  return a->ops > 0 && a->key_bytes >= 8;
}

std::string KeyOf(uint32_t i, uint32_t len, char tag) {
  std::string k(len, tag);
  std::snprintf(k.data(), len, "k%07u", i);
  k[std::strlen(k.c_str())] = tag;  // keep the fixed length
  return k;
}

uint64_t FabricOps(const LoopbackFabric& f) {
  LoopbackStats s = f.stats();
  return s.reads + s.writes + s.sends + s.atomics + s.invalidations;
}

// Waits until the fabric has executed `target` WRs in all (a completion is
// queued under the same lock that counts its WR). Called with collection off.
void WaitFabric(const LoopbackFabric& f, uint64_t target) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (FabricOps(f) < target) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "opcount: the fabric did not execute the posted work\n");
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Runs one operation; counts what the client thread does for it (Submit and
// the Polls, collection on only around them) and nothing of the driver.
// Returns the client's Poll calls (each finds work: no empty polls counted).
uint32_t RunOne(Client& c, const LoopbackFabric& f, Op& op) {
  const ClientStats before = c.stats();
  const uint64_t fab_before = FabricOps(f);
  Op* ops[1] = {&op};
  CALLGRIND_TOGGLE_COLLECT;  // on
  const size_t submitted = c.Submit(ops);
  CALLGRIND_TOGGLE_COLLECT;  // off
  if (submitted != 1) {
    std::fprintf(stderr, "opcount: Submit refused\n");
    std::exit(1);
  }
  Op* done[1];
  uint32_t polls = 0;
  for (;;) {
    const ClientStats now = c.stats();
    // What this operation put on the wire so far: its READs, or its request
    // and the server's reply; a rendezvous PUT's also the server's READ of
    // its value and, once a Poll found the reply, the window's invalidation.
    const uint64_t rendezvous = now.rendezvous_puts - before.rendezvous_puts;
    const uint64_t posted = (now.reads - before.reads) + 2 * (now.messages - before.messages) + rendezvous +
                            (polls > 0 ? rendezvous : 0);
    WaitFabric(f, fab_before + posted);
    ++polls;
    CALLGRIND_TOGGLE_COLLECT;  // on
    const size_t n = c.Poll(done);
    CALLGRIND_TOGGLE_COLLECT;  // off
    if (n == 1) return polls;
  }
}

int Main(int argc, char** argv) {
  Args a;
  if (!Parse(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: opcount --op=get_uncached|get_cached|get_miss|put [--into=string|buffer|registered] [--ops=N] "
                 "[--key-bytes=K] [--value-bytes=V] [--rendezvous-bytes=R]\n");
    return 2;
  }
  auto fabric = LoopbackFabric::Create();
  auto server_dev = fabric->CreateDevice("loop-server");
  auto client_dev = fabric->CreateDevice("loop-client");

  server::ServerConfig cfg;
  cfg.port = 0;
  cfg.listen = "";
  cfg.workers = 1;
  cfg.credits = 8;
  cfg.srq_depth = 64;
  cfg.lock_words = 1024;
  cfg.busy_poll_us = 0;
  cfg.busy_poll_max_us = 0;
  StoreConfig sc;
  sc.index_homes = 1 << 15;
  sc.segment_bytes = 4 << 20;  // > the largest entry (1 MiB value)
  // Room for every entry the run writes with no cleaner (store mode waits
  // for one, then answers ServerFull): the 2N preloaded keys and the 2N PUTs
  // of a put run (each a new version), as many whole entries to a segment
  // as fit (an entry does not span two), plus open segments to spare.
  const uint64_t entry_bytes = EntryBytes(a.key_bytes, a.value_bytes) + kLeaderBytes;
  const uint64_t per_segment = std::max<uint64_t>(1, sc.segment_bytes / entry_bytes);
  const uint64_t segments = (4 * uint64_t{a.ops} + per_segment - 1) / per_segment + 2 * (cfg.workers + 1) + 2;
  sc.log_bytes = std::max<uint64_t>(32 << 20, segments * sc.segment_bytes);
  sc.workers = cfg.workers;
  sc.huge_pages = HugePages::kOff;
  sc.cleaner_thread = false;
  sc.grace_period = std::chrono::milliseconds(cfg.grace_period_ms);
  auto backend = server::StoreBackend::Create(sc);
  if (!backend.ok()) {
    std::fprintf(stderr, "opcount: %s\n", backend.status().ToString().c_str());
    return 1;
  }
  server::Server srv(cfg, server_dev, **backend);
  if (Status st = srv.Start(); !st.ok()) {
    std::fprintf(stderr, "opcount: %s\n", st.ToString().c_str());
    return 1;
  }
  std::thread srv_thread([&] { (void)srv.Run(); });

  ClientOptions o;
  o.host = "loopback";
  o.port = srv.port();
  o.put_mode = PutMode::kSend;
  o.location_cache_entries = a.kind == Kind::kGetCached ? 4096 : 0;
  if (a.rendezvous_bytes >= 0) o.rendezvous_bytes = static_cast<uint32_t>(a.rendezvous_bytes);
  auto client = ClientFactory::ConnectWith(client_dev, o);
  if (!client.ok()) {
    std::fprintf(stderr, "opcount: %s\n", client.status().ToString().c_str());
    return 1;
  }
  Client& c = **client;

  // Keys present: 2N (warm-up on the first N, measured on the second N for
  // GETs and PUTs of present keys); absent keys use another tag.
  const std::string value(a.value_bytes, 'v');
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < 2 * a.ops; ++i) keys.push_back(KeyOf(i, a.key_bytes, 'p'));
  for (const std::string& k : keys) {
    if (Status st = c.Put(k, value); !st.ok()) {
      std::fprintf(stderr, "opcount: preload: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  std::vector<std::string> absent;
  for (uint32_t i = 0; i < 2 * a.ops; ++i) absent.push_back(KeyOf(i, a.key_bytes, 'a'));

  std::string out;
  out.reserve(a.value_bytes + 64);
  std::vector<std::byte> buf(a.value_bytes);
  if (a.into == Args::Into::kRegistered) {
    if (Status st = c.RegisterMemory(buf); !st.ok()) {
      std::fprintf(stderr, "opcount: RegisterMemory: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  const auto got = [&](const Op& op) {
    if (a.into == Args::Into::kString) return std::string_view(out);
    return std::string_view(reinterpret_cast<const char*>(buf.data()), op.value_bytes);
  };
  const auto into = [&](Op& op) {
    if (a.into == Args::Into::kString) {
      op.result = &out;
    } else {
      op.buffer = buf;
    }
  };
  uint64_t polls = 0;
  auto run = [&](uint32_t i) {
    Op op;
    switch (a.kind) {
      case Kind::kGetUncached:
      case Kind::kGetCached:
        op.type = Op::Type::kGet;
        // Cached: GET the same N keys twice (warm-up fills the cache).
        op.key = keys[a.kind == Kind::kGetCached ? i % a.ops : i];
        into(op);
        break;
      case Kind::kGetMiss:
        op.type = Op::Type::kGet;
        op.key = absent[i];
        into(op);
        break;
      case Kind::kPut:
        op.type = Op::Type::kPut;
        op.key = keys[i];
        op.value = value;
        break;
    }
    polls += RunOne(c, *fabric, op);
    const bool ok = a.kind == Kind::kGetMiss ? op.status.IsNotFound() : op.status.ok();
    if (!ok || (op.type == Op::Type::kGet && a.kind != Kind::kGetMiss && got(op) != value)) {
      std::fprintf(stderr, "opcount: op %u failed: %s\n", i, op.status.ToString().c_str());
      std::exit(1);
    }
  };
  // Warm-up. Cached GETs go over their keys twice: a large entry's location
  // is READ from the cache only once a second GET confirmed it (client_get.cc).
  for (int pass = 0; pass < (a.kind == Kind::kGetCached ? 2 : 1); ++pass) {
    for (uint32_t i = 0; i < a.ops; ++i) run(i);
  }
  const ClientStats before = c.stats();
  polls = 0;
  CALLGRIND_ZERO_STATS;
  CALLGRIND_START_INSTRUMENTATION;
  // Every thread collects (the server's, the fabric's); this one only inside
  // RunOne's Submit and Poll calls.
  CALLGRIND_TOGGLE_COLLECT;
  for (uint32_t i = a.ops; i < 2 * a.ops; ++i) run(i);
  CALLGRIND_TOGGLE_COLLECT;
  CALLGRIND_STOP_INSTRUMENTATION;
  const ClientStats after = c.stats();
  std::printf(
      "opcount: ops=%u log=%lluMiB reads/op=%.3f rounds/op=%.3f messages/op=%.3f polls/op=%.3f cache_hits=%llu "
      "direct_reads=%llu\n",
      a.ops, static_cast<unsigned long long>(sc.log_bytes >> 20), double(after.reads - before.reads) / a.ops,
      double(after.get_rounds - before.get_rounds) / a.ops, double(after.messages - before.messages) / a.ops,
      double(polls) / a.ops, static_cast<unsigned long long>(after.cache_hits - before.cache_hits),
      static_cast<unsigned long long>(after.direct_reads - before.direct_reads));
  client->reset();
  srv.RequestStop();
  srv_thread.join();
  return 0;
}

}  // namespace
}  // namespace kvrdma

int main(int argc, char** argv) { return kvrdma::Main(argc, argv); }
