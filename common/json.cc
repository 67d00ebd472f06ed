// The json templates common/json.h declares, instantiated once for every
// smprof binary.
#include "common/json.h"

#ifdef SMPROF_JSON_TEMPLATES
SMPROF_JSON_TEMPLATES()
#endif
