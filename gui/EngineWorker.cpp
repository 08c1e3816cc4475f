#include "EngineWorker.h"

#include <QDir>
#include <QFileInfo>

#include "compare/compare.h"
#include "core/error.h"
#include "core/logging.h"
#include "demo/demo_model.h"
#include "io/image_metrics.h"
#include "io/png.h"
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
  void onNotice(const std::string& text) override { Q_EMIT m_worker->notice(m_run, QString::fromStdString(text)); }

 private:
  EngineWorker* m_worker;
  int m_run;
};

}  // namespace

EngineWorker::EngineWorker() = default;
EngineWorker::~EngineWorker() = default;

void EngineWorker::loadModel(const ModelRequest& request) {
  Q_EMIT busyChanged(true, BusyKind::Loading, tr("Loading %1").arg(QDir::toNativeSeparators(request.checkpoint)));
  try {
    QString checkpoint = request.checkpoint;
    if (checkpoint.isEmpty()) {  // the shipped demo model (its sha256 is checked: file I/O, so here)
      try {
        checkpoint = QString::fromStdString(demo::find_demo_model());
      } catch (const InputError& e) {
        if (request.randomDemo.isEmpty()) throw;
        log().warn("{}", e.what());
        checkpoint = request.randomDemo;
      }
    }
    if (checkpoint == request.randomDemo && !QFileInfo::exists(checkpoint)) {
      Q_EMIT busyChanged(true, BusyKind::Loading, tr("Making the demo model (random weights)"));
      QDir().mkpath(QFileInfo(checkpoint).absolutePath());
      demo::make_random_demo_model(checkpoint.toStdString(), 1);
    }
    LoadOptions options;
    options.checkpoint = checkpoint.toStdString();
    options.vocab = request.vocab.toStdString();
    options.lora_dir = request.loraDir.toStdString();
    options.embeddings_dir = request.embeddingsDir.toStdString();
    options.storage = request.storage;
    options.device = request.device.toStdString();
    options.components = request.components;
    m_engine.reset();  // never two models in memory
    m_hasModel.store(false);
    const int run = m_nextRun++;
    Q_EMIT loadStarted(run, request.storage);
    SignalObserver observer(this, run);  // the load's memory samples reach the chart
    m_engine = std::make_unique<Engine>(options, &observer);
    m_hasModel.store(true);
    Q_EMIT modelLoaded(m_engine->info());
    Q_EMIT tokenizerChanged(m_engine->tokenizer(), {});  // the engine's own, found before the weights
  } catch (const MissingVocabulary& e) {
    Q_EMIT failed(-1, QString::fromStdString(e.what()));
    Q_EMIT tokenizerChanged(nullptr, QString::fromStdString(e.what()));
    Q_EMIT vocabularyMissing(QString::fromStdString(e.what()));
  } catch (const std::exception& e) {
    Q_EMIT failed(-1, QString::fromStdString(e.what()));
  }
  Q_EMIT busyChanged(false, BusyKind::Idle, QString());
}

void EngineWorker::finishRun(RunResult& out, const QString& outputDir) {
  if (m_engine) out.residency = QString::fromStdString(m_engine->info().residency);
  if (!outputDir.isEmpty()) {
    for (const auto& img : out.result.images) {
      out.savedPaths << QString::fromStdString(write_numbered_png(outputDir.toStdString(), img.seed, img.image, img.parameters));
    }
  }
  Q_EMIT finished(out);
}

void EngineWorker::reportFailure(int run) {
  try {
    throw;
  } catch (const Cancelled&) {
    Q_EMIT cancelled(run);
  } catch (const std::exception& e) {
    Q_EMIT failed(run, QString::fromStdString(e.what()));
  } catch (...) {
    Q_EMIT failed(run, tr("unknown engine failure"));
  }
}

void EngineWorker::queueGenerate(const GenerationRequest& request, const QString& outputDir) {
  const uint64_t ticket = ++m_queued;
  QMetaObject::invokeMethod(this, [this, ticket, request, outputDir] {
    m_jobTicket = ticket;
    generate(request, outputDir);
  }, Qt::QueuedConnection);
}

