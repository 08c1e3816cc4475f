#include "ModelPanel.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QLabel>
#include <QPushButton>
#include <QSettings>
#include <QSignalBlocker>
#include <QVBoxLayout>

#include "Background.h"
#include "models/inspect.h"

namespace fp8s::gui {

QString formatBytes(double bytes) {
  if (bytes >= 1e9) return QStringLiteral("%1 GB").arg(bytes / 1e9, 0, 'f', 2);
  if (bytes >= 1e6) return QStringLiteral("%1 MB").arg(bytes / 1e6, 0, 'f', bytes >= 1e8 ? 0 : 1);
  return QStringLiteral("%1 kB").arg(bytes / 1e3, 0, 'f', 0);
}

ModelPanel::ModelPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* row = new QHBoxLayout;
  m_combo = new QComboBox(this);
  m_combo->setObjectName(QStringLiteral("modelCombo"));
  m_combo->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  m_combo->setMinimumContentsLength(10);
  m_combo->setToolTip(tr("Checkpoints in the models folder and recently used ones"));
  auto* browseButton = new QPushButton(tr("Open…"), this);
  browseButton->setToolTip(tr("Choose a .safetensors checkpoint"));
  auto* rescanButton = new QPushButton(tr("Rescan"), this);
  rescanButton->setToolTip(tr("Look for new checkpoints in the models folder"));
  row->addWidget(m_combo, 1);
  row->addWidget(browseButton);
  row->addWidget(rescanButton);
  layout->addLayout(row);
  m_info = new QLabel(this);
  m_info->setObjectName(QStringLiteral("modelInfo"));
  m_info->setTextFormat(Qt::RichText);
  m_info->setWordWrap(true);
  layout->addWidget(m_info);
  m_status = new QLabel(this);
  m_status->setWordWrap(true);
  layout->addWidget(m_status);

  connect(browseButton, &QPushButton::clicked, this, &ModelPanel::browse);
  connect(rescanButton, &QPushButton::clicked, this, &ModelPanel::rescan);
  connect(m_combo, &QComboBox::activated, this, [this](int) {
    inspectCurrent();
    Q_EMIT modelChosen(checkpoint());
  });
}

QString ModelPanel::checkpoint() const { return m_combo->currentData().toString(); }

void ModelPanel::setModelsFolder(const QString& folder) {
  m_folder = folder;
  rescan();
}

void ModelPanel::rescan() {
  const QString current = checkpoint();
  QStringList paths = m_recent;
  if (!m_folder.isEmpty()) {
    const auto found = QDir(m_folder).entryInfoList({QStringLiteral("*.safetensors")}, QDir::Files, QDir::Name);
    for (const auto& f : found) {
      if (!paths.contains(f.absoluteFilePath())) paths << f.absoluteFilePath();
    }
  }
  const QSignalBlocker block(m_combo);
  m_combo->clear();
  for (const auto& p : paths) {
    m_combo->addItem(QFileInfo(p).completeBaseName(), p);
    m_combo->setItemData(m_combo->count() - 1, QDir::toNativeSeparators(p), Qt::ToolTipRole);
  }
  const int i = m_combo->findData(current);
  if (i >= 0) m_combo->setCurrentIndex(i);
}

void ModelPanel::browse() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open checkpoint"), m_folder.isEmpty() ? QDir::homePath() : m_folder,
                                                    tr("Safetensors checkpoints (*.safetensors);;All files (*)"));
  if (path.isEmpty()) return;
  setCheckpoint(path);
  Q_EMIT modelChosen(path);
}

void ModelPanel::setCheckpoint(const QString& path) {
  const QString abs = QFileInfo(path).absoluteFilePath();
  m_recent.removeAll(abs);
  m_recent.prepend(abs);
  while (m_recent.size() > 8) m_recent.removeLast();
  rescan();
  const QSignalBlocker block(m_combo);
  m_combo->setCurrentIndex(m_combo->findData(abs));
  inspectCurrent();
}

void ModelPanel::setStatus(const QString& text) { m_status->setText(text); }

