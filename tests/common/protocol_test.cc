#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "common/format/format_constants.h"
#include "common/protocol/handshake.h"
#include "common/protocol/locks.h"
#include "common/protocol/messages.h"

namespace kvrdma {
namespace {

ServerDescriptor SampleDescriptor() {
  ServerDescriptor d;
  d.conn_id = 77;
  d.index = {0x7f0000001000, 1 << 20, 0x1234};
  d.index_homes = 1 << 16;  // + 127 tail words: 525 KB of the 1 MiB region
  d.index_window = 128;
  d.hash_seed = 0x1122334455667788;
  d.log = {0x7f0000200000, 64 << 20, 0x2345};
  d.locks = {0x7f0010000000, 1 << 16, 0x3456};
  d.ring = {0x7f0020000000, 8 * 4096, 0x4567};
  d.message_bytes = 4096;
  d.credits = 8;
  d.max_key_bytes = 1023;
  d.max_value_bytes = 1 << 20;
  d.round_limit_us = 100000;
  d.lock_words = 1000;
  return d;
}

TEST(HandshakeTest, DescriptorRoundTripsAndToleratesPadding) {
  std::array<uint8_t, kMaxAcceptData> buf{};  // zero padding after the message
  ServerDescriptor d = SampleDescriptor();
  size_t n = EncodeServerDescriptor(d, buf);
  ASSERT_GT(n, 0u);
  ASSERT_LE(n, kMaxAcceptData);
  auto back = DecodeServerDescriptor(buf);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, d);
  // Little-endian, field by field: the magic's bytes spell KVRD.
  EXPECT_EQ(0, std::memcmp(buf.data(), "KVRD", 4));
}

// The client hashes keys of up to max_key_bytes without checking them against
// the format's limit again: a descriptor beyond it is refused.
TEST(HandshakeTest, DescriptorWithKeysLongerThanTheFormatAllowsIsRefused) {
  for (uint32_t bad : {0u, static_cast<uint32_t>(kMaxKeyBytes) + 1}) {
    std::array<uint8_t, kMaxAcceptData> buf{};
    ServerDescriptor d = SampleDescriptor();
    d.max_key_bytes = static_cast<uint16_t>(bad);
    EncodeServerDescriptor(d, buf);
    auto back = DecodeServerDescriptor(buf);
    ASSERT_FALSE(back.ok()) << bad;
    EXPECT_NE(back.status().message().find("max key bytes"), std::string::npos) << back.status().ToString();
  }
}

TEST(HandshakeTest, DescriptorFromAnotherMajorVersionIsRefusedWithBothVersions) {
  std::array<uint8_t, kMaxAcceptData> buf{};
  ServerDescriptor d = SampleDescriptor();
  d.major = kProtocolMajor + 1;
  EncodeServerDescriptor(d, buf);
  auto back = DecodeServerDescriptor(buf);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), Status::Code::kProtocol);
  EXPECT_NE(back.status().message().find("protocol " + std::to_string(kProtocolMajor + 1) + "." + std::to_string(kProtocolMinor)), std::string::npos)
      << back.status().ToString();
}

// Protocol 11 (lock places from the index hash), 10 (several writes per
// message: flag MORE, replies of several records), 9 (40-byte request
// headers: conditional writes), 8 (format 6: tag nibbles 0..14 from hash bits
// 40..47) and 7 would misparse each other's requests, disagree on which keys
// a move tag matches or on which lock word a key has, so each side refuses
// the others, naming both.
TEST(HandshakeTest, PeersOfAnOlderProtocolAreRefusedBothWays) {
  static_assert(kProtocolMajor == 11);
  for (uint16_t old : {7, 8, 9, 10}) {
    const std::string want = "protocol " + std::to_string(old) + "." + std::to_string(kProtocolMinor) +
                             ", this build speaks 11." + std::to_string(kProtocolMinor);
    std::array<uint8_t, kMaxAcceptData> buf{};
    ServerDescriptor d = SampleDescriptor();
    d.major = old;
    EncodeServerDescriptor(d, buf);
    auto back = DecodeServerDescriptor(buf);
    ASSERT_FALSE(back.ok());
    EXPECT_EQ(back.status().code(), Status::Code::kProtocol);
    EXPECT_NE(back.status().message().find(want), std::string::npos) << back.status().ToString();
    std::array<uint8_t, kMaxRequestData> req{};
    ConnectRequestMsg m;
    m.major = old;
    ASSERT_GT(EncodeConnectRequest(m, req), 0u);
    auto r = DecodeConnectRequest(req);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kProtocol);
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().ToString();
  }
}

