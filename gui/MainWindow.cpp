#include "MainWindow.h"

#include <QDir>
#include <QDragEnterEvent>
#include <QFileInfo>
#include <QLabel>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>

#include <tuple>

#include "core/logging.h"
#include "core/rate.h"
#include "core/version.h"
#include "demo/demo_model.h"
#include "memory/process_memory.h"
#include "panels/ChartsPanel.h"
#include "panels/CompareView.h"
#include "panels/GalleryPanel.h"
#include "panels/ImageView.h"
#include "panels/EmbeddingsPanel.h"
#include "panels/ControlNetPanel.h"
#include "panels/Img2ImgPanel.h"
#include "panels/LogPanel.h"
#include "panels/LoraPanel.h"
#include "panels/ModelPanel.h"
#include "panels/PrecisionPanel.h"
#include "panels/PromptPanel.h"
#include "VocabDownload.h"
#include "pipeline/engine.h"

// The icon and other resources live in this static library: register them once.
static void initResources() { Q_INIT_RESOURCE(fp8studio); }

namespace fp8s::gui {

MainWindow::MainWindow(QSettings* settings, bool autoLoad, QWidget* parent)
    : QMainWindow(parent), m_settings(settings), m_folders(AppFolders::defaults()) {
  initResources();
  registerMetaTypes();
  if (!m_settings) {
    m_ownSettings = std::make_unique<QSettings>();
    m_settings = m_ownSettings.get();
  }
  m_folders.models = m_settings->value(QStringLiteral("folders/models"), m_folders.models).toString();
  m_folders.loras = m_settings->value(QStringLiteral("folders/loras"), m_folders.loras).toString();
  m_folders.controlnets = m_settings->value(QStringLiteral("folders/controlnet"), m_folders.controlnets).toString();
  m_folders.outputs = m_settings->value(QStringLiteral("folders/outputs"), m_folders.outputs).toString();
  setWindowTitle(QStringLiteral("FP8 Studio %1").arg(QString::fromLatin1(kVersion)));
  setWindowIcon(QIcon(QStringLiteral(":/icons/fp8studio.svg")));
  setAcceptDrops(true);

  m_worker = new EngineWorker;
  m_worker->moveToThread(&m_thread);
  connect(&m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
  m_thread.setObjectName(QStringLiteral("engine"));
  m_thread.start();

  buildUi();
  connectWorker();

  m_model->setModelsFolder(m_folders.models);
  m_lora->setFolder(m_folders.loras);
  m_controlnet->setFolder(m_folders.controlnets);
  m_embeddings->setFolder(m_folders.data + QStringLiteral("/embeddings"));
  std::apply([&](auto*... panel) { (panel->restoreSettings(*m_settings), ...); }, std::tuple{m_model, m_prompt, m_img2img, m_lora, m_precision, m_controlnet});
  restoreGeometry(m_settings->value(QStringLiteral("window/geometry")).toByteArray());
  m_splitter->restoreState(m_settings->value(QStringLiteral("window/splitter")).toByteArray());
  m_tabs->setCurrentIndex(m_settings->value(QStringLiteral("window/tab"), 0).toInt());

  if (autoLoad) {
    const QString model = m_model->checkpoint();
    if (!model.isEmpty() && QFileInfo::exists(model)) {
      loadModel(model);
    } else {
      // first run: the built-in demo model (or, without one, a tiny checkpoint with random weights)
      if (m_prompt->promptEdit()->toPlainText().isEmpty()) m_prompt->setFromRequest(demo::first_run_request());
      // the worker finds (and verifies) the shipped demo model, or makes the random-weight one
      const ModelRequest demo = modelRequest(QString(), demoModelPath());
      QMetaObject::invokeMethod(m_worker, [w = m_worker, demo] { w->loadModel(demo); }, Qt::QueuedConnection);
    }
  }
  auto* timer = new QTimer(this);
  connect(timer, &QTimer::timeout, this, &MainWindow::updateStatus);
  timer->start(1000);
  updateStatus();
}

MainWindow::~MainWindow() {
  m_worker->cancel();
  m_thread.quit();
  m_thread.wait();
}

QString MainWindow::demoModelPath() const {
  return m_folders.models + QLatin1Char('/') + QString::fromLatin1(demo::kRandomDemoFile);
}

void MainWindow::connectWorker() {
  connect(m_worker, &EngineWorker::busyChanged, this, &MainWindow::setBusy);
  connect(m_worker, &EngineWorker::modelLoaded, this, &MainWindow::onModelLoaded);
  connect(m_worker, &EngineWorker::vocabularyMissing, this, &MainWindow::offerVocabulary);
  connect(m_worker, &EngineWorker::tokenizerChanged, m_prompt, &PromptPanel::setTokenizer);
  connect(m_worker, &EngineWorker::loadStarted, this,
          [this](int run, const StorageSpec& storage) { m_charts->beginRun(run, storage, true); });
  connect(m_worker, &EngineWorker::runStarted, this, [this](int run, const StorageSpec& storage) {
    m_currentRun = run;
    m_stepMsSum = 0;
    m_stepCount = 0;
    m_charts->beginRun(run, storage);
    m_progress->setValue(0);
    m_progress->setFormat(tr("#%1 %2: starting…").arg(run).arg(storageLabel(storage)));
  });
  connect(m_worker, &EngineWorker::phase, this, [this](int run, const PhaseEvent& e) {
    m_charts->addPhase(run, e);
    if (e.phase == Phase::Decode) m_progress->setFormat(tr("#%1: decoding the image…").arg(run));
    if (e.phase == Phase::Encode) m_progress->setFormat(tr("#%1: encoding the prompt…").arg(run));
  });
  connect(m_worker, &EngineWorker::step, this, &MainWindow::onStep);
  connect(m_worker, &EngineWorker::memory, this, [this](int run, const MemorySample& s) {
    m_charts->addMemory(run, s);
    m_vramBytes = s.cuda_allocated_bytes;
  });
  connect(m_worker, &EngineWorker::notice, this, [this](int run, const QString& text) {
    statusBar()->showMessage(tr("#%1: %2").arg(run).arg(text), 20000);
  });
  connect(m_worker, &EngineWorker::finished, this, &MainWindow::onFinished);
  connect(m_worker, &EngineWorker::compareFinished, this, [this](const CompareResult& c) {
    m_compare->setResult(c);
    m_tabs->setCurrentWidget(m_compare);
  });
  connect(m_worker, &EngineWorker::cancelled, this, [this](int run) {
    m_progress->setFormat(tr("#%1 interrupted").arg(run));
    statusBar()->showMessage(tr("Interrupted"), 4000);
  });
  connect(m_worker, &EngineWorker::failed, this, [this](int run, const QString& message) {
    showError(run < 0 ? tr("Could not load the model: %1").arg(message) : tr("Run #%1 failed: %2").arg(run).arg(message));
    if (run >= 0) m_progress->setFormat(tr("#%1 failed").arg(run));
  });
}

void MainWindow::onModelLoaded(const ModelInfo& info) {
  m_model->setCheckpoint(QString::fromStdString(info.path));
  m_model->setStatus(tr("Loaded: %1, stored as %2").arg(QString::fromStdString(info.architecture), QString::fromStdString(info.storage)));
  m_model->setModelInfo(info);
  m_prompt->setTraits(info.traits);
  m_charts->setTraits(info.traits);
  m_compare->setTraits(info.traits);
  m_loadedPath = QString::fromStdString(info.path);
  m_deviceText = QString::fromStdString(info.device);
  m_gpu = info.gpu;
  updateStatus();
  m_errorBanner->hide();
  log().info("model loaded: {}", info.path);
  Q_EMIT modelReady();
}

// the charts, the progress bar (this image's rate and ETA) and the preview
void MainWindow::onStep(int run, const StepEvent& e) {
  m_charts->addStep(run, e);
  m_stepMsSum += e.step_ms;
  ++m_stepCount;
  // this image's steps: the rate of the steps so far, the ETA for what is left of them
  const Rate rate = estimate_rate(static_cast<std::size_t>(m_stepCount),
                                  static_cast<std::size_t>(m_stepCount + e.steps - e.step), m_stepMsSum / 1000.0);
  m_progress->setMaximum(e.steps);
  m_progress->setValue(e.step);
  m_progress->setFormat(tr("#%1 step %2/%3 · %4 it/s · ETA %5 s")
                            .arg(run)
                            .arg(e.step)
                            .arg(e.steps)
                            .arg(rate.per_second, 0, 'f', rate.per_second < 1 ? 2 : 1)
                            .arg(rate.eta_seconds, 0, 'f', 1));
  if (e.preview.width > 0) m_image->setPreview(toQImage(e.preview), m_targetWidth, m_targetHeight);
}

void MainWindow::onFinished(const RunResult& r) {
  m_charts->setWeightBytes(r.run, r.result.weight_bytes);
  if (r.request.weight_budget) m_charts->setWeightBudget(r.run, *r.request.weight_budget);
  m_model->setResidency(r.residency);
  if (!r.result.images.empty()) {
    m_image->setImage(toQImage(r.result.images.front().image), r.savedPath());
    m_prompt->setLastSeed(static_cast<int64_t>(r.result.images.front().seed));
  }
  m_gallery->addResult(r);
  const double median = r.result.timing.step_ms.empty() ? 0 : fp8s::median(r.result.timing.step_ms);
  m_progress->setFormat(tr("#%1 %2 done · %3 ms/step · %4 s").arg(r.run).arg(r.label).arg(median, 0, 'f', 0).arg(r.result.timing.total_ms / 1000.0, 0, 'f', 1));
  if (!r.savedPaths.isEmpty()) statusBar()->showMessage(tr("Saved %1").arg(QDir::toNativeSeparators(r.savedPath())), 6000);
}

GenerationRequest MainWindow::currentRequest() const {
  GenerationRequest r = m_promptState;
  PrecisionPanel::applyTo(m_precisionState, r);
  r.loras = m_loraState.loras;
  r.lora_mode = m_loraState.mode;
  Img2ImgPanel::applyTo(m_imageState, r);
  ControlNetPanel::applyTo(m_controlState, r);
  return r;
}

ModelRequest MainWindow::modelRequest(const QString& checkpoint, const QString& randomDemo) const {
  return {checkpoint, QString(), m_folders.loras, m_folders.data + QStringLiteral("/embeddings"),
          m_precision->settings().storage, m_precision->device(), randomDemo, m_model->components()};
}

void MainWindow::loadModel(const QString& path) {
  if (path.isEmpty()) return;
  if (m_busy) m_worker->cancel();  // a model switch stops the running generation first
  m_loadedPath = path;
  const ModelRequest request = modelRequest(path, path == demoModelPath() ? path : QString());
  QMetaObject::invokeMethod(m_worker, [w = m_worker, request] { w->loadModel(request); }, Qt::QueuedConnection);
}

std::optional<GenerationRequest> MainWindow::beginRun() {
  if (m_busy) return std::nullopt;
  m_errorBanner->hide();
  if (const QString problem = m_img2img->problem(); !problem.isEmpty()) {
    showError(problem);
    showImg2Img();
    return std::nullopt;
  }
  if (const QString problem = m_controlnet->problem(); !problem.isEmpty()) {
    showError(problem);
    showControlNet();
    return std::nullopt;
  }
  GenerationRequest r = currentRequest();
  m_targetWidth = r.width;
  m_targetHeight = r.height;
  m_busy = true;  // until the worker says otherwise: no double submission
  return r;
}

void MainWindow::generate() {
  const auto started = beginRun();
  if (!started) return;
  const GenerationRequest r = *started;
  const QString out = m_folders.outputs;
  if (m_tabs->currentWidget() == m_compare) m_tabs->setCurrentWidget(m_charts);
  m_worker->queueGenerate(r, out);
}

void MainWindow::compare() {
  const auto started = beginRun();
  if (!started) return;
  const GenerationRequest r = *started;
  const StorageSpec fp8 = m_precision->compareStorage();
  m_tabs->setCurrentWidget(m_charts);  // watch both runs; the Compare tab opens when they are done
  const QString out = m_folders.outputs;
  m_worker->queueCompare(r, fp8, out);
}

void MainWindow::showImg2Img() { m_tabs->setCurrentWidget(m_img2imgTab); }
void MainWindow::showControlNet() { m_tabs->setCurrentWidget(m_controlTab); }

void MainWindow::interrupt() {
  if (!m_busy) return;
  m_worker->cancel();
  m_progress->setFormat(tr("Interrupting…"));
}

void MainWindow::setBusy(bool busy, BusyKind kind, const QString& what) {
  m_busy = busy;
  m_generateButton->setEnabled(!busy);
  m_interruptButton->setEnabled(busy);
  if (busy) {
    statusBar()->showMessage(what);
    if (kind == BusyKind::Loading) m_progress->setRange(0, 0);  // indeterminate while loading
  } else {
    if (m_progress->maximum() == 0) {
      m_progress->setRange(0, 1);
      m_progress->setValue(1);
      m_progress->setFormat(tr("Ready"));
    }
    statusBar()->clearMessage();
  }
}

void MainWindow::offerVocabulary() {
  if (m_settings->value(QStringLiteral("vocab/offered")).toBool()) return;
  m_settings->setValue(QStringLiteral("vocab/offered"), true);  // once: a "Not now" is not asked again
  m_vocabOffer->show();
}

void MainWindow::showError(const QString& message) {
  m_lastError = message;
  m_errorBanner->setText(message);
  m_errorBanner->show();
  log().error("{}", message.toStdString());
  statusBar()->showMessage(message, 8000);
}

void MainWindow::updateStatus() {
  const auto mem = read_process_memory();
  const QString rss = formatBytes(static_cast<double>(mem.rss_bytes));
  if (m_gpu) {
    m_statusMemory->setText(tr("%1 · VRAM %2 · RSS %3").arg(m_deviceText, formatBytes(static_cast<double>(m_vramBytes)), rss));
  } else {
    m_statusMemory->setText(tr("%1 · %2 threads · RSS %3").arg(m_deviceText.isEmpty() ? tr("CPU") : m_deviceText).arg(QThread::idealThreadCount()).arg(rss));
  }
}

void MainWindow::restoreRequest(const GenerationRequest& r) {
  m_prompt->setFromRequest(r);
  m_img2img->setFromRequest(r);
  m_controlnet->setFromRequest(r);
  m_precision->setSettings(PrecisionSettings{r.storage, r.compute, r.weight_budget});
}

bool MainWindow::applyPngParameters(const QString& path) {
  try {
    const auto png = read_png_request(path.toStdString());
    GenerationRequest r = png.request;
    if (!png.has_storage) {  // an A1111 image: the precision stays as chosen
      const auto p = m_precision->settings();
      r.storage = p.storage;
      r.compute = p.compute;
    }
    restoreRequest(r);
    m_image->setImage(toQImage(png.image), path);
    statusBar()->showMessage(tr("Parameters restored from %1").arg(QFileInfo(path).fileName()), 6000);
    m_errorBanner->hide();
    return true;
  } catch (const std::exception& e) {
    showError(tr("%1: %2").arg(QFileInfo(path).fileName(), QString::fromStdString(e.what())));
    return false;
  }
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  for (const auto& url : e->mimeData()->urls()) {
    if (url.isLocalFile() && url.toLocalFile().endsWith(QLatin1String(".png"), Qt::CaseInsensitive)) {
      e->acceptProposedAction();
      return;
    }
  }
}

void MainWindow::dropEvent(QDropEvent* e) {
  for (const auto& url : e->mimeData()->urls()) {
    if (url.isLocalFile()) {
      applyPngParameters(url.toLocalFile());
      break;
    }
  }
}

void MainWindow::saveSettings() {
  QSettings& s = *m_settings;
  s.setValue(QStringLiteral("folders/models"), m_folders.models);
  s.setValue(QStringLiteral("folders/loras"), m_folders.loras);
  s.setValue(QStringLiteral("folders/outputs"), m_folders.outputs);
  std::apply([&](auto*... panel) { (panel->saveSettings(s), ...); }, std::tuple{m_model, m_prompt, m_img2img, m_lora, m_precision, m_controlnet});
  s.setValue(QStringLiteral("window/geometry"), saveGeometry());
  s.setValue(QStringLiteral("window/splitter"), m_splitter->saveState());
  s.setValue(QStringLiteral("window/tab"), m_tabs->currentIndex());
  s.sync();
}

void MainWindow::closeEvent(QCloseEvent* e) {
  saveSettings();
  m_worker->cancel();
  e->accept();
}

}  // namespace fp8s::gui
