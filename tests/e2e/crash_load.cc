// kvrdma_crash_load: the client half of the kill -9 test (kill9_test.sh).
//
// Load:  kvrdma_crash_load --server ADDR:PORT --keys N --state FILE --seed S
//                          [--threads T] [--value-size A-B] [--large PCT:A-B]
//                          [--rendezvous-bytes R] [--state-in PREV]
//   T threads, each with its own Client and one write in flight, PUT (80 %)
//   and DELETE (20 %) keys ck-<i> of their own (key i belongs to thread
//   i % T, so a key's writes are one thread's, in order) until the server
//   goes away. Per key it keeps the last acknowledged state (value or
//   absent, and the write's version) and the write in flight when the
//   connection broke ("unknown": it may or may not have been applied). When
//   every thread has stopped it writes FILE (tmp + rename): PREV's
//   expectations (a resolved state file from --check --resolved) for keys
//   not written now, the new ones for the rest. Since the expectation of
//   every key is exact while the server is up (PREV is resolved, each key
//   has one writer), a DELETE that finds nothing where a value is expected,
//   or finds a value where none is, or a version that does not grow, is a
//   violation already here. With --large PCT:A-B, PCT % of the PUTs carry a
//   value of A-B bytes instead: above a message's bytes they go in
//   fragments, from --rendezvous-bytes as rendezvous PUTs (the server READs
//   the value), so that a kill lands amid those too.
//   SIGTERM ends the load at once (kill9_test.sh sends it once the server is
//   dead, instead of waiting out the operation timeout): a write still in
//   flight then is unknown, as if its connection had broken.
//   Exit: 0; 1 a violation or an unexpected error; 3 no write was
//   acknowledged (the server died before or right after the connects);
//   FILE is written in every case but a usage error.
//
// Check: kvrdma_crash_load --server ADDR:PORT --check FILE [--resolved OUT]
//   GETs every key 0..N-1 of FILE and a few never-written keys: a value must
//   be the last acknowledged one or the unknown write's; an absent key must
//   be expected absent (or the unknown write a DELETE). The version of an
//   acknowledged PUT is checked with a conditional PUT of the same value at
//   that version (it must commit); where the unknown PUT applied, the same
//   conditional PUT must fail with VersionMismatch and report a larger
//   version. OUT gets the resolved expectations (versions of the check's own
//   writes, unknown writes settled) for the next load's --state-in.
//   Exit: 0; 1 a violation (the first ones printed with details); 2 an
//   error (cannot connect, unexpected status).
#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kvrdma/client.h"
#include "kvrdma/sharded_client.h"

