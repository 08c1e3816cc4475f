#include "GuiTypes.h"

#include "EngineWorker.h"

namespace fp8s::gui {

QString storageLabel(const StorageSpec& storage) {
  QString s;
  switch (storage.weights) {
    case WeightType::FP32: s = QStringLiteral("FP32"); break;
    case WeightType::FP16: s = QStringLiteral("FP16"); break;
    case WeightType::BF16: s = QStringLiteral("BF16"); break;
    case WeightType::FP8_E4M3: s = QStringLiteral("FP8 E4M3"); break;
    case WeightType::FP8_E5M2: s = QStringLiteral("FP8 E5M2"); break;
  }
  if (is_fp8(storage.weights) && storage.scale != Fp8Scale::None) {
    s += QStringLiteral(" /") + QString::fromLatin1(fp8_scale_name(storage.scale));
  }
  if (storage.fp8_vae) s += QStringLiteral(" +VAE");
  return s;
}

void registerMetaTypes() {
  qRegisterMetaType<fp8s::GenerationRequest>();
  qRegisterMetaType<fp8s::StepEvent>();
  qRegisterMetaType<fp8s::MemorySample>();
  qRegisterMetaType<fp8s::PhaseEvent>();
  qRegisterMetaType<fp8s::ModelInfo>();
  qRegisterMetaType<fp8s::StorageSpec>();
  qRegisterMetaType<fp8s::gui::RunResult>();
  qRegisterMetaType<fp8s::gui::CompareResult>();
  qRegisterMetaType<fp8s::gui::ModelRequest>();
}

}  // namespace fp8s::gui