TEST(HandshakeTest, TruncatedOrInsaneDescriptorsAreRejected) {
  std::array<uint8_t, kMaxAcceptData> buf{};
  size_t n = EncodeServerDescriptor(SampleDescriptor(), buf);
  for (size_t cut = 0; cut < n; ++cut) {
    EXPECT_FALSE(DecodeServerDescriptor(std::span(buf).first(cut)).ok()) << cut;
  }
  ServerDescriptor d = SampleDescriptor();
  d.index_homes = 3;  // not a power of two
  EncodeServerDescriptor(d, buf);
  EXPECT_FALSE(DecodeServerDescriptor(buf).ok());
  d = SampleDescriptor();
  d.index_homes = 1 << 17;  // its words do not fit the index region
  EncodeServerDescriptor(d, buf);
  EXPECT_FALSE(DecodeServerDescriptor(buf).ok());
  d = SampleDescriptor();
  d.index_window = 129;  // wider than any window
  EncodeServerDescriptor(d, buf);
  EXPECT_FALSE(DecodeServerDescriptor(buf).ok());
  d.index_window = 0;
  EncodeServerDescriptor(d, buf);
  EXPECT_FALSE(DecodeServerDescriptor(buf).ok());
  d = SampleDescriptor();
  d.credits = 9;  // 9 message buffers do not fit the ring
  EncodeServerDescriptor(d, buf);
  EXPECT_FALSE(DecodeServerDescriptor(buf).ok());
}

TEST(HandshakeTest, DescriptorWhoseMessageBytesCannotHoldTheLongestKeyIsRefused) {
  // 256 message bytes with 1023-byte keys: a PUT of a long key would not fit
  // its staging buffer (the client copied past it before this check).
  std::array<uint8_t, kMaxAcceptData> buf{};
  ServerDescriptor d = SampleDescriptor();
  d.message_bytes = 256;
  d.ring.length = 8 * 256;
  d.max_key_bytes = 1023;
  EncodeServerDescriptor(d, buf);
  auto back = DecodeServerDescriptor(buf);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), Status::Code::kProtocol);
  EXPECT_NE(back.status().message().find("at most 215"), std::string::npos) << back.status().ToString();
  // The largest key that leaves one value byte is fine.
  d.max_key_bytes = 256 - kRequestHeaderSize - 1;
  EncodeServerDescriptor(d, buf);
  EXPECT_TRUE(DecodeServerDescriptor(buf).ok());
  EXPECT_TRUE(CheckMessageLimits(256, 215).ok());
  EXPECT_FALSE(CheckMessageLimits(256, 216).ok());
}

TEST(HandshakeTest, ConnectRequestRoundTrips) {
  std::array<uint8_t, kMaxRequestData> buf{};
  ConnectRequestMsg m;
  m.put_path = PutPath::kWriteImm;
  m.auth_len = 5;
  std::memcpy(m.auth.data(), "token", 5);
  size_t n = EncodeConnectRequest(m, buf);
  ASSERT_GT(n, 0u);
  auto back = DecodeConnectRequest(buf);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->put_path, PutPath::kWriteImm);
  EXPECT_EQ(back->auth_len, 5);
  EXPECT_EQ(0, std::memcmp(back->auth.data(), "token", 5));
  buf[0] ^= 1;
  EXPECT_EQ(DecodeConnectRequest(buf).status().code(), Status::Code::kProtocol);
}

TEST(HandshakeTest, RejectCarriesCodeAndReason) {
  std::array<uint8_t, kMaxRejectData> buf{};
  RejectMsg m;
  m.code = Status::Code::kProtocol;
  m.reason = std::string(500, 'x');  // truncated to fit
  size_t n = EncodeReject(m, buf);
  ASSERT_GT(n, 0u);
  ASSERT_LE(n, kMaxRejectData);
  auto back = DecodeReject(buf);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->code, Status::Code::kProtocol);
  EXPECT_GT(back->reason.size(), 100u);
  std::array<uint8_t, 8> empty{};
  EXPECT_TRUE(DecodeReject(empty).status().IsNotFound());
}

