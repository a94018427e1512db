// index_sim: candidate index layouts for issue 15 ("A GET in two READs"),
// simulated on random 64-bit key hashes (no store, no network).
//
//   build/bench/kvrdma_index_sim [--lines=65536] [--seeds=5]
//
// For each layout: the load at the first failed insert (mean and min over
// seeds), the moves per insert up to 90 % load, and at 90 % load the index
// READs per lookup, the entry READs a hit and a miss make (fingerprint
// collisions read a wrong entry first), the index bytes per item, and the
// overhead per item as bench/store_bench.cc's BM_BytesPerItem defines it
// (index bytes / items + entry header + padding; here format 4's 16-byte header, key +
// value a multiple of 8). See docs/DESIGN.md "Why one window per key (issue 15): the study".
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

uint64_t Mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint16_t Fp(uint64_t h) { return static_cast<uint16_t>(h >> 48); }

// A layout of `lines` lines (a line: `per_line` 8-byte words). A key may sit
// in any line of its candidate list; a lookup READs `reads` contiguous ranges.
struct Layout {
  std::string name;
  uint32_t per_line = 8;      // words per line
  uint32_t line_bytes = 64;   // including any version word
  uint32_t index_reads = 1;   // READs per lookup round (all in one round)
  uint32_t read_bytes = 64;   // bytes per lookup (sum over its READs)
  uint32_t miss_rounds = 1;   // rounds a miss needs (format 2: 3, MissCheck)
  // Candidate lines of hash h (in lookup order) into out; returns count.
  uint32_t (*cands)(uint64_t h, uint64_t lines, uint32_t param, uint64_t* out) = nullptr;
  uint32_t param = 0;
  uint32_t bfs_lines = 1024;  // lines a displacement search may visit
  uint32_t bfs_depth = 6;     // moves per displacement path
};

// Today: 2-choice partial-key cuckoo, 64-byte buckets (version + 7 words).
uint32_t Cuckoo2(uint64_t h, uint64_t lines, uint32_t, uint64_t* out) {
  uint64_t b0 = h & (lines - 1);
  uint64_t alt = ((uint64_t{Fp(h)} + 1) * 0x9E3779B97F4A7C15ull >> 29) & (lines - 1);
  if (alt == 0) alt = 1;
  out[0] = b0;
  out[1] = b0 ^ alt;
  return 2;
}
// A window of W consecutive lines from the home line (one READ of W lines).
uint32_t Window(uint64_t h, uint64_t lines, uint32_t w, uint64_t* out) {
  uint64_t b0 = h & (lines - 1);
  for (uint32_t i = 0; i < w; ++i) out[i] = (b0 + i) & (lines - 1);
  return w;
}
// RACE-style groups [main0][overflow][main1]: a combined bucket is a main
// line and the overflow next to it (one 128-byte READ). param 1: one
// combined bucket per key; 2: two (two READs, one round).
uint32_t Race(uint64_t h, uint64_t lines, uint32_t choices, uint64_t* out) {
  const uint64_t groups = lines / 3;
  uint32_t n = 0;
  for (uint32_t c = 0; c < choices; ++c) {
    uint64_t x = Mix(h + c);
    uint64_t g = x % groups;
    bool right = (x >> 63) != 0;
    out[n++] = 3 * g + (right ? 2 : 0);
    out[n++] = 3 * g + 1;
  }
  return n;
}

struct Table {
  const Layout& L;
  uint64_t lines;
  std::vector<uint64_t> words;      // key hash, 0 = empty
  std::vector<uint32_t> used;      // per line
  std::vector<uint32_t> seen;      // per line: the search that visited it last
  uint32_t search = 0;
  uint64_t items = 0, moves = 0;

  Table(const Layout& l, uint64_t n) : L(l), lines(n), words(n * l.per_line, 0), used(n, 0), seen(n, 0) {}

