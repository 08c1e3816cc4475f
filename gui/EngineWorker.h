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
#include <map>
#include <string>

namespace fp8s {
class ClipTokenizer;
class Engine;
}

namespace fp8s::gui {

struct ModelRequest {
  QString checkpoint;  // empty: the shipped demo model (found and verified on the engine thread)
  QString vocab;    // empty: the engine's search (docs/architecture.md, "Text, noise and files")
  QString loraDir;
  QString embeddingsDir;  // textual inversions
  StorageSpec storage;  // load straight into the chosen storage (no second conversion)
  QString device = QStringLiteral("auto");  // auto, cpu, cuda:N
  // Where a tiny-sd1 checkpoint with random weights is written (once) and loaded when `checkpoint`
  // is empty and no demo model ships with this build; or, equal to `checkpoint`, made if missing.
  QString randomDemo;
  std::map<std::string, std::string> components;  // a model's other files by role (absent: found by the engine)
};

// What the worker is busy with (the UI's state, never read back from translated text).
enum class BusyKind { Idle, Loading, Generating, Comparing };

class EngineWorker : public QObject {
  Q_OBJECT

 public:
  EngineWorker();
  ~EngineWorker() override;

  // Thread-safe: asks the running job to stop at its next step, and every generation or compare
  // queued (queueGenerate/queueCompare) before this call to stop before its first.
  void cancel() {
    m_cancelledUpTo.store(m_queued.load());
    m_cancel.store(true);
  }
  // Thread-safe: queue a generation / a compare on the worker's thread (what the window does).
  void queueGenerate(const GenerationRequest& request, const QString& outputDir);
  void queueCompare(const GenerationRequest& request, const StorageSpec& fp8, const QString& outputDir);
  bool hasModel() const { return m_hasModel.load(); }

  // Called on the engine thread at every sampling step, inside the engine's loop (set it while
  // idle). Fault-injection tests throw from it: an exception there is an engine failure mid-run.
  using StepHook = std::function<void(const StepEvent&)>;
  void setStepHook(StepHook hook) { m_stepHook = std::move(hook); }
  const StepHook& stepHook() const { return m_stepHook; }

 public Q_SLOTS:
  void loadModel(const fp8s::gui::ModelRequest& request);
  // Generates `request` as the next run (runStarted says which); images go into `outputDir` (not
  // saved when empty).
  void generate(const fp8s::GenerationRequest& request, const QString& outputDir);
  // The engine's compare (measure_compare) of the request in FP16 and in `fp8` storage: two runs.
  void compare(const fp8s::GenerationRequest& request, const fp8s::StorageSpec& fp8, const QString& outputDir);

 Q_SIGNALS:
  void busyChanged(bool busy, fp8s::gui::BusyKind kind, const QString& what);
  void modelLoaded(const fp8s::ModelInfo& info);
  // The loaded checkpoint's CLIP tokenizer (for the prompt's token counter), or why there is none.
  void tokenizerChanged(std::shared_ptr<const fp8s::ClipTokenizer> tokenizer, const QString& why);
  // The model could not load because no CLIP vocabulary was found (after `failed`).
  void vocabularyMissing(const QString& why);
  void runStarted(int run, const fp8s::StorageSpec& storage);
  // A model load, with its own run id: its memory samples arrive as memory(run, ...).
  void loadStarted(int run, const fp8s::StorageSpec& storage);
  void phase(int run, const fp8s::PhaseEvent& event);
  void step(int run, const fp8s::StepEvent& event);
  void memory(int run, const fp8s::MemorySample& sample);
  // A warning before long work (a size far above the model's own), shown in the status bar.
  void notice(int run, const QString& text);
  void finished(const fp8s::gui::RunResult& result);
  void compareFinished(const fp8s::gui::CompareResult& result);
  void cancelled(int run);
  void failed(int run, const QString& message);

 private:
  // Saves the run's images into `outputDir` and emits finished.
  void finishRun(RunResult& out, const QString& outputDir);
  // Emits cancelled/failed for the exception being handled.
  void reportFailure(int run);
  // At a job's start: its cancel flag, set when a cancel came after the job was queued.
  void beginJob();

  std::unique_ptr<Engine> m_engine;
  int m_nextRun = 1;  // the run ids: owned here, announced by runStarted
  std::atomic<bool> m_cancel{false};
  std::atomic<uint64_t> m_queued{0};         // tickets handed out by queueGenerate/queueCompare
  std::atomic<uint64_t> m_cancelledUpTo{0};  // every ticket up to this one was cancelled
  uint64_t m_jobTicket = 0;                  // the starting job's ticket (0: called directly)
  std::atomic<bool> m_hasModel{false};
  StepHook m_stepHook;
};

}  // namespace fp8s::gui

Q_DECLARE_METATYPE(fp8s::gui::ModelRequest)
Q_DECLARE_METATYPE(fp8s::gui::BusyKind)
Q_DECLARE_METATYPE(std::shared_ptr<const fp8s::ClipTokenizer>)
