// File: calibrate_command.h
// -----------------------------------------------------------------------------
// `undercurrent calibrate --model M --spec S --prompts benign.jsonl --target-fpr 0.01
// --out S.calibrated.yaml`: runs every prompt with the spec's probes made silent (thresholds no
// score reaches, so no probe acts and every request runs its course), takes each request's peak
// statistic per point (probe::PeakStatistic) and sets each point's threshold to the lowest
// that at most floor(rate × requests) of the benign requests reach (probe::FitThreshold). The
// output is the spec with those thresholds, its header recording the rate, the sample count,
// the prompts file's hash and the model's fingerprint.
//
// `--measure` fits nothing: it runs the spec as it is and reports, per point, the share of
// requests it flagged or stopped with a 95% (Wilson) interval — the held-out check of a
// calibrated spec. One process; prompts are greedy unless --temperature or their own fields
// say otherwise. Exit 0 on success, 1 on bad input (named), 2 on a usage error.
#pragma once

#include <CLI/CLI.hpp>

namespace uc::cli {

void AddCalibrateCommand(CLI::App& app);

}  // namespace uc::cli
