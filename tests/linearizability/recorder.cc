#include "tests/linearizability/recorder.h"

#include <algorithm>
#include <latch>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace kvrdma::lin {
namespace {

uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

std::string MakeValue(uint32_t client, uint64_t seq, size_t len) {
  std::string v = "c" + std::to_string(client) + "-" + std::to_string(seq) + ":";
  len = std::max(len, v.size() + 1);
  for (size_t i = v.size(); i < len; ++i) v.push_back(static_cast<char>('a' + (client * 131 + seq * 7 + i) % 26));
  return v;
}

// One operation in flight. The Op's views point into this op state's strings,
// so op states never move while the client may touch them.
struct OpState {
  Op op;
  std::string key, value, result;
  HistoryOp rec;
  bool busy = false;
};

struct Worker {
  uint32_t id = 0;
  std::unique_ptr<Client> client;
  History history;
  RecordStats stats;
  Status connect_status;
};

void Classify(OpState& s, RecordStats* st) {
  HistoryOp& r = s.rec;
  const Status& status = s.op.status;
  if (status.ok()) {
    r.outcome = Outcome::kOk;
    if (r.type == OpType::kGet) r.value = s.result;
  } else if (status.IsNotFound() && r.type != OpType::kPut) {
    r.outcome = Outcome::kNotFound;
  } else {
    // ConnectionLost/Timeout: the write may or may not have happened. Any
    // other error is treated the same way (a relaxation) and counted.
    r.outcome = Outcome::kUnknown;
    st->errors[std::string(CodeName(status.code()))]++;
  }
  st->by_type_outcome[std::string(OpTypeName(r.type)) + " " + std::string(OutcomeName(r.outcome))]++;
  st->ops++;
}

void RunWorker(Worker& w, const RecorderOptions& o, const ConnectFn& connect, uint64_t deadline_ns) {
  std::mt19937_64 rng(o.seed * 0x9e3779b97f4a7c15ull + w.id + 1);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::uniform_int_distribution<uint32_t> key_dist(0, o.keys - 1);
  std::uniform_int_distribution<size_t> len_dist(8, std::max<size_t>(8, o.max_value_bytes));
  std::vector<OpState> op_states(std::max<uint32_t>(1, o.depth));
  std::vector<Op*> done(op_states.size());
  uint64_t issued = 0, seq = 0;
  size_t in_flight = 0;
  bool broken = false;
  while (true) {
    bool more = issued < o.ops_per_client && NowNs() < deadline_ns;
    for (OpState& s : op_states) {
      if (!more || broken || s.busy || issued >= o.ops_per_client) continue;
      double c = coin(rng);
      s.key = "lin-" + std::to_string(key_dist(rng));
      s.op = Op{};
      s.op.key = s.key;
      s.op.result = &s.result;
      s.op.user = &s;
      s.rec = HistoryOp{};
      s.rec.client = w.id;
      s.rec.key = s.key;
      if (c < o.get_fraction) {
        s.op.type = Op::Type::kGet;
        s.rec.type = OpType::kGet;
      } else if (c < o.get_fraction + o.put_fraction) {
        s.value = MakeValue(w.id, seq++, len_dist(rng));
        s.op.type = Op::Type::kPut;
        s.op.value = s.value;
        s.rec.type = OpType::kPut;
        s.rec.value = s.value;
      } else {
        s.op.type = Op::Type::kDelete;
        s.rec.type = OpType::kDelete;
      }
      Op* p = &s.op;
      s.rec.invoke_ns = NowNs();
      if (w.client->Submit({&p, 1}) != 1) break;  // at the client's limit: poll first
      s.busy = true;
      ++in_flight;
      ++issued;
    }
    if (in_flight == 0) {
      if (!more) break;
      if (broken) {
        // Everything in flight failed: start over with a new client.
        auto c = connect();
        if (!c.ok()) {
          w.stats.errors["reconnect: " + std::string(CodeName(c.status().code()))]++;
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          continue;
        }
        w.client = std::move(c).value();
        w.stats.reconnects++;
        broken = false;
      }
      continue;
    }
    size_t n = w.client->Wait(done, 100);
    uint64_t now = NowNs();
    for (size_t i = 0; i < n; ++i) {
      OpState& s = *static_cast<OpState*>(done[i]->user);
      s.rec.complete_ns = now;
      Classify(s, &w.stats);
      if (s.op.status.IsConnectionLost() || s.op.status.IsTimeout()) broken = true;
      w.history.push_back(std::move(s.rec));
      s.busy = false;
      --in_flight;
    }
  }
}

}  // namespace

Result<History> RecordHistory(const RecorderOptions& options, const ConnectFn& connect, RecordStats* stats) {
  std::vector<Worker> workers(options.clients);
  std::latch ready(options.clients);
  std::latch go(1);
  uint64_t deadline_ns = 0;
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < options.clients; ++i) {
    threads.emplace_back([&, i] {
      Worker& w = workers[i];
      w.id = i;
      auto c = connect();
      if (c.ok()) w.client = std::move(c).value();
      else w.connect_status = c.status();
      ready.count_down();
      go.wait();
      if (w.client) RunWorker(w, options, connect, deadline_ns);
      w.client.reset();
    });
  }
  ready.wait();
  Status failed;
  for (const Worker& w : workers) {
    if (!w.connect_status.ok()) failed = w.connect_status;
  }
  uint64_t start = NowNs();
  // A failed connect stops everyone at once: the deadline is already past.
  deadline_ns = failed.ok() ? start + static_cast<uint64_t>(options.duration.count()) * 1000000 : 0;
  go.count_down();
  for (std::thread& t : threads) t.join();
  if (!failed.ok()) return failed;
  History h;
  RecordStats total;
  for (Worker& w : workers) {
    h.insert(h.end(), std::make_move_iterator(w.history.begin()), std::make_move_iterator(w.history.end()));
    total.ops += w.stats.ops;
    total.reconnects += w.stats.reconnects;
    for (auto& [k, v] : w.stats.by_type_outcome) total.by_type_outcome[k] += v;
    for (auto& [k, v] : w.stats.errors) total.errors[k] += v;
  }
  total.seconds = static_cast<double>(NowNs() - start) / 1e9;
  std::sort(h.begin(), h.end(), [](const HistoryOp& a, const HistoryOp& b) { return a.invoke_ns < b.invoke_ns; });
  if (stats != nullptr) *stats = std::move(total);
  return h;
}

}  // namespace kvrdma::lin
