#include "engine/kv_transfer/kv_peer_auth.h"

#include "common/internal_key.h"

namespace tessera {
namespace {

std::string CanonicalSource(const KvSourceFields& s) {
  std::string m;
  m.append(s.host).append("\n").append(std::to_string(s.port)).append("\n");
  m.append(s.handle).append("\n").append(s.engine_id).append("\n");
  for (int32_t b : *s.block_ids) m.append(std::to_string(b)).append(",");
  return m;
}

}  // namespace

KvPeerAuth KvPeerAuth::FromInternalKey(std::string_view internal_key) {
  KvPeerAuth a;
  if (internal_key.empty()) return a;
  a.token = HmacSha256Hex(DeriveInternalKey(internal_key, "kv-control-plane"), "token");
  a.signing_key = DeriveInternalKey(internal_key, "kv-transfer-params");
  return a;
}

std::string SignKvSource(const KvPeerAuth& auth, const KvSourceFields& source) {
  if (!auth.enabled()) return "";
  return HmacSha256Hex(auth.signing_key, CanonicalSource(source));
}

Status CheckKvSource(const KvPeerAuth& auth, const KvSourceFields& source, std::string_view signature) {
  if (auth.enabled()) {
    if (!ConstantTimeEquals(SignKvSource(auth, source), signature)) {
      return InvalidArgument("'kv_transfer_params.remote_signature' is missing or does not match: the parameters "
                              "were not issued by an instance of this deployment (same --internal-api-key-file)");
    }
    return Status::Ok();
  }
  if (!IsLoopbackHost(source.host)) {
    return InvalidArgument("'kv_transfer_params.remote_host' " + std::string(source.host.substr(0, 256)) +
                            " is not a loopback address; pulling KV from another host needs "
                            "--internal-api-key-file on every instance");
  }
  return Status::Ok();
}

bool KvTokenMatches(const KvPeerAuth& auth, std::string_view authorization) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (!auth.enabled() || authorization.substr(0, kPrefix.size()) != kPrefix) return false;
  return ConstantTimeEquals(authorization.substr(kPrefix.size()), auth.token);
}

}  // namespace tessera
