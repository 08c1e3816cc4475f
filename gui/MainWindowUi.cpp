// MainWindow's widgets: the left column (model, precision, LoRA, embeddings), the centre (prompt,
// error banner, image, progress and buttons), the right tabs, and the connections between panels.
#include "MainWindow.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QShortcut>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QVBoxLayout>

#include "ScrollFit.h"
#include "VocabDownload.h"
#include "core/logging.h"
#include "core/threads.h"
#include "panels/ChartsPanel.h"
#include "panels/CompareView.h"
#include "panels/ControlNetPanel.h"
#include "panels/EmbeddingsPanel.h"
#include "panels/GalleryPanel.h"
#include "panels/ImageView.h"
#include "panels/Img2ImgPanel.h"
#include "panels/LogPanel.h"
#include "panels/LoraPanel.h"
#include "panels/ModelPanel.h"
#include "panels/PrecisionPanel.h"
#include "panels/PromptPanel.h"

namespace fp8s::gui {

void MainWindow::buildUi() {
  m_splitter = new QSplitter(Qt::Horizontal);
  m_splitter->setObjectName(QStringLiteral("mainSplitter"));
  m_splitter->addWidget(buildLeft());
  m_splitter->addWidget(buildCentre());
  m_splitter->addWidget(buildRight());
  m_splitter->setStretchFactor(0, 0);
  m_splitter->setStretchFactor(1, 1);
  m_splitter->setStretchFactor(2, 1);
  m_splitter->setSizes({320, 480, 480});
  setCentralWidget(m_splitter);
  resize(1280, 800);

  m_statusMemory = new QLabel;
  statusBar()->addPermanentWidget(m_statusMemory);
  connectRun();
  connectPanels();
}

// left: model, precision, LoRA, embeddings
QWidget* MainWindow::buildLeft() {
  auto* left = new QWidget;
  auto* leftLayout = new QVBoxLayout(left);
  auto group = [&](const QString& title, QWidget* panel, int stretch) {
    auto* label = new QLabel(QStringLiteral("<b>%1</b>").arg(title));
    leftLayout->addWidget(label);
    leftLayout->addWidget(panel, stretch);
  };
  m_model = new ModelPanel;
  m_precision = new PrecisionPanel;
  m_lora = new LoraPanel;
  m_img2img = new Img2ImgPanel;
  m_controlnet = new ControlNetPanel;
  group(tr("Model"), m_model, 0);
  group(tr("Precision — the FP8 toggle"), m_precision, 0);
  group(tr("LoRA"), m_lora, 1);
  m_embeddings = new EmbeddingsPanel;
  group(tr("Embeddings (textual inversion)"), m_embeddings, 0);
  auto* leftScroll = new QScrollArea;
  leftScroll->setWidget(left);
  leftScroll->setWidgetResizable(true);
  leftScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  new ScrollFit(leftScroll);  // as wide as the panels need, also when they grow
  return leftScroll;
}

// centre: prompt, error banner, vocabulary offer, image, progress and buttons
QWidget* MainWindow::buildCentre() {
  auto* centre = new QWidget;
  auto* centreLayout = new QVBoxLayout(centre);
  m_prompt = new PromptPanel;
  centreLayout->addWidget(m_prompt, 0);
  m_errorBanner = new QLabel;
  m_errorBanner->setObjectName(QStringLiteral("errorBanner"));
  m_errorBanner->setWordWrap(true);
  m_errorBanner->setStyleSheet(QStringLiteral("QLabel{background:#fdecea;color:#8b1a10;border:1px solid #e6a39b;padding:4px;border-radius:3px}"));
  m_errorBanner->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_errorBanner->hide();
  centreLayout->addWidget(m_errorBanner);
  m_vocabOffer = new VocabOffer(m_folders.data + QStringLiteral("/clip"));
  connect(m_vocabOffer, &VocabOffer::failed, this, &MainWindow::showError);
  connect(m_vocabOffer, &VocabOffer::installed, this, [this](const QString& path) {
    statusBar()->showMessage(tr("CLIP vocabulary installed: %1").arg(path), 6000);
    loadModel(m_loadedPath);  // the load that stopped for want of it
  });
  m_vocabOffer->hide();
  centreLayout->addWidget(m_vocabOffer);
  m_image = new ImageView;
  centreLayout->addWidget(m_image, 1);
  auto* runRow = new QHBoxLayout;
  m_progress = new QProgressBar;
  m_progress->setObjectName(QStringLiteral("progressBar"));
  m_progress->setFormat(tr("Idle"));
  m_progress->setValue(0);
  m_generateButton = new QPushButton(tr("Generate"));
  m_generateButton->setObjectName(QStringLiteral("generateButton"));
  m_generateButton->setToolTip(tr("Generate (Ctrl+Enter)"));
  m_generateButton->setDefault(true);
  m_interruptButton = new QPushButton(tr("Interrupt"));
  m_interruptButton->setObjectName(QStringLiteral("interruptButton"));
  m_interruptButton->setToolTip(tr("Stop after the current step (Esc)"));
  m_interruptButton->setEnabled(false);
  centreLayout->addWidget(m_progress);  // a row of its own: the run's text is not cut at 1280 wide
  runRow->addStretch(1);
  runRow->addWidget(m_generateButton);
  runRow->addWidget(m_interruptButton);
  centreLayout->addLayout(runRow);
  return centre;
}

// right: charts, img2img, ControlNet, compare, gallery, log
QWidget* MainWindow::buildRight() {
  m_tabs = new QTabWidget;
  m_charts = new ChartsPanel;
  m_compare = new CompareView;
  m_gallery = new GalleryPanel;
  m_log = new LogPanel;
  m_tabs->addTab(m_charts, tr("Charts"));
  // a form that takes the room there is and scrolls in a small window
  auto scrolled = [this](QWidget* panel, const QString& title) {
    auto* area = new QScrollArea;
    area->setWidget(panel);
    area->setWidgetResizable(true);
    area->setFrameShape(QFrame::NoFrame);
    m_tabs->addTab(area, title);
    return area;
  };
  m_img2imgTab = scrolled(m_img2img, tr("img2img / inpaint"));
  m_controlTab = scrolled(m_controlnet, tr("ControlNet"));
  m_tabs->addTab(m_compare, tr("Compare"));
  m_tabs->addTab(m_gallery, tr("Gallery"));
  m_tabs->addTab(m_log, tr("Log"));
  return m_tabs;
}

// the buttons and their keys: Generate (Ctrl+Enter), Interrupt (Esc)
void MainWindow::connectRun() {
  connect(m_generateButton, &QPushButton::clicked, this, &MainWindow::generate);
  connect(m_interruptButton, &QPushButton::clicked, this, &MainWindow::interrupt);
  connect(m_prompt, &PromptPanel::generateRequested, this, &MainWindow::generate);
  auto* gen = new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return), this);
  connect(gen, &QShortcut::activated, this, &MainWindow::generate);
  auto* genEnter = new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_Enter), this);
  connect(genEnter, &QShortcut::activated, this, &MainWindow::generate);
  auto* esc = new QShortcut(QKeySequence(Qt::Key_Escape), this);
  connect(esc, &QShortcut::activated, this, &MainWindow::interrupt);
}

