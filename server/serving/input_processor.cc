#include "server/serving/input_processor.h"

#include <utility>

namespace tessera {

StatusOr<GenerateInput> ProcessInput(Request request, bool skip_special_tokens, bool include_stop_str_in_output,
                                     const ModelLimits& limits) {
  RETURN_IF_ERROR(ValidateRequest(request, limits));
  GenerateInput in;
  in.request = std::move(request);
  in.skip_special_tokens = skip_special_tokens;
  in.include_stop_str_in_output = include_stop_str_in_output;
  return in;
}

}  // namespace tessera
