// The smallest kvrdma consumer, built with nothing but pkg-config
// (examples/build_with_pkg_config.sh): put, get, delete one key.
//   kvrdma_pc_hello HOST PORT
#include <kvrdma/client.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: kvrdma_pc_hello HOST PORT\n");
    return 2;
  }
  kvrdma::ClientOptions o;
  o.host = argv[1];
  o.port = static_cast<uint16_t>(std::atoi(argv[2]));
  auto c = kvrdma::Client::Connect(o);
  if (!c.ok()) {
    std::fprintf(stderr, "connect: %s\n", c.status().ToString().c_str());
    return 1;
  }
  std::string v;
  kvrdma::Status put = (*c)->Put("pc:hello", "from pkg-config");
  kvrdma::Status get = (*c)->Get("pc:hello", &v);
  kvrdma::Status del = (*c)->Delete("pc:hello");
  std::printf("put %s, get %s -> '%s', delete %s\n", put.ToString().c_str(), get.ToString().c_str(), v.c_str(),
              del.ToString().c_str());
  return put.ok() && get.ok() && v == "from pkg-config" && del.ok() ? 0 : 1;
}
