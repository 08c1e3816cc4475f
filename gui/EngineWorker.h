// The engine's thread: an object living in a QThread that owns the Engine (the model stays loaded
// between runs). Requests arrive as queued calls; the engine's observer events leave as signals,
// which Qt queues to the UI thread. Every exception becomes `failed`, and the worker stays usable.
#pragma once

#include <QObject>
#include <QString>

#include <atomic>
#include <functional>
#include <memory>

#include "GuiTypes.h"

namespace fp8s {
class Engine;
}

namespace fp8s::gui {

struct ModelRequest {
  QString checkpoint;
  QString vocab;    // empty: the engine's search (DESIGN.md section 4)
  QString loraDir;
  StorageSpec storage;  // load straight into the chosen storage (no second conversion)
  QString device = QStringLiteral("auto");  // auto, cpu, cuda:N
  // Writes a tiny-sd1 checkpoint with random weights at `checkpoint` first when it does not exist
  // (the first-run model until the trained demo model ships).
  bool makeDemoIfMissing = false;
};

class EngineWorker : public QObject {
  Q_OBJECT

 public:
  EngineWorker();
  ~EngineWorker() override;

  // Thread-safe: asks the running job to stop at its next step.
  void cancel() { m_cancel.store(true); }
  bool hasModel() const { return m_hasModel.load(); }

  // Called on the engine thread at every sampling step, inside the engine's loop (set it while
  // idle). Fault-injection tests throw from it: an exception there is an engine failure mid-run.
  using StepHook = std::function<void(const StepEvent&)>;
  void setStepHook(StepHook hook) { m_stepHook = std::move(hook); }
  const StepHook& stepHook() const { return m_stepHook; }

 public Q_SLOTS:
  void loadModel(const fp8s::gui::ModelRequest& request);
  // Generates `request` as run `run`; images go into `outputDir` (not saved when empty).
  void generate(const fp8s::GenerationRequest& request, int run, const QString& label, const QString& outputDir);
  // The same request with FP16 storage (run `run`) and then with `fp8` storage (run `run + 1`).
  void compare(const fp8s::GenerationRequest& request, const fp8s::StorageSpec& fp8, int run, const QString& outputDir);

 Q_SIGNALS:
  void busyChanged(bool busy, const QString& what);
  void modelLoaded(const fp8s::ModelInfo& info);
  void runStarted(int run, const QString& label);
  void phase(int run, const fp8s::PhaseEvent& event);
  void step(int run, const fp8s::StepEvent& event);
  void memory(int run, const fp8s::MemorySample& sample);
  void finished(const fp8s::gui::RunResult& result);
  void compareFinished(const fp8s::gui::CompareResult& result);
  void cancelled(int run);
  void failed(int run, const QString& message);

 private:
  // Runs one generation; returns false (after emitting cancelled/failed) when it did not finish.
  bool runOne(const GenerationRequest& request, int run, const QString& label, const QString& outputDir,
              RunResult& out);

  std::unique_ptr<Engine> m_engine;
  std::atomic<bool> m_cancel{false};
  std::atomic<bool> m_hasModel{false};
  StepHook m_stepHook;
};

}  // namespace fp8s::gui

Q_DECLARE_METATYPE(fp8s::gui::ModelRequest)
