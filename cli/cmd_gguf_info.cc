// `tessera gguf-info FILE`: the header, metadata and tensor table of a GGUF
// file, validated as the loader validates it (text, or JSON with --json), with a
// per-type count/bytes summary and the file's llama.cpp recipe (general.file_type).
// Exits 1 when the file or its model metadata is invalid.
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "engine/gguf.h"
#include "common/log.h"
#include "engine/gguf_model.h"
#include "engine/gguf_recipe.h"
#include "cli/commands.h"

namespace tessera {
namespace {

using ojson = nlohmann::ordered_json;

// Integers as JSON integers (uint64 kept unsigned), floats as doubles; arrays
// keep their first `max_array` elements (all when < 0) and report the length.
ojson ValueJson(const GgufValue& v, int64_t max_array) {
  switch (v.type) {
    case GgufType::kUint8: case GgufType::kUint16: case GgufType::kUint32: case GgufType::kUint64: return v.u;
    case GgufType::kInt8: case GgufType::kInt16: case GgufType::kInt32: case GgufType::kInt64:
      return static_cast<int64_t>(v.u);
    case GgufType::kBool: return v.u != 0;
    case GgufType::kFloat32: case GgufType::kFloat64: return v.f;
    case GgufType::kString: return v.str;
    case GgufType::kArray: {
      ojson a = {{"array_type", GgufTypeName(v.array_type)}, {"length", v.array.size()}};
      ojson vals = ojson::array();
      for (size_t i = 0; i < v.array.size() && (max_array < 0 || static_cast<int64_t>(i) < max_array); ++i) {
        vals.push_back(ValueJson(v.array[i], max_array));
      }
      a["values"] = std::move(vals);
      return a;
    }
  }
  return nullptr;
}

// Tensors and bytes per GGML type, in type-id order.
struct TypeCount {
  uint64_t tensors = 0, bytes = 0;
};
std::map<uint32_t, TypeCount> CountTypes(const GgufContents& c) {
  std::map<uint32_t, TypeCount> out;
  for (const GgufTensor& t : c.tensors) {
    out[t.ggml_type].tensors += 1;
    out[t.ggml_type].bytes += t.nbytes;
  }
  return out;
}

// general.file_type as llama.cpp names it; null when absent, "unknown" ids kept.
ojson FileTypeJson(const GgufContents& c) {
  const GgufValue* v = c.Find("general.file_type");
  const auto id = v ? v->AsInt() : std::nullopt;
  if (!id) return nullptr;
  const LlamaFileType* f = *id >= 0 && *id <= UINT32_MAX ? FindLlamaFileType(static_cast<uint32_t>(*id)) : nullptr;
  if (f == nullptr) return {{"id", *id}, {"name", nullptr}, {"recipe", nullptr}, {"description", "unknown"}};
  return {{"id", *id}, {"name", f->enum_name}, {"recipe", f->recipe}, {"description", f->description}};
}

int Run(const std::string& path, bool as_json, int64_t max_array) {
  auto f = GgufFile::Open(path);
  if (!f.ok()) {
    LogError("{}", f.status().ToString());
    return 1;
  }
  const GgufContents& c = (*f)->contents();
  auto config = GgufModelConfig(c, path);
  if (as_json) {
    ojson j;
    j["version"] = c.version;
    j["alignment"] = c.alignment;
    j["data_offset"] = c.data_offset;
    j["file_bytes"] = (*f)->file_bytes();
    ojson md = ojson::array();
    for (const auto& [k, v] : c.metadata) md.push_back({{"key", k}, {"type", GgufTypeName(v.type)}, {"value", ValueJson(v, max_array)}});
    j["metadata"] = std::move(md);
    ojson ts = ojson::array();
    for (const GgufTensor& t : c.tensors) {
      ts.push_back({{"name", t.name}, {"ne", t.ne}, {"shape", t.shape()}, {"type", GgmlTypeName(t.ggml_type)},
                    {"type_id", t.ggml_type}, {"offset", t.offset}, {"nbytes", t.nbytes}});
    }
    j["tensors"] = std::move(ts);
    ojson types = ojson::array();
    for (const auto& [id, n] : CountTypes(c)) {
      types.push_back({{"type", GgmlTypeName(id)}, {"type_id", id}, {"tensors", n.tensors}, {"bytes", n.bytes}});
    }
    j["types"] = std::move(types);
    j["file_type"] = FileTypeJson(c);
    j["model"] = config.ok() ? ojson(config->Summary()) : ojson(nullptr);
    if (!config.ok()) j["model_error"] = config.status().ToString();
    // Invalid UTF-8 in strings is replaced rather than aborting the dump.
    std::cout << j.dump(2, ' ', false, ojson::error_handler_t::replace) << "\n";
    if (!config.ok()) LogError("{}", config.status().ToString());
    return config.ok() ? 0 : 1;
  }
  std::printf("%s: GGUF v%u, alignment %u, %zu metadata keys, %zu tensors, data at %llu\n", path.c_str(), c.version,
              c.alignment, c.metadata.size(), c.tensors.size(), static_cast<unsigned long long>(c.data_offset));
  for (const auto& [k, v] : c.metadata) {
    std::string val;
    if (v.type == GgufType::kArray) {
      val = "[" + std::string(GgufTypeName(v.array_type)) + " x " + std::to_string(v.array.size()) + "]";
    } else {
      val = ValueJson(v, 0).dump(-1, ' ', false, ojson::error_handler_t::replace);
      if (val.size() > 100) val = val.substr(0, 100) + "...";
    }
    std::printf("  %-48s %-8s %s\n", k.c_str(), std::string(GgufTypeName(v.type)).c_str(), val.c_str());
  }
  for (const GgufTensor& t : c.tensors) {
    std::string ne;
    for (int64_t d : t.ne) ne += (ne.empty() ? "" : ", ") + std::to_string(d);
    std::printf("  %-32s %-6s ne [%s] offset %llu bytes %llu\n", t.name.c_str(),
                std::string(GgmlTypeName(t.ggml_type)).c_str(), ne.c_str(),
                static_cast<unsigned long long>(t.offset), static_cast<unsigned long long>(t.nbytes));
  }
  for (const auto& [id, n] : CountTypes(c)) {
    std::printf("type %-6s %5llu tensors %14llu bytes\n", std::string(GgmlTypeName(id)).c_str(),
                static_cast<unsigned long long>(n.tensors), static_cast<unsigned long long>(n.bytes));
  }
  const ojson ft = FileTypeJson(c);
  if (ft.is_null()) {
    std::printf("file type: not set (no general.file_type)\n");
  } else {
    std::printf("file type: %lld %s (%s)\n", static_cast<long long>(ft["id"].get<int64_t>()),
                ft["recipe"].is_null() ? "unknown" : ft["recipe"].get<std::string>().c_str(),
                ft["description"].get<std::string>().c_str());
  }
  std::printf("model: %s\n", config.ok() ? config->Summary().c_str() : config.status().ToString().c_str());
  // The container may be well formed while the model metadata is not: that is
  // a file the server cannot load, so the exit status says so.
  if (!config.ok()) LogError("{}", config.status().ToString());
  return config.ok() ? 0 : 1;
}

}  // namespace

void AddGgufInfoCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("gguf-info", "Validate a GGUF file and print its metadata and tensors");
  auto path = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto max_array = std::make_shared<int64_t>(16);
  cmd->add_option("file", *path, "the .gguf file")->required();
  cmd->add_flag("--json", *as_json, "print JSON");
  cmd->add_option("--max-array", *max_array, "array elements to print (-1: all)")->capture_default_str();
  cmd->callback([=] { *exit_code = Run(*path, *as_json, *max_array); });
}

}  // namespace tessera
