#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <utility>

namespace tessera {
namespace {

using json = nlohmann::json;

struct StDType {
  std::string_view name;
  int64_t size;
  std::optional<DType> dtype;
};

constexpr StDType kDTypes[] = {
    {"BOOL", 1, std::nullopt},    {"U8", 1, std::nullopt},      {"I8", 1, std::nullopt},
    {"F8_E5M2", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"I16", 2, std::nullopt},
    {"U16", 2, std::nullopt},     {"F16", 2, DType::kF16},      {"BF16", 2, DType::kBF16},
    {"I32", 4, DType::kI32},      {"U32", 4, std::nullopt},     {"F32", 4, DType::kF32},
    {"F64", 8, std::nullopt},     {"I64", 8, DType::kI64},      {"U64", 8, std::nullopt},
};

const StDType* LookupDType(std::string_view name) {
  for (const StDType& d : kDTypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::string_view SafetensorsName(DType t) {
  for (const StDType& d : kDTypes) {
    if (d.dtype == t) return d.name;
  }
  return "?";
}

// A name/string for an error message: control bytes escaped, long ones cut,
// so hostile headers cannot produce unreadable or huge messages.
std::string Q(std::string_view s) {
  constexpr size_t kMax = 200;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMax) out += "...";
  return out;
}

std::string ShapeStr(const std::vector<int64_t>& shape) {
  constexpr size_t kMaxDims = 16;
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i == kMaxDims) {
      s += ", ... (" + std::to_string(shape.size()) + " dims)";
      break;
    }
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string RangeStr(uint64_t b, uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + "]";
}

std::string ErrnoStr(int err) { return std::error_code(err, std::generic_category()).message(); }

// Streaming validator for the JSON header: builds tensors/metadata directly,
// never a DOM, so memory stays proportional to the header's size.
class HeaderSax final : public nlohmann::json_sax<json> {
 public:
  HeaderSax(std::string_view label, uint64_t data_bytes, SafetensorsHeader* out)
      : label_(label), data_bytes_(data_bytes), out_(out) {}

  Status TakeStatus() { return std::move(status_); }
  bool done() const { return state_ == State::kDone; }

  bool null() override { return Value(Kind::kNull, 0, nullptr); }
  bool boolean(bool) override { return Value(Kind::kBool, 0, nullptr); }
  bool number_integer(number_integer_t v) override {
    if (v < 0) {
      const std::string s = std::to_string(v);
      return Value(Kind::kNegative, 0, &s);
    }
    return Value(Kind::kUnsigned, static_cast<uint64_t>(v), nullptr);
  }
  bool number_unsigned(number_unsigned_t v) override { return Value(Kind::kUnsigned, v, nullptr); }
  bool number_float(number_float_t, const string_t& raw) override { return Value(Kind::kFloat, 0, &raw); }
  bool string(string_t& v) override { return Value(Kind::kString, 0, &v); }
  bool binary(binary_t&) override { return Value(Kind::kBinary, 0, nullptr); }

  bool start_object(std::size_t) override {
    switch (state_) {
      case State::kRoot: state_ = State::kTop; return true;
      case State::kTopValue:
        if (key_ == "__metadata__") {
          state_ = State::kMeta;
        } else {
          out_->tensors.emplace_back();
          out_->tensors.back().name = std::move(key_);
          has_dtype_ = has_shape_ = has_offsets_ = false;
          state_ = State::kTensor;
        }
        return true;
      case State::kSkip: ++skip_depth_; return true;
      default: return Value(Kind::kObject, 0, nullptr);
    }
  }
  bool start_array(std::size_t) override {
    if (state_ == State::kSkip) {
      ++skip_depth_;
      return true;
    }
    if (state_ == State::kTensorValue && field_ == Field::kShape) {
      state_ = State::kShape;
      return true;
    }
    if (state_ == State::kTensorValue && field_ == Field::kOffsets) {
      state_ = State::kOffsets;
      offsets_count_ = 0;
      return true;
    }
    return Value(Kind::kArray, 0, nullptr);
  }
  bool key(string_t& k) override {
    switch (state_) {
      case State::kTop:
        if (k == "__metadata__") {
          if (seen_metadata_) return Fail(InvalidArgument(label_ + ": duplicate key '__metadata__'"));
          seen_metadata_ = true;
        }
        key_ = std::move(k);
        state_ = State::kTopValue;
        return true;
      case State::kMeta:
        if (out_->metadata.count(k)) {
          return Fail(InvalidArgument(label_ + ": __metadata__ has duplicate key '" + Q(k) + "'"));
        }
        key_ = std::move(k);
        state_ = State::kMetaValue;
        return true;
      case State::kTensor: {
        bool* seen = nullptr;
        if (k == "dtype") {
          field_ = Field::kDType, seen = &has_dtype_;
        } else if (k == "shape") {
          field_ = Field::kShape, seen = &has_shape_;
        } else if (k == "data_offsets") {
          field_ = Field::kOffsets, seen = &has_offsets_;
        } else {
          state_ = State::kSkip;  // unknown field: ignored, like the reference
          skip_depth_ = 0;
          return true;
        }
        if (*seen) return Bad("duplicate field '" + k + "'");
        *seen = true;
        state_ = State::kTensorValue;
        return true;
      }
      case State::kSkip: return true;
      default: return Fail(Internal(label_ + ": unexpected JSON key"));
    }
  }
  bool end_object() override {
    switch (state_) {
      case State::kTop: state_ = State::kDone; return true;
      case State::kMeta: state_ = State::kTop; return true;
      case State::kTensor: state_ = State::kTop; return FinishTensor();
      case State::kSkip: return EndSkipped();
      default: return Fail(Internal(label_ + ": unexpected end of JSON object"));
    }
  }
  bool end_array() override {
    switch (state_) {
      case State::kShape: state_ = State::kTensor; return true;
      case State::kOffsets:
        if (offsets_count_ != 2) {
          return Bad("data_offsets has " + std::to_string(offsets_count_) +
                     " elements, expected 2 [begin, end]");
        }
        state_ = State::kTensor;
        return true;
      case State::kSkip: return EndSkipped();
      default: return Fail(Internal(label_ + ": unexpected end of JSON array"));
    }
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    return Fail(InvalidArgument(label_ + ": header is not valid JSON: " + Q(ex.what())));
  }

 private:
  enum class State {
    kRoot,
    kTop,
    kTopValue,
    kMeta,
    kMetaValue,
    kTensor,
    kTensorValue,
    kShape,
    kOffsets,
    kSkip,
    kDone
  };
  enum class Field { kDType, kShape, kOffsets };
  enum class Kind { kNull, kBool, kNegative, kUnsigned, kFloat, kString, kBinary, kObject, kArray };

  static const char* Describe(Kind k) {
    static constexpr const char* kNames[] = {
        "null",     "a boolean",   "a negative integer", "an integer", "a non-integer number",
        "a string", "binary data", "an object",          "an array"};
    return kNames[static_cast<int>(k)];
  }

  bool Fail(Status s) {
    if (status_.ok()) status_ = std::move(s);
    return false;
  }
  Status TensorError(StatusCode code, const std::string& msg) const {
    return Status(code, label_ + ": tensor '" + Q(out_->tensors.back().name) + "': " + msg);
  }
  // An InvalidArgument about the current tensor.
  bool Bad(const std::string& msg) { return Fail(TensorError(StatusCode::kInvalidArgument, msg)); }
  bool EndSkipped() {
    if (--skip_depth_ == 0) state_ = State::kTensor;
    return true;
  }

  // Any value or container start where only the state decides validity.
  // `text` is the string value or the number's text.
  bool Value(Kind kind, uint64_t u, const std::string* text) {
    auto found = [kind] { return std::string(" (found ") + Describe(kind) + ")"; };
    switch (state_) {
      case State::kRoot: return Fail(InvalidArgument(label_ + ": header is not a JSON object" + found()));
      case State::kTopValue:
        if (key_ == "__metadata__") {
          return Fail(InvalidArgument(label_ + ": __metadata__ is not an object" + found()));
        }
        return Fail(InvalidArgument(label_ + ": tensor '" + Q(key_) + "': entry is not an object" + found()));
      case State::kMetaValue:
        if (kind != Kind::kString) {
          return Fail(InvalidArgument(label_ + ": __metadata__ value for key '" + Q(key_) +
                                      "' is not a string" + found()));
        }
        out_->metadata.emplace(std::move(key_), *text);
        state_ = State::kMeta;
        return true;
      case State::kTensorValue:
        if (field_ == Field::kDType) {
          if (kind != Kind::kString) return Bad("dtype is not a string" + found());
          out_->tensors.back().dtype_name = *text;
          state_ = State::kTensor;
          return true;
        }
        return Bad(std::string(field_ == Field::kShape ? "shape" : "data_offsets") + " is not an array" +
                   found());
      case State::kShape:
      case State::kOffsets: {
        const bool shape = state_ == State::kShape;
        const std::string field = shape ? "shape" : "data_offsets";
        if (kind == Kind::kNegative || kind == Kind::kFloat) {
          return Bad(field + " has " + (kind == Kind::kFloat ? "non-integer" : "negative") + " element " +
                     Q(*text));
        }
        if (kind != Kind::kUnsigned) return Bad(field + " element is not an integer" + found());
        SafetensorsTensor& t = out_->tensors.back();
        if (shape) {
          if (u > static_cast<uint64_t>(INT64_MAX))
            return Bad("shape dimension " + std::to_string(u) + " is too large");
          t.shape.push_back(static_cast<int64_t>(u));
        } else {
          if (offsets_count_ >= 2) return Bad("data_offsets has more than 2 elements, expected [begin, end]");
          (offsets_count_ == 0 ? t.begin : t.end) = u;
          ++offsets_count_;
        }
        return true;
      }
      case State::kSkip:
        if (skip_depth_ == 0) state_ = State::kTensor;
        return true;
      default: return Fail(Internal(label_ + ": unexpected JSON value"));
    }
  }

  bool FinishTensor() {
    SafetensorsTensor& t = out_->tensors.back();
    const char* missing = !has_dtype_     ? "dtype"
                          : !has_shape_   ? "shape"
                          : !has_offsets_ ? "data_offsets"
                                          : nullptr;
    if (missing) return Bad(std::string("missing field '") + missing + "'");
    const StDType* dt = LookupDType(t.dtype_name);
    if (!dt) return Bad("unknown dtype '" + Q(t.dtype_name) + "'");
    t.dtype = dt->dtype;
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) ||
          numel > static_cast<uint64_t>(INT64_MAX)) {
        return Bad("shape " + ShapeStr(t.shape) + " has too many elements");
      }
    }
    uint64_t need = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dt->size), &need))
      return Bad("shape " + ShapeStr(t.shape) + " of " + t.dtype_name + " is too large");
    const std::string offs = "data_offsets " + RangeStr(t.begin, t.end);
    if (t.begin > t.end) return Bad(offs + " has begin > end");
    if (t.end > data_bytes_) {
      return Fail(TensorError(StatusCode::kDataLoss, offs + " extends past the data buffer (" +
                                                         std::to_string(data_bytes_) +
                                                         " bytes; file truncated?)"));
    }
    if (t.end - t.begin != need) {
      return Bad(offs + " has " + std::to_string(t.end - t.begin) + " bytes but shape " + ShapeStr(t.shape) +
                 " of " + t.dtype_name + " needs " + std::to_string(need));
    }
    return true;
  }

  const std::string label_;
  const uint64_t data_bytes_;
  SafetensorsHeader* out_;
  Status status_;
  State state_ = State::kRoot;
  std::string key_;  // pending top-level or metadata key
  Field field_ = Field::kDType;
  bool has_dtype_ = false, has_shape_ = false, has_offsets_ = false;
  bool seen_metadata_ = false;
  int offsets_count_ = 0;
  uint64_t skip_depth_ = 0;
};

