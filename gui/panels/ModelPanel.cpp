#include "ModelPanel.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QGroupBox>
#include <QLineEdit>
#include <QLabel>
#include <QPushButton>
#include <QSettings>
#include <QSignalBlocker>
#include <QVBoxLayout>

#include "Background.h"
#include "models/inspect.h"
#include "pipeline/request.h"

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
  // a Flux transformer's other files (ComfyUI's separate text encoders and autoencoder)
  m_fluxBox = new QGroupBox(tr("Flux components"), this);
  m_fluxBox->setObjectName(QStringLiteral("fluxComponents"));
  auto* fluxGrid = new QGridLayout(m_fluxBox);
  fluxGrid->setContentsMargins(4, 4, 4, 4);
  const char* names[3] = {"fluxT5Edit", "fluxClipEdit", "fluxVaeEdit"};
  const QString labels[3] = {tr("T5-XXL"), tr("CLIP-L"), tr("Autoencoder")};
  const QString hints[3] = {tr("t5xxl_fp16 / t5xxl_fp8_e4m3fn(_scaled)"), tr("clip_l"), tr("ae")};
  for (int i = 0; i < 3; ++i) {
    m_fluxEdits[i] = new QLineEdit(m_fluxBox);
    m_fluxEdits[i]->setObjectName(QString::fromLatin1(names[i]));
    m_fluxEdits[i]->setPlaceholderText(tr("found automatically (%1)").arg(hints[i]));
    m_fluxEdits[i]->setClearButtonEnabled(true);
    auto* pick = new QPushButton(tr("…"), m_fluxBox);
    pick->setMaximumWidth(32);
    pick->setToolTip(tr("Choose the %1 file").arg(labels[i]));
    fluxGrid->addWidget(new QLabel(labels[i], m_fluxBox), i, 0);
    fluxGrid->addWidget(m_fluxEdits[i], i, 1);
    fluxGrid->addWidget(pick, i, 2);
    connect(pick, &QPushButton::clicked, this, [this, i, label = labels[i]] {
      const QString start = m_fluxEdits[i]->text().isEmpty() ? QFileInfo(checkpoint()).absolutePath() : m_fluxEdits[i]->text();
      const QString path = QFileDialog::getOpenFileName(this, tr("Choose the %1 file").arg(label), start,
                                                        tr("Safetensors files (*.safetensors)"));
      if (path.isEmpty()) return;
      m_fluxEdits[i]->setText(path);
      Q_EMIT componentsChanged();
    });
    connect(m_fluxEdits[i], &QLineEdit::editingFinished, this, [this, i] {
      if (m_fluxEdits[i]->isModified()) {
        m_fluxEdits[i]->setModified(false);
        Q_EMIT componentsChanged();
      }
    });
  }
  m_components = new QLabel(m_fluxBox);
  m_components->setObjectName(QStringLiteral("fluxComponentTable"));
  m_components->setTextFormat(Qt::RichText);
  m_components->setWordWrap(true);
  fluxGrid->addWidget(m_components, 3, 0, 1, 3);
  m_fluxBox->hide();
  layout->addWidget(m_fluxBox);

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

FluxPaths ModelPanel::fluxPaths() const {
  FluxPaths p;
  p.t5 = m_fluxEdits[0]->text().trimmed().toStdString();
  p.clip_l = m_fluxEdits[1]->text().trimmed().toStdString();
  p.vae = m_fluxEdits[2]->text().trimmed().toStdString();
  return p;
}

void ModelPanel::setFluxPaths(const FluxPaths& p) {
  const std::string* v[3] = {&p.t5, &p.clip_l, &p.vae};
  for (int i = 0; i < 3; ++i) m_fluxEdits[i]->setText(QString::fromStdString(*v[i]));
}

void ModelPanel::setModelInfo(const ModelInfo& info) {
  m_fluxBox->setVisible(info.flux);
  if (!info.flux) return;
  QString html = tr("<table cellspacing=0 cellpadding=1><tr><td>component&nbsp;</td><td>storage&nbsp;</td>"
                    "<td align=right>bytes&nbsp;</td><td>file</td></tr>");
  for (const auto& c : info.components) {
    const QString file = c.path.empty() ? tr("<span style='color:#c0392b'>not found</span>")
                                        : QFileInfo(QString::fromStdString(c.path)).fileName().toHtmlEscaped();
    html += QStringLiteral("<tr><td nowrap>%1&nbsp;</td><td nowrap>%2&nbsp;</td><td align=right nowrap>%3&nbsp;</td><td>%4</td></tr>")
                .arg(QString::fromStdString(c.name), QString::fromStdString(c.storage).replace(QLatin1Char('-'), QStringLiteral("&#8209;")),
                     c.path.empty() ? QStringLiteral("—") : formatBytes(static_cast<double>(c.bytes)), file);
  }
  m_components->setText(html + QStringLiteral("</table>"));
}

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
  // a Flux transformer's other files can be picked before it loads
  if (m_report && (m_report->detection.arch == Arch::FLUX_DEV || m_report->detection.arch == Arch::FLUX_SCHNELL)) {
    m_fluxBox->show();
  }
  Q_EMIT reportChanged();
}

void ModelPanel::saveSettings(QSettings& s) const {
  s.setValue(QStringLiteral("model/recent"), m_recent);
  const auto p = fluxPaths();
  s.setValue(QStringLiteral("model/flux_t5"), QString::fromStdString(p.t5));
  s.setValue(QStringLiteral("model/flux_clip_l"), QString::fromStdString(p.clip_l));
  s.setValue(QStringLiteral("model/flux_vae"), QString::fromStdString(p.vae));
  s.setValue(QStringLiteral("model/current"), checkpoint());
}

void ModelPanel::restoreSettings(const QSettings& s) {
  m_recent = s.value(QStringLiteral("model/recent")).toStringList();
  FluxPaths p;
  p.t5 = s.value(QStringLiteral("model/flux_t5")).toString().toStdString();
  p.clip_l = s.value(QStringLiteral("model/flux_clip_l")).toString().toStdString();
  p.vae = s.value(QStringLiteral("model/flux_vae")).toString().toStdString();
  setFluxPaths(p);
  const QString current = s.value(QStringLiteral("model/current")).toString();
  rescan();
  if (!current.isEmpty() && QFileInfo::exists(current)) setCheckpoint(current);
}

}  // namespace fp8s::gui
