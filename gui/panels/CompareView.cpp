#include "CompareView.h"

#include <QFileDialog>
#include <QFile>
#include <QGridLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableWidget>
#include <QTextStream>
#include <QVBoxLayout>

#include <cmath>

#include "ImageView.h"
#include "ModelPanel.h"
#include "compare/compare.h"
#include "io/image_metrics.h"

namespace fp8s::gui {
namespace {

double medianOf(const std::vector<double>& v) { return fp8s::median(v); }

}  // namespace

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* grid = new QGridLayout;
  for (int i = 0; i < 3; ++i) {
    m_captions[i] = new QLabel(this);
    m_captions[i]->setAlignment(Qt::AlignCenter);
    m_captions[i]->setWordWrap(true);
    m_captions[i]->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    m_images[i] = new QLabel(this);
    m_images[i]->setAlignment(Qt::AlignCenter);
    m_images[i]->setMinimumSize(96, 96);
    m_images[i]->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Ignored);
    grid->addWidget(m_captions[i], 0, i);
    grid->addWidget(m_images[i], 1, i);
    grid->setColumnStretch(i, 1);
  }
  grid->setRowStretch(1, 1);
  layout->addLayout(grid, 3);
  m_table = new QTableWidget(0, 4, this);
  m_table->setObjectName(QStringLiteral("compareTable"));
  m_table->setHorizontalHeaderLabels({tr("Metric"), tr("FP16"), tr("FP8"), tr("FP8 / FP16")});
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  m_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  m_table->verticalHeader()->hide();
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  layout->addWidget(m_table, 2);
  m_note = new QLabel(this);
  m_note->setObjectName(QStringLiteral("compareNote"));
  m_note->setWordWrap(true);
  m_note->setStyleSheet(QStringLiteral("color: #b9770e"));
  m_note->hide();
  layout->addWidget(m_note);
  auto* exportButton = new QPushButton(tr("Export images + report…"), this);
  exportButton->setObjectName(QStringLiteral("exportButton"));
  layout->addWidget(exportButton, 0, Qt::AlignRight);
  connect(exportButton, &QPushButton::clicked, this, &CompareView::exportInteractive);
  m_captions[1]->setText(tr("Run “Compare with FP16” in the Precision panel."));
}