// Duplicate names, then: sorted by offsets, tensors must tile [0, data_bytes).
Status CheckLayout(SafetensorsHeader& h, const std::string& label) {
  std::vector<const SafetensorsTensor*> by_name;
  by_name.reserve(h.tensors.size());
  for (const SafetensorsTensor& t : h.tensors) by_name.push_back(&t);
  std::sort(by_name.begin(), by_name.end(),
            [](const SafetensorsTensor* a, const SafetensorsTensor* b) { return a->name < b->name; });
  for (size_t i = 1; i < by_name.size(); ++i) {
    if (by_name[i]->name == by_name[i - 1]->name) {
      return InvalidArgument(label + ": duplicate tensor name '" + Q(by_name[i]->name) + "'");
    }
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  uint64_t covered = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor& t : h.tensors) {
    auto what = [&] {
      return label + ": tensor '" + Q(t.name) + "': data_offsets " + RangeStr(t.begin, t.end);
    };
    if (t.begin < covered) {
      return InvalidArgument(what() + " overlaps tensor '" + Q(prev->name) + "' " +
                             RangeStr(prev->begin, prev->end));
    }
    if (t.begin > covered) {
      return InvalidArgument(what() + " leaves a hole: data bytes [" + std::to_string(covered) + ", " +
                             std::to_string(t.begin) + ") belong to no tensor");
    }
    covered = t.end;
    prev = &t;
  }
  if (covered != h.data_bytes) {
    return InvalidArgument(label + ": data buffer has " + std::to_string(h.data_bytes) +
                           " bytes but tensors cover only " + std::to_string(covered) +
                           (prev ? " (ending with tensor '" + Q(prev->name) + "' data_offsets " +
                                       RangeStr(prev->begin, prev->end) + ")"
                                 : std::string(" (no tensors)")));
  }
  return Status::Ok();
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

Status OpenError(const std::string& path, int err) {
  const std::string msg = path + ": cannot open: " + ErrnoStr(err);
  if (err == ENOENT || err == ENOTDIR) return NotFound(msg);
  return FailedPrecondition(msg);
}

StatusOr<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OpenError(path, errno);
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return FailedPrecondition(path + ": read failed: " + ErrnoStr(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      ::close(fd);
      return InvalidArgument(path + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
  }
  ::close(fd);
  return out;
}

bool IsPlainFileName(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos;
}

// Parses index.json into shard -> listed tensor names, rejecting duplicate keys
// (json::parse would silently keep the last one).
StatusOr<std::map<std::string, std::vector<std::string>>> ParseIndex(const std::string& path,
                                                                     const std::string& text) {
  struct Level {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Level> stack;
  std::string dup_key;
  bool dup_in_weight_map = false, dup = false;
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) {
      stack.emplace_back();
    } else if (ev == json::parse_event_t::object_end) {
      if (!stack.empty()) stack.pop_back();
    } else if (ev == json::parse_event_t::key && !stack.empty() && parsed.is_string()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!stack.back().keys.insert(k).second && !dup) {
        dup = true;
        dup_key = k;
        dup_in_weight_map = stack.size() == 2 && stack[0].last_key == "weight_map";
      }
      stack.back().last_key = k;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, cb, /*allow_exceptions=*/true);
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": not valid JSON: " + Q(e.what()));
  }
  if (dup) {
    if (dup_in_weight_map)
      return InvalidArgument(path + ": weight_map lists tensor '" + Q(dup_key) + "' twice");
    return InvalidArgument(path + ": duplicate key '" + Q(dup_key) + "'");
  }
  if (!j.is_object()) return InvalidArgument(path + ": not a JSON object");
  auto it = j.find("weight_map");
  if (it == j.end()) return InvalidArgument(path + ": missing field 'weight_map'");
  if (!it->is_object()) return InvalidArgument(path + ": field 'weight_map' is not an object");
  if (it->empty()) return InvalidArgument(path + ": field 'weight_map' is empty");
  std::map<std::string, std::vector<std::string>> shards;
  for (auto& [name, shard] : it->items()) {
    if (!shard.is_string()) {
      return InvalidArgument(path + ": weight_map entry for tensor '" + Q(name) + "' is not a string");
    }
    const std::string& file = shard.get_ref<const std::string&>();
    if (!IsPlainFileName(file)) {
      return InvalidArgument(path + ": weight_map entry for tensor '" + Q(name) + "' names shard '" +
                             Q(file) + "', which is not a plain file name in the model directory");
    }
    shards[file].push_back(name);
  }
  return shards;
}