std::vector<uint8_t> Request(RequestHeader h, std::string_view key, std::string_view value) {
  std::vector<uint8_t> m(kRequestHeaderSize);
  EncodeRequestHeader(h, m.data());
  m.insert(m.end(), key.begin(), key.end());
  m.insert(m.end(), value.begin(), value.end());
  return m;
}

TEST(MessagesTest, WholePutParses) {
  RequestHeader h;
  h.key_len = 3;
  h.value_len = 5;
  h.frag_len = 5;
  h.request_id = 42;
  auto m = Request(h, "abc", "hello");
  auto p = ParseRequest(m, 1024, 1 << 20);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->header.request_id, 42u);
  EXPECT_EQ(std::string(p->key.begin(), p->key.end()), "abc");
  EXPECT_EQ(std::string(p->value.begin(), p->value.end()), "hello");
}

TEST(MessagesTest, ClockAndStatsTakeNoKeyAndNoValue) {
  for (Opcode op : {Opcode::kClock, Opcode::kStats}) {
    RequestHeader h;
    h.opcode = op;
    h.request_id = 5;
    auto p = ParseRequest(Request(h, "", ""), 1024, 1 << 20);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->header.opcode, op);
    h.key_len = 3;
    EXPECT_NE(ParseRequest(Request(h, "abc", ""), 1024, 1 << 20).status().message().find("takes no key"),
              std::string::npos);
    h.key_len = 0;
    h.value_len = h.frag_len = 2;
    EXPECT_EQ(ParseRequest(Request(h, "", "xy"), 1024, 1 << 20).status().code(), Status::Code::kInvalidArgument);
  }
}

TEST(MessagesTest, MalformedRequestsGetClearErrors) {
  RequestHeader h;
  h.key_len = 3;
  h.value_len = 5;
  h.frag_len = 5;
  auto bad_len = Request(h, "abc", "hell");  // one byte short
  auto p = ParseRequest(bad_len, 1024, 1 << 20);
  EXPECT_EQ(p.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(p.status().message().find("do not add up"), std::string::npos);

  auto bad_op = Request(h, "abc", "hello");
  bad_op[0] = 9;
  EXPECT_NE(ParseRequest(bad_op, 1024, 1 << 20).status().message().find("unknown opcode"), std::string::npos);

  RequestHeader big = h;
  big.value_len = 2 << 20;
  EXPECT_EQ(ParseRequest(Request(big, "abc", "hello"), 1024, 1 << 20).status().code(), Status::Code::kTooLarge);

  RequestHeader longkey = h;
  longkey.key_len = 2000;
  EXPECT_EQ(ParseRequest(Request(longkey, std::string(2000, 'k'), "hello"), 1024, 1 << 20).status().code(),
            Status::Code::kTooLarge);

  RequestHeader frag = h;
  frag.flags = kFlagLast;  // a LAST fragment that does not end the value
  frag.frag_offset = 1;
  frag.frag_len = 2;
  EXPECT_FALSE(ParseRequest(Request(frag, "", "he"), 1024, 1 << 20).ok());

  std::vector<uint8_t> tiny(10, 0);
  EXPECT_FALSE(ParseRequest(tiny, 1024, 1 << 20).ok());
}

// A rendezvous PUT: header, key, 24 descriptor bytes.
std::vector<uint8_t> RendezvousPut(RequestHeader h, std::string_view key, const RendezvousValue& v) {
  h.flags |= kFlagRendezvous;
  h.key_len = static_cast<uint16_t>(key.size());
  h.frag_len = kRendezvousFieldsBytes;
  auto m = Request(h, key, "");
  m.resize(m.size() + kRendezvousFieldsBytes);
  EncodeRendezvous(v, m.data() + m.size() - kRendezvousFieldsBytes);
  return m;
}

TEST(MessagesTest, ARendezvousPutParsesWithItsDescriptor) {
  RequestHeader h;
  h.value_len = 1 << 20;
  h.request_id = 77;
  h.lock_token = 9;
  h.flags |= kFlagIfVersion;
  h.if_version = 12;
  const RendezvousValue v{0x7f0012345678ull, 0xabcdef01u, 0x123456789abcdefull};
  const auto m = RendezvousPut(h, "key", v);  // the parsed spans point into it
  auto p = ParseRequest(m, 1024, 1 << 20);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->header.value_len, 1u << 20);
  EXPECT_EQ(p->header.if_version, 12u);
  EXPECT_EQ(p->header.lock_token, 9u);
  EXPECT_EQ(std::string(p->key.begin(), p->key.end()), "key");
  EXPECT_TRUE(p->value.empty());
  EXPECT_EQ(p->rendezvous.addr, v.addr);
  EXPECT_EQ(p->rendezvous.rkey, v.rkey);
  EXPECT_EQ(p->rendezvous.checksum, v.checksum);
  // A value of 1 byte is fine (24 descriptor bytes are not value bytes).
  h.value_len = 1;
  EXPECT_TRUE(ParseRequest(RendezvousPut(h, "key", v), 1024, 1 << 20).ok());
}

