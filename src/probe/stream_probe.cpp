#include "probe/stream_probe.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "io/csv.h"
#include "probe/stream_stats.h"
#include "probe/residual_norms.h"
#include "probe/residual_probe.h"
#include "util/error.h"

namespace blocklab::probe {

template <typename T>
std::vector<StreamBlockStats> stream_stats(const Activations<T>& acts, const ModelConfig& config) {
  const int C = config.width, B = acts.batch(), Tn = acts.seq_len();
  const ResidualNorms norms = residual_norms(acts, C);
  std::vector<StreamBlockStats> out;
  for (int l = 0; l <= acts.layers(); ++l) {
    StreamBlockStats s;
    s.block = l;
    s.rms = norms.mean_token_norm[l] / std::sqrt(static_cast<double>(C));
    const StreamPeak peak = stream_peak(acts.stream(l), static_cast<long>(B) * Tn, C);
    s.max_abs = peak.max_abs;
    s.max_channel = peak.channel;
    if (l > 0)
      if (const T* att = acts.block_acts(l - 1).attn.att; att != nullptr && Tn >= 2)
        s.sink = sink_share(att, B, config.heads, Tn, Tn);
    out.push_back(s);
  }
  return out;
}

template std::vector<StreamBlockStats> stream_stats(const Activations<float>&, const ModelConfig&);
template std::vector<StreamBlockStats> stream_stats(const Activations<double>&, const ModelConfig&);

const std::vector<std::string>& stream_columns() {
  static const std::vector<std::string> names = {"step", "block", "rms", "max_abs", "max_channel", "sink"};
  return names;
}

std::vector<StreamRow> read_stream_csv(const std::string& path) {
  const std::vector<io::CsvRecord> records = io::read_csv(path);
  if (records.empty() || records.front().fields != stream_columns())
    throw Error(path + ": not a stream.csv (expected the header step,block,rms,max_abs,max_channel,sink)");
  std::vector<StreamRow> rows;
  for (size_t r = 1; r < records.size(); ++r) {
    const std::vector<std::string>& f = records[r].fields;
    if (f.size() != stream_columns().size())
      throw Error(path + ":" + std::to_string(records[r].line) + ": expected 6 fields, got " + std::to_string(f.size()));
    StreamRow row;
    row.step = std::atoi(f[0].c_str());
    row.stats.block = std::atoi(f[1].c_str());
    row.stats.rms = std::strtod(f[2].c_str(), nullptr);
    row.stats.max_abs = std::strtod(f[3].c_str(), nullptr);
    row.stats.max_channel = std::atoi(f[4].c_str());
    if (!f[5].empty()) row.stats.sink = std::strtod(f[5].c_str(), nullptr);
    rows.push_back(row);
  }
  return rows;
}

StreamSummary summarize_stream(const std::vector<StreamRow>& rows) {
  if (rows.empty()) throw Error("stream summary: no rows");
  StreamSummary s;
  s.first_step = s.last_step = rows.front().step;
  for (const StreamRow& r : rows) {
    s.first_step = std::min(s.first_step, r.step);
    s.last_step = std::max(s.last_step, r.step);
  }
  auto at = [](std::vector<double>& v, int block) -> double& {
    if (block >= static_cast<int>(v.size())) v.resize(static_cast<size_t>(block) + 1, std::nan(""));
    return v[static_cast<size_t>(block)];
  };
  for (const StreamRow& r : rows) {
    if (r.stats.block < 0) continue;
    if (r.step == s.first_step) at(s.rms_first, r.stats.block) = r.stats.rms;
    if (r.step != s.last_step) continue;
    at(s.rms_last, r.stats.block) = r.stats.rms;
    if (!(r.stats.max_abs <= s.max_abs_last)) s.max_abs_last = r.stats.max_abs;  // NaN sticks
    if (r.stats.sink && (!s.sink_max_last || *r.stats.sink > *s.sink_max_last)) s.sink_max_last = r.stats.sink;
  }
  return s;
}

StreamRecorder::StreamRecorder(std::string path, int every) : path_(std::move(path)), every_(every) {
  if (every < 1) throw Error("stream_every must be >= 1 for a recorder, got " + std::to_string(every));
}

StreamRecorder::~StreamRecorder() {
  if (file_ != nullptr) std::fclose(file_);
}

void StreamRecorder::open(int first_step, bool records_first) {
  std::string kept = io::csv_line(stream_columns());
  if (first_step > 0 && std::filesystem::exists(path_)) {  // a resumed run: keep what the steps before it wrote
    // (the rows of its first step too when it does not record that step: the earlier segment's last step, with
    // the weights of the checkpoint it resumes from)
    const std::vector<io::CsvRecord> records = io::read_csv(path_);
    if (!records.empty() && records.front().fields == stream_columns())
      for (size_t r = 1; r < records.size(); ++r) {
        const long step = std::atol(records[r].fields.front().c_str());
        if (step < first_step || (step == first_step && !records_first)) io::append_csv_line(kept, records[r].fields);
      }
  }
  file_ = std::fopen(path_.c_str(), "w");
  if (file_ == nullptr) throw Error(path_ + ": cannot write: " + std::strerror(errno));
  std::fputs(kept.c_str(), file_);
  if (std::fflush(file_) != 0) throw Error(path_ + ": write failed: " + std::strerror(errno));
}

void StreamRecorder::operator()(Trainer& trainer) {
  if (const ShardExchange* x = trainer.exchange(); x != nullptr && x->rank() != 0) return;
  const int step = trainer.steps_done();
  const RunConfig& config = trainer.config();
  const bool records = step % every_ == 0 || step == config.steps;
  if (file_ == nullptr) open(step, records);  // the first call: the run's (or this segment's) first step
  if (!records) return;
  if (!have_batch_) {
    const TextTask* text = trainer.task().text();
    TaskStream probe_task = make_task_stream(config, ResidualProbeWriter::probe_seed(config.seed),
                                             text ? text->shared_tokens() : nullptr);
    probe_task.next(batch_, trainer.shard_batch());  // the size of the trainer's activations
    have_batch_ = true;
  }
  // The trainer's own activations: its step has run its backward, so they are free until the next step.
  Activations<float>& acts = trainer.activations();
  trainer.model().forward_hidden(acts, batch_.inputs.data());
  std::string rows;
  for (const StreamBlockStats& s : stream_stats(acts, config.model))
    io::append_csv_line(rows, {std::to_string(step), std::to_string(s.block), io::csv_number(s.rms),
                               io::csv_number(s.max_abs), std::to_string(s.max_channel),
                               s.sink ? io::csv_number(*s.sink) : std::string()});
  std::fputs(rows.c_str(), file_);
  if (std::fflush(file_) != 0) throw Error(path_ + ": write failed: " + std::strerror(errno));
}

TrainerHook with_stream_recorder(const RunConfig& config, TrainerHook hook) {
  if (config.stream_every <= 0) return hook;
  auto recorder = std::make_shared<StreamRecorder>((std::filesystem::path(config.out) / "stream.csv").string(),
                                                   config.stream_every);
  return [recorder, hook = std::move(hook)](Trainer& trainer) {
    if (hook) hook(trainer);
    (*recorder)(trainer);
  };
}

}  // namespace blocklab::probe
