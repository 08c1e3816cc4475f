#include "GuiTypes.h"

#include "EngineWorker.h"

#include <QDir>
#include <QStandardPaths>

namespace fp8s::gui {

AppFolders AppFolders::defaults() {
  AppFolders f;
  QString data = QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation);
  if (data.isEmpty()) data = QDir::homePath() + QStringLiteral("/.local/share");
  f.data = data + QStringLiteral("/fp8studio");  // where the engine also looks for the CLIP vocabulary
  f.models = f.data + QStringLiteral("/models");
  f.loras = f.data + QStringLiteral("/loras");
  f.controlnets = f.data + QStringLiteral("/controlnet");
  QString pictures = QStandardPaths::writableLocation(QStandardPaths::PicturesLocation);
  if (pictures.isEmpty()) pictures = QDir::homePath();
  f.outputs = pictures + QStringLiteral("/FP8 Studio");
  return f;
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
  qRegisterMetaType<fp8s::gui::BusyKind>();
  qRegisterMetaType<std::shared_ptr<const fp8s::ClipTokenizer>>();
}

}  // namespace fp8s::gui