TEST(MessagesTest, MalformedRendezvousPutsAreRefused) {
  const RendezvousValue v{0x1000, 7, 99};
  RequestHeader h;
  h.value_len = 65536;
  auto code = [](const std::vector<uint8_t>& m) { return ParseRequest(m, 1024, 1 << 20).status().code(); };
  {  // past the value limit
    RequestHeader b = h;
    b.value_len = (1 << 20) + 1;
    EXPECT_EQ(code(RendezvousPut(b, "k", v)), Status::Code::kTooLarge);
  }
  {  // an empty value
    RequestHeader b = h;
    b.value_len = 0;
    EXPECT_EQ(code(RendezvousPut(b, "k", v)), Status::Code::kInvalidArgument);
  }
  {  // not a PUT
    RequestHeader b = h;
    b.opcode = Opcode::kDelete;
    b.value_len = 0;
    EXPECT_EQ(code(RendezvousPut(b, "k", v)), Status::Code::kInvalidArgument);
  }
  {  // a fragment
    RequestHeader b = h;
    b.flags = kFlagFirst;
    EXPECT_EQ(code(RendezvousPut(b, "k", v)), Status::Code::kInvalidArgument);
  }
  {  // MORE, alone and in a message
    RequestHeader b = h;
    b.flags |= kFlagMore;
    auto m = RendezvousPut(b, "k", v);
    EXPECT_EQ(code(m), Status::Code::kInvalidArgument);
    RequestHeader put;
    put.value_len = put.frag_len = 2;
    put.key_len = 1;
    auto second = Request(put, "x", "yz");
    m.insert(m.end(), second.begin(), second.end());
    std::array<ParsedRequest, kMaxRequestsPerMessage> out;
    EXPECT_FALSE(ParseMessage(m, 1024, 1 << 20, out).ok());
    // ... and after MORE.
    RequestHeader first = put;
    first.flags |= kFlagMore;
    auto m2 = Request(first, "x", "yz");
    auto r = RendezvousPut(h, "k", v);
    m2.insert(m2.end(), r.begin(), r.end());
    EXPECT_FALSE(ParseMessage(m2, 1024, 1 << 20, out).ok());
  }
  {  // value bytes instead of (or besides) the descriptor
    RequestHeader b = h;
    b.flags |= kFlagRendezvous;
    b.key_len = 1;
    b.frag_len = 30;
    EXPECT_EQ(code(Request(b, "k", std::string(30, 'v'))), Status::Code::kInvalidArgument);
    b.frag_len = kRendezvousFieldsBytes;
    b.frag_offset = 8;
    EXPECT_EQ(code(Request(b, "k", std::string(kRendezvousFieldsBytes, 'v'))), Status::Code::kInvalidArgument);
  }
  {  // the reserved word set
    auto m = RendezvousPut(h, "k", v);
    m[kRequestHeaderSize + 1 + 12] = 1;
    EXPECT_EQ(code(m), Status::Code::kInvalidArgument);
  }
  {  // a descriptor cut short
    auto m = RendezvousPut(h, "k", v);
    m.pop_back();
    EXPECT_EQ(code(m), Status::Code::kInvalidArgument);
  }
}

