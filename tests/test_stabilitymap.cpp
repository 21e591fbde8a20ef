// blocklab stabilitymap: cell labels and the majority boundary on synthetic runs, the CSV's columns, optimizer
// entries and flags, and a toy map end to end (CSV, tables, figures), resuming without retraining; an
// interrupted map's rows carried to another output directory with --finished.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <tuple>

#include "cli_runner.h"
#include "experiments/stabilitymap.h"
#include "report/plot.h"
#include "util/error.h"
#include "util/process.h"

using namespace blocklab;
namespace bt = blocklab::testing;
using namespace blocklab::experiments;
namespace fs = std::filesystem;

namespace {
// width 8, 1 block, Post-LN, adam and radam+v0, warm-up 0, lr 1e-3 and 1e-2, seeds 0 and 1, 20 steps
const char* kToyFlags =
    "--width 8 --heads 2 --layers 1 --vocab 8 --copy-len 4 --batch 4 --steps 20 --placements post "
    "--optimizers adam,radam+v0 --warmups 0 --lrs 1e-3,1e-2 --seeds 0,1 --jobs 2";

std::vector<std::vector<std::string>> csv_rows(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(split(line, ','));
  return rows;
}

StabilityMapOptions synthetic_options() {
  StabilityMapOptions o;
  o.placements = {NormPlacement::Post};
  o.optimizers = {{OptimizerKind::Adam, AdamV0::Zero}};
  o.warmups = {0, 100};
  o.lrs = {1e-3, 1e-2, 1e-1};
  o.seeds = {0, 1, 2};
  o.base.steps = 600;
  return o;
}

// `learned` of the three seeds learn (first below 0.01 at 100, 200, 300), the rest never start.
void add_cell(std::vector<StabilityRun>& runs, int warmup, double lr, int learned) {
  for (int seed = 0; seed < 3; ++seed) {
    StabilityRun r;
    r.placement = NormPlacement::Post;
    r.optimizer = "adam";
    r.warmup = warmup;
    r.lr = lr;
    r.seed = seed;
    if (seed < learned) {
      r.outcome = probe::Outcome::Learned;
      r.first_step_below = 100 * (seed + 1);
    } else {
      r.outcome = seed == 2 ? probe::Outcome::Diverged : probe::Outcome::NeverStarted;
    }
    runs.push_back(r);
  }
}
}  // namespace

TEST(StabilityMap, OptimizerEntries) {
  EXPECT_EQ(to_string(parse_optimizer_entry("adam")), "adam");
  EXPECT_EQ(to_string(parse_optimizer_entry("adam+v0")), "adam+v0");
  EXPECT_EQ(parse_optimizer_entry("radam+v0"), (OptimizerEntry{OptimizerKind::RAdam, AdamV0::Grad}));
  EXPECT_EQ(parse_optimizer_entry(" lion "), (OptimizerEntry{OptimizerKind::Lion, AdamV0::Zero}));
  EXPECT_THROW(parse_optimizer_entry("sgd+v0"), Error);
  EXPECT_THROW(parse_optimizer_entry("adam+v1"), Error);
  EXPECT_THROW(parse_optimizer_entry("+v0"), Error);
  EXPECT_THROW(parse_optimizer_entries("adam,adam"), Error);
  EXPECT_THROW(parse_optimizer_entries("adam,,radam"), Error);
  EXPECT_THROW(parse_optimizer_entries(""), Error);
  EXPECT_EQ(parse_optimizer_entries("adam,adam+v0,muon").size(), 3u);
  try {
    parse_optimizer_entries("adamx", "--optimizers");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--optimizers: unknown optimizer entry 'adamx'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("+v0"), std::string::npos) << e.what();
  }
}

