// OpenAI's Responses API on `tessera serve`: POST /v1/responses,
// GET/DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel and
// GET /v1/responses/{id}/input_items (server/responses/README.md).
#pragma once

#include "server/http/openai_routes.h"

namespace tessera {

// Needs ctx->response_store (not owned; outlives the server).
void RegisterResponsesRoutes(ServeContext* ctx);

}  // namespace tessera
