// The string_view bridges now live with the lowest layer that uses them,
// store/absl_compat.h (src/store never includes src/core). This name stays for
// the code above the store that includes it; include the store header in new code.
#pragma once

#include "store/absl_compat.h"
