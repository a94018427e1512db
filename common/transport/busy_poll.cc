#include "common/transport/busy_poll.h"

#include <sys/resource.h>

namespace kvrdma {

uint64_t InvoluntarySwitches() {
  rusage u{};
  if (getrusage(RUSAGE_THREAD, &u) != 0) return 0;
  return static_cast<uint64_t>(u.ru_nivcsw);
}

}  // namespace kvrdma
