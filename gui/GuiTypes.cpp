#include "GuiTypes.h"

#include "EngineWorker.h"

namespace fp8s::gui {

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