namespace kvrdma {
namespace {

// What the store must hold for one key.
struct KeyState {
  bool present = false;   // expected: present with `value` (else absent)
  std::string value;
  uint64_t version = 0;   // version of the last acknowledged (or resolved) write; 0: none known
  char unknown = '-';     // the write in flight when the connection broke: '-', 'P' (PUT) or 'D' (DELETE)
  std::string unknown_value;
  bool touched = false;   // written in this load (or listed in a state file)
};

struct StateFile {
  uint64_t keys = 0;
  std::vector<KeyState> states;  // indexed by key number
};

constexpr const char* kMagic = "kvrdma-crash-state-v1";

std::string KeyName(uint64_t i) {
  char b[32];
  std::snprintf(b, sizeof b, "ck-%06" PRIu64, i);
  return b;
}

bool ParseKeyName(const std::string& k, uint64_t* i) {
  if (k.size() < 4 || k.compare(0, 3, "ck-") != 0) return false;
  char* end = nullptr;
  *i = std::strtoull(k.c_str() + 3, &end, 10);
  return end && *end == '\0';
}

// Values never contain spaces (the state file is whitespace-separated).
bool ReadState(const std::string& path, StateFile* out, std::string* err) {
  std::ifstream f(path);
  if (!f) {
    *err = "cannot open " + path;
    return false;
  }
  std::string magic, keys_field;
  if (!(f >> magic >> keys_field) || magic != kMagic || keys_field.compare(0, 5, "keys=") != 0) {
    *err = path + ": not a state file";
    return false;
  }
  out->keys = std::strtoull(keys_field.c_str() + 5, nullptr, 10);
  out->states.assign(out->keys, KeyState{});
  std::string key, kind, value, uk, uvalue;
  uint64_t version = 0;
  while (f >> key >> kind >> value >> version >> uk >> uvalue) {
    uint64_t i = 0;
    if (!ParseKeyName(key, &i) || i >= out->keys || (kind != "P" && kind != "A") ||
        (uk != "-" && uk != "P" && uk != "D")) {
      *err = path + ": bad line for key " + key;
      return false;
    }
    KeyState& s = out->states[i];
    s.present = kind == "P";
    s.value = s.present ? value : std::string();
    s.version = version;
    s.unknown = uk[0];
    s.unknown_value = s.unknown == 'P' ? uvalue : std::string();
    s.touched = true;
  }
  if (!f.eof()) {
    *err = path + ": unreadable line";
    return false;
  }
  return true;
}

bool WriteState(const std::string& path, const StateFile& st) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return false;
    f << kMagic << " keys=" << st.keys << "\n";
    for (uint64_t i = 0; i < st.keys; ++i) {
      const KeyState& s = st.states[i];
      if (!s.touched) continue;
      f << KeyName(i) << ' ' << (s.present ? "P" : "A") << ' ' << (s.present ? s.value : "-") << ' ' << s.version
        << ' ' << s.unknown << ' ' << (s.unknown == 'P' ? s.unknown_value : "-") << "\n";
    }
    f.flush();
    if (!f) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

// Set by SIGTERM (lock-free, so the handler may store it).
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);
void OnSigterm(int) { g_stop.store(true, std::memory_order_relaxed); }

// Waits for the one operation in flight. The client completes it with
// Timeout after op_timeout_ms at the latest; past a generous bound it is a
// client bug (kStuck). kStopped: SIGTERM came first; a reply the server sent
// before it died has had 100 ms more to be polled.
enum class Waited { kDone, kStopped, kStuck };
Waited WaitOne(Client& c, int op_timeout_ms) {
  Op* done[1];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(op_timeout_ms + 30000);
  while (c.Wait(done, 50) == 0) {
    if (g_stop.load(std::memory_order_relaxed)) return c.Wait(done, 100) == 1 ? Waited::kDone : Waited::kStopped;
    if (std::chrono::steady_clock::now() > deadline) return Waited::kStuck;
  }
  return Waited::kDone;
}

struct LoadConfig {
  std::string server;
  uint64_t keys = 2000;
  std::string state, state_in;
  uint64_t seed = 1;
  unsigned threads = 4;
  size_t vmin = 16, vmax = 200;
  // --large: this share of PUTs (percent) has a value of lmin..lmax bytes
  // instead (in fragments above a message, rendezvous PUTs from
  // rendezvous_bytes).
  unsigned large_pct = 0;
  size_t lmin = 0, lmax = 0;
  int64_t rendezvous_bytes = -1;  // ClientOptions::rendezvous_bytes; -1: the library's default
  int op_timeout_ms = 3000;
};

struct ThreadTally {
  uint64_t puts = 0, deletes = 0, delete_misses = 0, unknown = 0;
  uint64_t large_puts = 0;  // acknowledged PUTs of more than a message's bytes (fragments or rendezvous)
  uint64_t rendezvous = 0;  // the client's rendezvous PUTs (ClientStats)
  bool connected = false;
  std::string stop_reason;
};

std::mutex g_print_mu;
std::atomic<bool> g_fatal{false};
// Threads whose expectations are final (RunLoad may write them out).
std::atomic<unsigned> g_finished{0};
std::atomic<uint64_t> g_violations{0};

void Report(const char* fmt, const std::string& a, const std::string& b = {}) {
  std::lock_guard<std::mutex> l(g_print_mu);
  std::fprintf(stderr, fmt, a.c_str(), b.c_str());
}

void LoadThread(const LoadConfig& cfg, unsigned t, StateFile* st, ThreadTally* tally) {
  // Declared before the client: after SIGTERM the write stays in flight
  // while the client lives (RunLoad may exit without joining).
  std::string key, value;
  Op op;
  std::unique_ptr<Client> c;
  struct Finished {
    ~Finished() { g_finished.fetch_add(1, std::memory_order_release); }
  } finished;  // counted before the client's destructor runs
  ClientOptions o;
  if (!ShardedClient::ParseServerAddress(cfg.server, &o.host, &o.port).ok()) return;
  o.op_timeout_ms = cfg.op_timeout_ms;
  o.connect_timeout_ms = 3000;
  o.max_in_flight = 2;
  o.put_mode = t % 2 == 0 ? PutMode::kSend : PutMode::kWriteImm;  // both request paths
  if (cfg.rendezvous_bytes >= 0) o.rendezvous_bytes = static_cast<uint32_t>(cfg.rendezvous_bytes);
  auto connected = Client::Connect(o);
  if (!connected.ok()) {
    tally->stop_reason = "connect: " + connected.status().ToString();
    return;
  }
  c = std::move(connected).value();
  tally->connected = true;
  Client& client = *c;
  std::mt19937_64 rng(cfg.seed * 7919 + t);
  const uint64_t mine = (cfg.keys - t + cfg.threads - 1) / cfg.threads;  // keys t, t+T, ... < keys
  std::uniform_int_distribution<uint64_t> pick(0, mine - 1);
  std::uniform_int_distribution<size_t> size(cfg.vmin, cfg.vmax);
  std::uniform_int_distribution<size_t> large(cfg.lmin, cfg.lmax);
  std::uniform_int_distribution<int> pct(0, 99);
  for (uint64_t seq = 1; !g_fatal.load(std::memory_order_relaxed); ++seq) {
    const uint64_t i = t + cfg.threads * pick(rng);
    KeyState& s = st->states[i];
    key = KeyName(i);
    op = Op{};
    op.key = key;
    if (pct(rng) < 20) {
      op.type = Op::Type::kDelete;
    } else {
      op.type = Op::Type::kPut;
      // Names (key, thread, sequence, seed); padded with a pattern that
      // depends on them, so a torn or mixed value cannot match another.
      char head[96];
      std::snprintf(head, sizeof head, "%" PRIx64 ".%u.%" PRIx64 ".%" PRIx64 ":", i, t, seq, cfg.seed);
      value = head;
      const size_t want = cfg.large_pct > 0 && static_cast<unsigned>(pct(rng)) < cfg.large_pct ? large(rng) : size(rng);
      for (size_t p = value.size(); p < want; ++p) value.push_back(static_cast<char>('a' + (p * 7 + seq) % 26));
      op.value = value;
    }
    Op* p = &op;
    if (client.Submit({&p, 1}) != 1) {
      Report("thread %s: Submit took nothing with nothing in flight%s\n", std::to_string(t));
      g_fatal = true;
      return;
    }
    const Waited w = WaitOne(client, cfg.op_timeout_ms);
    if (w == Waited::kStuck) {
      Report("thread %s: an operation did not complete within its timeout + 30 s%s\n", std::to_string(t));
      g_fatal = true;
      return;
    }
    s.touched = true;
    if (w == Waited::kStopped) {
      s.unknown = op.type == Op::Type::kPut ? 'P' : 'D';
      s.unknown_value = op.type == Op::Type::kPut ? value : std::string();
      ++tally->unknown;
      tally->stop_reason = "SIGTERM with a write in flight";
      return;
    }
    const Status& r = op.status;
    if (r.IsConnectionLost() || r.IsTimeout()) {
      s.unknown = op.type == Op::Type::kPut ? 'P' : 'D';
      s.unknown_value = op.type == Op::Type::kPut ? value : std::string();
      ++tally->unknown;
      tally->stop_reason = r.ToString();
      return;
    }
    if (op.type == Op::Type::kDelete && r.IsNotFound()) {
      ++tally->delete_misses;
      if (s.present) {
        Report("VIOLATION in load: DELETE %s found nothing, expected the acknowledged value %s\n", key, s.value);
        ++g_violations;
        s.present = false;  // follow the server from here on (only the first report matters)
      }
      continue;
    }
    if (!r.ok()) {
      Report("thread %s: unexpected status %s\n", std::to_string(t), r.ToString() + " (key " + key + ")");
      g_fatal = true;
      return;
    }
    if (op.version <= s.version) {
      Report("VIOLATION in load: key %s: %s\n", key,
             "a write acknowledged with version " + std::to_string(op.version) +
                 ", not above the version of its previous write " + std::to_string(s.version));
      ++g_violations;
    }
    tally->rendezvous = client.stats().rendezvous_puts;
    if (op.type == Op::Type::kPut) {
      s.present = true;
      s.value = value;
      ++tally->puts;
      if (value.size() > 4096) ++tally->large_puts;
    } else {
      if (!s.present) {
        Report("VIOLATION in load: DELETE %s found a value, expected the key absent%s\n", key);
        ++g_violations;
      }
      s.present = false;
      s.value.clear();
      ++tally->deletes;
    }
    s.version = op.version;
  }
}

int RunLoad(const LoadConfig& cfg) {
  StateFile st;
  if (!cfg.state_in.empty()) {
    std::string err;
    if (!ReadState(cfg.state_in, &st, &err)) {
      std::fprintf(stderr, "kvrdma_crash_load: --state-in: %s\n", err.c_str());
      return 2;
    }
    if (st.keys != cfg.keys) {
      std::fprintf(stderr, "kvrdma_crash_load: --state-in has keys=%" PRIu64 ", --keys is %" PRIu64 "\n", st.keys,
                   cfg.keys);
      return 2;
    }
    for (const KeyState& s : st.states) {
      if (s.unknown != '-') {
        std::fprintf(stderr, "kvrdma_crash_load: --state-in has unresolved writes: pass a --check --resolved file\n");
        return 2;
      }
    }
  } else {
    st.keys = cfg.keys;
    st.states.assign(cfg.keys, KeyState{});
  }
  std::vector<ThreadTally> tally(cfg.threads);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < cfg.threads; ++t) threads.emplace_back(LoadThread, std::cref(cfg), t, &st, &tally[t]);
  // Every thread's expectations final; after SIGTERM the threads are not
  // joined (a client with a write in flight to a dead server may take its
  // time to close): the process ends with _Exit below.
  while (g_finished.load(std::memory_order_acquire) < cfg.threads) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const bool stopped = g_stop.load(std::memory_order_relaxed);
  if (!stopped) {
    for (auto& th : threads) th.join();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!WriteState(cfg.state, st)) {
    std::fprintf(stderr, "kvrdma_crash_load: cannot write %s\n", cfg.state.c_str());
    return 2;
  }
  uint64_t puts = 0, deletes = 0, misses = 0, unknown = 0, large_puts = 0, rendezvous = 0;
  unsigned connected = 0;
  for (const ThreadTally& x : tally) {
    puts += x.puts, deletes += x.deletes, misses += x.delete_misses, unknown += x.unknown;
    large_puts += x.large_puts, rendezvous += x.rendezvous;
    connected += x.connected;
  }
  std::printf("load: threads %u (%u connected), acked writes %" PRIu64 " (puts %" PRIu64 ", deletes %" PRIu64
              ", deletes of absent keys %" PRIu64 "), unknown %" PRIu64 ", %.2f s, violations %" PRIu64
              ", large puts %" PRIu64 ", rendezvous puts %" PRIu64 "\n",
              cfg.threads, connected, puts + deletes + misses, puts, deletes, misses, unknown, secs,
              g_violations.load(), large_puts, rendezvous);
  for (unsigned t = 0; t < cfg.threads; ++t) std::printf("  thread %u stopped: %s\n", t, tally[t].stop_reason.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  const int rc = g_fatal || g_violations > 0 ? 1 : puts + deletes + misses == 0 ? 3 : 0;
  if (stopped) std::_Exit(rc);
  return rc;
}

// --- check

struct Pending {
  uint64_t i = 0;
  std::string key, value, got;
  Op op;
  enum { kVerifyVersion, kLearnVersion } purpose = kVerifyVersion;
};

// Runs every op in `v` with up to `depth` in flight. False on a client bug.
bool RunAll(Client& c, std::vector<Pending>& v, size_t depth, int op_timeout_ms) {
  size_t next = 0, in_flight = 0;
  Op* done[64];
  auto last = std::chrono::steady_clock::now();
  while (next < v.size() || in_flight > 0) {
    while (next < v.size() && in_flight < depth) {
      Op* p = &v[next].op;
      if (c.Submit({&p, 1}) != 1) break;
      ++next, ++in_flight;
    }
    const size_t n = c.Wait(done, 1000);
    in_flight -= n;
    if (n > 0) {
      last = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - last > std::chrono::milliseconds(op_timeout_ms + 30000)) {
      return false;
    }
  }
  return true;
}

int RunCheck(const std::string& server, const std::string& path, const std::string& resolved, int op_timeout_ms,
             int64_t rendezvous_bytes) {
  StateFile st;
  std::string err;
  if (!ReadState(path, &st, &err)) {
    std::fprintf(stderr, "kvrdma_crash_load: --check: %s\n", err.c_str());
    return 2;
  }
  ClientOptions o;
  if (!ShardedClient::ParseServerAddress(server, &o.host, &o.port).ok()) {
    std::fprintf(stderr, "kvrdma_crash_load: bad --server %s\n", server.c_str());
    return 2;
  }
  o.op_timeout_ms = op_timeout_ms;
  o.max_in_flight = 32;
  if (rendezvous_bytes >= 0) o.rendezvous_bytes = static_cast<uint32_t>(rendezvous_bytes);
  auto c = Client::Connect(o);
  if (!c.ok()) {
    std::fprintf(stderr, "kvrdma_crash_load: connect: %s\n", c.status().ToString().c_str());
    return 2;
  }
  Client& client = **c;
  constexpr uint64_t kNever = 16;
  // Phase 1: GET every key of the range and the never-written ones.
  std::vector<Pending> gets(st.keys + kNever);
  for (uint64_t i = 0; i < gets.size(); ++i) {
    Pending& g = gets[i];
    g.i = i;
    g.key = i < st.keys ? KeyName(i) : "never-" + std::to_string(i - st.keys);
    g.op.type = Op::Type::kGet;
    g.op.key = g.key;
    g.op.result = &g.got;
  }
  if (!RunAll(client, gets, 16, op_timeout_ms)) {
    std::fprintf(stderr, "kvrdma_crash_load: GETs did not complete\n");
    return 2;
  }
  uint64_t violations = 0, expected_present = 0, expected_absent = 0, unknown_applied = 0, unknown_not_applied = 0,
           never_checked = 0;
  auto violation = [&](const std::string& key, const std::string& what) {
    if (++violations <= 10) std::printf("VIOLATION: key %s: %s\n", key.c_str(), what.c_str());
  };
  auto describe = [](const KeyState& s) {
    std::string d = s.present ? "acked PUT '" + s.value + "' version " + std::to_string(s.version)
                              : "absent (last acked version " + std::to_string(s.version) + ")";
    if (s.unknown == 'P') d += ", unknown PUT '" + s.unknown_value + "'";
    if (s.unknown == 'D') d += ", unknown DELETE";
    return d;
  };
  // Phase 2 (conditional PUTs of the value found) is planned here.
  std::vector<Pending> puts;
  puts.reserve(st.keys);
  uint64_t get_errors = 0;
  for (Pending& g : gets) {
    const Status& r = g.op.status;
    if (!r.ok() && !r.IsNotFound()) {
      // Not a verdict on durability by itself, but a recovered key that
      // cannot be read is a bug: say what it should hold, and read it once
      // more on its own.
      std::string again;
      const Status r2 = client.Get(g.key, &again);
      std::fprintf(stderr, "kvrdma_crash_load: GET %s: %s; expected %s; read again alone: %s%s\n", g.key.c_str(),
                   r.ToString().c_str(),
                   g.i < st.keys && st.states[g.i].touched ? describe(st.states[g.i]).c_str() : "never written",
                   r2.ToString().c_str(), r2.ok() ? (" '" + again + "'").c_str() : "");
      ++get_errors;
      continue;
    }
    if (g.i >= st.keys || !st.states[g.i].touched) {
      ++never_checked;
      if (r.ok()) violation(g.key, "never written, but GET found '" + g.got + "'");
      continue;
    }
    KeyState& s = st.states[g.i];
    (s.present ? expected_present : expected_absent)++;
    if (r.IsNotFound()) {
      if (!s.present) {
        if (s.unknown != '-') ++unknown_not_applied;  // an unknown DELETE of an absent key changes nothing
      } else if (s.unknown == 'D') {
        ++unknown_applied;  // the version of the tombstone is not known: keep the acked one as a lower bound
      } else {
        violation(g.key, "GET found nothing; expected " + describe(s));
        continue;
      }
      s.present = false;
      s.value.clear();
      s.unknown = '-';
      continue;
    }
    Pending p;
    p.i = g.i;
    p.key = g.key;
    p.value = g.got;
    p.op.type = Op::Type::kPut;
    if (s.present && g.got == s.value) {
      if (s.unknown != '-') ++unknown_not_applied;
      p.purpose = Pending::kVerifyVersion;
      p.op.if_version = s.version;
    } else if (s.unknown == 'P' && g.got == s.unknown_value) {
      ++unknown_applied;
      p.purpose = Pending::kLearnVersion;
      p.op.if_version = s.present ? s.version : kIfAbsent;
    } else {
      violation(g.key, "GET found '" + g.got + "' (stale or never written); expected " + describe(s));
      continue;
    }
    puts.push_back(std::move(p));
  }
  if (get_errors > 0) {
    std::printf("check: %" PRIu64 " GETs failed (see above), violations so far %" PRIu64 "\n", get_errors, violations);
    return violations > 0 ? 1 : 2;
  }
  for (Pending& p : puts) {  // the views point into the vector's final elements
    p.op.key = p.key;
    p.op.value = p.value;
  }
  if (!RunAll(client, puts, 16, op_timeout_ms)) {
    std::fprintf(stderr, "kvrdma_crash_load: conditional PUTs did not complete\n");
    return 2;
  }
  uint64_t versions_verified = 0;
  for (Pending& p : puts) {
    KeyState& s = st.states[p.i];
    const Status& r = p.op.status;
    if (p.purpose == Pending::kVerifyVersion) {
      if (r.IsVersionMismatch()) {
        violation(p.key, "value found, but not at its acknowledged version: the server has version " +
                             std::to_string(p.op.version) + "; expected " + describe(s));
        continue;
      }
      if (!r.ok()) {
        std::fprintf(stderr, "kvrdma_crash_load: conditional PUT %s: %s\n", p.key.c_str(), r.ToString().c_str());
        return 2;
      }
      ++versions_verified;
    } else {
      if (r.ok()) {
        violation(p.key, "the unknown PUT's value was found, but a conditional PUT at the version before it "
                         "committed; expected " + describe(s));
        continue;
      }
      if (!r.IsVersionMismatch()) {
        std::fprintf(stderr, "kvrdma_crash_load: conditional PUT %s: %s\n", p.key.c_str(), r.ToString().c_str());
        return 2;
      }
    }
    if (p.op.version <= s.version) {
      violation(p.key, "version " + std::to_string(p.op.version) + " reported, not above the acknowledged " +
                           std::to_string(s.version) + "; expected " + describe(s));
      continue;
    }
    s.present = true;
    s.value = p.value;
    s.version = p.op.version;
    s.unknown = '-';
  }
  std::printf("check: keys %" PRIu64 " (expected present %" PRIu64 ", absent %" PRIu64
              "), acked versions verified %" PRIu64 ", unknown applied %" PRIu64 " / not applied %" PRIu64
              ", never-written keys absent-checked %" PRIu64 ", violations %" PRIu64 "\n",
              expected_present + expected_absent, expected_present, expected_absent, versions_verified,
              unknown_applied, unknown_not_applied, never_checked, violations);
  std::fflush(stdout);
  if (violations > 0) return 1;
  if (!resolved.empty() && !WriteState(resolved, st)) {
    std::fprintf(stderr, "kvrdma_crash_load: cannot write %s\n", resolved.c_str());
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace kvrdma

int main(int argc, char** argv) {
  kvrdma::LoadConfig cfg;
  std::string check, resolved, value_size = "16-200", large_size;
  CLI::App app{"kvrdma_crash_load: writes until the server dies and records what was acknowledged (load), "
               "or checks a restarted server against that record (--check)"};
  app.add_option("--server", cfg.server, "ADDR:PORT")->required();
  app.add_option("--keys", cfg.keys, "Keys ck-0 .. ck-(N-1)")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  app.add_option("--state", cfg.state, "Load: where the expectations go");
  app.add_option("--state-in", cfg.state_in, "Load: start from this resolved state file (a --check --resolved OUT)");
  app.add_option("--seed", cfg.seed, "Load: random seed (also part of every value)")->capture_default_str();
  app.add_option("--threads", cfg.threads, "Load: threads, one connection each")
      ->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--value-size", value_size, "Load: value sizes A-B (a value is never shorter than its name)")
      ->capture_default_str();
  app.add_option("--large", large_size,
                 "Load: PCT:A-B, PCT % of the PUTs with a value of A-B bytes instead (e.g. 10:3000-60000: "
                 "fragmented and rendezvous PUTs)");
  app.add_option("--rendezvous-bytes", cfg.rendezvous_bytes,
                 "Load and check: ClientOptions::rendezvous_bytes (PUTs of at least this many bytes are "
                 "rendezvous PUTs; 0: none; default: the library's)");
  app.add_option("--op-timeout-ms", cfg.op_timeout_ms, "Per operation")->capture_default_str();
  app.add_option("--check", check, "Check the server against this state file");
  app.add_option("--resolved", resolved, "Check: write the resolved expectations here (input of the next load)");
  CLI11_PARSE(app, argc, argv);
  {
    std::string host;
    uint16_t port = 0;
    if (!kvrdma::ShardedClient::ParseServerAddress(cfg.server, &host, &port).ok()) {
      std::fprintf(stderr, "kvrdma_crash_load: bad --server %s (ADDR:PORT)\n", cfg.server.c_str());
      return 2;
    }
  }
  if (!check.empty()) return kvrdma::RunCheck(cfg.server, check, resolved, cfg.op_timeout_ms, cfg.rendezvous_bytes);
  struct sigaction sa = {};
  sa.sa_handler = kvrdma::OnSigterm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  if (cfg.state.empty()) {
    std::fprintf(stderr, "kvrdma_crash_load: --state FILE (load) or --check FILE is required\n");
    return 2;
  }
  if (std::sscanf(value_size.c_str(), "%zu-%zu", &cfg.vmin, &cfg.vmax) != 2 || cfg.vmin > cfg.vmax) {
    std::fprintf(stderr, "kvrdma_crash_load: --value-size A-B\n");
    return 2;
  }
  if (!large_size.empty() && (std::sscanf(large_size.c_str(), "%u:%zu-%zu", &cfg.large_pct, &cfg.lmin, &cfg.lmax) != 3 ||
                              cfg.large_pct > 100 || cfg.lmin > cfg.lmax)) {
    std::fprintf(stderr, "kvrdma_crash_load: --large PCT:A-B (PCT 0..100, A <= B)\n");
    return 2;
  }
  if (cfg.threads > cfg.keys) cfg.threads = static_cast<unsigned>(cfg.keys);
  return kvrdma::RunLoad(cfg);
}