// The client's checksum is the entry checksum the store computes over key
// and value side by side (one pass on the server), whatever the sizes (XXH3
// below and above 240 bytes), and it sees every byte, of the key too.
TEST(MessagesTest, RendezvousChecksumIsTheEntryChecksumAndSeesEveryByte) {
  const uint64_t seed = 0x1234abcd5678ef01ull;
  const std::string key = "a-key";
  const std::span<const uint8_t> k{reinterpret_cast<const uint8_t*>(key.data()), key.size()};
  for (size_t n : {size_t{1}, size_t{200}, size_t{241}, size_t{4096}, size_t{100000}}) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7);
    std::vector<std::byte> joined(key.size() + n);
    std::memcpy(joined.data(), key.data(), key.size());
    std::memcpy(joined.data() + key.size(), v.data(), n);
    const uint64_t c = RendezvousChecksum(k, v, seed);
    EXPECT_EQ(c, EntryChecksum(PackLengths(key.size(), n, false), joined.data(), joined.size(), seed)) << n;
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      v[at] ^= 1;
      EXPECT_NE(RendezvousChecksum(k, v, seed), c) << n << " " << at;
      v[at] ^= 1;
    }
    EXPECT_NE(RendezvousChecksum(k, v, seed + 1), c) << n;
    const std::string other = "a-kez";
    EXPECT_NE(RendezvousChecksum({reinterpret_cast<const uint8_t*>(other.data()), other.size()}, v, seed), c) << n;
  }
}

TEST(MessagesTest, FragmentsParse) {
  RequestHeader h;
  h.flags = kFlagFirst;
  h.key_len = 1;
  h.value_len = 10;
  h.frag_len = 4;
  ASSERT_TRUE(ParseRequest(Request(h, "k", "0123"), 64, 100).ok());
  h.flags = 0;
  h.frag_offset = 4;
  h.frag_len = 4;
  ASSERT_TRUE(ParseRequest(Request(h, "", "4567"), 64, 100).ok());
  h.flags = kFlagLast;
  h.frag_offset = 8;
  h.frag_len = 2;
  ASSERT_TRUE(ParseRequest(Request(h, "", "89"), 64, 100).ok());
}

// The condition of a conditional write: u64 if_version at byte 32 with flag
// IF_VERSION (bit 2); anything else about it is refused before the worker
// looks at the key.
TEST(MessagesTest, ConditionalWritesParseAndMalformedConditionsAreRefused) {
  static_assert(kRequestHeaderSize == 40 && kFlagIfVersion == 4);
  RequestHeader h;
  h.flags = kFlagFirst | kFlagLast | kFlagIfVersion;
  h.key_len = 1;
  h.value_len = h.frag_len = 2;
  h.if_version = 0x0102030405060708;
  auto m = Request(h, "k", "vv");
  EXPECT_EQ(m[1], kFlagFirst | kFlagLast | kFlagIfVersion);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(m[32 + i], 8 - i) << "byte " << 32 + i;  // little-endian at 32
  EXPECT_EQ(m[40], 'k');
  auto p = ParseRequest(m, 64, 100);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->header.if_version, 0x0102030405060708u);
  EXPECT_EQ(p->header.flags & kFlagIfVersion, kFlagIfVersion);
  h.if_version = 0;  // PUT only if absent
  EXPECT_TRUE(ParseRequest(Request(h, "k", "vv"), 64, 100).ok());
  RequestHeader del = h;  // DELETE if at version 9
  del.opcode = Opcode::kDelete;
  del.value_len = del.frag_len = 0;
  del.if_version = 9;
  EXPECT_TRUE(ParseRequest(Request(del, "k", ""), 64, 100).ok());

  auto refused = [](RequestHeader r, std::string_view key, std::string_view value, std::string_view why) {
    auto q = ParseRequest(Request(r, key, value), 64, 100);
    ASSERT_FALSE(q.ok()) << why;
    EXPECT_EQ(q.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(q.status().message().find(why), std::string::npos) << q.status().ToString();
  };
  RequestHeader stray = h;  // a version without the flag
  stray.flags = kFlagFirst | kFlagLast;
  stray.if_version = 7;
  refused(stray, "k", "vv", "if_version without the IF_VERSION flag");
  del.if_version = 0;  // DELETE only if absent
  refused(del, "k", "", "a DELETE only if the key has no value");
  for (Opcode q : {Opcode::kStats, Opcode::kClock}) {
    RequestHeader query;
    query.opcode = q;
    query.flags = kFlagFirst | kFlagLast | kFlagIfVersion;
    query.if_version = 3;
    refused(query, "", "", "a condition on a query");
  }
  RequestHeader unknown = h;  // bit 5 means nothing (bit 3 is MORE, bit 4 RENDEZVOUS)
  unknown.flags |= 32;
  refused(unknown, "k", "vv", "unknown request flags");
}

