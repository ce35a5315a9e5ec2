// The Anthropic Messages API routes of `tessera serve`: POST /v1/messages
// (JSON or SSE) and POST /v1/messages/count_tokens. Errors in Anthropic's
// shape (anthropic/errors.h), authentication included (x-api-key or Bearer).
// Parsing, templates and tokenization run on ServeContext::workers, the
// generation on a GenerationJob (generation_job.h).
#pragma once

#include "server/http/openai_routes.h"

namespace tessera {

void RegisterAnthropicRoutes(ServeContext* ctx);

}  // namespace tessera
