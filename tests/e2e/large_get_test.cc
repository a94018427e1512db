// Issue 13, finding 3: a GET of a large value beside busy readers and
// writers must complete. On c1cae9c a round older than the round limit (half
// the grace period) started over, so on a slow link a 1 MiB GET restarted
// dozens of times and could fail with a Timeout that blamed writers.
//
// Four reader threads GET other keys and two writer threads PUT other keys
// without pause while the main thread GETs a 1 MiB value kRounds times. Every
// GET must return the value; the latencies (p50, max) and the restarts are
// printed. Not a speed test: it asserts completion and correctness only.
// KVRDMA_LARGE_GET_ROUNDS overrides the number of GETs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "client/large_buffer.h"
#include "common/memory/racy_copy.h"  // KVRDMA_TSAN
#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

class LargeGetTest : public ::testing::TestWithParam<Kind> {};

TEST_P(LargeGetTest, OneMiBGetBesideFourBusyReadersAndTwoWritersCompletes) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  // Loopback: the default grace period (100 ms; round limit 50 ms, a late
  // round's recheck within 150 ms). Soft-RoCE in the test bed's guest, with
  // the six busy clients below on its two CPUs, moves one 1 MiB READ in
  // 100-200 ms: past the recheck limit about as often as not (ff650dc and
  // b97e520 alike: p50 0.3-2.6 s, 160-300 restarts per 20 GETs, a GET past
  // its 5 s deadline in 5 of 7 runs, 2026-11-28). There the grace period is
  // 1 s (round limit 500 ms): the test is about the large buffer and late
  // rounds beside busy clients, not the bed's READ speed. A link that slow
  // needs a longer --grace-ms in production too (kvserver --help).
  server::ServerConfig cfg = TestServer::Defaults();
  if (GetParam() == Kind::kVerbs) cfg.grace_period_ms = 1000;
  TestServer server(env, cfg);
  const char* env_rounds = std::getenv("KVRDMA_LARGE_GET_ROUNDS");
  const int rounds = env_rounds != nullptr ? std::atoi(env_rounds) : 20;

  auto big_client = server.Connect(PutMode::kWriteImm);
  ASSERT_TRUE(big_client.ok()) << big_client.status().ToString();
  std::unique_ptr<Client> big = std::move(big_client).value();
  std::string value(1 << 20, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>('a' + (i * 7 + i / 4096) % 26);
  ASSERT_TRUE(big->Put("big", value).ok());
  for (int k = 0; k < 64; ++k) ASSERT_TRUE(big->Put("small-" + std::to_string(k), std::string(200, 's')).ok());

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> background_ops{0}, background_errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    auto c = server.Connect(PutMode::kWriteImm);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    threads.emplace_back([&, t, cl = std::move(c).value()]() mutable {
      const bool writer = t >= 4;
      std::string v;
      for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const std::string key = "small-" + std::to_string((i * 13 + static_cast<uint64_t>(t)) % 64);
        Status st = writer ? cl->Put(key, std::string(100 + i % 900, static_cast<char>('A' + t))) : cl->Get(key, &v);
        background_ops.fetch_add(1, std::memory_order_relaxed);
        if (!st.ok()) background_errors.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }

  std::vector<double> ms;
  const uint64_t retries_before = big->stats().get_retries;
  for (int r = 0; r < rounds; ++r) {
    std::string got;
    auto t0 = std::chrono::steady_clock::now();
    Status st = big->Get("big", &got);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    EXPECT_TRUE(st.ok()) << "GET " << r << ": " << st.ToString();
    EXPECT_TRUE(got == value) << "GET " << r << " returned " << got.size() << " bytes that differ";
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();
  std::sort(ms.begin(), ms.end());
  std::printf("[large-get] %s: %d GETs of 1 MiB beside 4 readers + 2 writers: p50 %.2f ms, max %.2f ms, "
              "restarts %llu; background %llu ops (%llu errors)\n",
              KindName({GetParam(), 0}).c_str(), rounds, ms[ms.size() / 2], ms.back(),
              static_cast<unsigned long long>(big->stats().get_retries - retries_before),
              static_cast<unsigned long long>(background_ops.load()),
              static_cast<unsigned long long>(background_errors.load()));
  EXPECT_GT(background_ops.load(), 0u);
  EXPECT_EQ(background_errors.load(), 0u);
}

// Client::Get into the caller's memory (and Op::buffer): the value lands at
// the buffer's start and nothing past it is written; a buffer too small fails
// with TooLarge and the value's length; every path a GET can take (the op
// buffer, the large buffer, a cached location) delivers the same way.
TEST_P(LargeGetTest, AGetIntoTheCallersBufferFillsItOrSaysHowLongTheValueIs) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  TestServer server(env);
  auto cl = server.Connect(PutMode::kSend);
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  Client& c = **cl;
  constexpr std::byte kGuard{0xA5};
  for (size_t size : {size_t{0}, size_t{1}, size_t{4093}, size_t{(16 << 10) + 1}, size_t{777'777}, size_t{1} << 20}) {
    SCOPED_TRACE("value of " + std::to_string(size) + " bytes");
    std::string value(size, '\0');
    for (size_t i = 0; i < size; ++i) value[i] = static_cast<char>(i * 131 + size);
    const std::string key = "into-" + std::to_string(size);
    ASSERT_TRUE(c.Put(key, value).ok());
    for (int pass = 0; pass < 2; ++pass) {  // the second GET of a small value takes its cached location
      std::vector<std::byte> buf(size + 64, kGuard);
      size_t n = 12345;
      Status st = c.Get(key, std::span(buf).first(size), &n);
      ASSERT_TRUE(st.ok()) << st.ToString();
      ASSERT_EQ(n, size);
      EXPECT_TRUE(size == 0 || std::memcmp(buf.data(), value.data(), size) == 0);  // memcmp of an empty vector's null data is undefined
      for (size_t i = size; i < buf.size(); ++i) ASSERT_EQ(buf[i], kGuard) << "byte " << i << " past the buffer";
    }
    if (size > 0) {
      std::vector<std::byte> small(size - 1);
      size_t n = 0;
      Status st = c.Get(key, small, &n);
      EXPECT_EQ(st.code(), Status::Code::kTooLarge) << st.ToString();
      EXPECT_EQ(n, size);
      EXPECT_NE(st.message().find("value of " + std::to_string(size) + " bytes"), std::string::npos) << st.message();
    }
    // The asynchronous form, beside a GET into a string.
    std::vector<std::byte> buf(size);
    std::string str;
    Op a, b;
    a.key = b.key = key;
    a.buffer = buf;
    b.result = &str;
    Op* ops[2] = {&a, &b};
    ASSERT_EQ(c.Submit(ops), 2u);
    Op* done[2];
    for (size_t got = 0; got < 2;) got += c.Wait(std::span(done).subspan(got), 5000);
    ASSERT_TRUE(a.status.ok()) << a.status.ToString();
    ASSERT_TRUE(b.status.ok()) << b.status.ToString();
    EXPECT_EQ(a.value_bytes, size);
    EXPECT_EQ(b.value_bytes, size);
    EXPECT_TRUE(size == 0 || std::memcmp(buf.data(), value.data(), size) == 0);  // memcmp of an empty vector's null data is undefined
    EXPECT_EQ(str, value);
    // Into a string reused: longer than the value (a large value is then
    // copied into it in the checksum's pass and the string cut to the
    // value's length), exactly as long, and shorter.
    for (size_t held : {size + 100, size, size / 2}) {
      std::string reused(held, 'x');
      Status st = c.Get(key, &reused);
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(reused.size(), size) << "a string of " << held << " bytes";
      EXPECT_TRUE(reused == value) << "a string of " << held << " bytes";
    }
  }
  // Absent: NotFound, 0 bytes. An Op with neither a string nor a buffer: a
  // buffer of 0 bytes, so TooLarge that says what is missing.
  std::vector<std::byte> buf(16);
  size_t n = 99;
  EXPECT_TRUE(c.Get("into-absent", buf, &n).IsNotFound());
  EXPECT_EQ(n, 0u);
  ASSERT_TRUE(c.Put("into-x", "x").ok());
  Op bare;
  bare.key = "into-x";
  Op* ops[1] = {&bare};
  ASSERT_EQ(c.Submit(ops), 1u);
  Op* done[1];
  while (c.Wait(done, 5000) == 0) {
  }
  EXPECT_EQ(bare.status.code(), Status::Code::kTooLarge);
  EXPECT_EQ(bare.value_bytes, 1u);
  EXPECT_NE(bare.status.message().find("needs a result string or a buffer"), std::string::npos)
      << bare.status.message();
}

// The index of the first byte of v[from, to) that is not `b` (to if none).
size_t FirstNot(const std::vector<std::byte>& v, size_t from, size_t to, std::byte b) {
  return static_cast<size_t>(std::find_if(v.begin() + from, v.begin() + to, [b](std::byte x) { return x != b; }) -
                             v.begin());
}

// A GET into a buffer that lies in memory registered with RegisterMemory
// READs the value straight into it (a direct READ: header and key into the
// client's buffer, the rest into the caller's), at any offset of the
// registered memory, with keys of several lengths. Nothing past the buffer
// is written; a value longer than the buffer is TooLarge with its length
// (read again the ordinary way); small values take the copy.
TEST_P(LargeGetTest, AGetIntoRegisteredMemoryReadsTheValueStraightIntoIt) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  TestServer server(env);
  auto cl = server.Connect(PutMode::kWriteImm);
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  Client& c = **cl;
  constexpr std::byte kGuard{0x5A};
  std::vector<std::byte> mem((2 << 20) + 4096, kGuard);
  ASSERT_TRUE(c.RegisterMemory(mem).ok());
  EXPECT_EQ(c.RegisterMemory(std::span(mem).subspan(100, 10)).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(c.RegisterMemory({}).code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(c.UnregisterMemory(std::span(mem).subspan(1)).IsNotFound());
  const std::string long_key(300, 'k');
  for (size_t size : {size_t{0}, size_t{100}, size_t{3700}, size_t{3790}, size_t{4096}, size_t{(16 << 10) + 3},
                      size_t{65536}, size_t{777'777}, size_t{1} << 20}) {
    for (const std::string& key : {"rg-" + std::to_string(size), long_key + std::to_string(size)}) {
      SCOPED_TRACE("value of " + std::to_string(size) + " bytes, key of " + std::to_string(key.size()));
      std::string value(size, '\0');
      for (size_t i = 0; i < size; ++i) value[i] = static_cast<char>(i * 37 + size + key.size());
      ASSERT_TRUE(c.Put(key, value).ok());
      for (size_t at : {size_t{0}, size_t{4096 + 7}}) {  // any offset, aligned or not
        std::fill(mem.begin(), mem.end(), kGuard);
        const ClientStats before = c.stats();
        size_t n = 12345;
        Status st = c.Get(key, std::span(mem).subspan(at, size), &n);
        ASSERT_TRUE(st.ok()) << st.ToString();
        ASSERT_EQ(n, size);
        EXPECT_TRUE(size == 0 || std::memcmp(mem.data() + at, value.data(), size) == 0);
        ASSERT_EQ(FirstNot(mem, 0, at, kGuard), at) << "a byte before the buffer was written";
        ASSERT_EQ(FirstNot(mem, at + size, mem.size(), kGuard), mem.size()) << "a byte past the buffer was written";
        // Entry READs of 4 KiB and more are direct (kDirectReadMinBytes; the
        // READ is the entry's size class, at least the entry); the second GET
        // of a key may take its cached location, direct too.
        const uint64_t direct = c.stats().direct_reads - before.direct_reads;
        if (12 + key.size() + size >= 4096) {
          EXPECT_GE(direct, 1u);
        } else {
          EXPECT_EQ(direct, 0u);
        }
      }
      if (size > 0) {
        size_t n = 0;
        std::fill(mem.begin(), mem.end(), kGuard);
        Status st = c.Get(key, std::span(mem).subspan(64, size - 1), &n);
        EXPECT_EQ(st.code(), Status::Code::kTooLarge) << st.ToString();
        EXPECT_EQ(n, size);
        ASSERT_EQ(FirstNot(mem, 64 + size - 1, mem.size(), kGuard), mem.size()) << "a byte past the buffer was written";
      }
    }
  }
  // Several at once, asynchronously, into parts of the same memory.
  constexpr int kOps = 8;
  std::vector<std::string> values(kOps);
  std::vector<std::string> keys(kOps);
  std::vector<Op> ops(kOps);
  std::vector<Op*> ptrs(kOps);
  for (int i = 0; i < kOps; ++i) {
    keys[i] = "rg-async-" + std::to_string(i);
    values[i].assign(100'000 + i * 1000, static_cast<char>('A' + i));
    ASSERT_TRUE(c.Put(keys[i], values[i]).ok());
    ops[i].key = keys[i];
    ops[i].buffer = std::span(mem).subspan(size_t(i) * 200'000, values[i].size());
    ptrs[i] = &ops[i];
  }
  ASSERT_EQ(c.Submit(ptrs), size_t{kOps});
  std::vector<Op*> done(kOps);
  for (size_t got = 0; got < size_t{kOps};) got += c.Wait(std::span(done).subspan(got), 5000);
  for (int i = 0; i < kOps; ++i) {
    ASSERT_TRUE(ops[i].status.ok()) << ops[i].status.ToString();
    ASSERT_EQ(ops[i].value_bytes, values[i].size());
    EXPECT_EQ(0, std::memcmp(mem.data() + size_t(i) * 200'000, values[i].data(), values[i].size())) << i;
  }
  // Unregistered: the same GET copies again (no direct READ).
  ASSERT_TRUE(c.UnregisterMemory(mem).ok());
  const uint64_t direct = c.stats().direct_reads;
  size_t n = 0;
  ASSERT_TRUE(c.Get(keys[0], std::span(mem).first(values[0].size()), &n).ok());
  EXPECT_EQ(c.stats().direct_reads, direct);
  EXPECT_EQ(0, std::memcmp(mem.data(), values[0].data(), values[0].size()));
}

// A direct READ that a change of the entry's bytes tears is read again,
// never returned: on loopback the READ is copied 4 KiB at a time and, for the
// first three direct READs, a byte of the value that the READ has not copied
// yet is flipped between two chunks and flipped back after the next (as a
// reuse of the segment would). The checksum over both pieces of the READ
// must refuse it: the GET restarts and returns the value whole.
TEST_P(LargeGetTest, ATornDirectReadIsReadAgainNeverReturned) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  TestServer server(env);
  auto cl = server.Connect(PutMode::kSend);
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  Client& c = **cl;
  std::string value(200'000, 'v');
  for (size_t i = 0; i < value.size(); i += 1000) value[i] = static_cast<char>('a' + i % 26);
  ASSERT_TRUE(c.Put("rg-torn", value).ok());
  std::vector<std::byte> mem(value.size());
  ASSERT_TRUE(c.RegisterMemory(mem).ok());
  int torn = 0;
  uint8_t* flipped = nullptr;  // the byte flipped in the READ in progress
  if (env.fabric) {
    LoopbackFaults f;
    f.read_chunk_bytes = 4096;
    f.between_read_chunks = [&](const SendWr& w, size_t done) {
      if (flipped != nullptr) {  // the chunk after the flip copied it: restore
        *flipped ^= 0x20;
        flipped = nullptr;
        ++torn;
        return;
      }
      if (w.local2.length == 0 || torn >= 3 || done != w.local.length) return;
      // The first call of a direct READ (after its header and key): flip a
      // byte of the value that the next chunk copies.
      flipped = reinterpret_cast<uint8_t*>(w.remote_addr + done + 100);
      *flipped ^= 0x20;
    };
    env.fabric->SetFaults(f);
  }
  const ClientStats before = c.stats();
  size_t n = 0;
  Status st = c.Get("rg-torn", mem, &n);
  if (env.fabric) env.fabric->SetFaults(LoopbackFaults{});
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(n, value.size());
  EXPECT_EQ(0, std::memcmp(mem.data(), value.data(), n));
  EXPECT_GE(c.stats().direct_reads - before.direct_reads, 1u);
  if (env.fabric) {
    EXPECT_EQ(torn, 3);
    EXPECT_EQ(c.stats().get_retries - before.get_retries, 3u);
  }
}

// Each GET of `ops` succeeded with values[i]: in got[i], or (registered)
// at the start of its buffer.
void ExpectValues(const std::vector<Op>& ops, const std::vector<std::string>& got,
                  const std::vector<std::string>& values, bool registered) {
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_TRUE(ops[i].status.ok()) << "GET " << i << ": " << ops[i].status.ToString();
    if (registered) {
      EXPECT_EQ(ops[i].value_bytes, values[i].size());
      EXPECT_EQ(0, std::memcmp(ops[i].buffer.data(), values[i].data(), values[i].size()))
          << "GET " << i << " returned another value";
    } else {
      EXPECT_TRUE(got[i] == values[i]) << "GET " << i << " returned another value";
    }
  }
}

// Sixteen GETs of 1 MiB values in flight on one connection, whose large
// buffer holds one such entry: they take it in turn. On 89c93d6 a GET whose
// entry needed the buffer waited for it after its window READ, so its round
// aged while the others' READs ran; past the round limit it needed the
// recheck, which aged too, and it started over, queued behind the same GETs
// again: at 1 x 16 on Soft-RoCE none completed (0 GETs a second,
// bench/bandwidth). Now a GET that waited past the round limit reads its
// window again with its range of the buffer held. On
// loopback each large READ takes 12 ms (the fault hook) against the default
// round limit of 50 ms (the recheck's limit 150 ms): a queue of 16 is 192 ms.
// Every GET must return its value, each in a round or two, none restarted.
// `registered`: the same with every GET into a buffer in registered memory
// (direct READs): they hold ranges of the large buffer too, and without them
// sixteen of them in flight at once outlived the round limit together (on
// Soft-RoCE none completed; on loopback, with the hook, they restart).
void SixteenLargeGetsInFlight(Kind kind, bool registered) {
  TransportEnv env = TransportEnv::Make(kind);
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
#ifdef KVRDMA_TSAN
  constexpr bool kReadsTakeWhatTheHookSays = false;
#else
  constexpr bool kReadsTakeWhatTheHookSays = true;
#endif
  // The default grace period (100 ms): round limit 50 ms. Under
  // ThreadSanitizer (below) a 1 MiB READ can outlive it by itself, and
  // rounds that restart add READs the loopback NIC must copy the same slow
  // way: on a slow host (CI on 5cd9e91) 76 rounds and 47 restarts left three
  // GETs without an answer for 10 s. There the grace is 2 s: the test is for
  // races, and for the large buffer's sharing, not for the round limit.
  server::ServerConfig cfg = TestServer::Defaults();
  if (!kReadsTakeWhatTheHookSays) cfg.grace_period_ms = 2000;
  TestServer server(env, cfg);
  auto cl = server.Connect(PutMode::kWriteImm);
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  Client& c = **cl;
  constexpr int kGets = 16;
  std::vector<std::string> values(kGets);
  for (int i = 0; i < kGets; ++i) {
    values[i].assign(1 << 20, static_cast<char>('a' + i));
    values[i][i * 1000] = '!';
    ASSERT_TRUE(c.Put("large-" + std::to_string(i), values[i]).ok());
  }
  if (env.fabric) {
    LoopbackFaults f;
    f.fail_wr = [](const SendWr& w) {
      if (w.opcode == WrOpcode::kRead && w.local.length + w.local2.length > (64 << 10)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(12));
      }
      return WcStatus::kSuccess;
    };
    env.fabric->SetFaults(f);
  }
  std::vector<std::string> got(kGets);
  std::vector<std::string> keys(kGets);
  std::vector<Op> ops(kGets);
  std::vector<Op*> ptrs(kGets);
  std::vector<std::byte> mem(registered ? size_t{kGets} << 20 : 0);
  if (registered) {
    ASSERT_TRUE(c.RegisterMemory(mem).ok());
  }
  for (int i = 0; i < kGets; ++i) {
    keys[i] = "large-" + std::to_string(i);
    ops[i].key = keys[i];
    if (registered) {
      ops[i].buffer = std::span(mem).subspan(size_t(i) << 20, 1 << 20);
    } else {
      ops[i].result = &got[i];
    }
    ptrs[i] = &ops[i];
  }
  const ClientStats before = c.stats();
  ASSERT_EQ(c.Submit(ptrs), static_cast<size_t>(kGets));
  std::vector<Op*> done(kGets);
  size_t n = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (n < static_cast<size_t>(kGets) && std::chrono::steady_clock::now() < deadline) {
    n += c.Wait(std::span(done).subspan(n), 1000);
  }
  if (env.fabric) env.fabric->SetFaults(LoopbackFaults{});
  ASSERT_EQ(n, static_cast<size_t>(kGets));
  ExpectValues(ops, got, values, registered);
  const ClientStats after = c.stats();
  if (registered) {
    EXPECT_GE(after.direct_reads - before.direct_reads, uint64_t{kGets});
  }
  std::printf("[large-get] %s: %d GETs of 1 MiB at once%s: %llu window rounds, %llu restarts\n",
              KindName({kind, 0}).c_str(), kGets, registered ? " into registered memory" : "",
              static_cast<unsigned long long>(after.get_rounds - before.get_rounds),
              static_cast<unsigned long long>(after.get_retries - before.get_retries));
  // One round each, plus one more for each GET that waited for the buffer
  // past the round limit: at most two. On loopback, where each READ takes
  // what the hook says, none restarts (nothing went stale). On Soft-RoCE a
  // READ of 1 MiB itself can outlive the round limit on a busy host (one
  // restart in a CI run): there the test asks for what the fix is for, that
  // every GET completes, and bounds the rounds loosely. So it does under
  // ThreadSanitizer, whose loopback copies a 1 MiB READ a word at a time
  // through atomics (racy_copy.h) and can take past the limit itself (one
  // restart in a CI run); the plain and ASan builds ask for none.
  if (env.fabric && kReadsTakeWhatTheHookSays) {
    EXPECT_LE(after.get_rounds - before.get_rounds, uint64_t{2 * kGets});
    EXPECT_EQ(after.get_retries - before.get_retries, 0u);
  } else {
    EXPECT_LE(after.get_rounds - before.get_rounds, uint64_t{4 * kGets});
  }
}

TEST_P(LargeGetTest, SixteenLargeGetsInFlightOnOneConnectionAllComplete) {
  SixteenLargeGetsInFlight(GetParam(), /*registered=*/false);
}

TEST_P(LargeGetTest, SixteenLargeDirectGetsInFlightOnOneConnectionAllComplete) {
  SixteenLargeGetsInFlight(GetParam(), /*registered=*/true);
}

// Large entry READs of one connection run side by side as long as their
// entries fit the large buffer together (a range of it each: client/
// large_buffer.h). Eight GETs of 64 KiB values against a server that
// accepts 1 MiB ones: on loopback their entry READs are held on the NIC
// until all eight are queued on the client's QP at once (on 9cbc32c, one
// large buffer per connection taken in turn, one at a time); then each must
// return its own value without a restart (ranges that overlapped would
// hand a GET another READ's bytes). Into strings, and into registered
// memory (direct READs hold ranges too, for the pace).
void EightLargeEntryReadsAtOnce(Kind kind, bool registered) {
  TransportEnv env = TransportEnv::Make(kind);
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  TestServer server(env);  // max value 1 MiB: the large buffer holds eight 64 KiB entries
  auto cl = server.Connect(PutMode::kWriteImm);
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  Client& c = **cl;
  constexpr int kGets = 8;
  constexpr size_t kValueBytes = 64 << 10;
  std::vector<std::string> values(kGets), keys(kGets), got(kGets);
  for (int i = 0; i < kGets; ++i) {
    keys[i] = "mid-" + std::to_string(i);
    values[i].assign(kValueBytes + 17 * static_cast<size_t>(i), static_cast<char>('a' + i));
    values[i][static_cast<size_t>(i) * 501] = '!';
    ASSERT_TRUE(c.Put(keys[i], values[i]).ok());
  }
  std::vector<std::byte> mem(registered ? size_t{kGets} * (kValueBytes + 4096) : 0);
  if (registered) {
    ASSERT_TRUE(c.RegisterMemory(mem).ok());
  }
  std::vector<Op> ops(kGets);
  std::vector<Op*> ptrs(kGets);
  for (int i = 0; i < kGets; ++i) {
    ops[i].key = keys[i];
    if (registered) {
      ops[i].buffer = std::span(mem).subspan(size_t(i) * (kValueBytes + 4096), kValueBytes + 4096);
    } else {
      ops[i].result = &got[i];
    }
    ptrs[i] = &ops[i];
  }
  std::atomic<bool> hold{env.fabric != nullptr};
  if (env.fabric) {
    LoopbackFaults f;
    f.hold_wr = [&hold](const SendWr& w) {
      return hold.load() && w.opcode == WrOpcode::kRead && w.local.length + w.local2.length > (16 << 10);
    };
    env.fabric->SetFaults(f);
  }
  const ClientStats before = c.stats();
  ASSERT_EQ(c.Submit(ptrs), static_cast<size_t>(kGets));
  std::vector<Op*> done(kGets);
  size_t n = 0;
  if (env.fabric) {
    uint64_t queued = 0;
    for (int i = 0; i < 500 && queued < kGets; ++i) {
      n += c.Wait(std::span(done).subspan(n), 2);  // drives the client; no entry READ completes
      queued = env.fabric->stats().reads_queued_on_one_qp;
    }
    EXPECT_EQ(queued, uint64_t{kGets}) << "large entry READs in flight at once on the client's QP";
    EXPECT_EQ(n, 0u);
    hold.store(false);
  }
  for (int i = 0; i < 300 && n < static_cast<size_t>(kGets); ++i) n += c.Wait(std::span(done).subspan(n), 100);
  if (env.fabric) env.fabric->SetFaults(LoopbackFaults{});
  ASSERT_EQ(n, static_cast<size_t>(kGets));
  ExpectValues(ops, got, values, registered);
  const ClientStats after = c.stats();
  EXPECT_EQ(after.get_retries - before.get_retries, 0u);
  if (registered) {
    EXPECT_EQ(after.direct_reads - before.direct_reads, uint64_t{kGets});
  }
}

TEST_P(LargeGetTest, EightLargeEntryReadsAreInFlightAtOnce) { EightLargeEntryReadsAtOnce(GetParam(), false); }

TEST_P(LargeGetTest, EightLargeDirectReadsAreInFlightAtOnce) { EightLargeEntryReadsAtOnce(GetParam(), true); }

// Large GETs of mixed sizes (20 KiB to 1 MiB, so that their ranges of the
// large buffer come and go at every offset), 16 in flight on one connection,
// while another client overwrites the same keys with values of other sizes
// (the cleaner reuses their segments; cached locations go stale). Every GET must return a whole value
// that its key had: the key's own letter throughout, a length the writer
// used, never NotFound (every key always has a value). Ranges that
// overlapped would hand a GET another READ's bytes: another key's entry
// (a NotFound) or a torn one (a restart).
TEST_P(LargeGetTest, MixedLargeGetsInFlightReturnTheirOwnKeysValues) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  TestServer server(env);
  auto reader_c = server.Connect(PutMode::kWriteImm);
  auto writer_c = server.Connect(PutMode::kWriteImm);
  ASSERT_TRUE(reader_c.ok()) << reader_c.status().ToString();
  ASSERT_TRUE(writer_c.ok()) << writer_c.status().ToString();
  Client& reader = **reader_c;
  std::unique_ptr<Client> writer = std::move(writer_c).value();
  constexpr size_t kSizes[] = {20 << 10, 64 << 10, 100 << 10, 300 << 10, (1 << 20) - 3};
  constexpr int kKeys = 10;
  auto value_of = [&](int k, uint64_t n) {
    return std::string(kSizes[(static_cast<size_t>(k) + n) % std::size(kSizes)], static_cast<char>('a' + k));
  };
  std::vector<std::string> keys;
  for (int k = 0; k < kKeys; ++k) {
    keys.push_back("mixed-" + std::to_string(k));
    ASSERT_TRUE(writer->Put(keys[k], value_of(k, 0)).ok());
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> puts{0}, put_errors{0};
  std::thread w([&] {
    for (uint64_t n = 1; !stop.load(std::memory_order_relaxed); ++n) {
      const int k = static_cast<int>(n * 7 % kKeys);
      if (!writer->Put(keys[k], value_of(k, n)).ok()) put_errors.fetch_add(1, std::memory_order_relaxed);
      puts.fetch_add(1, std::memory_order_relaxed);
    }
  });
  // Under ThreadSanitizer 500 loopback GETs: it judges every racing access
  // it sees, and each GET's are the same. 2000 did not finish within the 30 s
  // this loop had on this bed (1,230-1,310 of them, ff650dc's code too).
#if defined(__SANITIZE_THREAD__)
  constexpr bool kTsan = true;
#else
  constexpr bool kTsan = false;
#endif
  const int gets = env.fabric != nullptr ? (kTsan ? 500 : 2000) : 200;
  constexpr int kDepth = 16;
  std::vector<Op> ops(kDepth);
  std::vector<std::string> got(kDepth);
  std::vector<int> key_of(kDepth);
  int submitted = 0, completed = 0, bad = 0;
  const ClientStats before = reader.stats();
  auto submit = [&](size_t slot) {
    key_of[slot] = (submitted * 3) % kKeys;
    ops[slot] = Op{};
    ops[slot].key = keys[key_of[slot]];
    ops[slot].result = &got[slot];
    Op* p = &ops[slot];
    ++submitted;
    return reader.Submit(std::span(&p, 1)) == 1;
  };
  for (size_t i = 0; i < kDepth; ++i) ASSERT_TRUE(submit(i));
  std::vector<Op*> done(kDepth);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (completed < submitted && std::chrono::steady_clock::now() < deadline) {
    const size_t n = reader.Wait(done, 100);
    for (size_t i = 0; i < n; ++i) {
      const size_t slot = static_cast<size_t>(done[i] - ops.data());
      ++completed;
      const int k = key_of[slot];
      const std::string& v = got[slot];
      const bool known_size = std::find(std::begin(kSizes), std::end(kSizes), v.size()) != std::end(kSizes);
      if (!ops[slot].status.ok() || !known_size ||
          v.find_first_not_of(static_cast<char>('a' + k)) != std::string::npos) {
        if (++bad <= 5) {
          ADD_FAILURE() << "GET of " << keys[k] << ": " << ops[slot].status.ToString() << ", " << v.size()
                        << " bytes";
        }
      }
      if (submitted < gets) {
        ASSERT_TRUE(submit(slot));
      }
    }
  }
  stop.store(true);
  w.join();
  const ClientStats after = reader.stats();
  std::printf("[large-get] %s: %d GETs of 20 KiB-1 MiB, 16 in flight, beside %llu PUTs: %llu restarts, "
              "%llu from the location cache, %llu stale locations\n",
              KindName({GetParam(), 0}).c_str(), completed, static_cast<unsigned long long>(puts.load()),
              static_cast<unsigned long long>(after.get_retries - before.get_retries),
              static_cast<unsigned long long>(after.cache_hits - before.cache_hits),
              static_cast<unsigned long long>(after.cache_stale - before.cache_stale));
  // Large entries are cached too (LocationCacheTest). On verbs the writer
  // outpaces the reader and most cached locations are stale (18 hits of 132
  // in one run): only loopback asks for hits.
  if (env.fabric) {
    EXPECT_GT(after.cache_hits - before.cache_hits, 0u);
  }
  EXPECT_EQ(completed, gets);
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(put_errors.load(), 0u);
}

// First come, first served (Impl::HoldLarge): a GET of the largest entry
// that finds no room is not passed over by shorter GETs staged after it.
// Loopback only (the NIC holds the large entry READs; a held READ holds the
// READs behind it on its QP too): five GETs submitted at once, two of 64
// KiB values, one of the largest entry, two more of 64 KiB. Their window
// READs run; the first two take ranges and their entry READs are held; the
// largest finds no room, and the two after it must wait too (two large
// READs queued, not four). Once the READs run every GET returns its value.
TEST_P(LargeGetTest, AGetOfTheLargestEntryIsNotPassedOverByShorterOnes) {
  TransportEnv env = TransportEnv::Make(GetParam());
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  if (!env.fabric) GTEST_SKIP() << "holds READs on the loopback NIC";
  TestServer server(env);
  auto cl = server.Connect(PutMode::kWriteImm);
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  Client& c = **cl;
  // The largest entry: the longest key (1023 bytes) and value (1 MiB) the
  // server accepts, whose size class is the whole large buffer.
  const std::string largest(1023, 'L');
  std::vector<std::string> keys = {"short-0", "short-1", largest, "short-2", "short-3"};
  std::vector<std::string> values(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    values[i].assign(i == 2 ? size_t{1} << 20 : size_t{64} << 10, static_cast<char>('k' + i));
    ASSERT_TRUE(c.Put(keys[i], values[i]).ok());
  }
  std::atomic<bool> hold{true};
  LoopbackFaults f;
  f.hold_wr = [&hold](const SendWr& w) {
    return hold.load() && w.opcode == WrOpcode::kRead && w.local.length + w.local2.length > (16 << 10);
  };
  env.fabric->SetFaults(f);
  std::vector<std::string> got(keys.size());
  std::vector<Op> ops(keys.size());
  std::vector<Op*> ptrs(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ops[i].key = keys[i];
    ops[i].result = &got[i];
    ptrs[i] = &ops[i];
  }
  ASSERT_EQ(c.Submit(ptrs), keys.size());
  std::vector<Op*> done(keys.size());
  size_t n = 0;
  for (int i = 0; i < 50; ++i) n += c.Wait(std::span(done).subspan(n), 2);
  EXPECT_EQ(env.fabric->stats().reads_queued_on_one_qp, 2u) << "a shorter GET took a range ahead of the largest";
  EXPECT_EQ(n, 0u);
  hold.store(false);
  for (int i = 0; i < 300 && n < keys.size(); ++i) n += c.Wait(std::span(done).subspan(n), 100);
  env.fabric->SetFaults(LoopbackFaults{});
  ASSERT_EQ(n, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(ops[i].status.ok()) << "GET " << i << ": " << ops[i].status.ToString();
    EXPECT_TRUE(got[i] == values[i]) << "GET " << i;
  }
}

// The ranges themselves: the lowest gap that fits, never past the buffer,
// never overlapping, a given-back range reused.
TEST(LargeBufferRanges, TakesTheLowestGapThatFitsAndNeverOverlaps) {
  LargeBufferRanges<4> r;
  r.Reset(100);
  EXPECT_EQ(r.Take(40), std::optional<uint64_t>(0));
  EXPECT_EQ(r.Take(40), std::optional<uint64_t>(40));
  EXPECT_EQ(r.Take(30), std::nullopt);  // 20 left
  EXPECT_EQ(r.Take(20), std::optional<uint64_t>(80));
  r.Give(0);
  EXPECT_EQ(r.Take(41), std::nullopt);  // the gap at 0 is 40
  EXPECT_EQ(r.Take(25), std::optional<uint64_t>(0));
  EXPECT_EQ(r.Take(15), std::optional<uint64_t>(25));
  EXPECT_EQ(r.Take(1), std::nullopt);  // four ranges: full
  r.Give(40);
  EXPECT_EQ(r.Take(0), std::nullopt);
  EXPECT_EQ(r.Take(40), std::optional<uint64_t>(40));
  EXPECT_EQ(r.ranges(), 4u);
  r.Reset(10);
  EXPECT_EQ(r.ranges(), 0u);
  EXPECT_EQ(r.Take(11), std::nullopt);
  EXPECT_EQ(r.Take(10), std::optional<uint64_t>(0));
  // Random takes and gives against a byte map: no byte in two ranges.
  LargeBufferRanges<64> big;
  big.Reset(1000);
  std::vector<int> owner(1000, -1);
  std::vector<std::pair<uint64_t, uint64_t>> held;
  uint64_t x = 12345;
  for (int step = 0; step < 20000; ++step) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    if (!held.empty() && (x >> 60) < 7) {
      const size_t i = (x >> 20) % held.size();
      for (uint64_t b = held[i].first; b < held[i].first + held[i].second; ++b) owner[b] = -1;
      big.Give(held[i].first);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    const uint64_t len = 1 + (x >> 33) % 400;
    const std::optional<uint64_t> at = big.Take(len);
    if (!at) continue;
    ASSERT_LE(*at + len, 1000u);
    for (uint64_t b = *at; b < *at + len; ++b) {
      ASSERT_EQ(owner[b], -1) << "byte " << b << " in two ranges";
      owner[b] = step;
    }
    held.emplace_back(*at, len);
  }
}

INSTANTIATE_TEST_SUITE_P(Loopback, LargeGetTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, LargeGetTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