// Several writes per message (protocol 10): whole PUT/DELETEs back to back,
// all but the last with MORE.
RequestHeader Write(Opcode op, uint64_t id, std::string_view key, std::string_view value, bool more) {
  RequestHeader h;
  h.opcode = op;
  h.flags = static_cast<uint8_t>(kFlagFirst | kFlagLast | (more ? kFlagMore : 0));
  h.key_len = static_cast<uint16_t>(key.size());
  h.value_len = h.frag_len = static_cast<uint32_t>(value.size());
  h.request_id = id;
  return h;
}
std::vector<uint8_t> Concat(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> m;
  for (const auto& p : parts) m.insert(m.end(), p.begin(), p.end());
  return m;
}

TEST(MessagesTest, SeveralWritesInOneMessageParseInOrder) {
  static_assert(kFlagMore == 8);
  RequestHeader cond = Write(Opcode::kDelete, 11, "bb", "", true);
  cond.flags |= kFlagIfVersion;
  cond.if_version = 99;
  cond.lock_token = 0x55;
  auto m = Concat({Request(Write(Opcode::kPut, 10, "a", "one", true), "a", "one"), Request(cond, "bb", ""),
                   Request(Write(Opcode::kPut, 12, "ccc", "three!", false), "ccc", "three!")});
  std::array<ParsedRequest, kMaxRequestsPerMessage> out;
  auto n = ParseMessage(m, 64, 100, out);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, 3u);
  EXPECT_EQ(out[0].header.request_id, 10u);
  EXPECT_EQ(std::string(out[0].value.begin(), out[0].value.end()), "one");
  EXPECT_EQ(out[1].header.opcode, Opcode::kDelete);
  EXPECT_EQ(out[1].header.if_version, 99u);
  EXPECT_EQ(out[1].header.lock_token, 0x55u);
  EXPECT_EQ(std::string(out[1].key.begin(), out[1].key.end()), "bb");
  EXPECT_EQ(std::string(out[2].key.begin(), out[2].key.end()), "ccc");
  EXPECT_EQ(std::string(out[2].value.begin(), out[2].value.end()), "three!");
  // A lone request parses as one, as protocol 9's did; MORE is refused there.
  auto lone = Request(Write(Opcode::kPut, 1, "a", "v", false), "a", "v");
  n = ParseMessage(lone, 64, 100, out);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1u);
  EXPECT_NE(ParseRequest(Request(Write(Opcode::kPut, 1, "a", "v", true), "a", "v"), 64, 100)
                .status().message().find("MORE on a lone request"),
            std::string::npos);
  // kMaxRequestsPerMessage fit, one more does not.
  std::vector<uint8_t> full;
  for (size_t i = 0; i < kMaxRequestsPerMessage; ++i) {
    auto r = Request(Write(Opcode::kPut, i, "k", "v", i + 1 < kMaxRequestsPerMessage), "k", "v");
    full.insert(full.end(), r.begin(), r.end());
  }
  n = ParseMessage(full, 64, 100, out);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, kMaxRequestsPerMessage);
  full[full.size() - 42 + 1] |= kFlagMore;  // the last one says MORE ...
  auto extra = Request(Write(Opcode::kPut, 99, "k", "v", false), "k", "v");
  full.insert(full.end(), extra.begin(), extra.end());  // ... and one more follows
  auto too_many = ParseMessage(full, 64, 100, out);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("more than 16 requests"), std::string::npos)
      << too_many.status().ToString();
}

