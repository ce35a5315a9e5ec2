// What the router and the instances agree on when finished responses live in
// a shared store (serve --responses-store-url; docs/architecture.md, "Router").
#pragma once

#include <string_view>

namespace tessera::responses {

// The router's client's tenant (ApiKeyTenantId), on by-id and create calls it
// relays; an instance honours it only with the internal API key.
inline constexpr std::string_view kOwnerHeader = "x-tessera-owner";
// The error code of the 503 an instance answers when the shared store cannot
// be read; the router relays it instead of trying another instance.
inline constexpr std::string_view kStoreUnavailableCode = "responses_store_unavailable";
// /server_info's "responses_store" of an instance whose store is shared.
inline constexpr std::string_view kSharedStoreKind = "redis";

}  // namespace tessera::responses
