#include "EngineWorker.h"

#include <QDir>
#include <QFileInfo>

#include <random>

#include "compare/image_metrics.h"
#include "core/error.h"
#include "models/synthetic.h"
#include "pipeline/engine.h"

namespace fp8s::gui {
namespace {

// Forwards the engine's observer calls as the worker's signals, tagged with the run.
class SignalObserver : public Observer {
 public:
  SignalObserver(EngineWorker* worker, int run) : m_worker(worker), m_run(run) {}
  void onPhase(const PhaseEvent& e) override { Q_EMIT m_worker->phase(m_run, e); }
  void onStep(const StepEvent& e) override {
    if (const auto& hook = m_worker->stepHook()) hook(e);  // may throw: inside the engine, not Qt
    Q_EMIT m_worker->step(m_run, e);
  }
  void onMemory(const MemorySample& s) override { Q_EMIT m_worker->memory(m_run, s); }

 private:
  EngineWorker* m_worker;
  int m_run;
};

}  // namespace

EngineWorker::EngineWorker() = default;
EngineWorker::~EngineWorker() = default;

void EngineWorker::loadModel(const ModelRequest& request) {
  Q_EMIT busyChanged(true, tr("Loading %1").arg(QDir::toNativeSeparators(request.checkpoint)));
  try {
    if (request.makeDemoIfMissing && !QFileInfo::exists(request.checkpoint)) {
      Q_EMIT busyChanged(true, tr("Making the demo model (random weights)"));
      QDir().mkpath(QFileInfo(request.checkpoint).absolutePath());
      SyntheticOptions demo;
      demo.config = preset_tiny_sd1();
      demo.seed = 1;
      demo.out = request.checkpoint.toStdString();
      make_synthetic(demo);
    }
    LoadOptions options;
    options.checkpoint = request.checkpoint.toStdString();
    options.vocab = request.vocab.toStdString();
    options.lora_dir = request.loraDir.toStdString();
    options.storage = request.storage;
    options.device = request.device.toStdString();
    m_engine.reset();  // never two models in memory
    m_hasModel.store(false);
    m_engine = std::make_unique<Engine>(options);
    m_hasModel.store(true);
    Q_EMIT modelLoaded(m_engine->info());
  } catch (const std::exception& e) {
    Q_EMIT failed(-1, QString::fromStdString(e.what()));
  }
  Q_EMIT busyChanged(false, QString());
}

bool EngineWorker::runOne(const GenerationRequest& request, int run, const QString& label,
                          const QString& outputDir, RunResult& out) {
  Q_EMIT runStarted(run, label);
  try {
    if (!m_engine) throw InputError("no model is loaded: choose a checkpoint in the Model panel");
    SignalObserver observer(this, run);
    out.run = run;
    out.label = label;
    out.request = request;
    out.result = m_engine->generate(request, &observer, m_cancel);
    if (!outputDir.isEmpty()) {
      for (std::size_t i = 0; i < out.result.images.size(); ++i) {
        const auto& img = out.result.images[i];
        const auto path = write_numbered_png(outputDir.toStdString(), img.seed, img.image, img.parameters);
        out.savedPaths << QString::fromStdString(path);
      }
    }
    Q_EMIT finished(out);
    return true;
  } catch (const Cancelled&) {
    Q_EMIT cancelled(run);
  } catch (const std::exception& e) {
    Q_EMIT failed(run, QString::fromStdString(e.what()));
  } catch (...) {
    Q_EMIT failed(run, tr("unknown engine failure"));
  }
  return false;
}

void EngineWorker::generate(const GenerationRequest& request, int run, const QString& label,
                            const QString& outputDir) {
  m_cancel.store(false);
  Q_EMIT busyChanged(true, tr("Generating"));
  RunResult result;
  runOne(request, run, label, outputDir, result);
  Q_EMIT busyChanged(false, QString());
}

void EngineWorker::compare(const GenerationRequest& request, const StorageSpec& fp8, int run,
                           const QString& outputDir) {
  m_cancel.store(false);
  Q_EMIT busyChanged(true, tr("Comparing"));
  GenerationRequest r = request;
  if (r.seed < 0) r.seed = static_cast<int64_t>(std::random_device{}() & 0xFFFFFFFFu);
  r.batch_count = 1;
  r.batch_size = 1;
  CompareResult c;
  r.storage = StorageSpec{WeightType::FP16, Fp8Scale::None, false};
  if (runOne(r, run, storageLabel(r.storage), outputDir, c.reference)) {
    r.storage = fp8;
    if (runOne(r, run + 1, storageLabel(r.storage), outputDir, c.candidate)) {
      const auto& a = c.reference.result.images.front().image;
      const auto& b = c.candidate.result.images.front().image;
      c.psnr = psnr(a, b);
      c.ssim = ssim(a, b);
      c.maxAbsDiff = max_abs_diff(a, b);
      c.heatmap = diff_heatmap(a, b);
      c.sourceNote = QString::fromStdString(m_engine->info().source_note);
      Q_EMIT compareFinished(c);
    }
  }
  Q_EMIT busyChanged(false, QString());
}

}  // namespace fp8s::gui
