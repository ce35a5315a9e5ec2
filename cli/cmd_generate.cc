// `tessera generate`: offline batch generation through the engine loop (the
// same scheduler the server uses). Prompts come from --prompt / --prompt-ids
// arguments, or from --input FILE ("-": stdin), one per line: plain text
// (needs the model's tokenizer.json), a JSON array of token ids, or a JSON
// object {"id", "prompt": text | [ids], "prompt_token_ids", and optional
// "max_tokens", "temperature", "top_p", "top_k", "seed", "n"}. Writes one
// JSONL result (or plain text, --format text) per prompt, in input order, to --output (default stdout); a
// progress bar goes to stderr. --bench measures decode throughput at the
// given batch sizes instead.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/engine_loop.h"
#include "common/log.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "text/gguf_tokenizer.h"
#include "text/tokenizer.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct GenerateArgs {
  std::string model, input, output;
  std::string format = "jsonl";  // jsonl | text
  std::vector<std::string> prompts, prompt_ids;
  bool ids_only = false, no_progress = false;
  SamplingParams params;
  int32_t max_tokens = 16;
  int64_t seed = -1;
  int num_threads = 0;
  int32_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  int64_t kv_cache_mb = 512;
  bool kv_cache_mb_set = false;
  std::string device = "cpu";
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;
  bool deterministic = false;
  std::vector<int32_t> bench_batches;
  std::string speculative_config;  // JSON, vLLM's fields
  int32_t bench_prompt_len = 32;
  int32_t bench_tokens = 32;
};

struct Prompt {
  std::string id;
  std::vector<int32_t> ids;
  SamplingParams params;
};

