// Internal code includes Status from here; the definition is public
// (client/include/kvrdma/status.h) because the client API returns it.
#pragma once

#include "kvrdma/status.h"