  void Place(uint64_t line, uint64_t h) {
    for (uint32_t i = 0; i < L.per_line; ++i) {
      uint64_t& s = words[line * L.per_line + i];
      if (s == 0) {
        s = h;
        ++used[line];
        return;
      }
    }
    std::abort();
  }
  void Remove(uint64_t line, uint64_t h) {
    for (uint32_t i = 0; i < L.per_line; ++i) {
      uint64_t& s = words[line * L.per_line + i];
      if (s == h) {
        s = 0;
        --used[line];
        return;
      }
    }
    std::abort();
  }

  // Insert as the format-2 server did: a free word among the candidates (the
  // least used line), else a breadth-first search over lines (each line
  // visited once; format 2: at most 1024 lines and paths of at most 6 moves) for
  // a chain of moves ending in a line with room; the moves run from the free
  // end backwards.
  bool Insert(uint64_t h) {
    uint64_t c[16];
    uint32_t n = L.cands(h, lines, L.param, c);
    int best = -1;
    for (uint32_t i = 0; i < n; ++i) {
      if (used[c[i]] < L.per_line && (best < 0 || used[c[i]] < used[c[best]])) best = static_cast<int>(i);
    }
    if (best >= 0) {
      Place(c[best], h);
      ++items;
      return true;
    }
    struct Node {
      uint64_t line;
      int parent;
      uint64_t moved;  // the key moved from parent's line into this line
      int depth;
    };
    std::vector<Node> q;
    ++search;
    for (uint32_t i = 0; i < n; ++i) {
      if (seen[c[i]] != search) q.push_back({c[i], -1, 0, 0});
      seen[c[i]] = search;
    }
    for (size_t qi = 0; qi < q.size() && q.size() < L.bfs_lines; ++qi) {
      if (q[qi].depth >= static_cast<int>(L.bfs_depth)) continue;
      const uint64_t line = q[qi].line;
      for (uint32_t s = 0; s < L.per_line; ++s) {
        const uint64_t k = words[line * L.per_line + s];
        uint64_t kc[16];
        uint32_t kn = L.cands(k, lines, L.param, kc);
        for (uint32_t j = 0; j < kn; ++j) {
          if (seen[kc[j]] == search) continue;
          seen[kc[j]] = search;
          q.push_back({kc[j], static_cast<int>(qi), k, q[qi].depth + 1});
          if (used[kc[j]] < L.per_line) {
            // Execute from the free end backwards.
            for (int at = static_cast<int>(q.size()) - 1; q[at].parent >= 0; at = q[at].parent) {
              Remove(q[q[at].parent].line, q[at].moved);
              Place(q[at].line, q[at].moved);
              ++moves;
            }
            return Insert(h);
          }
        }
      }
    }
    return false;
  }

  // Entry READs a lookup of h makes: words of the READ with h's fingerprint,
  // in lookup order, up to and including h itself (all of them for a miss).
  uint32_t EntryReads(uint64_t h, bool present) const {
    uint64_t c[16];
    uint32_t n = L.cands(h, lines, L.param, c);
    uint32_t reads = 0;
    for (uint32_t i = 0; i < n; ++i) {
      for (uint32_t s = 0; s < L.per_line; ++s) {
        const uint64_t k = words[c[i] * L.per_line + s];
        if (k == 0 || Fp(k) != Fp(h)) continue;
        ++reads;
        if (present && k == h) return reads;
      }
    }
    return reads;
  }
};