TEST(StabilityMap, LrLists) {
  EXPECT_EQ(parse_lr_list("1e-3, 0.01,3e-4"), (std::vector<double>{1e-3, 1e-2, 3e-4}));
  for (const char* bad : {"", "1e-3,", "0", "-1e-3", "abc", "1e-3x", "1e-3,0.001", "inf", "nan"})
    EXPECT_THROW(parse_lr_list(bad), Error) << bad;
}

TEST(StabilityMap, CellsCountSeedsAndTheBoundaryFollowsTheMajority) {
  StabilityMapOptions o = synthetic_options();
  //            warm-up 0   warm-up 100
  // lr 1e-1       0/3         1/3
  // lr 1e-2       1/3         3/3
  // lr 1e-3       3/3         2/3
  std::vector<StabilityRun> runs;
  add_cell(runs, 0, 1e-3, 3);
  add_cell(runs, 0, 1e-2, 1);
  add_cell(runs, 0, 1e-1, 0);
  add_cell(runs, 100, 1e-3, 2);
  add_cell(runs, 100, 1e-2, 3);
  add_cell(runs, 100, 1e-1, 1);
  const auto cells = summarize_stabilitymap(o, runs);
  ASSERT_EQ(cells.size(), 6u);
  EXPECT_EQ(find_cell(cells, NormPlacement::Post, "adam", 0, 1e-3)->text, "3/3 learned, median 200 steps");
  EXPECT_EQ(find_cell(cells, NormPlacement::Post, "adam", 100, 1e-3)->text, "2/3 learned, median 150 steps");
  EXPECT_EQ(find_cell(cells, NormPlacement::Post, "adam", 0, 1e-2)->text, "1/3 diverged, 1/3 never-started, 1/3 learned");
  EXPECT_EQ(find_cell(cells, NormPlacement::Post, "adam", 0, 1e-1)->text, "1/3 diverged, 2/3 never-started");
  EXPECT_FALSE(find_cell(cells, NormPlacement::Post, "adam", 0, 1e-1)->learned_side());
  EXPECT_EQ(find_cell(cells, NormPlacement::Post, "adam", 0, 5e-2), nullptr);

  // Edges: between (0, 1e-3) and (0, 1e-2) (horizontal, at the midpoint of -3 and -2), between (0, 1e-2) and
  // (100, 1e-2) (vertical at x = 0.5), between (100, 1e-2) and (100, 1e-1) (horizontal at -1.5), and between
  // (0, 1e-3) learned and (100, 1e-3) learned: none.
  auto segments = majority_boundary(o, cells, NormPlacement::Post, "adam");
  ASSERT_EQ(segments.size(), 3u);
  std::sort(segments.begin(), segments.end(),
            [](const BoundarySegment& a, const BoundarySegment& b) { return std::tie(a.x0, a.y0) < std::tie(b.x0, b.y0); });
  EXPECT_DOUBLE_EQ(segments[0].x0, -0.5);
  EXPECT_DOUBLE_EQ(segments[0].x1, 0.5);
  EXPECT_NEAR(segments[0].y0, -2.5, 1e-12);
  EXPECT_NEAR(segments[0].y1, -2.5, 1e-12);
  EXPECT_DOUBLE_EQ(segments[1].x0, 0.5);
  EXPECT_DOUBLE_EQ(segments[1].x1, 0.5);
  EXPECT_NEAR(segments[1].y0, -2.5, 1e-12);
  EXPECT_NEAR(segments[1].y1, -1.5, 1e-12);
  EXPECT_DOUBLE_EQ(segments[2].x0, 0.5);
  EXPECT_DOUBLE_EQ(segments[2].x1, 1.5);
  EXPECT_NEAR(segments[2].y0, -1.5, 1e-12);

  // Shading by the fraction that learned: white-ish at 0, darker with each seed; white without runs.
  const StabilityCell* none = find_cell(cells, NormPlacement::Post, "adam", 0, 1e-1);
  const StabilityCell* all = find_cell(cells, NormPlacement::Post, "adam", 0, 1e-3);
  EXPECT_EQ(fraction_color(*none), "#F2F2F2");
  EXPECT_EQ(fraction_color(*all), "#006D2C");
  EXPECT_EQ(fraction_color(SeedCell{}), "#FFFFFF");

  // The markdown table: lr as rows (largest first), warm-ups as columns.
  const auto header = stabilitymap_table_header(o);
  EXPECT_EQ(header, (std::vector<std::string>{"lr", "no warm-up", "warm-up 100 steps"}));
  const auto table = stabilitymap_table(o, cells, NormPlacement::Post, "adam");
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[0][0], "0.1");
  EXPECT_EQ(table[2][0], "0.001");
  EXPECT_EQ(table[1][2], "3/3 learned, median 200 steps");

  // The CSV: its columns in this order, one row per run in the order given.
  std::istringstream csv(stabilitymap_csv(runs));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "placement,optimizer,warmup,lr,seed,outcome,first_step_below,final_loss,min_loss,seconds");
  std::getline(csv, line);
  EXPECT_EQ(line.substr(0, 33), "post,adam,0,0.001,0,learned,100,0") << line;
  int rows = 1;
  while (std::getline(csv, line)) ++rows;
  EXPECT_EQ(rows, 18);

  // One seed: the step alone, or the label.
  o.seeds = {0};
  runs.clear();
  add_cell(runs, 0, 1e-3, 3);
  runs.resize(1);
  EXPECT_EQ(find_cell(summarize_stabilitymap(o, runs), NormPlacement::Post, "adam", 0, 1e-3)->text, "100");
}

