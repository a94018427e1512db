// kvbench: YCSB-style load generator for kvrdma.
//
// Each thread owns one Client per server and keeps --depth operations in
// flight with the asynchronous API (closed loop), or starts operations at
// --rate (open loop: latency counts from each operation's intended start, so
// a stall is not hidden). Keys and values are formatted into per-thread
// buffers up front: the measured loop allocates nothing.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/version.h"
#include "bench/kvbench/histogram.h"
#include "bench/kvbench/keygen.h"
#include "bench/kvbench/placement.h"
#include "kvrdma/client.h"
#include "kvrdma/sharded_client.h"

namespace kvrdma::bench {
namespace {

using Clock = std::chrono::steady_clock;
enum OpKind { kRead = 0, kUpdate, kInsert, kRmw, kKinds };
const char* const kKindNames[kKinds] = {"read", "update", "insert", "rmw"};

struct Config {
  std::vector<std::string> servers{"127.0.0.1"};
  std::string workload = "C";
  double read_ratio = -1;
  uint64_t keys = 100000;
  size_t key_size = 16;
  std::string value_size = "100";
  size_t vmin = 100, vmax = 100;
  std::string distribution;  // default from the workload
  double theta = 0.99;
  unsigned threads = 1, depth = 1;
  double duration = 5, warmup = 1;
  uint64_t ops = 0;
  bool preload = false;
  double rate = 0;
  std::string put_mode = "send";
  std::string get_into = "string";  // where a GET's value goes: string, buffer or registered
  std::string put_from = "string";  // where PUT values come from: string or registered
  int64_t location_cache = -1;  // -1: the client's default
  int64_t busy_poll_us = -1;    // -1: the client's default
  int64_t busy_poll_max_us = -1;  // -1: the client's default
  int64_t rendezvous_bytes = -1;  // -1: the client's default (ClientOptions::rendezvous_bytes)
  int64_t rendezvous_copy_bytes = -1;  // -1: the client's default (ClientOptions::rendezvous_copy_bytes)
  bool spin = false;            // poll without sleeping even with nothing to start
  // Threads poll while every operation is in flight: --spin, or several
  // servers (a Wait on one would delay the others' completions).
  bool PollsWhileWaiting() const { return spin || servers.size() > 1; }
  std::string json;
  // Derived mix.
  double p_read = 1, p_update = 0, p_insert = 0, p_rmw = 0;
};

// One worker's counters: written by that worker only (a relaxed load and
// store, no read-modify-write, on its own cache lines), read by the reporter.
// So an operation touches no atomic another thread writes.
struct alignas(64) Tally {
  Histogram hist[kKinds];
  std::atomic<uint64_t> count[kKinds] = {}, errors[kKinds] = {}, misses{0};
  std::atomic<uint64_t> progress{0}, progress_errors{0};  // every completed op, warm-up included
  std::string first_error;  // the worker's first failed operation; read only after it has joined
  static void Bump(std::atomic<uint64_t>& a) { a.store(a.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
};

struct Shared {
  Shared(const Config& c) : cfg(c), tally(std::make_unique<Tally[]>(c.threads)) {}
  const Config& cfg;
  std::unique_ptr<Zipfian> zipf;
  std::atomic<uint64_t> inserted;  // keys 0..inserted-1 exist (D: grows; written by inserts only)
  std::atomic<bool> measuring{false}, stop{false};
  std::atomic<unsigned> finished{0};  // --ops: workers whose share is done
  std::unique_ptr<Tally[]> tally;  // one per worker
  template <typename F>
  uint64_t Sum(F f) const {
    uint64_t n = 0;
    for (unsigned i = 0; i < cfg.threads; ++i) n += f(tally[i]).load(std::memory_order_relaxed);
    return n;
  }
  void MergeHist(int k, Histogram* into) const {
    for (unsigned i = 0; i < cfg.threads; ++i) into->Merge(tally[i].hist[k]);
  }
};

struct OpState {
  Op op;
  OpKind kind = kRead;
  int server = 0;
  Clock::time_point start;
  bool rmw_write = false;
  std::string key, result;
  std::span<std::byte> buffer;  // --get-into buffer|registered: this op state's part of the worker's
};

class Worker {
 public:
  Worker(Shared& sh, unsigned index)
      : sh_(sh),
        cfg_(sh.cfg),
        tally_(sh.tally[index]),
        // --ops: this worker's share (no shared counter per operation).
        budget_(cfg_.ops / cfg_.threads + (index < cfg_.ops % cfg_.threads ? 1 : 0)),
        rng_(0x9e3779b9u * (index + 1)) {
    // --put-from registered: a slot of vmax bytes per op state, so that a
    // PUT of a fixed size repeats its bytes and its value's registration is
    // kept (Client::RegisterMemory); else values start anywhere.
    values_.resize(cfg_.put_from == "registered" ? size_t{cfg_.depth} * cfg_.vmax : cfg_.vmax + 1);
    for (auto& c : values_) c = static_cast<char>('a' + rng_() % 26);
    op_states_.resize(cfg_.depth);
    if (cfg_.get_into != "string") buffers_.resize(size_t{cfg_.depth} * cfg_.vmax);
    for (size_t i = 0; i < op_states_.size(); ++i) {
      OpState& s = op_states_[i];
      s.key.assign(cfg_.key_size, '0');
      if (cfg_.get_into == "string") {
        s.op.result = &s.result;
        s.result.reserve(cfg_.vmax);
      } else {
        s.buffer = std::span(buffers_).subspan(i * cfg_.vmax, cfg_.vmax);
        s.op.buffer = s.buffer;
      }
    }
    if (cfg_.rate > 0) interval_ = std::chrono::duration<double>(cfg_.threads / cfg_.rate);
  }

  // Adds this worker's client counters (warm-up and preload included) to *t.
  void AddClientStats(ClientStats* t) const {
    for (const auto& c : clients_) {
      const ClientStats& s = c->stats();
      t->gets += s.gets;
      t->get_rounds += s.get_rounds;
      t->get_retries += s.get_retries;
      t->reads += s.reads;
      t->cache_hits += s.cache_hits;
      t->cache_stale += s.cache_stale;
      t->direct_reads += s.direct_reads;
      t->rendezvous_puts += s.rendezvous_puts;
      t->rendezvous_registrations += s.rendezvous_registrations;
      t->rendezvous_copies += s.rendezvous_copies;
      t->rendezvous_fallbacks += s.rendezvous_fallbacks;
      t->puts += s.puts;
      t->messages += s.messages;
      t->get_hits += s.get_hits;
      t->get_hit_reads += s.get_hit_reads;
      t->get_misses += s.get_misses;
      t->get_miss_rounds += s.get_miss_rounds;
    }
  }

  Status Connect() {
    for (const std::string& s : cfg_.servers) {
      ClientOptions o;
      KVRDMA_RETURN_IF_ERROR(ShardedClient::ParseServerAddress(s, &o.host, &o.port));
      o.put_mode = cfg_.put_mode == "write-imm" ? PutMode::kWriteImm : PutMode::kSend;
      o.max_in_flight = std::min<uint32_t>(cfg_.depth, 64);
      if (cfg_.location_cache >= 0) o.location_cache_entries = static_cast<size_t>(cfg_.location_cache);
      if (cfg_.busy_poll_us >= 0) o.busy_poll_us = static_cast<uint32_t>(cfg_.busy_poll_us);
      if (cfg_.busy_poll_max_us >= 0) o.busy_poll_max_us = static_cast<uint32_t>(cfg_.busy_poll_max_us);
      if (cfg_.rendezvous_bytes >= 0) o.rendezvous_bytes = static_cast<uint32_t>(cfg_.rendezvous_bytes);
      if (cfg_.rendezvous_copy_bytes >= 0) o.rendezvous_copy_bytes = static_cast<uint32_t>(cfg_.rendezvous_copy_bytes);
      o.op_timeout_ms = 10000;
      auto c = Client::Connect(o);
      if (!c.ok()) return Status(c.status().code(), "connecting to " + s + ": " + c.status().message());
      clients_.push_back(std::move(c).value());
      started_ops_.emplace_back().reserve(cfg_.depth);
      if (cfg_.get_into == "registered") {
        Status st = clients_.back()->RegisterMemory(buffers_);
        if (!st.ok()) return Status(st.code(), "--get-into registered: " + st.message());
      }
      if (cfg_.put_from == "registered") {
        Status st = clients_.back()->RegisterMemory(std::as_writable_bytes(std::span(values_.data(), values_.size())));
        if (!st.ok()) return Status(st.code(), "--put-from registered: " + st.message());
      }
    }
    return Status::OK();
  }

  // PUTs keys [from, to) with the worker's depth.
  Status Preload(uint64_t from, uint64_t to) {
    uint64_t next = from, done = 0, total = to - from;
    std::vector<Op*> fin(cfg_.depth);
    std::vector<OpState*> idle;
    for (auto& s : op_states_) idle.push_back(&s);
    while (done < total) {
      while (!idle.empty() && next < to) {
        OpState* s = idle.back();
        Prepare(*s, kUpdate, next++);
        Op* op = &s->op;
        if (clients_[s->server]->Submit({&op, 1}) == 0) {
          --next;
          break;
        }
        idle.pop_back();
      }
      for (auto& c : clients_) {
        size_t n = c->Wait(fin, 10);
        for (size_t i = 0; i < n; ++i) {
          if (!fin[i]->status.ok()) return fin[i]->status;
          idle.push_back(reinterpret_cast<OpState*>(fin[i]->user));
          ++done;
        }
      }
    }
    return Status::OK();
  }

  void Run() {
    std::vector<Op*> fin(cfg_.depth);
    std::vector<OpState*> idle;
    for (auto& s : op_states_) idle.push_back(&s);
    next_start_ = Clock::now();
    while (!sh_.stop.load(std::memory_order_relaxed)) {
      auto now = Clock::now();
      while (!idle.empty()) {
        if (cfg_.rate > 0 && next_start_ > now) break;  // open loop: not yet
        if (cfg_.ops != 0 && started_ >= budget_) break;  // this worker's share is done
        ++started_;
        OpState* s = idle.back();
        idle.pop_back();
        Start(*s, cfg_.rate > 0 ? next_start_ : now);
        if (cfg_.rate > 0) next_start_ += std::chrono::duration_cast<Clock::duration>(interval_);
      }
      SubmitStarted();
      // Nothing to start until something completes (every op state in flight, or
      // this worker's --ops share started): wait like the synchronous API
      // does, polling --busy-poll-us and then sleeping until a completion.
      // Spinning on Poll here kept a vCPU busy that kvserver and Soft-RoCE
      // needed (docs/PERFORMANCE.md, "The load generator's own polling, and
      // one doorbell per batch"); Config::PollsWhileWaiting says when not.
      const bool can_start = !idle.empty() && !(cfg_.ops != 0 && started_ >= budget_);
      const bool wait = !can_start && !cfg_.PollsWhileWaiting();
      for (auto& c : clients_) {
        size_t n = wait ? c->Wait(fin, 10) : c->Poll(fin);
        for (size_t i = 0; i < n; ++i) {
          OpState* s = reinterpret_cast<OpState*>(fin[i]->user);
          if (Complete(*s)) idle.push_back(s);
        }
      }
      // --ops: this worker's share started and completed; the last worker
      // to get there stops the run.
      if (cfg_.ops != 0 && started_ >= budget_ && idle.size() == op_states_.size()) {
        if (sh_.finished.fetch_add(1) + 1 == cfg_.threads) sh_.stop = true;
        break;
      }
    }
    for (auto& c : clients_) {  // drain
      while (c->in_flight() > 0) c->Wait(fin, 100);
    }
  }

 private:
  uint64_t ChooseKey(OpKind kind) {
    uint64_t n = sh_.inserted.load(std::memory_order_relaxed);
    if (kind == kInsert) return sh_.inserted.fetch_add(1);
    if (cfg_.distribution == "uniform") return rng_() % n;
    uint64_t r = sh_.zipf->Next(rng_) % n;
    if (cfg_.distribution == "latest") return n - 1 - r;
    return Scramble(r, n);
  }
  void Prepare(OpState& s, OpKind kind, uint64_t id) {
    FormatKey(id, cfg_.key_size, s.key.data());
    s.kind = kind;
    s.op.user = &s;
    s.op.key = s.key;
    // The placement ShardedClient and kvctl use: a preloaded key is where they look.
    s.server = static_cast<int>(ServerForKey(s.op.key, clients_.size()));
    size_t vs = cfg_.vmin == cfg_.vmax ? cfg_.vmin : cfg_.vmin + rng_() % (cfg_.vmax - cfg_.vmin + 1);
    const size_t at = cfg_.put_from == "registered" ? static_cast<size_t>(&s - op_states_.data()) * cfg_.vmax
                                                    : rng_() % (values_.size() - vs);
    s.op.value = std::string_view(values_.data() + at, vs);
    s.op.type = (kind == kRead || (kind == kRmw && !s.rmw_write)) ? Op::Type::kGet : Op::Type::kPut;
  }
  void Start(OpState& s, Clock::time_point start) {
    double u = std::uniform_real_distribution<double>(0, 1)(rng_);
    OpKind kind = u < cfg_.p_read ? kRead
                  : u < cfg_.p_read + cfg_.p_update ? kUpdate
                  : u < cfg_.p_read + cfg_.p_update + cfg_.p_insert ? kInsert : kRmw;
    s.rmw_write = false;
    Prepare(s, kind, ChooseKey(kind));
    // Open loop: from the scheduled start (queueing included). Closed loop:
    // from the submit, so that choosing and formatting the key (zipfian
    // sampling calls pow()) is not counted as the store's latency.
    s.start = cfg_.rate > 0 ? start : Clock::now();
    started_ops_[s.server].push_back(&s.op);
  }
  // Submits the operations Start prepared, together per server: the client
  // sends them with one doorbell.
  void SubmitStarted() {
    for (size_t i = 0; i < clients_.size(); ++i) {
      std::vector<Op*>& ops = started_ops_[i];
      for (size_t taken = 0; taken < ops.size();) {
        taken += clients_[i]->Submit(std::span<Op* const>(ops).subspan(taken));
      }
      ops.clear();
    }
  }
  void Submit(OpState& s) {
    Op* op = &s.op;
    while (clients_[s.server]->Submit({&op, 1}) == 0) {
    }
  }
  // Returns true when the op state is free again.
  bool Complete(OpState& s) {
    const Status& st = s.op.status;
    if (s.kind == kRmw && !s.rmw_write && (st.ok() || st.IsNotFound())) {
      s.rmw_write = true;  // read done: write the same key
      s.op.type = Op::Type::kPut;
      Submit(s);
      return false;
    }
    Tally::Bump(tally_.progress);
    if (!st.ok() && !st.IsNotFound()) {
      Tally::Bump(tally_.progress_errors);
      if (tally_.first_error.empty()) tally_.first_error = std::string(kKindNames[s.kind]) + ": " + st.ToString();
    }
    if (sh_.measuring.load(std::memory_order_relaxed)) {
      uint64_t ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s.start).count());
      tally_.hist[s.kind].Record(ns);
      Tally::Bump(tally_.count[s.kind]);
      if (st.IsNotFound()) {
        Tally::Bump(tally_.misses);
      } else if (!st.ok()) {
        Tally::Bump(tally_.errors[s.kind]);
      }
    }
    return true;
  }