// Hopscotch over single words: home word h, the key within [h, h+H); one
// READ of H words (8 B each, no version words). Insert: the nearest free
// word at or after h (probing at most 4096), then hop it back towards h.
struct Hopscotch {
  uint32_t H;
  uint64_t n;
  std::vector<uint64_t> words;
  uint64_t items = 0, moves = 0;
  // Inserts that needed a chain of hops, and the longest chain (up to 90 %
  // load: Run reads them there). A marker rule that holds a vacated word for
  // a TTL makes such an insert wait one TTL per hop (DESIGN.md).
  uint64_t chained = 0, longest_chain = 0, chained90 = 0, longest90 = 0;
  Hopscotch(uint32_t h, uint64_t words) : H(h), n(words), words(words, 0) {}
  uint64_t Home(uint64_t k) const { return k & (n - 1); }
  uint64_t Dist(uint64_t from, uint64_t to) const { return (to - from) & (n - 1); }
  bool Insert(uint64_t k) {
    const uint64_t home = Home(k);
    uint64_t f = home;
    uint32_t probe = 0;
    while (words[f] != 0) {
      if (++probe >= 4096) return false;
      f = (f + 1) & (n - 1);
    }
    uint64_t chain = 0;
    while (Dist(home, f) >= H) {
      ++chain;
      bool hopped = false;
      for (uint64_t d = H - 1; d > 0; --d) {
        const uint64_t j = (f - d) & (n - 1);
        if (words[j] != 0 && Dist(Home(words[j]), f) < H) {
          words[f] = words[j];
          words[j] = 0;
          f = j;
          ++moves;
          hopped = true;
          break;
        }
      }
      if (!hopped) return false;
    }
    words[f] = k;
    ++items;
    if (chain > 0) {
      ++chained;
      longest_chain = std::max(longest_chain, chain);
    }
    if (items * 10 <= n * 9) {
      chained90 = chained;
      longest90 = longest_chain;
    }
    return true;
  }
  uint32_t EntryReads(uint64_t k, bool present) const {
    uint32_t reads = 0;
    for (uint32_t d = 0; d < H; ++d) {
      const uint64_t s = words[(Home(k) + d) & (n - 1)];
      if (s == 0 || Fp(s) != Fp(k)) continue;
      ++reads;
      if (present && s == k) return reads;
    }
    return reads;
  }
};

// A window of H words from the home word h and, for a key that finds it
// full, up to D - 1 overflow windows of H words at other homes (other hash
// bits), tried in order; nothing ever moves. Word h carries the depth of its
// home: how many overflow windows a key of this home may be in (0..D-1,
// the largest used by a key of this home). A lookup READs window(h); if the
// key is not there and the depth is d > 0, the d overflow windows in one
// more round (d READs, one doorbell). A miss needs no version words and no
// markers (DESIGN.md).
struct WindowOverflow {
  uint32_t H, D;
  uint64_t n;
  std::vector<uint64_t> words;
  std::vector<uint8_t> depth;  // per home
  uint64_t items = 0, moves = 0, overflowed = 0;
  WindowOverflow(uint32_t h, uint32_t d, uint64_t words) : H(h), D(d), n(words), words(words, 0), depth(words, 0) {}
  uint64_t HomeN(uint64_t k, uint32_t i) const { return (i == 0 ? k : Mix(k + i)) & (n - 1); }
  // The word whose depth a key's lookup reads: its home word.
  uint64_t DepthWord(uint64_t k) const { return HomeN(k, 0); }
  bool Put(uint64_t home, uint64_t k) {
    for (uint32_t d = 0; d < H; ++d) {
      uint64_t& s = words[(home + d) & (n - 1)];
      if (s == 0) {
        s = k;
        return true;
      }
    }
    return false;
  }
  bool Insert(uint64_t k) {
    for (uint32_t i = 0; i < D; ++i) {
      if (!Put(HomeN(k, i), k)) continue;
      uint8_t& dep = depth[DepthWord(k)];
      dep = std::max<uint8_t>(dep, static_cast<uint8_t>(i));
      overflowed += i > 0;
      ++items;
      return true;
    }
    return false;
  }
  // Index READs beyond the first, plus entry READs (fingerprint collisions
  // first), for a lookup of k.
  uint32_t EntryReads(uint64_t k, bool present) const {
    uint32_t reads = 0;
    const uint32_t dep = depth[DepthWord(k)];
    for (uint32_t i = 0; i <= dep; ++i) {
      if (i == 1) reads += dep;  // the overflow windows, one round
      const uint64_t home = HomeN(k, i);
      for (uint32_t d = 0; d < H; ++d) {
        const uint64_t s = words[(home + d) & (n - 1)];
        if (s == 0 || Fp(s) != Fp(k)) continue;
        ++reads;
        if (present && s == k) return reads;
      }
    }
    return reads;
  }
  uint32_t ExtraMissRounds(uint64_t k) const { return depth[DepthWord(k)] != 0; }
};

