// POST /v1/receipts/verify (docs/architecture.md, "Receipts"): body
// {"receipt": <the receipt object, or the tessera-receipt header's base64url>,
//  "request": <the /v1/chat/completions body (has "messages") or the
//              /v1/completions body (has "prompt")>}.
// Checks the receipt's signature when it has one (400 code
// invalid_receipt_signature: a receipt this server's --receipt-key did not
// sign is refused whatever it names), its model digests against this server's
// (400 code receipt_model_mismatch), the request as executed against the receipt's
// request digest, then re-executes the request with the recorded seed and
// answers 200 {"result": "equal"} or {"result": "different", ...} naming the
// first differing token (receipt/compare.h).
#pragma once

#include "server/http/openai_routes.h"

namespace tessera {

void RegisterReceiptRoutes(ServeContext* ctx);

}  // namespace tessera