Status WriteAll(int fd, const uint8_t* p, uint64_t n, const std::string& path, uint64_t* written) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<uint64_t>(n, 1ull << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      const bool full = err == ENOSPC || err == EDQUOT || err == EFBIG;
      return Status(full ? StatusCode::kResourceExhausted : StatusCode::kInternal,
                    path + ": short write after " + std::to_string(*written) + " bytes: " + ErrnoStr(err));
    }
    p += w;
    n -= static_cast<uint64_t>(w);
    *written += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t SafetensorsDTypeSize(std::string_view name) {
  const StDType* d = LookupDType(name);
  return d ? d->size : 0;
}

StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* bytes, size_t size,
                                                   std::string_view file_label) {
  const std::string label(file_label);
  if (size < 8) {
    return DataLoss(label + ": file has " + std::to_string(size) +
                    " bytes, shorter than the 8-byte header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kSafetensorsMaxHeaderBytes) {
    return InvalidArgument(label + ": header length " + std::to_string(n) + " exceeds the " +
                           std::to_string(kSafetensorsMaxHeaderBytes) +
                           "-byte limit (not a safetensors file?)");
  }
  if (n > size - 8) {
    return DataLoss(label + ": header length " + std::to_string(n) + " runs past the end of the file (" +
                    std::to_string(size) + " bytes)");
  }
  SafetensorsHeader h;
  h.header_bytes = n;
  h.data_offset = 8 + n;
  h.data_bytes = size - h.data_offset;
  try {
    HeaderSax sax(label, h.data_bytes, &h);
    const char* first = reinterpret_cast<const char*>(bytes + 8);
    const bool ok = json::sax_parse(first, first + n, &sax, nlohmann::detail::input_format_t::json,
                                    /*strict=*/true);
    Status st = sax.TakeStatus();
    if (!st.ok()) return st;
    if (!ok || !sax.done()) return InvalidArgument(label + ": header is not a complete JSON object");
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(label + ": out of memory parsing the header");
  } catch (const std::exception& e) {
    return InvalidArgument(label + ": header is not valid JSON: " + Q(e.what()));
  }
  RETURN_IF_ERROR(CheckLayout(h, label));
  for (SafetensorsTensor& t : h.tensors) {
    t.data = bytes + h.data_offset + t.begin;
    t.file = label;
  }
  return h;
}

// ---------------------------------------------------------------------------
// SafetensorsFile

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  ASSIGN_OR_RETURN(f->file_, MappedFile::Open(path));
  // Default readahead suits both header parsing and sequential weight loads.
  ASSIGN_OR_RETURN(f->header_, ParseSafetensorsHeader(f->file_->data(), f->file_->size(), path));
  for (size_t i = 0; i < f->header_.tensors.size(); ++i) f->index_.emplace(f->header_.tensors[i].name, i);
  return f;
}

