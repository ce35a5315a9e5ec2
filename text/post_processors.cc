#include "text/post_processors.h"

namespace tessera::text {

Status ParsePostProcessor(const Json& j, const std::string& path, SpecialTokenTemplate* out) {
  ASSIGN_OR_RETURN(std::string type, GetType(j, path));
  if (type == "ByteLevel") return Status::Ok();  // only adjusts offsets
  if (type == "Sequence") {
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) return InvalidArgument(path + ": missing array field 'processors'");
    for (size_t i = 0; i < it->size(); ++i) {
      RETURN_IF_ERROR(ParsePostProcessor((*it)[i], path + ".processors[" + std::to_string(i) + "]", out));
    }
    return Status::Ok();
  }
  if (type != "TemplateProcessing") return Unsupported(path, type);
  auto single = j.find("single");
  if (single == j.end() || !single->is_array()) return InvalidArgument(path + ": missing array field 'single'");
  auto specials = j.find("special_tokens");
  SpecialTokenTemplate t;
  bool seen_a = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& item = (*single)[i];
    const std::string where = path + ".single[" + std::to_string(i) + "]";
    if (!item.is_object()) return InvalidArgument(where + ": expected an object");
    if (auto seq = item.find("Sequence"); seq != item.end()) {
      if (!seq->is_object() || !seq->contains("id") || (*seq)["id"] != "A") {
        return InvalidArgument(where + ": only sequence 'A' is valid in a single template");
      }
      if (seen_a) return InvalidArgument(where + ": sequence 'A' appears twice");
      seen_a = true;
      continue;
    }
    auto sp = item.find("SpecialToken");
    if (sp == item.end() || !sp->is_object() || !sp->contains("id") || !(*sp)["id"].is_string()) {
      return InvalidArgument(where + ": expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}");
    }
    const std::string name = (*sp)["id"].get<std::string>();
    if (specials == j.end() || !specials->is_object() || !specials->contains(name)) {
      return InvalidArgument(where + ": special token '" + name + "' missing from special_tokens");
    }
    const Json& ids = (*specials)[name]["ids"];
    if (!ids.is_array()) return InvalidArgument(path + ".special_tokens['" + name + "'].ids: expected an array");
    auto& dst = seen_a ? t.suffix : t.prefix;
    for (const Json& id : ids) {
      if (!id.is_number_integer()) return InvalidArgument(path + ".special_tokens['" + name + "'].ids: expected integers");
      dst.push_back(id.get<int32_t>());
    }
  }
  if (!seen_a) return InvalidArgument(path + ".single: no sequence 'A'");
  *out = std::move(t);
  return Status::Ok();
}

}  // namespace tessera::text
