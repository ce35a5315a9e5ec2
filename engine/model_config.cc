#include "engine/model_config.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tessera {
namespace {

using json = nlohmann::json;

// Field readers: missing → default (or error when required), wrong type → error.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string label) : obj_(obj), label_(std::move(label)) {}

  Status Int(const char* key, int64_t* out, bool required, int64_t min_value = 1) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) {
      if (required) return InvalidArgument(label_ + ": missing required field '" + key + "'");
      return Status::Ok();
    }
    if (!it->is_number_integer()) {
      return InvalidArgument(label_ + ": field '" + key + "' must be an integer, got " + it->dump());
    }
    int64_t v = it->get<int64_t>();
    if (v < min_value) {
      return InvalidArgument(label_ + ": field '" + key + "' must be >= " + std::to_string(min_value) +
                             ", got " + std::to_string(v));
    }
    *out = v;
    return Status::Ok();
  }

  Status Double(const char* key, double* out, bool required, double min_exclusive) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) {
      if (required) return InvalidArgument(label_ + ": missing required field '" + key + "'");
      return Status::Ok();
    }
    if (!it->is_number()) {
      return InvalidArgument(label_ + ": field '" + key + "' must be a number, got " + it->dump());
    }
    double v = it->get<double>();
    if (!(v > min_exclusive)) {
      std::ostringstream os;
      os << label_ << ": field '" << key << "' must be > " << min_exclusive << ", got " << v;
      return InvalidArgument(os.str());
    }
    *out = v;
    return Status::Ok();
  }

  Status Bool(const char* key, bool* out) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return Status::Ok();
    if (!it->is_boolean()) {
      return InvalidArgument(label_ + ": field '" + key + "' must be true or false, got " + it->dump());
    }
    *out = it->get<bool>();
    return Status::Ok();
  }

  Status String(const char* key, std::string* out) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return Status::Ok();
    if (!it->is_string()) {
      return InvalidArgument(label_ + ": field '" + key + "' must be a string, got " + it->dump());
    }
    *out = it->get<std::string>();
    return Status::Ok();
  }

  // An int or a list of ints (eos_token_id takes both forms).
  Status IntList(const char* key, std::vector<int64_t>* out) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return Status::Ok();
    auto bad = [&] {
      return InvalidArgument(label_ + ": field '" + key + "' must be an integer or a list of integers, got " +
                             it->dump());
    };
    if (it->is_number_integer()) {
      out->assign(1, it->get<int64_t>());
      return Status::Ok();
    }
    if (!it->is_array()) return bad();
    out->clear();
    for (const auto& v : *it) {
      if (!v.is_number_integer()) return bad();
      out->push_back(v.get<int64_t>());
    }
    return Status::Ok();
  }

 private:
  const json& obj_;
  std::string label_;
};

Status ParseRopeScaling(const json& root, const std::string& label, ModelConfig* c) {
  auto it = root.find("rope_scaling");
  if (it == root.end() || it->is_null()) return Status::Ok();
  if (!it->is_object()) {
    return InvalidArgument(label + ": field 'rope_scaling' must be an object or null, got " + it->dump());
  }
  const std::string sub = label + ": rope_scaling";
  FieldReader r(*it, sub);
  std::string type;
  RETURN_IF_ERROR(r.String("rope_type", &type));
  if (type.empty()) RETURN_IF_ERROR(r.String("type", &type));
  RopeScaling& s = c->rope_scaling;
  if (type.empty() || type == "default") {
    s.type = RopeScalingType::kNone;
    return Status::Ok();
  }
  if (type == "linear") {
    s.type = RopeScalingType::kLinear;
  } else if (type == "llama3") {
    s.type = RopeScalingType::kLlama3;
  } else if (type == "yarn") {
    s.type = RopeScalingType::kYarn;
  } else {
    return Unimplemented(sub + ": field 'rope_type' value '" + type +
                         "' is not supported (supported: default, linear, llama3, yarn)");
  }
  RETURN_IF_ERROR(r.Double("factor", &s.factor, /*required=*/true, 0.0));
  if (s.type == RopeScalingType::kLlama3) {
    RETURN_IF_ERROR(r.Double("low_freq_factor", &s.low_freq_factor, true, 0.0));
    RETURN_IF_ERROR(r.Double("high_freq_factor", &s.high_freq_factor, true, 0.0));
    RETURN_IF_ERROR(r.Int("original_max_position_embeddings", &s.original_max_position_embeddings, true));
    if (s.high_freq_factor <= s.low_freq_factor) {
      return InvalidArgument(sub + ": field 'high_freq_factor' must be greater than 'low_freq_factor'");
    }
  }
  if (s.type == RopeScalingType::kYarn) {
    s.original_max_position_embeddings = c->max_position_embeddings;
    RETURN_IF_ERROR(r.Int("original_max_position_embeddings", &s.original_max_position_embeddings, false));
    RETURN_IF_ERROR(r.Double("beta_fast", &s.beta_fast, false, 0.0));
    RETURN_IF_ERROR(r.Double("beta_slow", &s.beta_slow, false, 0.0));
    RETURN_IF_ERROR(r.Double("attention_factor", &s.attention_factor, false, 0.0));
    RETURN_IF_ERROR(r.Double("mscale", &s.mscale, false, 0.0));
    RETURN_IF_ERROR(r.Double("mscale_all_dim", &s.mscale_all_dim, false, 0.0));
    RETURN_IF_ERROR(r.Bool("truncate", &s.truncate));
  }
  return Status::Ok();
}

}  // namespace

