// Rendezvous PUTs (issue 26, protocol 10.1): a PUT of at least
// ClientOptions::rendezvous_bytes exposes its value READ-only through a
// memory window bound on the client's connection, and the server pulls it
// with one RDMA READ into memory of its own, checks the checksum over its
// copy, and applies it as any PUT.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/e2e_util.h"
#include "tests/e2e/rogue_client.h"

namespace kvrdma::testing {
namespace {

// The clients here turn rendezvous PUTs on from this many bytes
// (ClientOptions::rendezvous_bytes; the library's default is 128 KiB).
constexpr uint32_t kThresholdBytes = 64 * 1024;

class RendezvousTest : public E2eServerTest {
 protected:
  static std::string Value(size_t n, char seed) {
    std::string v(n, '\0');
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(seed + (i * 7 + i / 4096) % 23);
    return v;
  }
};

TEST_P(RendezvousTest, ValuesAroundTheThresholdAndUpToOneMiBRoundTrip) {
  auto c = NewClient(kThresholdBytes);
  ASSERT_TRUE(c);
  const size_t threshold = kThresholdBytes;
  uint64_t rendezvous = 0;
  for (size_t n : {threshold - 1, threshold, threshold + 1, size_t{300000}, size_t{1} << 20}) {
    const std::string key = "rv-" + std::to_string(n);
    const std::string v = Value(n, static_cast<char>('a' + n % 3));
    ASSERT_TRUE(c->Put(key, v).ok()) << n;
    // Returned: the window over the value is invalidated (loopback counts them).
    if (env_.fabric) {
      EXPECT_EQ(env_.fabric->stats().runtime_windows_bound, 0u) << n;
    }
    rendezvous += n >= threshold;
    EXPECT_EQ(c->stats().rendezvous_puts, rendezvous) << n;
    std::string got;
    ASSERT_TRUE(c->Get(key, &got).ok()) << n;
    EXPECT_TRUE(got == v) << n;
    // Overwritten by a rendezvous PUT again: the new value, a newer version.
    const uint64_t first = c->last_version();
    const std::string v2 = Value(n, 'K');
    ASSERT_TRUE(c->Put(key, v2).ok()) << n;
    EXPECT_GT(c->last_version(), first);
    rendezvous += n >= threshold;
    EXPECT_EQ(c->stats().rendezvous_puts, rendezvous) << n;
    ASSERT_TRUE(c->Get(key, &got).ok());
    EXPECT_TRUE(got == v2) << n;
  }
}

// A client with the library's options: rendezvous PUTs from 128 KiB, on
// both transports (the device has type-2 windows: DeviceInfo::memory_windows).
TEST_P(RendezvousTest, TheLibrarysDefaultSendsValuesOf128KiBAndMoreAsRendezvousPuts) {
  EXPECT_EQ(ClientOptions{}.rendezvous_bytes, 128u * 1024);
  EXPECT_TRUE(env_.client->info().memory_windows);
  auto c = NewClient(TestServer::kLibraryDefault);
  ASSERT_TRUE(c);
  const std::string below = Value(128 * 1024 - 1, 'b'), at = Value(128 * 1024, 'a');
  ASSERT_TRUE(c->Put("default-below", below).ok());
  EXPECT_EQ(c->stats().rendezvous_puts, 0u);
  ASSERT_TRUE(c->Put("default-at", at).ok());
  EXPECT_EQ(c->stats().rendezvous_puts, 1u);
  std::string got;
  ASSERT_TRUE(c->Get("default-below", &got).ok());
  EXPECT_TRUE(got == below);
  ASSERT_TRUE(c->Get("default-at", &got).ok());
  EXPECT_TRUE(got == at);
}

// While other operations of the client are in flight, a PUT is a rendezvous
// PUT from half of rendezvous_bytes (64 KiB by default): its value's
// registration overlaps their transfers. One at a time it takes the whole
// threshold, as above.
TEST_P(RendezvousTest, WithOthersInFlightValuesFromHalfTheThresholdAreRendezvousPuts) {
  auto c = NewClient(TestServer::kLibraryDefault);
  ASSERT_TRUE(c);
  const std::string half = Value(64 * 1024, 'h'), below_half = Value(64 * 1024 - 1, 'l');
  ASSERT_TRUE(c->Put("alone", half).ok());  // nothing else in flight: fragments
  EXPECT_EQ(c->stats().rendezvous_puts, 0u);
  // Submitted together: the first finds nothing else in flight (fragments),
  // each later one the ones before it (rendezvous PUTs from 64 KiB).
  constexpr size_t kPuts = 5;
  std::vector<Op> ops(kPuts);
  std::vector<Op*> ptrs;
  const std::string keys[kPuts] = {"first", "second", "third", "small", "fifth"};
  for (size_t i = 0; i < kPuts; ++i) {
    ops[i].type = Op::Type::kPut;
    ops[i].key = keys[i];
    ops[i].value = i == 3 ? below_half : half;
    ptrs.push_back(&ops[i]);
  }
  ASSERT_EQ(c->Submit(ptrs), kPuts);
  std::vector<Op*> done(kPuts);
  size_t got = 0;
  for (int i = 0; i < 300 && got < kPuts; ++i) got += c->Wait(std::span(done).subspan(got), 100);
  ASSERT_EQ(got, kPuts);
  for (const Op& op : ops) EXPECT_TRUE(op.status.ok()) << op.key << ": " << op.status.ToString();
  EXPECT_EQ(c->stats().rendezvous_puts, 3u);  // second, third and fifth
  std::string v;
  for (size_t i = 0; i < kPuts; ++i) {
    ASSERT_TRUE(c->Get(keys[i], &v).ok()) << keys[i];
    EXPECT_TRUE(v == (i == 3 ? below_half : half)) << keys[i];
  }
  ASSERT_TRUE(c->Get("alone", &v).ok());
  EXPECT_TRUE(v == half);
}

TEST_P(RendezvousTest, ConditionsAndLocksHoldForRendezvousPuts) {
  auto c = NewClient(kThresholdBytes);
  auto other = NewClient(kThresholdBytes);
  ASSERT_TRUE(c && other);
  const std::string v = Value(100000, 'c');
  ASSERT_TRUE(c->Put("cond", v, kIfAbsent).ok());
  const uint64_t version = c->last_version();
  Status st = c->Put("cond", Value(100000, 'd'), kIfAbsent);
  EXPECT_TRUE(st.IsVersionMismatch()) << st.ToString();
  EXPECT_EQ(c->last_version(), version);  // the current version comes back
  ASSERT_TRUE(c->Put("cond", Value(100000, 'e'), version).ok());
  std::string got;
  ASSERT_TRUE(c->Get("cond", &got).ok());
  EXPECT_TRUE(got == Value(100000, 'e'));
  ASSERT_TRUE(other->Lock("cond", std::chrono::milliseconds(5000)).ok());
  st = c->Put("cond", Value(100000, 'f'));
  EXPECT_EQ(st.code(), Status::Code::kLocked) << st.ToString();
  ASSERT_TRUE(other->Put("cond", Value(100000, 'g')).ok());  // the holder writes
  ASSERT_TRUE(other->Unlock("cond").ok());
  ASSERT_TRUE(c->Get("cond", &got).ok());
  EXPECT_TRUE(got == Value(100000, 'g'));
  EXPECT_EQ(c->stats().rendezvous_puts, 4u);
}

TEST_P(RendezvousTest, ConcurrentRendezvousPutsBesideGetsAllLand) {
  constexpr int kWriters = 3, kReaders = 2, kPuts = 12;
  auto seed = NewClient(kThresholdBytes);
  ASSERT_TRUE(seed);
  for (int k = 0; k < 8; ++k) ASSERT_TRUE(seed->Put("small-" + std::to_string(k), std::string(100, 's')).ok());
  std::atomic<int> errors{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kWriters + kReaders; ++t) {
    auto cl = NewClient(kThresholdBytes);
    ASSERT_TRUE(cl);
    threads.emplace_back([&, t, c = std::move(cl)]() mutable {
      if (t < kWriters) {
        for (int i = 0; i < kPuts; ++i) {
          const std::string v = Value(65536 + size_t(i) * 10000, static_cast<char>('A' + t));
          if (!c->Put("big-" + std::to_string(t), v).ok()) errors.fetch_add(1);
        }
        if (c->stats().rendezvous_puts != kPuts) errors.fetch_add(1);
        return;
      }
      std::string v;
      for (uint64_t i = 0; !stop.load(); ++i) {
        if (!c->Get("small-" + std::to_string(i % 8), &v).ok() || v != std::string(100, 's')) errors.fetch_add(1);
      }
    });
  }
  for (int t = 0; t < kWriters; ++t) threads[size_t(t)].join();
  stop.store(true);
  for (int t = kWriters; t < kWriters + kReaders; ++t) threads[size_t(t)].join();
  EXPECT_EQ(errors.load(), 0);
  std::string got;
  for (int t = 0; t < kWriters; ++t) {
    ASSERT_TRUE(seed->Get("big-" + std::to_string(t), &got).ok());
    EXPECT_TRUE(got == Value(65536 + size_t(kPuts - 1) * 10000, static_cast<char>('A' + t))) << t;
  }
}

// Writes submitted behind rendezvous PUTs on one connection: the worker
// serves the connection's next message only once the READ is done, so every
// reply comes in request order and every write lands in order.
TEST_P(RendezvousTest, WritesBehindARendezvousPutAreAnsweredInOrder) {
  auto c = NewClient(kThresholdBytes);
  ASSERT_TRUE(c);
  const std::string big1 = Value(300000, 'p'), big2 = Value(200000, 'q');
  std::vector<Op> ops(6);
  const std::string_view values[] = {big1, "small-1", "small-2", big2, "small-3", "small-4"};
  const std::string keys[] = {"b1", "s1", "s2", "b1", "s3", "s1"};
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i].type = Op::Type::kPut;
    ops[i].key = keys[i];
    ops[i].value = values[i];
  }
  std::vector<Op*> ptrs;
  for (Op& o : ops) ptrs.push_back(&o);
  ASSERT_EQ(c->Submit(ptrs), ops.size());
  std::vector<Op*> done(ops.size());
  size_t got = 0;
  for (int i = 0; i < 200 && got < ops.size(); ++i) got += c->Wait(std::span(done).subspan(got), 100);
  ASSERT_EQ(got, ops.size());
  uint64_t last = 0;
  for (Op& o : ops) {
    EXPECT_TRUE(o.status.ok()) << o.key << ": " << o.status.ToString();
    EXPECT_GT(o.version, last) << o.key;  // applied in submission order
    last = o.version;
  }
  std::string v;
  ASSERT_TRUE(c->Get("b1", &v).ok());
  EXPECT_TRUE(v == big2);
  ASSERT_TRUE(c->Get("s1", &v).ok());
  EXPECT_EQ(v, "small-4");
  EXPECT_EQ(c->stats().rendezvous_puts, 2u);
}