  Shared& sh_;
  const Config& cfg_;
  Tally& tally_;
  const uint64_t budget_;  // --ops: operations this worker starts
  uint64_t started_ = 0;
  std::mt19937_64 rng_;
  std::string values_;
  std::vector<OpState> op_states_;
  std::vector<std::byte> buffers_;  // --get-into buffer|registered: depth x the largest value
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::vector<Op*>> started_ops_;  // per server: started, not yet submitted (<= depth)
  std::chrono::duration<double> interval_{0};
  Clock::time_point next_start_;
};

Status SetMix(Config& c) {
  std::string w = c.workload;
  if (c.read_ratio >= 0) {
    if (c.read_ratio > 1) return Status::InvalidArgument("--read-ratio must be 0..1");
    c.p_read = c.read_ratio;
    c.p_update = 1 - c.read_ratio;
    w = "custom";
  } else if (w == "A") {
    c.p_read = 0.5, c.p_update = 0.5;
  } else if (w == "B") {
    c.p_read = 0.95, c.p_update = 0.05;
  } else if (w == "C") {
    c.p_read = 1;
  } else if (w == "D") {
    c.p_read = 0.95, c.p_insert = 0.05;
  } else if (w == "F") {
    c.p_read = 0.5, c.p_rmw = 0.5;
  } else {
    return Status::InvalidArgument("--workload must be A, B, C, D or F");
  }
  if (c.p_update + c.p_insert + c.p_rmw > 0 || c.p_read < 1) c.p_read = std::max(0.0, c.p_read);
  if (c.distribution.empty()) c.distribution = w == "D" ? "latest" : "zipfian";
  auto dash = c.value_size.find('-');
  try {
    c.vmin = std::stoul(c.value_size.substr(0, dash));
    c.vmax = dash == std::string::npos ? c.vmin : std::stoul(c.value_size.substr(dash + 1));
  } catch (...) {
    return Status::InvalidArgument("--value-size must be B or MIN-MAX");
  }
  if (c.vmin > c.vmax) return Status::InvalidArgument("--value-size MIN is above MAX");
  if (c.key_size < 8 || c.key_size > 1023) return Status::InvalidArgument("--key-size must be 8..1023");
  if (c.keys == 0) return Status::InvalidArgument("--keys must be > 0");
  return Status::OK();
}

}  // namespace
}  // namespace kvrdma::bench