StatusOr<std::vector<int32_t>> ParseIdList(const std::string& s) {
  std::vector<int32_t> ids;
  std::string tok;
  std::stringstream ss(s);
  for (char c : s) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == ',' || c == ' ' || c == '\t')) {
      return InvalidArgument("not a token-id list: '" + s + "'");
    }
  }
  while (std::getline(ss, tok, ',')) {
    std::stringstream ts(tok);
    int64_t v;
    while (ts >> v) ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

StatusOr<std::vector<int32_t>> JsonIds(const json& j, const std::string& where) {
  if (!j.is_array()) return InvalidArgument(where + ": token ids must be an array of integers");
  std::vector<int32_t> ids;
  for (const json& v : j) {
    if (!v.is_number_integer()) return InvalidArgument(where + ": token ids must be integers");
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

class PromptReader {
 public:
  PromptReader(const GenerateArgs& a, const text::Tokenizer* tok) : a_(a), tok_(tok) {}

  StatusOr<std::vector<int32_t>> Text(const std::string& s, const std::string& where) {
    if (tok_ == nullptr) {
      return InvalidArgument(where + ": text prompts need the model's tokenizer.json (none loaded); " +
                             "pass token ids instead");
    }
    return tok_->Encode(s);
  }

  Status Line(const std::string& line, int64_t lineno) {
    const std::string where = "line " + std::to_string(lineno);
    Prompt p{"prompt-" + std::to_string(out.size()), {}, a_.params};
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) return Status::Ok();
    if (line[first] == '{' || line[first] == '[') {
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded()) return InvalidArgument(where + ": invalid JSON");
      if (j.is_array()) {
        ASSIGN_OR_RETURN(p.ids, JsonIds(j, where));
      } else {
        if (j.contains("id")) p.id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();
        if (j.contains("prompt_token_ids")) {
          ASSIGN_OR_RETURN(p.ids, JsonIds(j["prompt_token_ids"], where));
        } else if (j.contains("prompt") && j["prompt"].is_string()) {
          ASSIGN_OR_RETURN(p.ids, Text(j["prompt"].get<std::string>(), where));
        } else if (j.contains("prompt")) {
          ASSIGN_OR_RETURN(p.ids, JsonIds(j["prompt"], where));
        } else {
          return InvalidArgument(where + ": needs \"prompt\" or \"prompt_token_ids\"");
        }
        try {
          if (j.contains("max_tokens")) p.params.max_tokens = j["max_tokens"].get<int32_t>();
          if (j.contains("temperature")) p.params.temperature = j["temperature"].get<float>();
          if (j.contains("top_p")) p.params.top_p = j["top_p"].get<float>();
          if (j.contains("top_k")) p.params.top_k = j["top_k"].get<int32_t>();
          if (j.contains("seed")) p.params.seed = j["seed"].get<uint64_t>();
          if (j.contains("n")) p.params.n = j["n"].get<int32_t>();
        } catch (const json::exception& e) {
          return InvalidArgument(where + ": " + e.what());
        }
      }
    } else if (a_.ids_only || tok_ == nullptr) {
      ASSIGN_OR_RETURN(p.ids, ParseIdList(line));
    } else {
      ASSIGN_OR_RETURN(p.ids, Text(line, where));
    }
    out.push_back(std::move(p));
    return Status::Ok();
  }

  std::vector<Prompt> out;

 private:
  const GenerateArgs& a_;
  const text::Tokenizer* tok_;
};

void DrawProgress(int64_t done, int64_t total, int64_t tokens, double secs) {
  const int width = 30;
  const int filled = total == 0 ? width : static_cast<int>(width * done / total);
  std::fprintf(stderr, "\r[%s%s] %lld/%lld  %lld tok  %.1f tok/s ", std::string(filled, '#').c_str(),
               std::string(width - filled, '.').c_str(), static_cast<long long>(done),
               static_cast<long long>(total), static_cast<long long>(tokens), secs > 0 ? tokens / secs : 0.0);
  std::fflush(stderr);
}

struct ChoiceResult {
  std::vector<int32_t> ids;
  std::vector<TokenLogprobs> logprobs;
  FinishReason reason = FinishReason::kNone;
};

// Drains every stream, polling; returns per-prompt choices.
std::vector<std::vector<ChoiceResult>> Collect(const std::vector<RequestStreamPtr>& streams,
                                               const std::vector<int32_t>& num_choices, bool progress,
                                               std::vector<Status>* errors) {
  std::vector<std::vector<ChoiceResult>> results(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) results[i].resize(static_cast<size_t>(num_choices[i]));
  errors->assign(streams.size(), Status::Ok());
  std::vector<bool> done(streams.size(), false);
  int64_t num_done = 0, tokens = 0;
  const auto start = Clock::now();
  while (num_done < static_cast<int64_t>(streams.size())) {
    for (size_t i = 0; i < streams.size(); ++i) {
      if (done[i]) continue;
      RequestOutput o;
      while (streams[i]->TryNext(&o)) {
        if (!o.status.ok()) (*errors)[i] = o.status;
        ChoiceResult& c = results[i][o.index];
        c.ids.insert(c.ids.end(), o.token_ids.begin(), o.token_ids.end());
        c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
        if (o.finish_reason != FinishReason::kNone) c.reason = o.finish_reason;
        tokens += static_cast<int64_t>(o.token_ids.size());
      }
      if (streams[i]->finished()) {
        while (streams[i]->TryNext(&o)) {
          ChoiceResult& c = results[i][o.index];
          c.ids.insert(c.ids.end(), o.token_ids.begin(), o.token_ids.end());
          if (o.finish_reason != FinishReason::kNone) c.reason = o.finish_reason;
          if (!o.status.ok()) (*errors)[i] = o.status;
        }
        done[i] = true;
        ++num_done;
      }
    }
    if (progress) {
      DrawProgress(num_done, static_cast<int64_t>(streams.size()), tokens,
                   std::chrono::duration<double>(Clock::now() - start).count());
    }
    if (num_done < static_cast<int64_t>(streams.size())) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (progress) std::fprintf(stderr, "\n");
  return results;
}

// Decode throughput at batch size b: b greedy requests of bench_prompt_len
// random tokens, bench_tokens each; decode tok/s counts the tokens after each
// request's first, over the time from the last first token to the end.
Status RunBench(EngineLoop& loop, const GenerateArgs& a) {
  const int vocab = static_cast<int>(loop.model_config().vocab_size);
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  for (int32_t b : a.bench_batches) {
    std::vector<RequestStreamPtr> streams;
    const auto t0 = Clock::now();
    for (int32_t i = 0; i < b; ++i) {
      Request r;
      r.id = "bench-" + std::to_string(b) + "-" + std::to_string(i);
      for (int32_t k = 0; k < a.bench_prompt_len; ++k) r.prompt_token_ids.push_back(tok(rng));
      r.params.temperature = 0.0f;
      r.params.ignore_eos = true;
      r.params.max_tokens = a.bench_tokens;
      RETURN_IF_ERROR(ValidateRequest(r, loop.scheduler_options().limits));
      ASSIGN_OR_RETURN(RequestStreamPtr s, loop.Submit(std::move(r)));
      streams.push_back(s);
    }
    // Poll every stream so each first token is timestamped when it arrives.
    Clock::time_point last_first = t0, end = t0;
    int64_t total = 0;
    std::vector<bool> got_first(streams.size(), false), done(streams.size(), false);
    for (size_t left = streams.size(); left > 0;) {
      for (size_t i = 0; i < streams.size(); ++i) {
        if (done[i]) continue;
        const bool was_finished = streams[i]->finished();  // then everything is queued
        RequestOutput o;
        while (streams[i]->TryNext(&o)) {
          if (!o.status.ok()) return o.status;
          if (!got_first[i] && !o.token_ids.empty()) {
            last_first = std::max(last_first, Clock::now());
            got_first[i] = true;
          }
          total += static_cast<int64_t>(o.token_ids.size());
        }
        if (was_finished) {
          done[i] = true;
          --left;
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    end = Clock::now();
    const double decode_s = std::chrono::duration<double>(end - last_first).count();
    const double total_s = std::chrono::duration<double>(end - t0).count();
    const int64_t decode_tokens = total - b;
    std::printf("{\"batch\": %d, \"prompt_len\": %d, \"max_tokens\": %d, \"total_s\": %.3f, \"decode_s\": %.3f, "
                "\"decode_tok_s\": %.2f, \"per_seq_tok_s\": %.2f}\n",
                b, a.bench_prompt_len, a.bench_tokens, total_s, decode_s, decode_tokens / decode_s,
                decode_tokens / decode_s / b);
    std::fflush(stdout);
  }
  return Status::Ok();
}

int RunGenerate(GenerateArgs a) {
  auto fail = [](const Status& s) {
    LogError("generate: {}", s.ToString());
    return 1;
  };
  if (a.model.empty()) {
    auto dir = EnsureDefaultModel("0.5b");  // the same embedded default as `serve`
    if (!dir.ok()) return fail(dir.status());
    a.model = *dir;
  }
  a.params.max_tokens = a.max_tokens;
  if (a.seed >= 0) a.params.seed = static_cast<uint64_t>(a.seed);

  EngineLoopOptions o;
  o.model_dir = a.model;
  o.num_threads = a.num_threads;
  o.kv_cache_bytes = a.kv_cache_mb << 20;
  o.kv_cache_bytes_set = a.kv_cache_mb_set;
  o.device = a.device;
  o.cuda.gpu_memory_utilization = a.gpu_memory_utilization;
  o.cuda.cuda_graphs = !a.enforce_eager;
  o.cuda.deterministic = a.deterministic;
  o.scheduler.max_num_seqs = a.max_num_seqs;
  o.scheduler.max_num_batched_tokens = a.max_num_batched_tokens;
  o.scheduler.limits.max_model_len = 0;  // the model's, capped by what the KV cache holds
  if (!a.speculative_config.empty()) {
    auto sc = ParseSpeculativeConfig(a.speculative_config);
    if (!sc.ok()) return fail(sc.status());
    o.speculative = *sc;
  }
  auto loop_or = EngineLoop::Create(o);
  if (!loop_or.ok()) return fail(loop_or.status());
  EngineLoop& loop = **loop_or;
  if (Status s = loop.Start(); !s.ok()) return fail(s);
  if (!a.bench_batches.empty()) {
    Status s = RunBench(loop, a);
    return s.ok() ? 0 : fail(s);
  }

  std::shared_ptr<const text::Tokenizer> tok;
  if (auto t = text::LoadModelTokenizer(a.model); t.ok()) {
    tok = *t;
  } else {
    LogWarn("generate: no usable tokenizer in {} ({}); token-id prompts only", a.model, t.status().message());
  }
  PromptReader reader(a, tok.get());
  int64_t lineno = 0;
  for (const std::string& p : a.prompts) {
    auto ids = reader.Text(p, "--prompt");
    if (!ids.ok()) return fail(ids.status());
    reader.out.push_back({"prompt-" + std::to_string(reader.out.size()), *ids, a.params});
  }
  for (const std::string& p : a.prompt_ids) {
    auto ids = ParseIdList(p);
    if (!ids.ok()) return fail(ids.status());
    reader.out.push_back({"prompt-" + std::to_string(reader.out.size()), *ids, a.params});
  }
  if (!a.input.empty()) {
    std::ifstream file;
    if (a.input != "-") {
      file.open(a.input);
      if (!file) return fail(NotFound(a.input + ": cannot open"));
    }
    std::istream& in = a.input == "-" ? std::cin : file;
    for (std::string line; std::getline(in, line);) {
      if (Status s = reader.Line(line, ++lineno); !s.ok()) return fail(s);
    }
  }
  if (reader.out.empty()) return fail(InvalidArgument("no prompts: pass --prompt, --prompt-ids or --input"));

  std::vector<RequestStreamPtr> streams;
  std::vector<int32_t> num_choices;
  for (Prompt& p : reader.out) {
    Request r;
    r.id = p.id;
    r.prompt_token_ids = p.ids;
    r.params = p.params;
    const Status valid = ValidateRequest(r, loop.scheduler_options().limits);
    StatusOr<RequestStreamPtr> s = valid.ok() ? loop.Submit(std::move(r)) : StatusOr<RequestStreamPtr>(valid);
    if (!s.ok()) return fail(Status(s.status().code(), p.id + ": " + s.status().message()));
    streams.push_back(*s);
    num_choices.push_back(p.params.n);
  }
  std::vector<Status> errors;
  const auto results = Collect(streams, num_choices, !a.no_progress, &errors);
  loop.Stop();

  std::ofstream file;
  if (!a.output.empty()) file.open(a.output);
  std::ostream& out = a.output.empty() ? std::cout : file;
  int rc = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    json j;
    j["id"] = reader.out[i].id;
    j["num_prompt_tokens"] = reader.out[i].ids.size();
    if (!errors[i].ok()) {
      j["error"] = errors[i].ToString();
      rc = 1;
    } else {
      json choices = json::array();
      for (size_t c = 0; c < results[i].size(); ++c) {
        const ChoiceResult& r = results[i][c];
        json jc = {{"index", c}, {"token_ids", r.ids}, {"finish_reason", FinishReasonName(r.reason)}};
        if (tok) {
          auto text = tok->Decode(r.ids);
          if (text.ok()) jc["text"] = *text;
        }
        if (!r.logprobs.empty()) {
          json lps = json::array();
          for (const TokenLogprobs& lp : r.logprobs) {
            json top = json::array();
            for (const TokenLogprob& t : lp.top) top.push_back({{"token_id", t.token}, {"logprob", t.logprob}});
            lps.push_back({{"logprob", lp.logprob}, {"top_logprobs", top}});
          }
          jc["logprobs"] = lps;
        }
        choices.push_back(jc);
      }
      j["choices"] = choices;
    }
    if (a.format == "text") {
      // Plain text: each choice's completion (token ids when there is no
      // tokenizer), one block per choice separated by a blank line; errors to stderr.
      if (!errors[i].ok()) {
        LogError("generate: prompt '{}': {}", reader.out[i].id, errors[i].ToString());
        continue;
      }
      for (const auto& jc : j["choices"]) {
        out << (jc.contains("text") ? jc["text"].get<std::string>() : jc["token_ids"].dump()) << "\n\n";
      }
      continue;
    }
    out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  out.flush();
  if (!out) return fail(Internal("cannot write " + (a.output.empty() ? std::string("stdout") : a.output)));
  return rc;
}

}  // namespace

void AddGenerateCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Offline batch generation through the scheduler (JSONL out)");
  cmd->add_option("--model", a->model, "HF checkpoint directory or .gguf file (default: the embedded synthetic model, as for serve)");
  cmd->add_option("--prompt", a->prompts, "Text prompt (repeatable; needs tokenizer.json)");
  cmd->add_option("--prompt-ids", a->prompt_ids, "Prompt as token ids, e.g. '1,2,3' (repeatable)");
  cmd->add_option("--input,-i", a->input, "Prompt file, one per line: text, [ids] or JSON object; '-' = stdin");
  cmd->add_option("--output,-o", a->output, "Write results here (default stdout)");
  cmd->add_option("--format", a->format, "jsonl (one object per prompt) or text (completions only)")
      ->check(CLI::IsMember({"jsonl", "text"}))
      ->capture_default_str();
  cmd->add_flag("--ids", a->ids_only, "Plain input lines are token-id lists, not text");
  cmd->add_flag("--no-progress", a->no_progress, "No progress bar on stderr");
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens to generate per choice")->capture_default_str();
  cmd->add_option("--min-tokens", a->params.min_tokens, "EOS/stop ids are banned before this many");
  cmd->add_option("--temperature", a->params.temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-p", a->params.top_p, "Nucleus sampling mass");
  cmd->add_option("--top-k", a->params.top_k, "Keep the k most likely tokens (-1: off)");
  cmd->add_option("--min-p", a->params.min_p, "Drop tokens below min_p x the top probability");
  cmd->add_option("--presence-penalty", a->params.presence_penalty, "OpenAI presence penalty");
  cmd->add_option("--frequency-penalty", a->params.frequency_penalty, "OpenAI frequency penalty");
  cmd->add_option("--repetition-penalty", a->params.repetition_penalty, "Multiplicative repetition penalty");
  cmd->add_option("--seed", a->seed, "RNG seed (same seed -> same tokens)");
  cmd->add_option("--n", a->params.n, "Choices per prompt");
  cmd->add_option("--stop-token-ids", a->params.stop_token_ids, "Extra stop token ids");
  cmd->add_flag("--ignore-eos", a->params.ignore_eos, "Do not stop at EOS");
  cmd->add_flag("--logprobs", a->params.logprobs, "Return each sampled token's logprob (raw logits)");
  cmd->add_option("--top-logprobs", a->params.top_logprobs, "Also this many most likely alternatives");
  cmd->add_option("--threads", a->num_threads, "CPU threads (0: all)");
  cmd->add_option("--max-num-seqs", a->max_num_seqs, "Scheduler sequence cap")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", a->max_num_batched_tokens, "Scheduler per-step token budget")
      ->capture_default_str();
  CLI::Option* kv_mb =
      cmd->add_option("--kv-cache-mb", a->kv_cache_mb, "KV cache budget in MiB (on a GPU: instead of "
                      "--gpu-memory-utilization)")->capture_default_str();
  cmd->add_option("--device", a->device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                  "Fraction of GPU memory for weights, activations and the KV pool")
      ->capture_default_str()->check(CLI::Range(0.01, 1.0));
  cmd->add_flag("--enforce-eager", a->enforce_eager, "CUDA: no graphs for decode steps");
  cmd->add_flag("--deterministic", a->deterministic,
                "CUDA: batch-invariant kernels (a sequence's logits do not depend on its batch; slower)");
  cmd->add_option("--speculative-config", a->speculative_config,
                  "Speculative decoding, JSON with vLLM's fields (method ngram|draft_model, "
                  "num_speculative_tokens, prompt_lookup_min/max, model, disable_by_batch_size, max_verify_tokens, "
                  "min_draft_acceptance)");
  cmd->add_option("--bench", a->bench_batches, "Measure decode throughput at these batch sizes, e.g. 1,16")
      ->delimiter(',');
  cmd->add_option("--bench-prompt-len", a->bench_prompt_len, "Bench prompt length")->capture_default_str();
  cmd->add_option("--bench-tokens", a->bench_tokens, "Bench tokens per request")->capture_default_str();
  cmd->callback([a, exit_code, kv_mb] {
    a->kv_cache_mb_set = kv_mb->count() > 0;
    *exit_code = RunGenerate(*a);
  });
}

}  // namespace tessera