struct Result {
  double fail_load_mean = 0, fail_load_min = 1, moves_per_insert = 0;
  double entry_reads_hit = 0, entry_reads_miss = 0, extra_miss_rounds = 0, overflowed = 0, chained = 0;
  uint64_t longest_chain = 0;
  bool reached90 = true;
};

template <typename T, typename Make>
Result Run(Make make, uint64_t words, uint32_t seeds) {
  Result r;
  for (uint32_t seed = 1; seed <= seeds; ++seed) {
    T t = make();
    std::mt19937_64 rng(seed);
    std::vector<uint64_t> keys;
    const uint64_t at90 = words * 9 / 10;
    bool failed = false;
    uint64_t moves90 = 0;
    double hit = 0, miss = 0, extra_rounds = 0;
    while (!failed) {
      uint64_t k = rng();
      if (k == 0) continue;  // 0 marks an empty word
      if (!t.Insert(k)) {
        failed = true;
        break;
      }
      keys.push_back(k);
      if (t.items == at90) {
        moves90 = t.moves;
        for (uint64_t x : keys) hit += t.EntryReads(x, true);
        for (uint32_t i = 0; i < 200000; ++i) {
          const uint64_t k = rng() | (uint64_t{1} << 40);
          miss += t.EntryReads(k, false);
          if constexpr (requires { t.ExtraMissRounds(k); }) extra_rounds += t.ExtraMissRounds(k);
        }
        if constexpr (requires { t.overflowed; }) r.overflowed += static_cast<double>(t.overflowed) / at90 / seeds;
        if constexpr (requires { t.chained90; }) {
          r.chained += static_cast<double>(t.chained90) / at90 / seeds;
          r.longest_chain = std::max(r.longest_chain, t.longest90);
        }
      }
    }
    const double load = static_cast<double>(t.items) / static_cast<double>(words);
    if (t.items < at90) {
      r.reached90 = false;
      moves90 = t.moves;
    }
    r.fail_load_mean += load / seeds;
    r.fail_load_min = std::min(r.fail_load_min, load);
    r.moves_per_insert += static_cast<double>(moves90) / static_cast<double>(std::min<uint64_t>(at90, t.items)) / seeds;
    r.entry_reads_hit += hit / static_cast<double>(at90) / seeds;
    r.entry_reads_miss += miss / 200000.0 / seeds;
    r.extra_miss_rounds += extra_rounds / 200000.0 / seeds;
  }
  return r;
}

