#include "server/openai/kv_transfer_params.h"

#include <string>

namespace tessera {

using Json = nlohmann::ordered_json;

namespace {

ApiError FieldError(const std::string& field, const std::string& expect) {
  return BadRequest("'kv_transfer_params." + field + "' must be " + expect, "kv_transfer_params." + field);
}

}  // namespace

std::optional<ApiError> ParseKvTransferParams(const Json& body, KvTransferRequest* out) {
  *out = {};
  auto it = body.find("kv_transfer_params");
  if (it == body.end()) return std::nullopt;
  return ParseKvTransferValue(*it, out);
}

std::optional<ApiError> ParseKvTransferValue(const Json& p, KvTransferRequest* out) {
  *out = {};
  if (p.is_null()) return std::nullopt;
  if (!p.is_object()) return BadRequest("'kv_transfer_params' must be an object", "kv_transfer_params");
  auto flag = [&](const char* key, bool* v) -> std::optional<ApiError> {
    auto f = p.find(key);
    if (f == p.end() || f->is_null()) return std::nullopt;
    if (!f->is_boolean()) return FieldError(key, "a boolean");
    *v = f->get<bool>();
    return std::nullopt;
  };
  bool remote_prefill = false;
  if (auto e = flag("do_remote_decode", &out->do_remote_decode)) return e;
  if (auto e = flag("do_remote_prefill", &remote_prefill)) return e;
  if (out->do_remote_decode && remote_prefill) {
    return BadRequest("'kv_transfer_params': do_remote_decode and do_remote_prefill exclude each other",
                      "kv_transfer_params");
  }
  if (!remote_prefill) return std::nullopt;
  RemoteKvSource src;
  auto str = [&](const char* key, std::string* v) -> std::optional<ApiError> {
    auto f = p.find(key);
    if (f == p.end() || !f->is_string() || f->get_ref<const std::string&>().empty()) {
      return FieldError(key, "a non-empty string");
    }
    *v = f->get<std::string>();
    return std::nullopt;
  };
  if (auto e = str("remote_host", &src.host)) return e;
  if (auto e = str("remote_request_id", &src.handle)) return e;
  if (auto f = p.find("remote_engine_id"); f != p.end() && f->is_string()) src.engine_id = f->get<std::string>();
  if (auto f = p.find("remote_signature"); f != p.end() && !f->is_null()) {
    if (!f->is_string()) return FieldError("remote_signature", "a string");
    src.signature = f->get<std::string>();
  }
  auto port = p.find("remote_port");
  if (port == p.end() || !port->is_number_integer() || port->get<int64_t>() < 1 || port->get<int64_t>() > 65535) {
    return FieldError("remote_port", "an integer port in [1, 65535]");
  }
  src.port = port->get<int32_t>();
  auto blocks = p.find("remote_block_ids");
  if (blocks == p.end() || !blocks->is_array()) return FieldError("remote_block_ids", "an array of block ids");
  if (blocks->size() > (1u << 20)) return FieldError("remote_block_ids", "at most 2^20 ids");
  for (const Json& b : *blocks) {
    if (!b.is_number_integer() || b.get<int64_t>() < 0 || b.get<int64_t>() > INT32_MAX) {
      return FieldError("remote_block_ids", "an array of non-negative integers");
    }
    src.block_ids.push_back(b.get<int32_t>());
  }
  out->remote = std::move(src);
  return std::nullopt;
}

Json KvTransferParamsJson(const KvExportInfo& info) {
  Json out = {{"do_remote_prefill", true},     {"do_remote_decode", false},
              {"remote_engine_id", info.engine_id}, {"remote_block_ids", info.block_ids},
              {"remote_host", info.host},      {"remote_port", info.port},
              {"remote_request_id", info.handle}};
  if (!info.signature.empty()) out["remote_signature"] = info.signature;
  return out;
}

std::optional<ApiError> CheckKvTransferCaller(const KvTransferRequest& kv, const KvTransferCaller& caller) {
  if (!kv.do_remote_decode && !kv.remote) return std::nullopt;
  if (!caller.internal_key_configured || caller.internal) return std::nullopt;
  return BadRequest("'kv_transfer_params' is accepted only from this deployment's router (a request authenticated "
                    "with the --internal-api-key-file credential)",
                    "kv_transfer_params", "kv_transfer_not_allowed");
}

}  // namespace tessera
