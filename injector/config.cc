#include "injector/config.h"

namespace smprof::injector {

Config LoadConfig(const GetEnv& getenv_fn, std::vector<std::string>* errors) {
  Config c;
  if (const char* v = getenv_fn(kEnvRunId)) c.run_id = v;
  c.settings = LoadSettings(getenv_fn, errors, &c.kernels_valid);
  return c;
}

}  // namespace smprof::injector