// stabilitymap.md ends with the verdicts of the explanations of warm-up that the map alone can test (2 and 3a), as
// the reproduction report computes them.
TEST(StabilityMap, MarkdownGivesTheVerdictsOfTheExplanationsItCanTest) {
  StabilityMapOptions o = synthetic_options();
  o.optimizers = {{OptimizerKind::Adam, AdamV0::Zero}, {OptimizerKind::Adam, AdamV0::Grad}};
  o.out = (bt::fresh_dir("stabilitymap_explanations") / "map").string();
  fs::create_directories(o.out);
  //        adam: warm-up 0   warm-up 100      adam+v0: warm-up 0   warm-up 100
  // lr 1e-1            0/3         1/3                      -            3/3
  // lr 1e-2            1/3         3/3                    3/3              -
  // lr 1e-3            3/3         2/3                    3/3              -
  StabilityMapResult result;
  add_cell(result.runs, 0, 1e-3, 3);
  add_cell(result.runs, 0, 1e-2, 1);
  add_cell(result.runs, 0, 1e-1, 0);
  add_cell(result.runs, 100, 1e-3, 2);
  add_cell(result.runs, 100, 1e-2, 3);
  add_cell(result.runs, 100, 1e-1, 1);
  const size_t adam_runs = result.runs.size();
  add_cell(result.runs, 0, 1e-3, 3);
  add_cell(result.runs, 0, 1e-2, 3);
  add_cell(result.runs, 100, 1e-1, 3);
  for (size_t i = adam_runs; i < result.runs.size(); ++i) result.runs[i].optimizer = "adam+v0";
  result.cells = summarize_stabilitymap(o, result.runs);
  write_stabilitymap(o, result);
  const std::string md = bt::read_text(fs::path(o.out) / "stabilitymap.md");
  const size_t section = md.find("## Explanations of warm-up this map can test");
  ASSERT_NE(section, std::string::npos) << md;
  const std::string tail = md.substr(section);
  // 2: adam fails without warm-up at 1e-1 and 1e-2 (the larger first), adam+v0 trains at 1e-2.
  EXPECT_NE(tail.find("### 2. The variance of Adam's adaptive learning rate"), std::string::npos) << tail;
  EXPECT_NE(tail.find("`adam` does not train at lr 0.1 (0/3), 0.01 (1/3); there, `adam+v0` trains at 0.01 (3/3)"),
            std::string::npos)
      << tail;
  // 3a: the largest training lr rises with warm-up in both panels (1e-3 -> 1e-2, 1e-2 -> 1e-1).
  EXPECT_NE(tail.find("### 3a. Curvature: the largest stable learning rate"), std::string::npos) << tail;
  EXPECT_NE(tail.find("rises with the warm-up in 2 of 2 panels"), std::string::npos) << tail;
  EXPECT_NE(tail.find("| Post-LN, adam+v0 | 0.01 (3/3) | 0.1 (3/3) | holds |"), std::string::npos) << tail;
  size_t verdicts = 0;
  const std::string holds = "**Verdict: holds.**";
  for (size_t at = tail.find(holds); at != std::string::npos; at = tail.find(holds, at + 1)) ++verdicts;
  EXPECT_EQ(verdicts, 2u) << tail;

  // Without warm-up adam+v0 fails where adam does: 2 does not hold; one warm-up length: 3a cannot tell.
  for (StabilityRun& r : result.runs)
    if (r.optimizer == "adam+v0" && r.warmup == 0 && r.lr == 1e-2) r.outcome = probe::Outcome::NeverStarted;
  o.warmups = {0};
  result.cells = summarize_stabilitymap(o, result.runs);
  write_stabilitymap(o, result);
  const std::string md2 = bt::read_text(fs::path(o.out) / "stabilitymap.md");
  EXPECT_NE(md2.find("`adam+v0` trains at none of them"), std::string::npos) << md2;
  EXPECT_NE(md2.find("**Verdict: does not.**"), std::string::npos) << md2;
  EXPECT_NE(md2.find("fewer than two warm-up lengths"), std::string::npos) << md2;
  EXPECT_NE(md2.find("**Verdict: cannot tell here.**"), std::string::npos) << md2;
}

