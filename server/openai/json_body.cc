#include "server/openai/json_body.h"

#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace tessera::openai {
namespace {

using Json = nlohmann::ordered_json;

// SAX handler building the document itself. Members of an object are appended
// to ordered_map's underlying vector directly (O(1)); duplicates are found with
// a hash set per open object instead of ordered_map's linear search.
class BoundedBuilder {
 public:
  BoundedBuilder(const JsonLimits& limits, Json* root) : limits_(limits), root_(root) {}

  bool null() { return Value(Json(nullptr)); }
  bool boolean(bool v) { return Value(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return Value(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return Value(Json(v)); }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return Value(Json(v)); }
  bool string(Json::string_t& v) { return Value(Json(std::move(v))); }
  bool binary(Json::binary_t&) { return Fail("The request body holds binary data"); }

  bool start_object(std::size_t) { return Open(Json::object()); }
  bool key(Json::string_t& k) {
    Frame& f = stack_.back();
    if (++f.keys > limits_.max_object_keys) {
      return Fail("A JSON object in the request body has more than " + std::to_string(limits_.max_object_keys) +
                  " keys (the limit)");
    }
    if (!f.seen.insert(k).second) {
      return Fail("Duplicate key \"" + k.substr(0, 64) + "\" in a JSON object of the request body");
    }
    key_ = std::move(k);
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t) { return Open(Json::array()); }
  bool end_array() { return Close(); }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) {
    if (error_.empty()) error_ = "The request body is not valid JSON (at byte " + std::to_string(position) + ")";
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  struct Frame {
    Json* node = nullptr;
    int64_t keys = 0;
    std::unordered_set<std::string> seen;  // objects only
  };

  bool Fail(std::string message) {
    error_ = std::move(message);
    return false;
  }

  // Places `v` in the innermost open container (or as the root); returns it.
  Json* Place(Json&& v) {
    if (stack_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    Json* parent = stack_.back().node;
    if (parent->is_array()) {
      auto& arr = parent->get_ref<Json::array_t&>();
      arr.push_back(std::move(v));
      return &arr.back();
    }
    // The base vector of ordered_map: appending skips its linear key search
    // (key() already refused duplicates).
    auto& members = static_cast<Json::object_t::Container&>(parent->get_ref<Json::object_t&>());
    members.emplace_back(std::move(key_), std::move(v));
    return &members.back().second;
  }

  bool Count() {
    if (++elements_ > limits_.max_elements) {
      return Fail("The request body holds more than " + std::to_string(limits_.max_elements) +
                  " JSON values (the limit)");
    }
    return true;
  }

  bool Value(Json&& v) {
    if (!Count()) return false;
    Place(std::move(v));
    return true;
  }

  bool Open(Json&& container) {
    if (!Count()) return false;
    if (static_cast<int>(stack_.size()) >= limits_.max_depth) {
      return Fail("The request body nests JSON deeper than " + std::to_string(limits_.max_depth) + " levels");
    }
    // A parent's vector does not grow while this child is open (only the
    // innermost container gets values), so the pointer stays valid.
    Frame f;
    f.node = Place(std::move(container));
    stack_.push_back(std::move(f));
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  const JsonLimits& limits_;
  Json* root_;
  std::vector<Frame> stack_;
  std::string key_;
  int64_t elements_ = 0;
  std::string error_;
};

}  // namespace

std::optional<ApiError> ParseJsonBounded(std::string_view body, const JsonLimits& limits, Json* out) {
  Json root;
  BoundedBuilder builder(limits, &root);
  const bool ok = Json::sax_parse(body.begin(), body.end(), &builder, nlohmann::detail::input_format_t::json,
                                  /*strict=*/true, /*ignore_comments=*/false);
  if (!ok) {
    return BadRequest(builder.error().empty() ? "The request body is not valid JSON" : builder.error());
  }
  *out = std::move(root);
  return std::nullopt;
}

}  // namespace tessera::openai
