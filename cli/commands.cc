#include "cli/commands.h"

#include <spdlog/spdlog.h>

namespace tessera {

int Fail(const Status& s) {
  spdlog::error("{}", s.ToString());
  return 1;
}

}  // namespace tessera
