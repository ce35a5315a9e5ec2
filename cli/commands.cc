#include "cli/commands.h"
#include "common/log.h"


namespace tessera {

int Fail(const Status& s) {
  LogError("{}", s.ToString());
  return 1;
}

}  // namespace tessera