// Set by SIGINT/SIGTERM (lock-free: a signal handler may store it).
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

int main(int argc, char** argv) {
  using namespace kvrdma::bench;
  Config cfg;
  CLI::App app{"kvbench: YCSB-style load generator for kvrdma. Each thread keeps --depth operations in flight\n"
               "(or starts them at --rate), prints a progress line every second and a table at the end."};
  app.set_version_flag("--version", kvrdma::VersionLine("kvbench"));
  app.add_option("-s,--server", cfg.servers, "kvserver HOST[:PORT] (repeatable: keys are spread by jump hash)")
      ->capture_default_str();
  app.add_option("-w,--workload", cfg.workload,
                 "YCSB mix: A 50/50 read/update, B 95/5, C read-only, D 95% read / 5% insert (latest),\n"
                 "F 50% read / 50% read-modify-write")
      ->capture_default_str()->check(CLI::IsMember({"A", "B", "C", "D", "F"}));
  app.add_option("--read-ratio", cfg.read_ratio, "Instead of --workload: reads with probability R, else updates");
  app.add_option("--keys", cfg.keys, "Number of keys")->capture_default_str();
  app.add_option("--key-size", cfg.key_size, "Key length in bytes (8..1023)")->capture_default_str();
  app.add_option("--value-size", cfg.value_size, "Value length in bytes, or MIN-MAX (uniform)")->capture_default_str();
  app.add_option("--distribution", cfg.distribution, "uniform, zipfian or latest (default: latest for D, else zipfian)")
      ->check(CLI::IsMember({"uniform", "zipfian", "latest"}));
  app.add_option("--zipf-theta", cfg.theta, "Zipfian skew")->capture_default_str()->check(CLI::Range(0.01, 0.999));
  app.add_option("-t,--threads", cfg.threads, "Threads (one connection each per server)")->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("-d,--depth", cfg.depth, "Operations in flight per thread")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--duration", cfg.duration,
                 "Seconds to measure (after the warm-up); SIGINT or SIGTERM ends the run sooner, with its summary")
      ->capture_default_str();
  app.add_option("--ops", cfg.ops, "Stop after this many operations instead of --duration");
  app.add_option("--warmup", cfg.warmup, "Seconds of load before measuring")->capture_default_str();
  app.add_flag("--preload", cfg.preload, "PUT every key before the run");
  app.add_option("--rate", cfg.rate, "Open loop: operations per second in total (0: closed loop)")->capture_default_str();
  app.add_option("--get-into", cfg.get_into,
                 "Where a GET's value goes: string (a std::string per operation), buffer (the caller's memory: "
                 "one copy), registered (the caller's memory, registered with RegisterMemory: no copy)")
      ->capture_default_str()
      ->check(CLI::IsMember({"string", "buffer", "registered"}));
  app.add_option("--put-from", cfg.put_from,
                 "Where PUT values come from: string (the worker's own memory, values anywhere in it),\n"
                 "registered (memory registered with RegisterMemory, a slot per operation in flight: the\n"
                 "client keeps a rendezvous PUT value's registration for the next PUT of the same bytes)")
      ->capture_default_str()
      ->check(CLI::IsMember({"string", "registered"}));
  app.add_option("--put-mode", cfg.put_mode, "send or write-imm")->capture_default_str()
      ->check(CLI::IsMember({"send", "write-imm"}));
  app.add_option("--rendezvous-bytes", cfg.rendezvous_bytes,
                 "PUTs of values of at least this many bytes are rendezvous PUTs, and of half as many while\n"
                 "other operations of the client are in flight (0: never; default: the library's,\n"
                 "ClientOptions::rendezvous_bytes, 128 KiB)");
  app.add_option("--rendezvous-copy-bytes", cfg.rendezvous_copy_bytes,
                 "Rendezvous values of at most this many bytes outside registered memory are copied into a\n"
                 "buffer registered at connect instead of registered for their PUT (0: never; default: the\n"
                 "library's, ClientOptions::rendezvous_copy_bytes)")
      ->check(CLI::Range(int64_t{0}, int64_t{64} << 20));
  app.add_option("--location-cache", cfg.location_cache,
                 "Entries in each client's location cache (0: off; default: the library's default, 4096)");
  app.add_option("--busy-poll-us", cfg.busy_poll_us,
                 "Microseconds each client polls after a completion before it sleeps until the next\n"
                 "(0: sleep at once; default: the library's default, 50)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--busy-poll-max-us", cfg.busy_poll_max_us,
                 "The longest a client's poll grows to while completions keep arriving just after it\n"
                 "ended (at or below --busy-poll-us: it never grows; default: the library's default, 50)")
      ->check(CLI::Range(0, 1000000));
  app.add_flag("--spin", cfg.spin,
               "Poll without sleeping even when every operation is in flight (a thread at 100% CPU, as\n"
               "perftest does; default: wait like the library's synchronous calls, see --busy-poll-us)");
  app.add_option("--json", cfg.json, "Write the configuration and results to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (kvrdma::Status st = SetMix(cfg); !st.ok()) {
    std::fprintf(stderr, "kvbench: %s\n", st.message().c_str());
    return 2;
  }
  std::printf("kvbench: servers %zu, workload %s (read %.2f update %.2f insert %.2f rmw %.2f), %" PRIu64
              " keys of %zu B, values %zu-%zu B, %s%s, %u threads x depth %u, %s, put mode %s, %s\n",
              cfg.servers.size(), cfg.read_ratio >= 0 ? "custom" : cfg.workload.c_str(), cfg.p_read, cfg.p_update,
              cfg.p_insert, cfg.p_rmw, cfg.keys, cfg.key_size, cfg.vmin, cfg.vmax, cfg.distribution.c_str(),
              cfg.distribution == "uniform" ? "" : (" theta " + std::to_string(cfg.theta)).c_str(), cfg.threads,
              cfg.depth, cfg.rate > 0 ? ("open loop " + std::to_string(static_cast<uint64_t>(cfg.rate)) + " ops/s").c_str() : "closed loop",
              cfg.put_mode.c_str(),
              cfg.PollsWhileWaiting() ? "polls while waiting" : "sleeps while waiting");
  Shared sh(cfg);
  sh.inserted = cfg.keys;
  sh.zipf = std::make_unique<Zipfian>(cfg.keys, cfg.theta);
  std::vector<std::unique_ptr<Worker>> workers;
  for (unsigned i = 0; i < cfg.threads; ++i) {
    workers.push_back(std::make_unique<Worker>(sh, i));
    if (kvrdma::Status st = workers.back()->Connect(); !st.ok()) {
      std::fprintf(stderr, "kvbench: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  if (cfg.preload) {
    auto t0 = Clock::now();
    std::vector<std::thread> t;
    std::atomic<int> failed{0};
    for (unsigned i = 0; i < cfg.threads; ++i) {
      t.emplace_back([&, i] {
        uint64_t per = (cfg.keys + cfg.threads - 1) / cfg.threads;
        uint64_t from = std::min<uint64_t>(cfg.keys, i * per), to = std::min<uint64_t>(cfg.keys, from + per);
        kvrdma::Status st = workers[i]->Preload(from, to);
        if (!st.ok()) {
          std::fprintf(stderr, "kvbench: preload: %s\n", st.ToString().c_str());
          failed++;
        }
      });
    }
    for (auto& th : t) th.join();
    if (failed) return 1;
    std::printf("preloaded %" PRIu64 " keys in %.1f s\n", cfg.keys,
                std::chrono::duration<double>(Clock::now() - t0).count());
    std::fflush(stdout);  // a script waiting on the log sees it now
  }
  std::vector<std::thread> threads;
  for (auto& w : workers) threads.emplace_back([&w] { w->Run(); });
  // SIGINT or SIGTERM ends the run at the next once-a-second line, with the
  // summary of what ran (a script stops a long run when it is done with it).
  struct sigaction sa = {};
  sa.sa_handler = [](int) { g_interrupted.store(true, std::memory_order_relaxed); };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  auto start = Clock::now();
  auto measure_start = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg.warmup));
  if (cfg.warmup <= 0) sh.measuring = true;
  uint64_t last_total = 0;
  auto last = start;
  for (int sec = 1;; ++sec) {
    std::this_thread::sleep_until(start + std::chrono::seconds(sec));
    auto now = Clock::now();
    bool was_measuring = sh.measuring.load();
    Histogram all;
    for (int k = 0; k < kKinds; ++k) sh.MergeHist(k, &all);
    uint64_t total = sh.Sum([](Tally& t) -> auto& { return t.progress; });
    uint64_t errors = sh.Sum([](Tally& t) -> auto& { return t.progress_errors; });
    double el = std::chrono::duration<double>(now - start).count();
    std::printf("[%5.1fs] %s %10.0f ops/s  p50 %8.1f us  p99 %8.1f us  errors %" PRIu64 "\n", el,
                sh.measuring ? "run   " : "warmup", static_cast<double>(total - last_total) /
                std::chrono::duration<double>(now - last).count(), all.Percentile(0.50) / 1e3,
                all.Percentile(0.99) / 1e3, errors);
    std::fflush(stdout);
    last_total = total;
    last = now;
    if (!was_measuring && now >= measure_start) {  // the warm-up ends: measure from here
      sh.measuring = true;
      measure_start = now;
    }
    bool done_time = cfg.ops == 0 && was_measuring && now - measure_start >= std::chrono::duration<double>(cfg.duration);
    if (g_interrupted.load(std::memory_order_relaxed)) {
      std::printf("interrupted: the run ends here\n");
      if (!was_measuring) measure_start = now;  // nothing measured
      break;
    }
    if (done_time || sh.stop) break;
  }
  sh.stop = true;
  auto end = Clock::now();
  for (auto& t : threads) t.join();
  double secs = std::chrono::duration<double>(end - measure_start).count();
  uint64_t total = 0;
  std::printf("\n%-8s %10s %11s %9s %9s %9s %9s %9s %10s %8s\n", "op", "count", "ops/s", "mean_us", "p50_us",
              "p90_us", "p99_us", "p99.9_us", "max_us", "errors");
  std::string json_results;
  for (int k = 0; k < kKinds; ++k) {
    Histogram h;
    sh.MergeHist(k, &h);
    uint64_t n = sh.Sum([k](Tally& t) -> auto& { return t.count[k]; });
    const uint64_t kind_errors = sh.Sum([k](Tally& t) -> auto& { return t.errors[k]; });
    if (n == 0) continue;
    total += n;
    double us[6] = {h.Mean() / 1e3, h.Percentile(0.5) / 1e3, h.Percentile(0.9) / 1e3, h.Percentile(0.99) / 1e3,
                    h.Percentile(0.999) / 1e3, h.max() / 1e3};
    std::printf("%-8s %10" PRIu64 " %11.0f %9.1f %9.1f %9.1f %9.1f %9.1f %10.1f %8" PRIu64 "\n", kKindNames[k], n,
                n / secs, us[0], us[1], us[2], us[3], us[4], us[5], kind_errors);
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "%s\"%s\": {\"ops\": %" PRIu64 ", \"ops_per_sec\": %.1f, \"mean_us\": %.2f, \"p50_us\": %.2f, "
                  "\"p90_us\": %.2f, \"p99_us\": %.2f, \"p999_us\": %.2f, \"max_us\": %.2f, \"errors\": %" PRIu64 "}",
                  json_results.empty() ? "" : ", ", kKindNames[k], n, n / secs, us[0], us[1], us[2], us[3], us[4], us[5],
                  kind_errors);
    json_results += buf;
  }
  std::printf("total    %10" PRIu64 " %11.0f   (%.1f s measured, %" PRIu64 " reads of absent keys)\n", total,
              total / secs, secs, sh.Sum([](Tally& t) -> auto& { return t.misses; }));
  for (unsigned i = 0; i < cfg.threads; ++i) {
    if (!sh.tally[i].first_error.empty())
      std::printf("errors   thread %u's first failed operation: %s\n", i, sh.tally[i].first_error.c_str());
  }
  kvrdma::ClientStats cs;
  for (const auto& w : workers) w->AddClientStats(&cs);
  if (cs.rendezvous_puts != 0) {
    std::printf("client   %" PRIu64 " rendezvous PUTs, %" PRIu64 " of them with a registration of their own, %" PRIu64
                " copied into a window's buffer; warm-up included\n",
                cs.rendezvous_puts, cs.rendezvous_registrations, cs.rendezvous_copies);
  }
  if (cs.rendezvous_fallbacks != 0) {
    std::printf("client   %" PRIu64 " PUTs of rendezvous size sent in fragments: registering their values failed "
                "(the locked-memory limit? ulimit -l)\n", cs.rendezvous_fallbacks);
  }
  if (cs.gets > 0) {
    const double g = static_cast<double>(cs.gets);
    std::printf("client   %.2f RDMA READs and %.2f window rounds per GET, %" PRIu64 " rounds repeated, "
                "%.1f%% answered from the location cache (%" PRIu64 " stale locations); warm-up included\n",
                static_cast<double>(cs.reads) / g, static_cast<double>(cs.get_rounds) / g, cs.get_retries,
                100.0 * static_cast<double>(cs.cache_hits) / g, cs.cache_stale);
    if (cs.direct_reads != 0) {
      std::printf("client   %" PRIu64 " direct READs (values READ straight into registered memory)\n", cs.direct_reads);
    }
    auto per = [](uint64_t a, uint64_t n) { return n == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(n); };
    std::printf("client   %.3f RDMA READs per GET that found its key (%" PRIu64 "), %.3f window rounds per GET that "
                "found none (%" PRIu64 "); warm-up included\n",
                per(cs.get_hit_reads, cs.get_hits), cs.get_hits, per(cs.get_miss_rounds, cs.get_misses), cs.get_misses);
  }
  if (!cfg.json.empty()) {
    std::ofstream f(cfg.json);
    std::string servers;
    for (auto& s : cfg.servers) servers += (servers.empty() ? "\"" : ", \"") + s + "\"";
    f << "{\"config\": {\"servers\": [" << servers << "], \"workload\": \"" << cfg.workload << "\", \"read_ratio\": "
      << cfg.p_read << ", \"update_ratio\": " << cfg.p_update << ", \"insert_ratio\": " << cfg.p_insert
      << ", \"rmw_ratio\": " << cfg.p_rmw << ", \"keys\": " << cfg.keys << ", \"key_size\": " << cfg.key_size
      << ", \"value_size_min\": " << cfg.vmin << ", \"value_size_max\": " << cfg.vmax << ", \"distribution\": \""
      << cfg.distribution << "\", \"zipf_theta\": " << cfg.theta << ", \"threads\": " << cfg.threads
      << ", \"depth\": " << cfg.depth << ", \"duration_s\": " << secs << ", \"warmup_s\": " << cfg.warmup
      << ", \"rate\": " << cfg.rate << ", \"preload\": " << (cfg.preload ? "true" : "false") << ", \"put_mode\": \""
      << cfg.put_mode << "\", \"location_cache\": " << cfg.location_cache << ", \"busy_poll_us\": " << cfg.busy_poll_us << ", \"busy_poll_max_us\": " << cfg.busy_poll_max_us
      << ", \"spin\": " << (cfg.PollsWhileWaiting() ? "true" : "false") << "}, \"results\": {" << json_results << "}, \"total_ops_per_sec\": " << total / secs << "}\n";
  }
  uint64_t errs = 0;
  for (int k = 0; k < kKinds; ++k) errs += sh.Sum([k](Tally& t) -> auto& { return t.errors[k]; });
  return errs == 0 ? 0 : 1;
}
