// Engine value structs made known to Qt's meta-type system, so they travel in queued signals
// between the engine worker's thread and the UI thread.
#pragma once

#include <QMetaType>
#include <QString>
#include <QStringList>

#include "pipeline/request.h"

namespace fp8s::gui {

// A finished generation as the UI keeps it: the run's id and label with the engine's result.
struct RunResult {
  int run = 0;
  QString label;  // "FP16", "FP8 E4M3", ...
  GenerationRequest request;
  GenerationResult result;
  QStringList savedPaths;  // where each image was written (empty when not saved)
  QString savedPath(std::size_t image = 0) const {
    return image < static_cast<std::size_t>(savedPaths.size()) ? savedPaths[static_cast<int>(image)] : QString();
  }
};

// Both runs of a "Compare FP8 vs FP16" action and the metrics between their first images.
struct CompareResult {
  RunResult reference;  // FP16
  RunResult candidate;  // FP8
  double psnr = 0, ssim = 0;
  int maxAbsDiff = 0;
  RgbImage heatmap;
  QString sourceNote;  // ModelInfo::source_note: the checkpoint is already FP8
};

// The label of a storage choice as the charts' legends and the compare table show it.
QString storageLabel(const StorageSpec& storage);

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