TEST(StabilityMap, PlanChecksItsLists) {
  StabilityMapOptions o = stabilitymap_preset(true);
  EXPECT_THROW(plan_stabilitymap(o), Error);  // no output directory
  o.out = (bt::fresh_dir("stabilitymap_plan") / "never").string();
  const auto sweeps = plan_stabilitymap(o);
  ASSERT_EQ(sweeps.size(), o.optimizers.size());
  EXPECT_EQ(fs::path(sweeps[1].out).filename(), "adam+v0");
  EXPECT_EQ(sweeps[1].base.optimizer.adam_v0, AdamV0::Grad);
  EXPECT_EQ(plan_sweep(sweeps[0]).size(), o.placements.size() * o.warmups.size() * o.lrs.size() * o.seeds.size());
  EXPECT_FALSE(fs::exists(o.out));  // planning writes nothing
  StabilityMapOptions bad = o;
  bad.warmups = {0, 0};
  EXPECT_THROW(plan_stabilitymap(bad), Error);
  bad = o;
  bad.lrs = {};
  EXPECT_THROW(plan_stabilitymap(bad), Error);
  bad = o;
  bad.optimizers.push_back(bad.optimizers.front());
  EXPECT_THROW(plan_stabilitymap(bad), Error);
  // The full preset: the source's model, 2 x 3 x 3 x 5 x 3 runs, lr 1e-3 in the grid.
  const StabilityMapOptions full = stabilitymap_preset(false);
  EXPECT_EQ(full.base.model.layers, 24);
  EXPECT_EQ(full.base.model.width, 128);
  EXPECT_NE(std::find(full.lrs.begin(), full.lrs.end(), 1e-3), full.lrs.end());
  EXPECT_EQ(full.placements.size() * full.optimizers.size() * full.warmups.size() * full.lrs.size() * full.seeds.size(),
            270u);
}