// A connection has several windows: rendezvous PUTs submitted together are
// bound and sent at once (the server READs the next while it applies the one
// before, kRendezvousPerConnection at a time), and still answered and
// applied in order. On the loopback fabric the server's READs are held until
// four windows are bound at once (never more, as many as the client has) and
// the server has posted that many READs on the connection's QP.
TEST_P(RendezvousTest, SeveralRendezvousPutsOfOneConnectionAreInFlightAtOnce) {
  auto c = NewClient(kThresholdBytes);
  ASSERT_TRUE(c);
  constexpr size_t kPuts = 9;
  std::vector<std::string> values;
  std::vector<std::string> keys;
  std::vector<Op> ops(kPuts);
  for (size_t i = 0; i < kPuts; ++i) {
    values.push_back(Value(kThresholdBytes + i * 3000, static_cast<char>('A' + i)));
    keys.push_back("many-" + std::to_string(i % 4));
  }
  std::vector<Op*> ptrs;
  for (size_t i = 0; i < kPuts; ++i) {
    ops[i].type = Op::Type::kPut;
    ops[i].key = keys[i];
    ops[i].value = values[i];
    ptrs.push_back(&ops[i]);
  }
  std::atomic<bool> hold{env_.fabric != nullptr};
  if (env_.fabric) {
    LoopbackFaults f;
    f.hold_wr = [&hold](const SendWr& w) {
      return hold.load() && w.opcode == WrOpcode::kRead && w.local.length >= kThresholdBytes;
    };
    env_.fabric->SetFaults(f);
  }
  ASSERT_EQ(c->Submit(ptrs), kPuts);
  std::vector<Op*> done(kPuts);
  size_t got = 0;
  if (env_.fabric) {
    uint64_t bound = 0, reads = 0;
    for (int i = 0; i < 500 && (bound < 4 || reads < 2); ++i) {
      got += c->Wait(std::span(done).subspan(got), 2);  // drives the client; nothing completes
      bound = env_.fabric->stats().runtime_windows_bound;
      reads = env_.fabric->stats().reads_queued_on_one_qp;
    }
    EXPECT_EQ(bound, 4u);
    // The server READs the next value while the one before is held: two
    // READs of this connection at once (kRendezvousPerConnection).
    EXPECT_EQ(reads, 2u);
    EXPECT_EQ(got, 0u);
    hold.store(false);
  }
  for (int i = 0; i < 300 && got < kPuts; ++i) got += c->Wait(std::span(done).subspan(got), 100);
  if (env_.fabric) env_.fabric->SetFaults({});
  ASSERT_EQ(got, kPuts);
  uint64_t last = 0;
  for (size_t i = 0; i < kPuts; ++i) {
    EXPECT_TRUE(ops[i].status.ok()) << i << ": " << ops[i].status.ToString();
    EXPECT_GT(ops[i].version, last) << i;  // applied in submission order
    last = ops[i].version;
  }
  EXPECT_EQ(c->stats().rendezvous_puts, kPuts);
  if (env_.fabric) {
    EXPECT_EQ(env_.fabric->stats().runtime_windows_bound, 0u);
  }
  std::string v;
  for (size_t k = 0; k < 4; ++k) {
    ASSERT_TRUE(c->Get("many-" + std::to_string(k), &v).ok()) << k;
    const size_t newest = k + 4 * ((kPuts - 1 - k) / 4);  // the last PUT of key k
    EXPECT_TRUE(v == values[newest]) << k;
  }
}