SafetensorsFile::~SafetensorsFile() = default;

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

// ---------------------------------------------------------------------------
// WeightStore

StatusOr<std::unique_ptr<WeightStore>> WeightStore::Open(const std::string& model_dir) {
  std::unique_ptr<WeightStore> ws(new WeightStore());
  ws->dir_ = model_dir;
  const std::string index_path = JoinPath(model_dir, "model.safetensors.index.json");
  const std::string single_path = JoinPath(model_dir, "model.safetensors");
  struct stat st;
  if (::stat(index_path.c_str(), &st) == 0) {
    ASSIGN_OR_RETURN(std::string text, ReadSmallFile(index_path, kSafetensorsMaxHeaderBytes));
    ASSIGN_OR_RETURN(auto shards, ParseIndex(index_path, text));
    for (const auto& [shard, names] : shards) {
      auto file = SafetensorsFile::Open(JoinPath(model_dir, shard));
      if (!file.ok()) {
        return Status(file.status().code(), index_path + ": shard '" + Q(shard) + "' (listed for tensor '" +
                                                Q(names.front()) + "'): " + file.status().message());
      }
      for (const std::string& name : names) {
        if (!(*file)->Find(name)) {
          return InvalidArgument(index_path + ": weight_map puts tensor '" + Q(name) + "' in '" + Q(shard) +
                                 "', but that file has no such tensor");
        }
      }
      ws->files_.push_back(std::move(file).value());
    }
  } else if (errno != ENOENT && errno != ENOTDIR) {
    return FailedPrecondition(index_path + ": cannot stat: " + ErrnoStr(errno));
  } else if (::stat(single_path.c_str(), &st) == 0) {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single_path));
    ws->files_.push_back(std::move(file));
  } else {
    return NotFound(model_dir + ": no model.safetensors.index.json or model.safetensors");
  }
  for (const auto& f : ws->files_) {
    ws->total_bytes_ += static_cast<int64_t>(f->file_bytes());
    for (const SafetensorsTensor& t : f->tensors()) {
      auto [it, inserted] = ws->tensors_.emplace(t.name, &t);
      if (!inserted) {
        return InvalidArgument(model_dir + ": tensor '" + Q(t.name) + "' is in both " + it->second->file +
                               " and " + t.file);
      }
    }
  }
  return ws;
}

