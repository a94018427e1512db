// The hash index as clients READ it: an array of 8-byte words, and a key's
// window of them (format 4; docs/DESIGN.md "Index words and windows").
//
// The index region holds `home_count + window_words - 1` words (home_count a
// power of two; window_words 1..kMaxWindowWords, 128 in kvserver), 8-aligned.
// A key's home is h = hash & (home_count - 1) (hash.h); its WINDOW is words
// [h, h + window_words). The key's entry ref is always in a word of its window
// (inserts and moves stay inside it), so a GET READs the window in one READ
// of window_words * 8 bytes at byte 8h, and nothing else to find the key.
//
// A word holds an entry ref (entry_ref.h: fingerprint, size class, location;
// 0 = empty) and, beside it, a MOVE TAG that belongs to the word, not to the ref:
//
//   bit 63           52 51         41 40   36 35                        0
//      | fingerprint:12 | size class:11 | tag:5 | location:36            |
//
//   tag bit 4 (word bit 40)  set: a key's ref LEFT this word (a move to
//                            another word of its window) less than tag_ttl
//                            ago, by the server's clock;
//   tag bits 0..3            that key's tag nibble (hash.h TagNibbleOf,
//                            0..14), or kTagAnyKey (15, no key's nibble)
//                            once a second key left the word while the
//                            first tag was still set.
//
// Every store of a word's ref keeps the word's tag; only the server's tag
// expiry clears it (after tag_ttl). So a word a move vacated is reusable at
// once, and a reader that READ the word after the move sees the tag of the
// key that left: the miss rule (read_path.h, MissRule) does not conclude
// "absent" from a window in which a tag matches the key.
//
// Words are written only by server threads, each with a single 8-byte
// release store (std::atomic_ref), under the lock of a window that contains
// the word (server/store/index.h); readers copy them as part of a window READ.
#pragma once

#include <cstdint>

#include "common/format/format_constants.h"
#include "common/format/entry_ref.h"
#include "common/format/hash.h"

namespace kvrdma {

inline constexpr uint64_t kWordTagMask = ((uint64_t{1} << kWordTagBits) - 1) << kWordTagShift;
inline constexpr uint64_t kTagSetBit = uint64_t{1} << (kWordTagBits - 1);  // within the 5-bit tag
inline constexpr uint64_t kTagNibbleMask = kTagSetBit - 1;
inline constexpr uint64_t kTagAnyKey = kTagNibbleMask;  // nibble 1111 with the set bit: matches every key

// The entry ref a word holds (tag bits cleared); 0 = empty.
constexpr uint64_t WordRef(uint64_t word) noexcept { return word & ~kWordTagMask; }
// The word's 5-bit tag (0 = none).
constexpr uint64_t WordTag(uint64_t word) noexcept { return (word & kWordTagMask) >> kWordTagShift; }
// `ref` stored into a word whose tag is `tag` (the tag is kept).
constexpr uint64_t WordWith(uint64_t ref, uint64_t tag) noexcept {
  return (ref & ~kWordTagMask) | ((tag << kWordTagShift) & kWordTagMask);
}
// The tag a move of a key with `nibble` leaves on a word whose tag was `old`.
constexpr uint64_t TagAfterMove(uint64_t old, uint64_t nibble) noexcept {
  if ((old & kTagSetBit) == 0 || (old & kTagNibbleMask) == (nibble & kTagNibbleMask)) {
    return kTagSetBit | (nibble & kTagNibbleMask);
  }
  return kTagSetBit | kTagAnyKey;
}
// Whether a word's tag says that a key with `nibble` may have left it.
constexpr bool TagMatches(uint64_t tag, uint64_t nibble) noexcept {
  return (tag & kTagSetBit) != 0 &&
         ((tag & kTagNibbleMask) == kTagAnyKey || (tag & kTagNibbleMask) == (nibble & kTagNibbleMask));
}

// Words in the index region of `home_count` homes and `window_words` windows.
constexpr uint64_t IndexWords(uint64_t home_count, uint64_t window_words) noexcept {
  return home_count + window_words - 1;
}

static_assert(WordRef(WordWith(PackRef(0xabc, 77, 8 * 12345), 0x1f)) == PackRef(0xabc, 77, 8 * 12345));
static_assert(WordTag(WordWith(PackRef(0xabc, 77, 8 * 12345), 0x13)) == 0x13);
static_assert(WordTag(PackRef(0xfff, kRefSizeClassMask, kMaxLogBytes - 8)) == 0, "a ref never has tag bits");
static_assert(TagAfterMove(0, 5) == (kTagSetBit | 5) && TagAfterMove(kTagSetBit | 5, 5) == (kTagSetBit | 5));
static_assert(TagAfterMove(kTagSetBit | 5, 6) == (kTagSetBit | kTagAnyKey));
static_assert(TagMatches(kTagSetBit | 5, 5) && !TagMatches(kTagSetBit | 5, 6) && !TagMatches(5, 5));
static_assert(TagMatches(kTagSetBit | kTagAnyKey, 3));
// No key's nibble is the any-key code: a key's first hop leaves a tag that
// matches only keys of its nibble (format 5 gave nibble 15 to 1 key in 16,
// whose hop blocked one-round misses of every key of the window).
static_assert(kKeyTagNibbles == kTagAnyKey && kKeyTagNibbles <= kTagNibbleMask);
constexpr bool NoHashGivesTheAnyKeyNibble() {
  for (uint64_t bits = 0; bits < 256; ++bits) {
    if (TagNibbleOf(bits << 40) >= kKeyTagNibbles) return false;
    if (TagAfterMove(0, TagNibbleOf(bits << 40)) == (kTagSetBit | kTagAnyKey)) return false;
  }
  return true;
}
static_assert(NoHashGivesTheAnyKeyNibble());
static_assert(TagNibbleOf(uint64_t{15} << 44) != kTagAnyKey && TagNibbleOf(~uint64_t{0}) != kTagAnyKey);

}  // namespace kvrdma