void Print(const std::string& name, uint32_t reads, uint32_t read_bytes, uint32_t miss_rounds, double index_b_per_home,
           const Result& r) {
  const double idx90 = index_b_per_home / 0.9;
  if (!r.reached90) {
    std::printf("| %s | %u x %u B | %.3f / %.3f | - | - | %u | - | - | - |\n", name.c_str(), reads, read_bytes,
                r.fail_load_mean, r.fail_load_min, miss_rounds);
    return;
  }
  std::printf("| %s | %u x %u B | %.3f / %.3f | %.3f | %.3f | %.3f | %.4f | %.2f | %.2f |\n", name.c_str(), reads,
              read_bytes, r.fail_load_mean, r.fail_load_min, reads + r.entry_reads_hit,
              reads * miss_rounds + r.entry_reads_miss, miss_rounds + r.extra_miss_rounds, r.moves_per_insert,
              idx90, idx90 + 16.0);
  if (r.overflowed > 0) std::printf("  (%s: %.4f of the keys in their overflow window at 90 %% load)\n", name.c_str(), r.overflowed);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t lines = 1 << 16;
  uint32_t seeds = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--lines=", 8) == 0) {
      lines = std::strtoull(argv[i] + 8, nullptr, 10);
    } else if (std::strncmp(argv[i], "--seeds=", 8) == 0) {
      seeds = static_cast<uint32_t>(std::strtoul(argv[i] + 8, nullptr, 10));
    } else {
      std::fprintf(stderr, "usage: kvrdma_index_sim [--lines=N (power of two)] [--seeds=S]\n");
      return 2;
    }
  }
  if (lines < 64 || (lines & (lines - 1)) != 0 || seeds == 0) {
    std::fprintf(stderr, "kvrdma_index_sim: --lines must be a power of two >= 64, --seeds >= 1\n");
    return 2;
  }
  std::printf("lines=%llu seeds=%u; READs counted per lookup at 90 %% load (index READs + entry READs, "
              "fingerprint collisions included); overhead = index B/item + 16 B header\n\n",
              static_cast<unsigned long long>(lines), seeds);
  std::printf("| layout | index READ | load at 1st failure (mean / min) | READs per hit | READs per miss | "
              "rounds per miss | moves per insert to 90 %% | index B/item at 90 %% | overhead B/item at 90 %% |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|---:|---:|\n");

  auto table = [&](const Layout& L, uint64_t n) {
    Result r = Run<Table>([&] { return Table(L, n); }, n * L.per_line, seeds);
    Print(L.name, L.index_reads, L.read_bytes / L.index_reads, L.miss_rounds,
          static_cast<double>(L.line_bytes) / L.per_line, r);
  };
  // Today.
  table(Layout{"cuckoo, 2 buckets of 7 words + version (format 2)", 7, 64, 2, 128, 3, Cuckoo2, 0}, lines);
  // One window of W lines of 8 words (no version word); the displacement
  // search may visit 4096 lines and make 64 moves (moves inside windows are
  // short, so a free word far away needs many).
  for (uint32_t w : {1u, 2u, 3u, 4u, 8u}) {
    table(Layout{"window of " + std::to_string(w) + " lines x 8 words", 8, 64, 1, 64 * w, 1, Window, w, 4096, 64},
          lines);
  }
  // The same windows with a version word per line (7 words per line).
  for (uint32_t w : {2u, 4u}) {
    table(Layout{"window of " + std::to_string(w) + " lines x (version + 7 words)", 7, 64, 1, 64 * w, 1, Window, w,
                 4096, 64},
          lines);
  }
  // RACE-style combined buckets (main + shared overflow).
  const uint64_t race_lines = (lines / 3) * 3;
  table(Layout{"RACE combined bucket, 1 choice (main + shared overflow)", 8, 64, 1, 128, 1, Race, 1}, race_lines);
  table(Layout{"RACE combined buckets, 2 choices", 8, 64, 2, 256, 1, Race, 2}, race_lines);
  // Hopscotch over words.
  for (uint32_t h : {8u, 16u, 32u, 48u, 64u, 128u}) {
    const uint64_t words = lines * 8;
    Result r = Run<Hopscotch>([&] { return Hopscotch(h, words); }, words, seeds);
    Print("hopscotch, neighbourhood H = " + std::to_string(h) + " words", 1, 8 * h, 1, 8.0, r);
    if (r.reached90) {
      std::printf("  (H = %u: up to 90 %% load, %.4f of the inserts needed a chain of hops, the longest %llu hops)\n", h,
                  r.chained, static_cast<unsigned long long>(r.longest_chain));
    }
  }
  // A window with an overflow window and a flag, nothing ever moves (the choice).
  for (uint32_t h : {64u, 128u}) {
    for (uint32_t d : {2u, 3u, 4u}) {
      const uint64_t words = lines * 8;
      Result r = Run<WindowOverflow>([&] { return WindowOverflow(h, d, words); }, words, seeds);
      Print("window of H = " + std::to_string(h) + " words + " + std::to_string(d - 1) +
                " overflow windows (depth on the home word), no moves",
            1, 8 * h, 1, 8.0, r);
    }
  }
  return 0;
}
