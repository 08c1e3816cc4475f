// Engine value structs made known to Qt's meta-type system, so they travel in queued signals
// between the engine worker's thread and the UI thread.
#pragma once

#include <QMetaType>
#include <QString>
#include <QStringList>

#include "compare/compare.h"
#include "pipeline/request.h"

namespace fp8s::gui {

// A finished generation as the UI keeps it: the run's id and label with the engine's result.
struct RunResult {
  int run = 0;
  QString label;  // "FP16", "FP8 E4M3", ...
  GenerationRequest request;
  GenerationResult result;
  QStringList savedPaths;  // where each image was written (empty when not saved)
  QString residency;       // the denoiser's plan under the run's weight budget (empty: all resident)
  QString savedPath(std::size_t image = 0) const {
    return image < static_cast<std::size_t>(savedPaths.size()) ? savedPaths[static_cast<int>(image)] : QString();
  }
};

// Both runs of a "Compare with FP16" action: the runs as the charts and gallery keep them, and
// the engine's compare report (metrics, each mode's own memory figures), which Export writes.
struct CompareResult {
  RunResult reference;  // FP16
  RunResult candidate;  // FP8
  CompareReport report;  // modes[0]: FP16, modes[1]: FP8 (its PSNR/SSIM/max diff are against FP16)
  RgbImage heatmap;      // |FP8 - FP16|, for the view (empty when FP16 did not run)
  QString referenceRefused;  // why FP16 did not run (its memory estimate); empty when it ran
  double psnr() const { return report.modes.size() > 1 ? report.modes[1].psnr : 0; }
  double ssim() const { return report.modes.size() > 1 ? report.modes[1].ssim : 0; }
  int maxAbsDiff() const { return report.modes.size() > 1 ? report.modes[1].max_abs_diff : 0; }
  QString sourceNote() const { return QString::fromStdString(report.source_note); }
};

// Where the app keeps its files (QSettings may override each folder).
struct AppFolders {
  QString data;     // ~/.local/share/fp8studio
  QString models;   // data/models
  QString loras;    // data/loras
  QString controlnets;  // data/controlnet (ComfyUI's models/controlnet)
  QString outputs;  // ~/Pictures/FP8 Studio
  static AppFolders defaults();
};

// The label of a storage choice as the charts' legends and the compare table show it.
inline QString storageLabel(const StorageSpec& storage) { return QString::fromStdString(storage_display_name(storage)); }

void registerMetaTypes();

}  // namespace fp8s::gui

Q_DECLARE_METATYPE(fp8s::GenerationRequest)
Q_DECLARE_METATYPE(fp8s::StepEvent)
Q_DECLARE_METATYPE(fp8s::MemorySample)
Q_DECLARE_METATYPE(fp8s::PhaseEvent)
Q_DECLARE_METATYPE(fp8s::ModelInfo)
Q_DECLARE_METATYPE(fp8s::StorageSpec)
Q_DECLARE_METATYPE(fp8s::gui::RunResult)
Q_DECLARE_METATYPE(fp8s::gui::CompareResult)