void ModelPanel::inspectCurrent() {
  m_report.reset();
  const QString path = checkpoint();
  const int serial = ++m_inspectSerial;
  if (path.isEmpty()) {
    showReport(path, nullptr, QString());
    return;
  }
  m_info->setText(tr("<i>Reading %1…</i>").arg(QFileInfo(path).fileName().toHtmlEscaped()));
  struct Result {
    std::shared_ptr<InspectReport> report;
    QString error;
  };
  runInBackground(
      this,
      [path]() -> Result {
        try {
          SafetensorsFile file(path.toStdString());
          return {std::make_shared<InspectReport>(inspect_checkpoint(file)), QString()};
        } catch (const std::exception& e) {
          return {nullptr, QString::fromStdString(e.what())};
        }
      },
      [this, path, serial](Result r) {
        if (serial == m_inspectSerial) showReport(path, std::move(r.report), r.error);
      });
}

void ModelPanel::showReport(const QString& path, std::shared_ptr<InspectReport> report, const QString& error) {
  m_report = std::move(report);
  if (path.isEmpty()) {
    m_info->setText(tr("<i>No checkpoint chosen.</i>"));
  } else if (!m_report) {
    m_info->setText(QStringLiteral("<span style='color:#c0392b'>%1</span>").arg(error.toHtmlEscaped()));
  } else {
    QString html = QStringLiteral("<b>%1</b><table cellspacing=0 cellpadding=1>")
                       .arg(QString::fromStdString(m_report->detection.description()).toHtmlEscaped());
    const bool fp8File = !m_report->fp8.layout.empty();
    html += tr("<tr><td>component&nbsp;</td><td align=right>params&nbsp;</td><td align=right>16-bit&nbsp;</td><td align=right>FP8</td>%1</tr>")
                .arg(fp8File ? tr("<td align=right>&nbsp;FP8 in file</td>") : QString());
    for (const auto& c : m_report->components) {
      // which layers the file itself holds in FP8 (of the quantisable ones)
      const QString inFile = !fp8File ? QString()
                             : c.quantisable_tensors ? QStringLiteral("<td align=right>%1/%2</td>").arg(c.fp8_in_file).arg(c.quantisable_tensors)
                                                     : QStringLiteral("<td></td>");
      html += QStringLiteral("<tr><td>%1</td><td align=right>%2 M&nbsp;</td><td align=right>%3&nbsp;</td><td align=right>%4</td>%5</tr>")
                  .arg(QString::fromStdString(c.name))
                  .arg(static_cast<double>(c.params) / 1e6, 0, 'f', 1)
                  .arg(formatBytes(static_cast<double>(c.bytes_16bit)))
                  .arg(formatBytes(static_cast<double>(c.bytes_fp8)))
                  .arg(inFile);
    }
    html += QStringLiteral("</table>");
    html += tr("In the file: %1").arg(QString::fromStdString(m_report->storage).toHtmlEscaped());
    if (fp8File) html += tr("<br>FP8 layout: %1").arg(QString::fromStdString(m_report->fp8.layout).toHtmlEscaped());
    if (m_report->is_fp8_source()) {
      html += tr("<br><span style='color:#b9770e'>This checkpoint is already FP8: 16- and 32-bit storage hold its "
                 "FP8 values upcast, so a compare shows the memory difference but the same images. The real "
                 "FP8 trade needs a 16-bit checkpoint.</span>");
    }
    m_info->setText(html);
  }
  Q_EMIT reportChanged();
}

void ModelPanel::saveSettings(QSettings& s) const {
  s.setValue(QStringLiteral("model/recent"), m_recent);
  s.setValue(QStringLiteral("model/current"), checkpoint());
}

void ModelPanel::restoreSettings(const QSettings& s) {
  m_recent = s.value(QStringLiteral("model/recent")).toStringList();
  const QString current = s.value(QStringLiteral("model/current")).toString();
  rescan();
  if (!current.isEmpty() && QFileInfo::exists(current)) setCheckpoint(current);
}

}  // namespace fp8s::gui