void CompareView::setResult(const CompareResult& c) {
  m_result = c;
  m_has = true;
  const bool refused = !c.referenceRefused.isEmpty();
  m_captions[0]->setText(refused ? tr("%1: did not run").arg(c.reference.label) : c.reference.label);
  m_captions[1]->setText(c.candidate.label);
  m_table->setHorizontalHeaderLabels({tr("Metric"), c.reference.label, c.candidate.label, tr("ratio")});
  m_table->horizontalHeaderItem(3)->setToolTip(tr("%1 / %2").arg(c.candidate.label, c.reference.label));
  m_captions[2]->setText(refused ? tr("no difference image without %1").arg(c.reference.label)
                                 : tr("|difference| (max %1)").arg(c.maxAbsDiff()));
  m_note->setText(c.sourceNote());
  m_note->setVisible(!c.sourceNote().isEmpty());
  const auto& a = c.reference.result;
  const auto& b = c.candidate.result;
  struct Row {
    QString metric;
    double fp16, fp8;
    bool bytes;
  };
  auto perStep = [](const GenerationResult& g, double v) { return g.timing.step_ms.empty() ? 0.0 : v / g.timing.step_ms.size(); };
  std::vector<Row> rows = {
      {tr("Weight memory"), double(a.weight_bytes), double(b.weight_bytes), true},
      {tr("%1 weights").arg(m_denoiser), double(a.unet_bytes), double(b.unet_bytes), true},
      {tr("Peak live tensors"), double(a.tracked_peak_bytes), double(b.tracked_peak_bytes), true},
      {a.rss_peak_is_per_request && b.rss_peak_is_per_request ? tr("Peak RSS (each run's own)") : tr("Peak RSS (process high-water mark)"),
       double(a.rss_peak_bytes), double(b.rss_peak_bytes), true},
      {tr("Median step (ms)"), medianOf(a.timing.step_ms), medianOf(b.timing.step_ms), false},
      {tr("Total (ms)"), a.timing.total_ms, b.timing.total_ms, false},
  };
  if (a.control_bytes || b.control_bytes) {  // the ControlNets, stored like the model
    rows.insert(rows.begin() + 2, {tr("ControlNet weights"), double(a.control_bytes), double(b.control_bytes), true});
  }
  if (a.streamed_bytes || b.streamed_bytes) {  // a weight budget streamed blocks (the rest was resident)
    rows.insert(rows.begin() + 2, {tr("Streamed a step"), perStep(a, double(a.streamed_bytes)), perStep(b, double(b.streamed_bytes)), true});
    rows.insert(rows.begin() + 3, {tr("Transfer wait a step (ms)"), perStep(a, a.transfer_wait_ms), perStep(b, b.transfer_wait_ms), false});
  }
  m_table->setRowCount(static_cast<int>(rows.size()) + 2);
  int r = 0;
  auto set = [&](int row, int col, const QString& text) { m_table->setItem(row, col, new QTableWidgetItem(text)); };
  for (const auto& row : rows) {
    set(r, 0, row.metric);
    set(r, 1, refused ? QStringLiteral("—") : row.bytes ? formatBytes(row.fp16) : QString::number(row.fp16, 'f', 0));
    set(r, 2, row.bytes ? formatBytes(row.fp8) : QString::number(row.fp8, 'f', 0));
    set(r, 3, !refused && row.fp16 > 0 ? QString::number(row.fp8 / row.fp16, 'f', 3) : QStringLiteral("—"));
    ++r;
  }
  set(r, 0, tr("PSNR (dB)"));
  set(r, 2, refused ? QStringLiteral("—") : std::isinf(c.psnr()) ? tr("identical") : QString::number(c.psnr(), 'f', 2));
  ++r;
  set(r, 0, tr("SSIM"));
  set(r, 2, refused ? QStringLiteral("—") : QString::number(c.ssim(), 'f', 4));
  if (refused) {
    // the FP16 column: its estimate, in the engine's words
    m_table->insertRow(0);
    set(0, 0, tr("Memory estimate"));
    set(0, 1, c.referenceRefused);
    m_table->item(0, 1)->setToolTip(c.referenceRefused);
  }
  renderImages();
}

void CompareView::renderImages() {
  if (!m_has) return;
  const bool refused = !m_result.referenceRefused.isEmpty();
  const QImage images[3] = {refused ? QImage() : toQImage(m_result.reference.result.images.front().image),
                            toQImage(m_result.candidate.result.images.front().image),
                            refused ? QImage() : toQImage(m_result.heatmap)};
  for (int i = 0; i < 3; ++i) {
    if (images[i].isNull()) {
      m_images[i]->setPixmap({});
      m_images[i]->setText(i == 0 ? m_result.referenceRefused : QString());
      m_images[i]->setWordWrap(true);
      continue;
    }
    const QSize box = m_images[i]->size();
    m_images[i]->setPixmap(QPixmap::fromImage(images[i].scaled(box, Qt::KeepAspectRatio,
                                                               box.width() > images[i].width() ? Qt::FastTransformation : Qt::SmoothTransformation)));
  }
}

void CompareView::resizeEvent(QResizeEvent* e) {
  QWidget::resizeEvent(e);
  renderImages();
}

bool CompareView::exportTo(const QString& folder, QString* error) const {
  if (!m_has) {
    if (error) *error = tr("nothing to export: run a compare first");
    return false;
  }
  try {
    CompareReport report = m_result.report;
    write_compare(report, folder.toStdString());
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

void CompareView::exportInteractive() {
  const QString folder = QFileDialog::getExistingDirectory(this, tr("Export compare into a folder"));
  if (folder.isEmpty()) return;
  QString error;
  if (!exportTo(folder, &error)) m_captions[0]->setText(tr("Export failed: %1").arg(error));
}

}  // namespace fp8s::gui