const std::vector<std::string>& SupportedArchitectures() {
  static const std::vector<std::string> kArchs = {"LlamaForCausalLM", "MistralForCausalLM",
                                                  "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
  return kArchs;
}

int64_t ModelConfig::NumParameters() const {
  const int64_t h = hidden_size;
  const int64_t attn = h * num_q_heads * head_dim * 2 + h * num_kv_heads * head_dim * 2;
  const int64_t mlp = 3 * h * intermediate_size;
  const int64_t emb = vocab_size * h * (tie_word_embeddings ? 1 : 2);
  return emb + num_layers * (attn + mlp + 2 * h) + h;
}

std::string ModelConfig::Summary() const {
  std::ostringstream os;
  os << architecture << ": " << num_layers << " layers, hidden " << hidden_size << ", heads "
     << num_q_heads << "/" << num_kv_heads << " x " << head_dim << ", ffn " << intermediate_size
     << ", vocab " << vocab_size << ", " << NumParameters() / 1e6 << "M params";
  return os.str();
}

StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& label) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return InvalidArgument(label + ": not valid JSON");
  if (!root.is_object()) return InvalidArgument(label + ": top level must be a JSON object");

  ModelConfig c;
  auto archs = root.find("architectures");
  if (archs == root.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    return InvalidArgument(label + ": field 'architectures' must be a non-empty list of strings");
  }
  c.architecture = (*archs)[0].get<std::string>();
  bool known = false;
  for (const auto& a : SupportedArchitectures()) known |= (a == c.architecture);
  if (!known) {
    std::string list;
    for (const auto& a : SupportedArchitectures()) list += (list.empty() ? "" : ", ") + a;
    return Unimplemented(label + ": field 'architectures' names '" + c.architecture +
                         "', which is not supported (supported: " + list + ")");
  }
  FieldReader r(root, label);
  RETURN_IF_ERROR(r.String("model_type", &c.model_type));
  RETURN_IF_ERROR(r.Int("vocab_size", &c.vocab_size, true));
  RETURN_IF_ERROR(r.Int("hidden_size", &c.hidden_size, true));
  RETURN_IF_ERROR(r.Int("intermediate_size", &c.intermediate_size, true));
  RETURN_IF_ERROR(r.Int("num_hidden_layers", &c.num_layers, true));
  RETURN_IF_ERROR(r.Int("num_attention_heads", &c.num_q_heads, true));
  c.num_kv_heads = c.num_q_heads;
  RETURN_IF_ERROR(r.Int("num_key_value_heads", &c.num_kv_heads, false));
  if (c.num_q_heads % c.num_kv_heads != 0) {
    return InvalidArgument(label + ": field 'num_key_value_heads' (" + std::to_string(c.num_kv_heads) +
                           ") must divide 'num_attention_heads' (" + std::to_string(c.num_q_heads) + ")");
  }
  c.head_dim = 0;
  RETURN_IF_ERROR(r.Int("head_dim", &c.head_dim, false));
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_q_heads != 0) {
      return InvalidArgument(label + ": field 'hidden_size' must be divisible by 'num_attention_heads' "
                                     "when 'head_dim' is not given");
    }
    c.head_dim = c.hidden_size / c.num_q_heads;
  }
  if (c.head_dim % 2 != 0) {
    return InvalidArgument(label + ": field 'head_dim' must be even for rotary embeddings, got " +
                           std::to_string(c.head_dim));
  }
  c.max_position_embeddings = 4096;
  RETURN_IF_ERROR(r.Int("max_position_embeddings", &c.max_position_embeddings, false));
  RETURN_IF_ERROR(r.Double("rms_norm_eps", &c.rms_norm_eps, false, 0.0));
  RETURN_IF_ERROR(r.Double("rope_theta", &c.rope_theta, false, 1.0));
  RETURN_IF_ERROR(ParseRopeScaling(root, label, &c));
  RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  RETURN_IF_ERROR(r.String("torch_dtype", &c.torch_dtype));
  RETURN_IF_ERROR(r.IntList("eos_token_id", &c.eos_token_ids));
  RETURN_IF_ERROR(r.Int("bos_token_id", &c.bos_token_id, false, 0));

  // Architecture traits, as data.
  const std::string& a = c.architecture;
  if (a == "Qwen2ForCausalLM") c.qkv_bias = true;
  if (a == "Qwen3ForCausalLM") {
    c.qk_norm = true;
    RETURN_IF_ERROR(r.Bool("attention_bias", &c.qkv_bias));
    c.o_bias = c.qkv_bias;
  }
  if (a == "LlamaForCausalLM" || a == "MistralForCausalLM") {
    RETURN_IF_ERROR(r.Bool("attention_bias", &c.qkv_bias));
    c.o_bias = c.qkv_bias;
    RETURN_IF_ERROR(r.Bool("mlp_bias", &c.mlp_bias));
  }

  // Sliding window: Mistral applies it on every layer when set; Qwen2/3 only with
  // use_sliding_window, on layers >= max_window_layers.
  c.layer_sliding_window.assign(c.num_layers, 0);
  int64_t window = 0;
  RETURN_IF_ERROR(r.Int("sliding_window", &window, false));
  if (window > 0) {
    if (a == "MistralForCausalLM") {
      c.layer_sliding_window.assign(c.num_layers, window);
    } else if (a == "Qwen2ForCausalLM" || a == "Qwen3ForCausalLM") {
      bool use = false;
      RETURN_IF_ERROR(r.Bool("use_sliding_window", &use));
      int64_t max_window_layers = c.num_layers;
      RETURN_IF_ERROR(r.Int("max_window_layers", &max_window_layers, false, 0));
      if (use) {
        for (int64_t i = max_window_layers; i < c.num_layers; ++i) c.layer_sliding_window[i] = window;
      }
    }
  }
  return c;
}

StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open (is --model an HF checkpoint directory?)");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseModelConfig(ss.str(), path);
}

}  // namespace tessera