// A value inside memory registered with RegisterMemory: its first PUT
// registers exactly its bytes and the client keeps that registration, so a
// later PUT of the same bytes registers nothing; a value not wholly inside
// that memory is registered for its PUT alone. The memory cannot be
// unregistered while a rendezvous PUT of a value in it is in flight, and
// unregistering it drops the kept registrations.
TEST_P(RendezvousTest, AValueInRegisteredMemoryKeepsItsRegistrationForTheNextPutOfTheSameBytes) {
  auto c = NewClient(kThresholdBytes);
  ASSERT_TRUE(c);
  std::vector<std::byte> mem(400000);
  for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<std::byte>('a' + (i * 13 + i / 1000) % 26);
  const std::span<std::byte> registered = std::span(mem).first(300000);
  ASSERT_TRUE(c->RegisterMemory(registered).ok());
  auto view = [&](size_t off, size_t n) { return std::string_view(reinterpret_cast<const char*>(mem.data()) + off, n); };
  auto regs = [&] { return c->stats().rendezvous_registrations; };
  ASSERT_TRUE(c->Put("in", view(1000, 100000)).ok());
  EXPECT_EQ(c->stats().rendezvous_puts, 1u);
  EXPECT_EQ(regs(), 1u);
  ASSERT_TRUE(c->Put("in", view(1000, 100000)).ok());  // the same bytes: kept
  ASSERT_TRUE(c->Put("in-2", view(1000, 100000)).ok());
  EXPECT_EQ(regs(), 1u);
  ASSERT_TRUE(c->Put("shorter", view(1000, 90000)).ok());  // other bytes: registered (exactly the value)
  EXPECT_EQ(regs(), 2u);
  ASSERT_TRUE(c->Put("last-byte", view(300000 - 70000, 70000)).ok());  // ends at the registration's last byte
  ASSERT_TRUE(c->Put("last-byte", view(300000 - 70000, 70000)).ok());
  EXPECT_EQ(regs(), 3u);
  ASSERT_TRUE(c->Put("across", view(250000, 100000)).ok());  // past its end: registered for each PUT
  ASSERT_TRUE(c->Put("across", view(250000, 100000)).ok());
  EXPECT_EQ(regs(), 5u);
  const std::string own = Value(90000, 'o');
  ASSERT_TRUE(c->Put("own", own).ok());
  EXPECT_EQ(regs(), 6u);
  EXPECT_EQ(c->stats().rendezvous_puts, 9u);
  if (env_.fabric) {
    EXPECT_EQ(env_.fabric->stats().runtime_windows_bound, 0u);
  }
  std::string got;
  ASSERT_TRUE(c->Get("in", &got).ok());
  EXPECT_TRUE(got == view(1000, 100000));
  ASSERT_TRUE(c->Get("in-2", &got).ok());
  EXPECT_TRUE(got == view(1000, 100000));
  ASSERT_TRUE(c->Get("shorter", &got).ok());
  EXPECT_TRUE(got == view(1000, 90000));
  ASSERT_TRUE(c->Get("last-byte", &got).ok());
  EXPECT_TRUE(got == view(230000, 70000));
  ASSERT_TRUE(c->Get("across", &got).ok());
  EXPECT_TRUE(got == view(250000, 100000));
  ASSERT_TRUE(c->Get("own", &got).ok());
  EXPECT_TRUE(got == own);
  if (env_.fabric) {
    // The server's READ held: the PUT is in flight with its window bound
    // over the kept registration.
    std::atomic<bool> hold{true};
    LoopbackFaults f;
    f.hold_wr = [&hold](const SendWr& w) { return hold.load() && w.opcode == WrOpcode::kRead; };
    env_.fabric->SetFaults(f);
    Op op;
    op.type = Op::Type::kPut;
    op.key = "held";
    op.value = view(1000, 100000);
    Op* p = &op;
    ASSERT_EQ(c->Submit({&p, 1}), 1u);
    Op* done = nullptr;
    for (int i = 0; i < 500 && env_.fabric->stats().runtime_windows_bound == 0; ++i) {
      ASSERT_EQ(c->Wait({&done, 1}, 2), 0u);
    }
    EXPECT_EQ(c->UnregisterMemory(registered).code(), Status::Code::kInvalidArgument);
    hold.store(false);
    size_t n = 0;
    for (int i = 0; i < 300 && n == 0; ++i) n = c->Wait({&done, 1}, 100);
    env_.fabric->SetFaults({});
    ASSERT_EQ(n, 1u);
    EXPECT_TRUE(op.status.ok()) << op.status.ToString();
    EXPECT_EQ(regs(), 6u);
  }
  ASSERT_TRUE(c->UnregisterMemory(registered).ok());
  ASSERT_TRUE(c->Put("after", view(1000, 100000)).ok());  // not registered memory any more: its own registration
  ASSERT_TRUE(c->Put("after", view(1000, 100000)).ok());
  EXPECT_EQ(regs(), 8u);
  ASSERT_TRUE(c->Get("after", &got).ok());
  EXPECT_TRUE(got == view(1000, 100000));
  // Registered again: the first PUT registers the value again (the kept one went with the memory).
  ASSERT_TRUE(c->RegisterMemory(registered).ok());
  ASSERT_TRUE(c->Put("again", view(1000, 100000)).ok());
  ASSERT_TRUE(c->Put("again", view(1000, 100000)).ok());
  EXPECT_EQ(regs(), 9u);
}

