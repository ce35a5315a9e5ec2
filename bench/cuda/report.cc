// Report: rows as JSON (with fractions of the measured ceilings) and as tables.
#include <fstream>

#include "bench/cuda/bench_util.h"

namespace tessera::cuda_bench {
namespace {

using json = nlohmann::json;

double Ratio(double v, double limit) { return limit > 0 && v > 0 ? v / limit : -1; }

std::string Fmt(const char* fmt, double v) {
  if (v < 0) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

void Report::SetCeilings(double copy_bytes_s, double bf16_flop_s, double f32_flop_s) {
  copy_bytes_s_ = copy_bytes_s;
  bf16_flop_s_ = bf16_flop_s;
  f32_flop_s_ = f32_flop_s;
  root_["ceilings"] = {{"d2d_copy_gb_s", copy_bytes_s / 1e9},
                       {"cublas_bf16_gemm_tflop_s", bf16_flop_s / 1e12},
                       {"cublas_f32_gemm_tflop_s", f32_flop_s / 1e12}};
}

void Report::Add(const Row& row) { rows_.push_back(row); }
void Report::AddModel(const json& entry) { models_.push_back(entry); }
void Report::AddNote(const std::string& note) { notes_.push_back(note); }

json Report::RowJson(const Row& r) const {
  json j = {{"section", r.section}, {"name", r.name}, {"shape", r.shape}};
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j;
  }
  const double s = r.t.median_us * 1e-6;
  j["median_us"] = r.t.median_us;
  j["min_us"] = r.t.min_us;
  j["max_us"] = r.t.max_us;
  j["samples"] = r.t.samples;
  j["calls_per_sample"] = r.t.inner;
  j["graph_replay"] = r.t.graph;
  if (r.bytes > 0) {
    j["bytes"] = r.bytes;
    j["gb_s"] = r.bytes / s / 1e9;
    j["fraction_of_d2d_copy"] = Ratio(r.bytes / s, copy_bytes_s_);
  }
  if (r.flops > 0) {
    j["flops"] = r.flops;
    j["tflop_s"] = r.flops / s / 1e12;
    j["fraction_of_bf16_gemm"] = Ratio(r.flops / s, bf16_flop_s_);
    j["fraction_of_f32_gemm"] = Ratio(r.flops / s, f32_flop_s_);
  }
  if (!r.extra.empty()) j["extra"] = r.extra;
  return j;
}

Status Report::WriteJson(const std::string& path) const {
  if (path.empty()) return Status::Ok();
  json out = root_;
  out["rows"] = json::array();
  for (const Row& r : rows_) out["rows"].push_back(RowJson(r));
  out["models"] = models_;
  out["notes"] = notes_;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return Internal("cannot write " + tmp);
    f << out.dump(1) << "\n";
    if (!f) return Internal("write failed: " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Internal("cannot rename " + tmp + " to " + path);
  return Status::Ok();
}

int Report::Failures() const {
  auto failed = [](const std::string& e) { return !e.empty() && e.rfind("skipped", 0) != 0; };
  int n = 0;
  for (const Row& r : rows_) n += failed(r.error);
  for (const json& m : models_) n += m.contains("error") && failed(m["error"].get<std::string>());
  return n;
}

void Report::PrintTables(std::FILE* out) const {
  std::fprintf(out, "\nceilings: D2D copy %s GB/s (read+write), cuBLAS bf16 GEMM %s TFLOP/s, f32 GEMM %s TFLOP/s\n",
               Fmt("%.0f", copy_bytes_s_ / 1e9).c_str(), Fmt("%.0f", bf16_flop_s_ / 1e12).c_str(),
               Fmt("%.1f", f32_flop_s_ / 1e12).c_str());
  std::fprintf(out, "%-9s %-26s %-40s %10s %8s %6s %8s %6s %6s\n", "section", "name", "shape", "us", "GB/s",
               "of cp", "TFLOP/s", "of bf", "of f32");
  for (const Row& r : rows_) {
    if (!r.error.empty()) {
      std::fprintf(out, "%-9s %-26s %-40s  %s\n", r.section.c_str(), r.name.c_str(), r.shape.c_str(),
                   r.error.substr(0, 100).c_str());
      continue;
    }
    const double s = r.t.median_us * 1e-6;
    const double bw = r.bytes > 0 ? r.bytes / s : -1, fl = r.flops > 0 ? r.flops / s : -1;
    std::fprintf(out, "%-9s %-26s %-40s %10.1f %8s %6s %8s %6s %6s\n", r.section.c_str(), r.name.c_str(),
                 r.shape.c_str(), r.t.median_us, Fmt("%.0f", bw / 1e9).c_str(),
                 Fmt("%.2f", Ratio(bw, copy_bytes_s_)).c_str(), Fmt("%.1f", fl / 1e12).c_str(),
                 Fmt("%.2f", Ratio(fl, bf16_flop_s_)).c_str(), Fmt("%.2f", Ratio(fl, f32_flop_s_)).c_str());
  }
  if (!models_.empty()) {
    std::fprintf(out, "\n%-4s %-13s %-7s %6s %7s %10s %9s %8s %8s\n", "model", "mode", "phase", "batch", "tokens",
                 "tok/s", "ms", "GB/step", "of roof");
    for (const json& m : models_) {
      if (m.contains("error")) {
        std::fprintf(out, "%-4s %-13s %-7s  %s\n", m.value("model", "").c_str(), m.value("mode", "").c_str(),
                     m.value("phase", "").c_str(), m["error"].get<std::string>().substr(0, 110).c_str());
        continue;
      }
      const std::string phase = m.value("phase", "");
      if (phase == "synth" || phase == "load") {
        std::fprintf(out, "%-4s %-13s %-7s  %s\n", m.value("model", "").c_str(), m.value("mode", "").c_str(),
                     phase.c_str(),
                     phase == "synth"
                         ? ("written in " + Fmt("%.1f", m.value("synth_s", -1.0)) + " s").c_str()
                         : (Fmt("%.2f", m.value("weight_bytes", 0.0) / 1e9) + " GB of weights, loaded in " +
                            Fmt("%.1f", m.value("load_s", -1.0)) + " s").c_str());
        continue;
      }
      const bool decode = phase == "decode";
      std::fprintf(out, "%-4s %-13s %-7s %6d %7d %10.1f %9.2f %8s %8s\n", m.value("model", "").c_str(),
                   m.value("mode", "").c_str(), m.value("phase", "").c_str(), m.value("batch", 0),
                   decode ? m.value("context", 0) : m.value("prompt", 0), m.value("tokens_per_s", 0.0),
                   decode ? m.value("ms_per_step", 0.0) : m.value("ttft_ms", 0.0),
                   decode ? Fmt("%.2f", m.value("bytes_per_step", 0.0) / 1e9).c_str() : "-",
                   decode ? Fmt("%.2f", m.value("fraction_of_hbm_roofline", -1.0)).c_str() : "-");
    }
  }
  for (const std::string& n : notes_) std::fprintf(out, "note: %s\n", n.c_str());
}

}  // namespace tessera::cuda_bench
