// The version line the programs print for --version: the project version
// (from CMake) and the wire protocol they speak.
#pragma once

#include <string>

#include "common/protocol/handshake.h"

#ifndef KVRDMA_VERSION_STRING
#error "KVRDMA_VERSION_STRING comes from the top-level CMakeLists.txt"
#endif

namespace kvrdma {

inline std::string VersionLine(const char* program) {
  return std::string(program) + " (kvrdma) " + KVRDMA_VERSION_STRING + ", protocol " +
         std::to_string(kProtocolMajor) + "." + std::to_string(kProtocolMinor);
}

}  // namespace kvrdma