// More distinct values in registered memory than the client keeps
// registrations for: the oldest go, every PUT lands.
TEST_P(RendezvousTest, KeptValueRegistrationsAreBoundedOldestFirst) {
  auto c = NewClient(kThresholdBytes);
  ASSERT_TRUE(c);
  constexpr size_t kValues = 70, kBytes = kThresholdBytes;  // the client keeps 64
  std::vector<std::byte> mem(kValues * kBytes);
  for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<std::byte>('A' + (i * 7 + i / 5000) % 26);
  ASSERT_TRUE(c->RegisterMemory(mem).ok());
  auto view = [&](size_t i) { return std::string_view(reinterpret_cast<const char*>(mem.data()) + i * kBytes, kBytes); };
  for (size_t i = 0; i < kValues; ++i) ASSERT_TRUE(c->Put("v" + std::to_string(i), view(i)).ok()) << i;
  EXPECT_EQ(c->stats().rendezvous_registrations, kValues);
  for (size_t i = kValues - 64; i < kValues; ++i) ASSERT_TRUE(c->Put("w" + std::to_string(i), view(i)).ok()) << i;
  EXPECT_EQ(c->stats().rendezvous_registrations, kValues);  // the newest 64 were kept
  ASSERT_TRUE(c->Put("w0", view(0)).ok());                  // the oldest was not
  EXPECT_EQ(c->stats().rendezvous_registrations, kValues + 1);
  std::string got;
  for (size_t i = 0; i < kValues; i += 7) {
    ASSERT_TRUE(c->Get("v" + std::to_string(i), &got).ok()) << i;
    EXPECT_TRUE(got == view(i)) << i;
  }
  ASSERT_TRUE(c->UnregisterMemory(mem).ok());
}

