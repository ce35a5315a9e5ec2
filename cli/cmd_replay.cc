// `tessera replay DIR`: re-runs what `tessera serve --record DIR` recorded,
// offline, and reports every output that differs (docs/architecture.md,
// "Record and replay"). It takes serve's settings; DIR/serve.toml (the
// settings the recorded server was given) is its --config unless one is
// named, and the command line wins over both.
//
// Per record: the receipt must name this engine's weights and tokenizer
// (else the replay is refused: exit 2). Chat and completions bodies are
// prepared again as the server prepares them (template, tokenization,
// defaults, structured outputs), and the request as executed must have the
// receipt's digest; other endpoints (Responses, Messages) replay the recorded
// requests as executed, except those with a structured-output constraint,
// whose grammar is not recorded (counted as skipped). Each runs with the seed
// the receipt names; its tokens are compared with the receipt's. Exit code 0:
// every replayed output equal; 1: some differ; 2: refused or failed.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/serve_flags.h"
#include "cli/serve_options.h"
#include "cli/serve_run.h"
#include "common/log.h"
#include "receipt/canonical_request.h"
#include "receipt/compare.h"
#include "server/openai/request_path.h"
#include "server/record/request_log.h"
#include "server/serving/receipts.h"

namespace tessera {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kMaxRecordBytes = size_t{1} << 30;  // one line; serve's bodies are far smaller

struct ReplayFlags {
  std::string dir;
  std::string config;
  std::string report;
  int64_t max_concurrency = 16;
  int64_t limit = 0;
};

// One recorded response to replay.
struct Job {
  std::string where;  // file:line
  std::string endpoint;
  receipt::Receipt claimed;
  std::vector<GenerateInput> inputs;
  // Running:
  ReceiptRecorder recorder;
  std::vector<std::shared_ptr<Generation>> gens;
};

struct Tally {
  int64_t records = 0, equal = 0, different = 0, skipped = 0, flags_differ = 0;
  json differences = json::array();
  json skips = json::array();
};

// 1: a line in *line; 0: end of file; -1: a line longer than kMaxRecordBytes.
int ReadRecordLine(std::istream& in, std::string* line) {
  line->clear();
  for (int c; (c = in.get()) != EOF;) {
    if (c == '\n') return 1;
    if (line->size() >= kMaxRecordBytes) return -1;
    line->push_back(static_cast<char>(c));
  }
  return line->empty() ? 0 : 1;
}

std::string StringField(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The record's inputs, ready to submit; a skip reason in *skip; or the error
// that makes the record unusable (a damaged record is a difference too: the
// request it names can no longer be executed).
Status PrepareJob(const json& rec, const OfflineEngine& loaded, Job* job, std::string* skip, json* diff) {
  if (!rec.is_object()) return InvalidArgument("a record must be a JSON object");
  const ServingEngine& engine = *loaded.engine;
  job->endpoint = StringField(rec, "endpoint");
  auto receipt_it = rec.find("receipt");
  if (receipt_it == rec.end()) return InvalidArgument("'receipt' is missing");
  ASSIGN_OR_RETURN(job->claimed, receipt::FromJson(*receipt_it));
  const receipt::ServerDigests& ours = engine.receipts().digests;
  if (job->claimed.server.weights != ours.weights || job->claimed.server.tokenizer != ours.tokenizer) {
    return FailedPrecondition("recorded with another model (weights " + job->claimed.server.weights +
                              ", tokenizer " + job->claimed.server.tokenizer + "; this one: " + ours.weights +
                              ", " + ours.tokenizer + "): replay with the recorded model");
  }
  const std::string body = StringField(rec, "body");
  openai::RequestModel model = openai::RequestModelOf(engine);
  model.output = loaded.chat_output;
  if (job->endpoint == "/v1/chat/completions") {
    openai::PreparedChat prepared;
    if (auto err = openai::PrepareChat(model, body, &prepared)) return InvalidArgument("body: " + err->message);
    job->inputs.push_back(std::move(prepared.input));
  } else if (job->endpoint == "/v1/completions") {
    openai::PreparedCompletion prepared;
    if (auto err = openai::PrepareCompletion(model, body, &prepared)) return InvalidArgument("body: " + err->message);
    job->inputs = std::move(prepared.inputs);
  } else {
    auto requests = rec.find("requests");
    if (requests == rec.end() || !requests->is_array()) return InvalidArgument("'requests' must be an array");
    for (const json& r : *requests) {
      ASSIGN_OR_RETURN(receipt::ExecutedRequest executed, receipt::ReadCanonicalRequest(r));
      if (!executed.structured_output.empty()) {
        *skip = "a " + executed.structured_output + " constraint from " + job->endpoint +
                ": its grammar is not recorded";
        return Status::Ok();
      }
      GenerateInput in;
      in.request = std::move(executed.request);
      in.skip_special_tokens = executed.skip_special_tokens;
      in.include_stop_str_in_output = executed.include_stop_str_in_output;
      job->inputs.push_back(std::move(in));
    }
  }
  if (job->inputs.size() != job->claimed.generations.size()) {
    *diff = {{"result", "different"}, {"differs", "request"},
             {"message", "the request has " + std::to_string(job->inputs.size()) + " prompts, the receipt " +
                             std::to_string(job->claimed.generations.size())}};
    return Status::Ok();
  }
  for (size_t i = 0; i < job->inputs.size(); ++i) {
    const receipt::GenerationRecord& g = job->claimed.generations[i];
    GenerateInput& in = job->inputs[i];
    const std::string digest = receipt::DigestHex(receipt::CanonicalDump(
        receipt::CanonicalRequest(in.request, g.seed, in.skip_special_tokens, in.include_stop_str_in_output)));
    if (digest != g.request) {
      *diff = {{"result", "different"}, {"differs", "request"}, {"generation", i},
               {"message", "the request as executed here (after defaults, template and tokenization) is not the "
                           "one the receipt names"}};
      return Status::Ok();
    }
    in.request.params.seed = g.seed;
  }
  return Status::Ok();
}

// Refused or failed: exit code 2 (1 means "some output differs").
int Refuse(const Status& s) {
  Fail(s);
  return 2;
}

int Replay(const ServeFlags& sf, const ReplayFlags& rf) {
  if (!sf.record.empty()) return Refuse(InvalidArgument("replay: --record is serve's; replay records nothing"));
  const std::vector<fs::path> files = record::RequestLog::RequestFiles(rf.dir);
  if (files.empty()) return Refuse(NotFound("replay: no requests-*.jsonl in " + rf.dir + " (tessera serve --record)"));
  StatusOr<ServeOptions> options = ServeOptionsFromFlags(sf);
  if (!options.ok()) return Refuse(options.status());
  if (options->role != "unified") return Refuse(InvalidArgument("replay: runs a unified engine; --role is " + options->role));
  StatusOr<OfflineEngine> loaded = LoadOfflineEngine(*options);
  if (!loaded.ok()) return Refuse(loaded.status());
  ServingEngine& engine = *loaded->engine;

  std::mutex mu;
  std::condition_variable cv;
  bool woken = false;
  auto notify = [&] {
    std::lock_guard<std::mutex> lock(mu);
    woken = true;
    cv.notify_one();
  };

  Tally tally;
  std::vector<std::unique_ptr<Job>> running;
  int64_t next_id = 0;
  auto finish = [&](Job& job) {
    receipt::Receipt replayed = job.recorder.Finish(engine.receipts());
    receipt::Comparison c = receipt::CompareOutputs(job.claimed, replayed);
    if (c.equal) {
      ++tally.equal;
    } else {
      ++tally.different;
      json d = receipt::ToJson(c);
      d["record"] = job.where;
      d["endpoint"] = job.endpoint;
      tally.differences.push_back(std::move(d));
      LogWarn("replay: {} ({}) differs: {}", job.where, job.endpoint, c.message);
    }
  };
  // Polls every running job; finished ones are compared and dropped.
  auto pump = [&]() -> Status {
    for (size_t j = 0; j < running.size();) {
      Job& job = *running[j];
      bool done = true;
      for (size_t i = 0; i < job.gens.size(); ++i) {
        GenerationUpdate u;
        while (job.gens[i]->Poll(&u)) {
          if (!u.status.ok()) return Internal("replay: " + job.where + ": " + u.status.ToString());
          job.recorder.Add(i, u);
        }
        done = done && job.gens[i]->finished();
      }
      if (done) {
        finish(job);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(j));
      } else {
        ++j;
      }
    }
    return Status::Ok();
  };
  auto wait_until = [&](size_t max_running) -> Status {
    while (running.size() > max_running) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return woken; });
        woken = false;
      }
      RETURN_IF_ERROR(pump());
    }
    return Status::Ok();
  };

  std::string flags_note;
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::string line;
    for (int64_t n = 1;; ++n) {
      const int got = ReadRecordLine(in, &line);
      if (got == 0) break;
      if (got < 0) {
        return Refuse(InvalidArgument("replay: " + file.filename().string() + ":" + std::to_string(n) +
                                    ": a record longer than 1 GiB"));
      }
      if (rf.limit > 0 && tally.records >= rf.limit) break;
      if (line.empty()) continue;
      ++tally.records;
      auto job = std::make_unique<Job>();
      job->where = file.filename().string() + ":" + std::to_string(n);
      json rec = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (rec.is_discarded()) return Refuse(InvalidArgument("replay: " + job->where + ": not a JSON record"));
      std::string skip;
      json diff;
      if (Status s = PrepareJob(rec, *loaded, job.get(), &skip, &diff); !s.ok()) {
        return Refuse(Status(s.code(), "replay: " + job->where + ": " + s.message()));
      }
      if (job->claimed.server.flags != engine.receipts().digests.flags) {
        ++tally.flags_differ;
        if (flags_note.empty()) {
          flags_note = "the recorded server's numerics-relevant settings differ from these (" +
                       engine.receipts().flags.dump() + "); outputs may differ for that reason";
          LogWarn("replay: {}", flags_note);
        }
      }
      if (!skip.empty()) {
        ++tally.skipped;
        tally.skips.push_back({{"record", job->where}, {"reason", skip}});
        continue;
      }
      if (!diff.is_null()) {
        ++tally.different;
        diff["record"] = job->where;
        diff["endpoint"] = job->endpoint;
        tally.differences.push_back(std::move(diff));
        continue;
      }
      for (size_t i = 0; i < job->inputs.size(); ++i) {
        job->inputs[i].request.id = "replay-" + std::to_string(next_id++);
        job->recorder.Begin(i, job->inputs[i]);
        StatusOr<std::shared_ptr<Generation>> g = engine.Submit(std::move(job->inputs[i]), notify);
        if (!g.ok()) return Refuse(Status(g.status().code(), "replay: " + job->where + ": " + g.status().message()));
        job->recorder.SetSeed(i, (*g)->seed(), (*g)->seed_drawn());
        job->gens.push_back(*g);
      }
      running.push_back(std::move(job));
      if (Status s = wait_until(static_cast<size_t>(rf.max_concurrency) - 1); !s.ok()) return Refuse(s);
    }
  }
  if (Status s = wait_until(0); !s.ok()) return Refuse(s);

  json report = {{"records", tally.records}, {"equal", tally.equal}, {"different", tally.different},
                 {"skipped", tally.skipped}, {"flags_differ", tally.flags_differ},
                 {"differences", tally.differences}, {"skips", tally.skips}};
  if (!flags_note.empty()) report["note"] = flags_note;
  const std::string text = report.dump(2);
  if (!rf.report.empty()) {
    std::ofstream out(rf.report, std::ios::trunc);
    if (!(out << text << "\n")) return Refuse(InvalidArgument("replay: --report " + rf.report + ": cannot write"));
  }
  std::printf("%s\n", text.c_str());
  LogInfo("replay: {} records: {} equal, {} different, {} skipped", tally.records, tally.equal, tally.different,
          tally.skipped);
  return tally.different > 0 ? 1 : 0;
}

}  // namespace

void AddReplayCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "replay", "re-run what `tessera serve --record DIR` recorded, offline, and report any output that differs");
  auto rf = std::make_shared<ReplayFlags>();
  auto sf = std::make_shared<ServeFlags>();
  cmd->add_option("dir", rf->dir, "the --record directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--config", rf->config, "serve settings (TOML); default: DIR/serve.toml, as recorded")
      ->check(CLI::ExistingFile);
  cmd->add_option("--report", rf->report, "also write the JSON report to this file");
  cmd->add_option("--max-concurrency", rf->max_concurrency, "records in flight at once (default 16)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--limit", rf->limit, "replay only the first N records (default: all)")
      ->check(CLI::NonNegativeNumber);
  AddServeFlags(cmd, sf.get());
  cmd->callback([cmd, rf, sf, exit_code] {
    std::string config = rf->config;
    if (config.empty() && fs::exists(fs::path(rf->dir) / "serve.toml")) config = (fs::path(rf->dir) / "serve.toml").string();
    if (!config.empty()) {
      if (Status s = ApplyServeConfigFile(cmd, config); !s.ok()) {
        *exit_code = Refuse(s);
        return;
      }
    }
    *exit_code = Replay(*sf, *rf);
  });
}

}  // namespace tessera