void EngineWorker::queueCompare(const GenerationRequest& request, const StorageSpec& fp8, const QString& outputDir) {
  const uint64_t ticket = ++m_queued;
  QMetaObject::invokeMethod(this, [this, ticket, request, fp8, outputDir] {
    m_jobTicket = ticket;
    compare(request, fp8, outputDir);
  }, Qt::QueuedConnection);
}

void EngineWorker::beginJob() {
  // a job called directly (ticket 0) starts uncancelled, as does one queued after the last cancel
  m_cancel.store(m_jobTicket != 0 && m_jobTicket <= m_cancelledUpTo.load());
  m_jobTicket = 0;
}

void EngineWorker::generate(const GenerationRequest& request, const QString& outputDir) {
  beginJob();
  Q_EMIT busyChanged(true, BusyKind::Generating, tr("Generating"));
  const int run = m_nextRun++;
  Q_EMIT runStarted(run, request.storage);
  try {
    if (!m_engine) throw InputError("no model is loaded: choose a checkpoint in the Model panel");
    SignalObserver observer(this, run);
    RunResult out;
    out.run = run;
    out.label = storageLabel(request.storage);
    out.request = request;
    out.result = m_engine->generate(request, &observer, m_cancel);
    finishRun(out, outputDir);
  } catch (...) {
    reportFailure(run);
  }
  Q_EMIT busyChanged(false, BusyKind::Idle, QString());
}

void EngineWorker::compare(const GenerationRequest& request, const StorageSpec& fp8, const QString& outputDir) {
  beginJob();
  Q_EMIT busyChanged(true, BusyKind::Comparing, tr("Comparing"));
  const int first = m_nextRun;
  m_nextRun += 2;
  int current = first;
  try {
    if (!m_engine) {
      Q_EMIT runStarted(first, StorageSpec{WeightType::FP16, Fp8Scale::None, false});
      throw InputError("no model is loaded: choose a checkpoint in the Model panel");
    }
    CompareOptions o;
    o.request = request;
    o.request.batch_count = 1;
    o.request.batch_size = 1;
    o.modes = {ModeSpec{StorageSpec{WeightType::FP16, Fp8Scale::None, false}}, ModeSpec{fp8}};
    o.unet_error = false;  // the images are what the tab shows
    std::vector<std::unique_ptr<SignalObserver>> observers;
    CompareHooks hooks;
    hooks.cancel = &m_cancel;
    hooks.observer = [&](std::size_t k) {
      current = first + static_cast<int>(k);
      Q_EMIT runStarted(current, o.modes[k].storage);
      observers.push_back(std::make_unique<SignalObserver>(this, current));
      return observers.back().get();
    };
    CompareResult c;
    hooks.mode_finished = [&](std::size_t k, const ModeResult& m) {
      RunResult& out = k == 0 ? c.reference : c.candidate;
      out.run = first + static_cast<int>(k);
      out.label = storageLabel(m.mode.storage);
      out.request = o.request;
      out.request.storage = m.mode.storage;
      out.result = m.result;
      finishRun(out, outputDir);
    };
    c.report = measure_compare(*m_engine, o, hooks);
    // FP16 that cannot fit (Flux on a 24 GB machine): the tab shows its estimate beside the FP8 run;
    // an FP8 mode that cannot fit either is a failure
    if (!c.report.modes.at(1).refused.empty()) throw DoesNotFit(c.report.modes[1].refused);
    c.referenceRefused = QString::fromStdString(c.report.modes[0].refused);
    if (c.referenceRefused.isEmpty()) {
      c.heatmap = diff_heatmap(c.reference.result.images.front().image, c.candidate.result.images.front().image);
    } else {
      c.reference.label = storageLabel(o.modes[0].storage);
    }
    Q_EMIT compareFinished(c);
  } catch (...) {
    reportFailure(current);
  }
  Q_EMIT busyChanged(false, BusyKind::Idle, QString());
}

}  // namespace fp8s::gui
