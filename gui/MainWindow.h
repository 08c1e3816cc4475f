// The main window: composes the panels, owns the engine worker's thread, and turns panel values into
// GenerationRequests and the worker's signals into what the panels show. No engine call happens on
// the UI thread.
#pragma once

#include <QMainWindow>
#include <QThread>

#include <memory>
#include <optional>

#include "EngineWorker.h"
#include "panels/LoraPanel.h"
#include "panels/PrecisionPanel.h"
#include "GuiTypes.h"

class QScrollArea;
class QLabel;
class QProgressBar;
class QPushButton;
class QSettings;
class QSplitter;
class QTabWidget;

namespace fp8s::gui {

class ChartsPanel;
class CompareView;
class GalleryPanel;
class ImageView;
class LogPanel;
class LoraPanel;
class Img2ImgPanel;
class ControlNetPanel;
class EmbeddingsPanel;
class ModelPanel;
class PrecisionPanel;
class PromptPanel;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  // `settings`: where state persists (nullptr: the application's QSettings). `autoLoad`: load the
  // last or the demo model at start (tests turn it off to drive the window themselves).
  explicit MainWindow(QSettings* settings = nullptr, bool autoLoad = true, QWidget* parent = nullptr);
  ~MainWindow() override;

  // The request the panels describe right now.
  // The request the panels' changed signals have assembled (no panel is read here).
  GenerationRequest currentRequest() const;
  // The demo checkpoint made on first run (random weights until the trained demo model exists).
  QString demoModelPath() const;

  ModelPanel* modelPanel() const { return m_model; }
  PromptPanel* promptPanel() const { return m_prompt; }
  LoraPanel* loraPanel() const { return m_lora; }
  Img2ImgPanel* img2imgPanel() const { return m_img2img; }
  EmbeddingsPanel* embeddingsPanel() const { return m_embeddings; }
  void showImg2Img();  // brings the img2img / inpaint tab to the front
  ControlNetPanel* controlNetPanel() const { return m_controlnet; }
  void showControlNet();
  PrecisionPanel* precisionPanel() const { return m_precision; }
  ChartsPanel* chartsPanel() const { return m_charts; }
  CompareView* compareView() const { return m_compare; }
  GalleryPanel* galleryPanel() const { return m_gallery; }
  ImageView* imageView() const { return m_image; }
  EngineWorker* worker() const { return m_worker; }
  QTabWidget* tabs() const { return m_tabs; }
  QString lastError() const { return m_lastError; }
  bool isBusy() const { return m_busy; }
  void setOutputFolder(const QString& folder) { m_folders.outputs = folder; }

  // Applies a dropped PNG's A1111 parameters to the panels; false (with the reason shown) otherwise.
  bool applyPngParameters(const QString& path);
  // Puts a request's settings back into the panels (prompt, img2img, precision): the gallery's and
  // a dropped or opened PNG's restore alike.
  void restoreRequest(const GenerationRequest& r);

 public Q_SLOTS:
  void loadModel(const QString& path);
  // The load request of `checkpoint` as the panels and folders say (randomDemo: ModelRequest's).
  ModelRequest modelRequest(const QString& checkpoint, const QString& randomDemo) const;
  void generate();
  void compare();
  void interrupt();
  void saveSettings();

 Q_SIGNALS:
  void modelReady();

 protected:
  void closeEvent(QCloseEvent* e) override;
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;

 private:
  void buildUi();
  QWidget* buildLeft();
  QWidget* buildCentre();
  QWidget* buildRight();
  void connectRun();
  void connectPanels();
  void connectWorker();
  void onModelLoaded(const ModelInfo& info);
  void onStep(int run, const StepEvent& e);
  void onFinished(const RunResult& r);
  void showError(const QString& message);
  void setBusy(bool busy, fp8s::gui::BusyKind kind, const QString& what);
  void updateStatus();
  // Common start of generate() and compare(): the request, or nothing while a run is going on.
  std::optional<GenerationRequest> beginRun();

  QSettings* m_settings;
  std::unique_ptr<QSettings> m_ownSettings;
  AppFolders m_folders;
  QThread m_thread;
  EngineWorker* m_worker;

  ModelPanel* m_model = nullptr;
  PromptPanel* m_prompt = nullptr;
  LoraPanel* m_lora = nullptr;
  Img2ImgPanel* m_img2img = nullptr;
  ControlNetPanel* m_controlnet = nullptr;
  QScrollArea* m_controlTab = nullptr;
  EmbeddingsPanel* m_embeddings = nullptr;
  QScrollArea* m_img2imgTab = nullptr;
  PrecisionPanel* m_precision = nullptr;
  ImageView* m_image = nullptr;
  ChartsPanel* m_charts = nullptr;
  CompareView* m_compare = nullptr;
  GalleryPanel* m_gallery = nullptr;
  LogPanel* m_log = nullptr;
  QTabWidget* m_tabs = nullptr;
  QSplitter* m_splitter = nullptr;
  QProgressBar* m_progress = nullptr;
  QPushButton* m_generateButton = nullptr;
  QPushButton* m_interruptButton = nullptr;
  QLabel* m_errorBanner = nullptr;
  class VocabOffer* m_vocabOffer = nullptr;  // "download the CLIP vocabulary?", shown once ever
  // The loaded model has no CLIP vocabulary: offers the download (once; the choice is remembered).
  void offerVocabulary();
  QLabel* m_statusMemory = nullptr;

  int m_currentRun = 0;
  int m_targetWidth = 512, m_targetHeight = 512;
  double m_stepMsSum = 0;  // this run's steps so far (the ETA)
  int m_stepCount = 0;
  bool m_busy = false;
  // What each panel last said it holds (their changed signals)
  GenerationRequest m_promptState;
  PrecisionSettings m_precisionState;
  LoraSettings m_loraState;
  GenerationRequest m_imageState;
  GenerationRequest m_controlState;  // the ControlNet panel's units
  QString m_lastError;
  QString m_deviceText;       // the loaded model's device (ModelInfo::device)
  bool m_gpu = false;
  uint64_t m_vramBytes = 0;    // the latest memory sample's VRAM
  QString m_loadedPath;
  QString m_pendingModel;
};

}  // namespace fp8s::gui