// Every malformed form of a message of several requests is refused whole,
// naming the request.
TEST(MessagesTest, AMalformedRequestAnywhereInAMessageRefusesIt) {
  std::array<ParsedRequest, kMaxRequestsPerMessage> out;
  auto first = Request(Write(Opcode::kPut, 1, "a", "one", true), "a", "one");
  auto refused = [&](const std::vector<uint8_t>& m, std::string_view why, Status::Code code) {
    auto n = ParseMessage(m, 64, 100, out);
    ASSERT_FALSE(n.ok()) << why;
    EXPECT_EQ(n.status().code(), code) << n.status().ToString();
    EXPECT_NE(n.status().message().find(why), std::string::npos) << n.status().ToString();
  };
  // MORE on the last request: nothing follows.
  refused(first, "leave no room for the next", Status::Code::kInvalidArgument);
  // The second request cut short.
  auto second = Request(Write(Opcode::kPut, 2, "bb", "two", false), "bb", "two");
  auto cut = Concat({first, second});
  cut.pop_back();
  refused(cut, "request 1 of the message: request lengths do not add up", Status::Code::kInvalidArgument);
  // Less than a header after MORE.
  auto stub = first;
  stub.insert(stub.end(), 10, 0);
  refused(stub, "request 1 of the message: request shorter than its header", Status::Code::kInvalidArgument);
  // A query with MORE, a query after MORE.
  RequestHeader stats;
  stats.opcode = Opcode::kStats;
  stats.flags = kFlagFirst | kFlagLast | kFlagMore;
  refused(Concat({Request(stats, "", ""), second}), "a query with MORE", Status::Code::kInvalidArgument);
  stats.flags = kFlagFirst | kFlagLast;
  refused(Concat({first, Request(stats, "", "")}), "request 1 of the message: only whole PUT/DELETEs",
          Status::Code::kInvalidArgument);
  // A fragment with MORE, a fragment after MORE.
  RequestHeader frag = Write(Opcode::kPut, 3, "f", "12", true);
  frag.flags = kFlagFirst | kFlagMore;
  frag.value_len = 10;
  refused(Concat({Request(frag, "f", "12"), second}), "a fragment with MORE", Status::Code::kInvalidArgument);
  frag.flags = kFlagFirst;
  refused(Concat({first, Request(frag, "f", "12")}), "request 1 of the message: only whole PUT/DELETEs",
          Status::Code::kInvalidArgument);
  // A request that is malformed alone is malformed in a message (and named).
  RequestHeader big = Write(Opcode::kPut, 4, "bb", "two", false);
  big.key_len = 65;
  refused(Concat({first, Request(big, std::string(65, 'k'), "two")}), "request 1 of the message: key of 65 bytes",
          Status::Code::kTooLarge);
  RequestHeader stray = Write(Opcode::kDelete, 5, "d", "", false);
  stray.if_version = 3;  // without IF_VERSION
  refused(Concat({first, first, Request(stray, "d", "")}), "request 2 of the message: if_version without",
          Status::Code::kInvalidArgument);
  auto bad_op = second;
  bad_op[0] = 9;
  refused(Concat({first, bad_op}), "request 1 of the message: unknown opcode", Status::Code::kInvalidArgument);
}

TEST(MessagesTest, AReplyOfSeveralRecordsRoundTripsAndMalformedOnesAreProtocolErrors) {
  std::array<uint8_t, kMaxReplySize> buf{};
  size_t len = 0;
  const std::string text = "the key is locked by another client";
  for (uint64_t i = 0; i < 3; ++i) {
    ReplyHeader h;
    h.status = i == 1 ? Status::Code::kLocked : Status::Code::kOk;
    h.request_id = 100 + i;
    h.version = 7 + i;
    std::span<const uint8_t> body;
    if (i == 1) body = {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
    len += EncodeReply(h, body, std::span(buf).subspan(len));
  }
  std::array<ParsedReply, kMaxRequestsPerMessage> out;
  auto n = ParseReplies({buf.data(), len}, out);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].header.request_id, 100 + i);
    EXPECT_EQ(out[i].header.version, 7 + i);
  }
  EXPECT_EQ(out[1].header.status, Status::Code::kLocked);
  EXPECT_EQ(std::string(out[1].body.begin(), out[1].body.end()), text);
  EXPECT_EQ(ParseReplies({buf.data(), len}, std::span(out).first(2)).status().code(), Status::Code::kProtocol);
  EXPECT_EQ(ParseReplies({buf.data(), len - 1}, out).status().code(), Status::Code::kProtocol);  // cut
  EXPECT_EQ(ParseReplies({buf.data(), len + 3}, out).status().code(), Status::Code::kProtocol);  // trailing bytes
  EXPECT_EQ(ParseReplies({buf.data(), 0}, out).status().code(), Status::Code::kProtocol);
}