TEST(StabilityMap, BadFlagsExit2AndWriteNothing) {
  const fs::path root = bt::fresh_dir("stabilitymap_bad");
  int i = 0;
  for (const char* bad : {"--optimizers adam,sgd+v0", "--optimizers nadam", "--optimizers ''", "--lrs 1e-3,x",
                          "--lrs 0", "--lrs ''", "--warmups 0,0", "--warmups -5", "--placements post,middle",
                          "--seeds ''", "--lr 1e-3", "--warmup 10", "--optimizer radam", "--adam-v0 grad"}) {
    const fs::path out = root / std::to_string(i++);
    const bt::CliResult r = bt::run_cli(std::string("stabilitymap --width 8 --heads 2 --layers 1 --steps 2 ") + bad +
                                        " --out " + out.string());
    EXPECT_EQ(r.status, 2) << bad << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << bad << ": " << r.err;
    EXPECT_FALSE(fs::exists(out)) << bad;
  }
}

TEST(StabilityMap, ToyMapWritesCsvFiguresAndTablesAndResumesWithoutRetraining) {
  const fs::path dir = bt::fresh_dir("stabilitymap_toy") / "map";
  const bt::CliResult first = bt::run_cli(std::string("stabilitymap ") + kToyFlags + " --out " + dir.string());
  ASSERT_EQ(first.status, 0) << first.out << first.err;
  EXPECT_NE(first.out.find("stability map: 8 runs"), std::string::npos) << first.out;  // the estimate, first
  EXPECT_NE(first.out.find("Expected"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("Post-LN, radam+v0"), std::string::npos) << first.out;  // the tables on the terminal

  const auto rows = csv_rows(dir / "stabilitymap.csv");
  ASSERT_EQ(rows.size(), 9u);  // header + 2 optimizers x 2 lrs x 2 seeds
  EXPECT_EQ(rows[0], (std::vector<std::string>{"placement", "optimizer", "warmup", "lr", "seed", "outcome",
                                               "first_step_below", "final_loss", "min_loss", "seconds"}));
  for (size_t i = 1; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 10u);
    EXPECT_EQ(rows[i][0], "post");
    EXPECT_EQ(rows[i][1], i <= 4 ? "adam" : "radam+v0");
    EXPECT_EQ(rows[i][2], "0");
    EXPECT_TRUE(rows[i][3] == "0.001" || rows[i][3] == "0.01") << rows[i][3];
    EXPECT_TRUE(probe::parse_outcome(rows[i][5]).has_value()) << rows[i][5];
  }
  const std::string md = bt::read_text(dir / "stabilitymap.md");
  EXPECT_NE(md.find("## Post-LN, radam+v0"), std::string::npos) << md;
  EXPECT_NE(md.find("| lr | no warm-up |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 0.01 |"), std::string::npos) << md;
  EXPECT_NE(md.find("neither `radam` nor `adam+v0`"), std::string::npos) << md;  // radam+v0 is neither
  EXPECT_NE(first.out.find("Explanations of warm-up this map can test"), std::string::npos) << first.out;
  EXPECT_TRUE(fs::exists(dir / "stabilitymap.gp"));
  EXPECT_TRUE(fs::exists(dir / "runs" / "radam+v0" / "summary.csv"));
  if (report::gnuplot_program().empty()) {
    std::printf("gnuplot is not installed: stabilitymap*.{png,svg} not checked\n");
  } else {
    EXPECT_TRUE(fs::exists(dir / "stabilitymap.png"));
    EXPECT_TRUE(fs::exists(dir / "stabilitymap_post_adam.png"));
    EXPECT_TRUE(fs::exists(dir / "stabilitymap_post_radam+v0.svg"));
  }

  // Rerun: every run is reused, none retrained (the metrics files keep their times).
  const fs::path metrics = dir / "runs" / "radam+v0" / "norm_placement=post+warmup=0+lr=0.01+seed=1" / "metrics.csv";
  ASSERT_TRUE(fs::exists(metrics));
  const auto before = fs::last_write_time(metrics);
  const bt::CliResult again = bt::run_cli(std::string("stabilitymap ") + kToyFlags + " --out " + dir.string());
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.out.find("4 already finished, 0 to run"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("(0 to train)"), std::string::npos) << again.out;
  EXPECT_EQ(fs::last_write_time(metrics), before);
  EXPECT_EQ(csv_rows(dir / "stabilitymap.csv").size(), 9u);

  // Other settings in the same directory are refused.
  std::string other_flags = kToyFlags;
  other_flags.replace(other_flags.find("--steps 20"), 10, "--steps 21");
  const bt::CliResult other = bt::run_cli("stabilitymap " + other_flags + " --out " + dir.string());
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.err.find("differs"), std::string::npos) << other.err;
}