// the panels' signals: the model, the request state each panel holds, images sent between them
void MainWindow::connectPanels() {
  connect(m_model, &ModelPanel::modelChosen, this, &MainWindow::loadModel);
  connect(m_model, &ModelPanel::componentsChanged, this, [this] { loadModel(m_model->checkpoint()); });
  connect(m_model, &ModelPanel::reportChanged, this, [this] {
    m_precision->setReport(m_model->report());
    m_precision->setEstimate(m_model->weightEstimate());
  });
  connect(m_precision, &PrecisionPanel::compareRequested, this, &MainWindow::compare);
  // the request is what the panels say, as they say it
  connect(m_prompt, &PromptPanel::changed, this, [this](const GenerationRequest& r) { m_promptState = r; });
  connect(m_precision, &PrecisionPanel::changed, this, [this](const PrecisionSettings& p) { m_precisionState = p; });
  connect(m_lora, &LoraPanel::changed, this, [this](const LoraSettings& l) { m_loraState = l; });
  connect(m_img2img, &Img2ImgPanel::changed, this, [this](const GenerationRequest& r) { m_imageState = r; });
  connect(m_controlnet, &ControlNetPanel::changed, this, [this](const GenerationRequest& r) { m_controlState = r; });
  // their state before the first change
  m_prompt->fillRequest(m_promptState);
  m_precisionState = m_precision->settings();
  m_loraState = m_lora->settings();
  m_img2img->fillRequest(m_imageState);
  m_controlnet->fillRequest(m_controlState);
  connect(m_precision, &PrecisionPanel::deviceChanged, this, [this] { loadModel(m_loadedPath); });
  // the thread count is set on the engine's own thread (OpenMP keeps one per thread), between runs
  auto applyThreads = [this](int n) {
    QMetaObject::invokeMethod(m_worker, [n] { log().info("threads: {}", describe(init_threads(n))); });
  };
  connect(m_precision, &PrecisionPanel::threadsChanged, this, applyThreads);
  applyThreads(m_precision->threads());
  auto toImg2Img = [this](const QImage& image) {
    m_img2img->setInitImage(image);
    showImg2Img();
  };
  connect(m_image, &ImageView::sendToImg2Img, this, toImg2Img);
  connect(m_embeddings, &EmbeddingsPanel::insertRequested, m_prompt, &PromptPanel::appendWord);
  connect(m_gallery, &GalleryPanel::sendToImg2Img, this,
          [this, toImg2Img](int index) { toImg2Img(toQImage(m_gallery->at(index).image.image)); });
  connect(m_gallery, &GalleryPanel::restoreRequested, this, [this](const GenerationRequest& r, int index) {
    restoreRequest(r);
    const auto& entry = m_gallery->at(index);
    m_image->setImage(toQImage(entry.image.image), entry.savedPath);
    statusBar()->showMessage(tr("Restored the settings of run #%1").arg(entry.run), 4000);
  });
}

}  // namespace fp8s::gui