const SafetensorsTensor* WeightStore::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

std::vector<std::string> WeightStore::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) names.push_back(name);
  return names;
}

StatusOr<const SafetensorsTensor*> WeightStore::Require(std::string_view name,
                                                        std::initializer_list<int64_t> expected_shape) const {
  const SafetensorsTensor* t = Find(name);
  if (!t) return NotFound(dir_ + ": missing tensor '" + Q(name) + "'");
  const std::vector<int64_t> want(expected_shape);
  if (t->shape != want) {
    return InvalidArgument(t->file + ": tensor '" + Q(name) + "' has shape " + ShapeStr(t->shape) +
                           ", expected " + ShapeStr(want));
  }
  if (!t->dtype || (*t->dtype != DType::kF32 && *t->dtype != DType::kF16 && *t->dtype != DType::kBF16)) {
    return Unimplemented(t->file + ": tensor '" + Q(name) + "' has dtype " + Q(t->dtype_name) +
                         "; weights must be F32, F16 or BF16");
  }
  return t;
}

// ---------------------------------------------------------------------------
// Writer

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsTensorToWrite*> order;
  order.reserve(tensors.size());
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::vector<uint64_t> sizes;
  uint64_t max_size = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const SafetensorsTensorToWrite& t = *order[i];
    const std::string what = path + ": tensor '" + Q(t.name) + "': ";
    if (i > 0 && t.name == order[i - 1]->name) return InvalidArgument(what + "duplicate name");
    if (t.name == "__metadata__") return InvalidArgument(what + "name is reserved");
    if (!t.fill) return InvalidArgument(what + "no fill function");
    uint64_t n = t.u8 ? 1 : static_cast<uint64_t>(DTypeSize(t.dtype));
    for (int64_t d : t.shape) {
      if (d < 0) return InvalidArgument(what + "shape " + ShapeStr(t.shape) + " has a negative dimension");
      if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > (1ull << 62)) {
        return InvalidArgument(what + "shape " + ShapeStr(t.shape) + " is too large");
      }
    }
    sizes.push_back(n);
    max_size = std::max(max_size, n);
  }

  std::string header = "{";
  uint64_t offset = 0;
  try {
    if (!metadata.empty()) header += "\"__metadata__\":" + json(metadata).dump() + ",";
    for (size_t i = 0; i < order.size(); ++i) {
      const SafetensorsTensorToWrite& t = *order[i];
      const std::string dtype(t.u8 ? "U8" : SafetensorsName(t.dtype));
      header += json(t.name).dump() + ":{\"dtype\":\"" + dtype + "\",\"shape\":[";
      for (size_t d = 0; d < t.shape.size(); ++d) header += (d ? "," : "") + std::to_string(t.shape[d]);
      header +=
          "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + sizes[i]) + "]},";
      offset += sizes[i];
    }
  } catch (const std::exception& e) {
    return InvalidArgument(
        path + ": cannot encode tensor name or metadata as JSON (invalid UTF-8?): " + Q(e.what()));
  }
  if (header.back() == ',') header.pop_back();
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return OpenError(path, errno);
  struct stat st;
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  uint64_t written = 0;
  Status status = [&]() -> Status {
    uint8_t len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
    RETURN_IF_ERROR(WriteAll(fd, len, 8, path, &written));
    RETURN_IF_ERROR(
        WriteAll(fd, reinterpret_cast<const uint8_t*>(header.data()), header.size(), path, &written));
    try {
      std::vector<uint8_t> buf;
      buf.reserve(max_size);
      for (size_t i = 0; i < order.size(); ++i) {
        if (sizes[i] == 0) continue;  // nothing to fill
        buf.assign(sizes[i], 0);
        order[i]->fill(buf.data());
        RETURN_IF_ERROR(WriteAll(fd, buf.data(), sizes[i], path, &written));
      }
    } catch (const std::bad_alloc&) {
      return ResourceExhausted(path + ": out of memory for a " + std::to_string(max_size) +
                               "-byte tensor buffer");
    } catch (const std::exception& e) {
      return Internal(path + ": tensor fill failed: " + Q(e.what()));
    }
    return Status::Ok();
  }();
  if (::close(fd) != 0 && status.ok()) {
    status = ResourceExhausted(path + ": close failed: " + ErrnoStr(errno));
  }
  if (!status.ok() && regular) ::unlink(path.c_str());
  return status;
}

}  // namespace tessera