TEST(StabilityMap, CsvRowsReadBackAsWritten) {
  std::vector<StabilityRun> runs;
  add_cell(runs, 100, 3e-4, 2);
  runs[2].final_loss = std::nan("");
  runs[0].seconds = 12.5;
  runs[1].optimizer = "radam+v0";
  const std::vector<StabilityRun> back = parse_stabilitymap_csv(stabilitymap_csv(runs), "rows.csv");
  ASSERT_EQ(back.size(), runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(back[i].placement, runs[i].placement);
    EXPECT_EQ(back[i].optimizer, runs[i].optimizer);
    EXPECT_EQ(back[i].warmup, runs[i].warmup);
    EXPECT_EQ(back[i].lr, runs[i].lr);
    EXPECT_EQ(back[i].seed, runs[i].seed);
    EXPECT_EQ(back[i].outcome, runs[i].outcome);
    EXPECT_EQ(back[i].first_step_below, runs[i].first_step_below);
    EXPECT_EQ(back[i].seconds, runs[i].seconds);
  }
  EXPECT_TRUE(std::isnan(back[2].final_loss));
  // Bad rows name the file and line.
  const std::string header = "placement,optimizer,warmup,lr,seed,outcome,first_step_below,final_loss,min_loss,seconds\n";
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"run,loss\n", "not a stabilitymap.csv"},
           {header + "post,adam,0,0.001,0,learned,5,0.1,0.1\n", "rows.csv:2: 9 fields"},
           {header + "post,adam,zero,0.001,0,learned,5,0.1,0.1,1\n", "rows.csv:2: warmup 'zero'"},
           {header + "post,adam,0,-1,0,learned,5,0.1,0.1,1\n", "rows.csv:2: lr '-1'"},
           {header + "post,adam,0,0.001,0,fine,5,0.1,0.1,1\n", "rows.csv:2: outcome 'fine'"},
           {header + "middle,adam,0,0.001,0,learned,5,0.1,0.1,1\n", "rows.csv:2:"},
           {header + "post,adam,0,0.001,0,learned,5,0.1x,0.1,1\n", "rows.csv:2: final_loss"}}) {
    try {
      parse_stabilitymap_csv(text, "rows.csv");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// A map interrupted in its second sweep writes the rows finished so far; carried to another directory with
// --finished, those runs are not trained again, the rest are, and the rows read back are the rows written. A run
// finished both in the output directory and in --finished is one row.
TEST(StabilityMap, InterruptedMapCarriesItsRowsToAnotherDirectory) {
  const fs::path root = bt::fresh_dir("stabilitymap_carry");
  const std::vector<std::string> flags = {"--layers", "2", "--width", "48", "--heads", "2", "--vocab", "8",
                                          "--copy-len", "8", "--batch", "8", "--steps", "3000", "--placements", "post",
                                          "--optimizers", "adam,radam", "--warmups", "0", "--lrs", "1e-3",
                                          "--seeds", "0", "--jobs", "1"};
  std::string flag_text;
  for (const std::string& f : flags) flag_text += " " + f;
  const std::string first = (root / "first").string();
  std::vector<std::string> argv = {BLOCKLAB_CLI, "stabilitymap"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"--out", first});
  const pid_t pid = spawn_process({argv, "", (root / "first.log").string(), true, false});
  // wait until the second sweep's run has started (its 3000 steps take seconds, the wait 5 ms a turn), then
  // interrupt; the first sweep's run may take minutes under a sanitizer
  const fs::path second_run = fs::path(first) / "runs" / "radam" / "norm_placement=post+warmup=0+lr=0.001+seed=0";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (!fs::exists(second_run / "metrics.csv") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(pid, SIGINT);
  ASSERT_EQ(wait_process(pid), 130) << bt::read_text(root / "first.log");
  const std::string log = bt::read_text(root / "first.log");
  EXPECT_NE(log.find("wrote the map of the 1 run(s) finished so far"), std::string::npos) << log;
  const auto partial = csv_rows(fs::path(first) / "stabilitymap.csv");
  ASSERT_EQ(partial.size(), 2u) << log;  // header + adam's run
  EXPECT_EQ(partial[1][1], "adam");

  // Carried: only experiment.json and stabilitymap.csv travel.
  const fs::path carried = root / "carried";
  fs::create_directories(carried);
  fs::copy_file(fs::path(first) / "experiment.json", carried / "experiment.json");
  fs::copy_file(fs::path(first) / "stabilitymap.csv", carried / "stabilitymap.csv");
  const fs::path second = root / "second";
  const bt::CliResult est = bt::run_cli("stabilitymap" + flag_text + " --finished " + carried.string() +
                                        " --estimate-only --out " + second.string());
  ASSERT_EQ(est.status, 0) << est.err;
  EXPECT_NE(est.out.find("2 runs (1 to train)"), std::string::npos) << est.out;
  const bt::CliResult rest =
      bt::run_cli("stabilitymap" + flag_text + " --finished " + carried.string() + " --out " + second.string());
  ASSERT_EQ(rest.status, 0) << rest.out << rest.err;
  EXPECT_NE(rest.out.find("1 run(s) finished elsewhere, read from"), std::string::npos) << rest.out;
  EXPECT_NE(rest.out.find("0 already finished, 1 finished elsewhere, 0 to run"), std::string::npos) << rest.out;
  EXPECT_FALSE(fs::exists(second / "runs" / "adam" / "norm_placement=post+warmup=0+lr=0.001+seed=0"));
  const auto full = csv_rows(second / "stabilitymap.csv");
  ASSERT_EQ(full.size(), 3u);
  EXPECT_EQ(full[1], partial[1]);  // the carried row, as it was written
  EXPECT_EQ(full[2][1], "radam");

  // Continued in the first directory, which finished adam's run itself, with --finished carrying that run too:
  // one row for it (the carried one), and the interrupted radam run finished.
  const bt::CliResult again =
      bt::run_cli("stabilitymap" + flag_text + " --finished " + carried.string() + " --out " + first);
  ASSERT_EQ(again.status, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("1 run(s) finished both in"), std::string::npos) << again.out;
  const auto once = csv_rows(fs::path(first) / "stabilitymap.csv");
  ASSERT_EQ(once.size(), 3u) << again.out;
  EXPECT_EQ(once[1], partial[1]);
  EXPECT_EQ(once[2][1], "radam");

  // Other per-run settings, or a directory without a map, are refused before anything is written.
  std::string other = flag_text;
  other.replace(other.find("--steps 3000"), 12, "--steps 2999");
  const bt::CliResult refused =
      bt::run_cli("stabilitymap" + other + " --finished " + carried.string() + " --out " + (root / "other").string());
  EXPECT_EQ(refused.status, 2) << refused.err;
  EXPECT_NE(refused.err.find("setting 'steps' differs"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(root / "other"));
  const bt::CliResult empty =
      bt::run_cli("stabilitymap" + flag_text + " --finished " + root.string() + " --out " + (root / "other").string());
  EXPECT_EQ(empty.status, 2) << empty.err;
  EXPECT_NE(empty.err.find("holds no stability map"), std::string::npos) << empty.err;
}