// ClientOptions::rendezvous_copy_bytes (off by default): a value up to that
// size outside registered memory is copied into the window's buffer when its
// PUT is sent: no registration, and the server READs the copy. The loopback
// NIC copies the READ in 4 KiB chunks; the caller's value changed between two
// of them (which the API forbids) changes nothing the server reads: the value
// as it was sent is stored. Larger values, and values in registered memory,
// are registered as without copies.
TEST_P(RendezvousTest, AValueUpToTheCopySizeIsCopiedNotRegistered) {
  EXPECT_EQ(ClientOptions{}.rendezvous_copy_bytes, 0u);
  constexpr size_t kCopy = 128 * 1024;
  ClientOptions o = server_->Options(GetParam().put_mode, kThresholdBytes);
  o.rendezvous_copy_bytes = kCopy;
  auto r = ClientFactory::ConnectWith(env_.client, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Client& c = **r;
  for (size_t n : {size_t{kThresholdBytes}, kCopy - 1, kCopy}) {
    const std::string v = Value(n, 'c');
    ASSERT_TRUE(c.Put("copied-" + std::to_string(n), v).ok()) << n;
    std::string got;
    ASSERT_TRUE(c.Get("copied-" + std::to_string(n), &got).ok()) << n;
    EXPECT_TRUE(got == v) << n;
  }
  ASSERT_TRUE(c.Put("registered", Value(kCopy + 1, 'r')).ok());
  // Several in flight at once (four windows), each from its own window's buffer.
  constexpr size_t kAtOnce = 6;
  std::vector<std::string> keys, values;
  std::vector<Op> ops(kAtOnce);
  std::vector<Op*> ptrs;
  for (size_t i = 0; i < kAtOnce; ++i) {
    keys.push_back("at-once-" + std::to_string(i));
    values.push_back(Value(kThresholdBytes + i * 1000, static_cast<char>('A' + i)));
  }
  for (size_t i = 0; i < kAtOnce; ++i) {
    ops[i].type = Op::Type::kPut;
    ops[i].key = keys[i];
    ops[i].value = values[i];
    ptrs.push_back(&ops[i]);
  }
  ASSERT_EQ(c.Submit(ptrs), kAtOnce);
  std::vector<Op*> done(kAtOnce);
  size_t finished = 0;
  for (int i = 0; i < 300 && finished < kAtOnce; ++i) finished += c.Wait(std::span(done).subspan(finished), 100);
  ASSERT_EQ(finished, kAtOnce);
  for (size_t i = 0; i < kAtOnce; ++i) {
    EXPECT_TRUE(ops[i].status.ok()) << i << ": " << ops[i].status.ToString();
    std::string got;
    ASSERT_TRUE(c.Get(keys[i], &got).ok()) << i;
    EXPECT_TRUE(got == values[i]) << i;
  }
  std::vector<std::byte> mem(100000);
  for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<std::byte>('a' + i % 26);
  ASSERT_TRUE(c.RegisterMemory(mem).ok());
  const std::string_view in_registered(reinterpret_cast<const char*>(mem.data()), mem.size());
  ASSERT_TRUE(c.Put("in-registered", in_registered).ok());
  EXPECT_EQ(c.stats().rendezvous_puts, 5u + kAtOnce);
  EXPECT_EQ(c.stats().rendezvous_copies, 3u + kAtOnce);
  EXPECT_EQ(c.stats().rendezvous_registrations, 2u);
  std::string got;
  ASSERT_TRUE(c.Get("in-registered", &got).ok());
  EXPECT_TRUE(got == in_registered);
  ASSERT_TRUE(c.UnregisterMemory(mem).ok());
  if (env_.fabric) {
    EXPECT_EQ(env_.fabric->stats().runtime_windows_bound, 0u);
    std::string v = Value(100000, 'x');
    const std::string sent = v;
    std::atomic<int> changed{0};
    LoopbackFaults f;
    f.read_chunk_bytes = 4096;
    f.between_read_chunks = [&](const SendWr& w, size_t done) {
      if (w.opcode == WrOpcode::kRead && w.local.length == v.size() && done == 65536 && changed.load() == 0) {
        v[90000] ^= 0x55;
        changed.fetch_add(1);
      }
    };
    env_.fabric->SetFaults(f);
    Status st = c.Put("copied-changed", v);
    env_.fabric->SetFaults({});
    EXPECT_EQ(changed.load(), 1);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(c.Get("copied-changed", &got).ok());
    EXPECT_TRUE(got == sent);
    EXPECT_EQ(c.stats().rendezvous_copies, 4u + kAtOnce);
  }
}

// The loopback NIC copies the READ in 4 KiB chunks and the test changes the
// client's value between two of them: the server's copy is torn, its
// checksum is not the client's, the PUT is refused and the key keeps its
// value; the same connection's next rendezvous PUT works.
TEST_P(RendezvousTest, LoopbackAValueChangedDuringTheReadIsRefusedNeverStoredTorn) {
  if (GetParam().kind != Kind::kLoopback) GTEST_SKIP() << "the fault hooks are the loopback transport's";
  auto c = NewClient(kThresholdBytes);
  auto other = NewClient(kThresholdBytes);
  ASSERT_TRUE(c && other);
  const std::string before = Value(200000, 'a');
  ASSERT_TRUE(c->Put("torn", before).ok());
  std::string v = Value(200000, 'b');
  std::atomic<int> changed{0};
  LoopbackFaults f;
  f.read_chunk_bytes = 4096;
  f.between_read_chunks = [&](const SendWr& w, size_t done) {
    if (w.opcode == WrOpcode::kRead && w.local.length == v.size() && done == 65536 && changed.load() == 0) {
      v[150000] ^= 0x55;  // not copied yet: the server's copy gets the new byte
      changed.fetch_add(1);
    }
  };
  env_.fabric->SetFaults(f);
  Status st = c->Put("torn", v);
  env_.fabric->SetFaults({});
  EXPECT_EQ(env_.fabric->stats().runtime_windows_bound, 0u);  // invalidated after an error reply too
  EXPECT_EQ(changed.load(), 1);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  std::string got;
  ASSERT_TRUE(other->Get("torn", &got).ok());
  EXPECT_TRUE(got == before);
  ASSERT_TRUE(c->Put("torn", v).ok());  // unchanged now: stored
  ASSERT_TRUE(other->Get("torn", &got).ok());
  EXPECT_TRUE(got == v);
}

// A client whose device has no type-2 memory windows (DeviceInfo::
// memory_windows false: a QP that would bind them is refused) connects with
// the library's default all the same, and sends large PUTs in fragments.
TEST_P(RendezvousTest, LoopbackADeviceWithoutMemoryWindowsSendsLargePutsInFragments) {
  if (GetParam().kind != Kind::kLoopback) GTEST_SKIP() << "a device without windows is the loopback transport's";
  auto dev = env_.fabric->CreateDeviceWithoutWindows("nowindows0");
  ASSERT_FALSE(dev->info().memory_windows);
  auto c = server_->Connect(GetParam().put_mode, TestServer::kLibraryDefault, dev);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::string v = Value(300000, 'w');
  ASSERT_TRUE((*c)->Put("no-windows", v).ok());
  EXPECT_EQ((*c)->stats().rendezvous_puts, 0u);
  EXPECT_EQ((*c)->stats().rendezvous_fallbacks, 0u);
  std::string got;
  ASSERT_TRUE((*c)->Get("no-windows", &got).ok());
  EXPECT_TRUE(got == v);
}

// A value the client cannot register (over the locked-memory limit, as
// ibv_reg_mr refuses it) goes in fragments instead: the PUT succeeds, and
// ClientStats says how many took that way. Registrations that work again
// bring rendezvous PUTs back.
TEST_P(RendezvousTest, LoopbackAValueThatCannotBeRegisteredGoesInFragments) {
  if (GetParam().kind != Kind::kLoopback) GTEST_SKIP() << "the fault hooks are the loopback transport's";
  auto c = NewClient(kThresholdBytes);
  ASSERT_TRUE(c);
  LoopbackFaults f;
  f.fail_registrations_of = 100000;
  env_.fabric->SetFaults(f);
  const std::string small = Value(kThresholdBytes, 's'), big = Value(300000, 'g');
  ASSERT_TRUE(c->Put("reg-small", small).ok());  // registered: under the limit
  Status st = c->Put("reg-big", big);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(c->stats().rendezvous_puts, 1u);
  EXPECT_EQ(c->stats().rendezvous_fallbacks, 1u);
  env_.fabric->SetFaults({});
  std::string got;
  ASSERT_TRUE(c->Get("reg-big", &got).ok());
  EXPECT_TRUE(got == big);
  const std::string big2 = Value(300000, 'h');
  ASSERT_TRUE(c->Put("reg-big", big2).ok());
  EXPECT_EQ(c->stats().rendezvous_puts, 2u);
  EXPECT_EQ(c->stats().rendezvous_fallbacks, 1u);
  ASSERT_TRUE(c->Get("reg-big", &got).ok());
  EXPECT_TRUE(got == big2);
  EXPECT_EQ(env_.fabric->stats().runtime_windows_bound, 0u);
}

// A value in read-only memory (a file mapped PROT_READ, say). The kernel
// pins memory registered for window binding as writable (ib_access_writable
// counts MW_BIND), so on a real device the registration fails and the PUT
// goes in fragments; either way it is stored whole.
TEST_P(RendezvousTest, AValueInReadOnlyMemoryIsStoredWhole) {
  auto c = NewClient(kThresholdBytes);
  ASSERT_TRUE(c);
  const size_t n = 200000;
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const std::string v = Value(n, 'r');
  std::memcpy(p, v.data(), n);
  ASSERT_EQ(mprotect(p, n, PROT_READ), 0);
  Status st = c->Put("read-only", std::string_view(static_cast<const char*>(p), n));
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(c->stats().rendezvous_puts + c->stats().rendezvous_fallbacks, 1u);
  std::printf("value in read-only memory: %s\n", c->stats().rendezvous_puts == 1 ? "rendezvous PUT" : "fragments");
  std::string got;
  ASSERT_TRUE(c->Get("read-only", &got).ok());
  EXPECT_TRUE(got == v);
  munmap(p, n);
}

// A client that names a window the server cannot read (invalidated, another
// key, another QP's: the NIC answers all alike) gets its connection closed;
// the server and the other clients go on.
TEST_P(RendezvousTest, AnUnreadableWindowClosesOnlyThatConnection) {
  auto c = NewClient(kThresholdBytes);
  ASSERT_TRUE(c);
  RogueClient rogue;
  ASSERT_TRUE(rogue.Connect(env_, server_->port(), GetParam().put_mode == PutMode::kWriteImm ? PutPath::kWriteImm : PutPath::kSend).ok());
  ASSERT_EQ(rogue.desc().major, kProtocolMajor);
  RequestHeader h;
  h.flags = kFlagFirst | kFlagLast | kFlagRendezvous;
  h.key_len = 3;
  h.value_len = 65536;
  h.frag_len = kRendezvousFieldsBytes;
  h.request_id = 31;
  std::vector<uint8_t> m(kRequestHeaderSize);
  EncodeRequestHeader(h, m.data());
  m.insert(m.end(), {'b', 'a', 'd'});
  m.resize(m.size() + kRendezvousFieldsBytes);
  EncodeRendezvous(RendezvousValue{0x10000, 0x12345678, 0}, m.data() + m.size() - kRendezvousFieldsBytes);
  if (GetParam().put_mode == PutMode::kWriteImm) {
    ASSERT_TRUE(rogue.WriteImm(m, 0).ok());
  } else {
    ASSERT_TRUE(rogue.Send(m).ok());
  }
  EXPECT_TRUE(rogue.WaitClosed(10000));
  std::string got;
  EXPECT_TRUE(c->Get("bad", &got).IsNotFound());
  const std::string v = Value(70000, 'z');
  ASSERT_TRUE(c->Put("good", v).ok());
  ASSERT_TRUE(c->Get("good", &got).ok());
  EXPECT_TRUE(got == v);
}

INSTANTIATE_TEST_SUITE_P(Loopback, RendezvousTest,
                         ::testing::Values(E2eParam{Kind::kLoopback, PutMode::kSend},
                                           E2eParam{Kind::kLoopback, PutMode::kWriteImm}),
                         E2eName);
INSTANTIATE_TEST_SUITE_P(Verbs, RendezvousTest,
                         ::testing::Values(E2eParam{Kind::kVerbs, PutMode::kSend},
                                           E2eParam{Kind::kVerbs, PutMode::kWriteImm}),
                         E2eName);

}  // namespace
}  // namespace kvrdma::testing