TEST(MessagesTest, AVersionMismatchReplyCarriesTheCurrentVersion) {
  std::array<uint8_t, kMaxReplySize> buf{};
  ReplyHeader h;
  h.status = Status::Code::kVersionMismatch;
  h.request_id = 3;
  h.version = 77;
  const size_t n = EncodeReply(h, {}, buf);
  auto p = ParseReply({buf.data(), n});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->header.status, Status::Code::kVersionMismatch);
  EXPECT_EQ(p->header.version, 77u);
  buf[0] = static_cast<uint8_t>(Status::kLastCode) + 1;
  EXPECT_FALSE(ParseReply({buf.data(), n}).ok());
}

TEST(MessagesTest, ReplyAndStatsRoundTrip) {
  std::array<uint8_t, 256> stats_buf{};
  std::pair<std::string_view, uint64_t> s[] = {{"puts", 10}, {"items", 7}};
  size_t sn = EncodeStats(s, stats_buf);
  ASSERT_GT(sn, 0u);
  std::array<uint8_t, kMaxReplySize> buf{};
  ReplyHeader h;
  h.status = Status::Code::kServerFull;
  h.request_id = 9;
  h.version = 12;
  size_t n = EncodeReply(h, std::span(stats_buf).first(sn), buf);
  auto p = ParseReply(std::span(buf).first(n));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->header.status, Status::Code::kServerFull);
  EXPECT_EQ(p->header.request_id, 9u);
  EXPECT_EQ(p->header.version, 12u);
  auto st = DecodeStats(p->body);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->size(), 2u);
  EXPECT_EQ((*st)[0].first, "puts");
  EXPECT_EQ((*st)[1].second, 7u);
}

}  // namespace
}  // namespace kvrdma

namespace kvrdma {
namespace {

TEST(LockWordTest, FieldsRoundTripAndTheExpiryRoundsUpToAUnit) {
  const uint64_t w = PackLock(kLockOwnerMax, 200, 1000001);
  EXPECT_EQ(LockOwner(w), kLockOwnerMax);
  EXPECT_EQ(LockKey(w), 200);
  EXPECT_EQ(LockExpiry(w), 1000016u);  // at least as late as asked, at most one unit later
  EXPECT_EQ(LockExpiry(PackLock(1, 1, 1000000)), 1000000u);  // a whole unit stays
  EXPECT_EQ(LockExpiry(PackLock(1, 1, kLockExpiryUnitMs * kLockExpiryMask)), kLockExpiryUnitMs * kLockExpiryMask);
}

TEST(LockWordTest, ALockAllowsOnlyWritesOfKeysItDoesNotCover) {
  const uint64_t now = 300 * kLockExpiryUnitMs, end = now + 6 * kLockExpiryUnitMs;
  const uint64_t k7 = PackLock(3, 7, end), all = PackLock(3, kLockAllKeys, end);
  EXPECT_TRUE(LockAllows(0, 7, 0, 9, now));                      // free
  EXPECT_FALSE(LockAllows(k7, 7, 0, 9, now));                    // held, its key
  EXPECT_TRUE(LockAllows(k7, 8, 0, 9, now));                     // held, another key of the word
  EXPECT_FALSE(LockAllows(all, 8, 0, 9, now));                   // held for every key of the word
  EXPECT_TRUE(LockAllows(k7, 7, k7, 3, now));                    // the holder, with its token
  EXPECT_FALSE(LockAllows(k7, 7, k7, 9, now));                   // a stolen token
  EXPECT_TRUE(LockAllows(k7, 7, 0, 9, end));                     // the lease has ended
  EXPECT_FALSE(LockAllows(k7, 7, 0, 9, end - 1));
}

TEST(LockWordTest, KeyBytesAreNeverTheAllKeysByteAndSpreadOverAllValues) {
  int seen[256] = {};
  for (int i = 0; i < 100000; ++i) {
    const std::string k = "key" + std::to_string(i);
    const LockPlace p = LockPlaceOf(k, 42, 65536);
    ASSERT_NE(p.key, kLockAllKeys);
    ASSERT_GE(p.index, 1u);
    ASSERT_LE(p.index, 65536u);
    seen[p.key]++;
  }
  for (int b = 1; b < 256; ++b) EXPECT_GT(seen[b], 200) << "key byte " << b;  // ~392 each
}

}  // namespace
}  // namespace kvrdma
