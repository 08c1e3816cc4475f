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
  // the denoiser's residency under the weight budget, after a run (hidden while all resident)
  m_residency = new QLabel(this);
  m_residency->setObjectName(QStringLiteral("residencyLabel"));
  m_residency->setWordWrap(true);
  m_residency->hide();
  layout->addWidget(m_residency);
  // a model's other files (ComfyUI's separate text encoders and autoencoder), one row per role
  m_componentBox = new QGroupBox(tr("Components"), this);
  m_componentBox->setObjectName(QStringLiteral("modelComponents"));
  m_componentGrid = new QGridLayout(m_componentBox);
  m_componentGrid->setContentsMargins(4, 4, 4, 4);
  m_componentGrid->setColumnStretch(1, 1);
  m_components = new QLabel(m_componentBox);
  m_components->setObjectName(QStringLiteral("componentTable"));
  m_components->setTextFormat(Qt::RichText);
  m_components->setWordWrap(true);
  m_componentBox->hide();
  layout->addWidget(m_componentBox);

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

WeightEstimate ModelPanel::weightEstimate() const {
  return m_report ? engineWeightEstimate(checkpoint().toStdString(), components()) : WeightEstimate();
}

void ModelPanel::setResidency(const QString& plan) {
  m_residency->setText(tr("Streaming: %1").arg(plan));
  m_residency->setVisible(!plan.isEmpty());
}

std::map<std::string, std::string> ModelPanel::components() const {
  std::map<std::string, std::string> out;
  for (const auto& [role, path] : m_paths) {
    if (!path.empty()) out[role] = path;
  }
  return out;
}

void ModelPanel::setComponents(const std::map<std::string, std::string>& paths) {
  m_paths = paths;
  for (const auto& [role, edit] : m_componentEdits) {
    const auto it = m_paths.find(role);
    edit->setText(it == m_paths.end() ? QString() : QString::fromStdString(it->second));
  }
}

void ModelPanel::setRoles(const std::vector<ComponentRole>& declared) {
  std::vector<ComponentRole> roles;  // the weights files (tokenizers are found beside them, or by the CLI's flags)
  for (const auto& r : declared) {
    if (!r.tokenizer) roles.push_back(r);
  }
  bool same = roles.size() == m_roles.size();
  for (std::size_t i = 0; same && i < roles.size(); ++i) same = roles[i].role == m_roles[i].role;
  if (!same) {
    for (auto* w : m_roleWidgets) w->deleteLater();
    m_roleWidgets.clear();
    m_componentEdits.clear();
    m_roles = roles;
    int row = 0;
    for (const auto& r : m_roles) {
      const QString label = QString::fromStdString(r.label);
      const std::string role = r.role;
      auto* name = new QLabel(label, m_componentBox);
      auto* edit = new QLineEdit(m_componentBox);
      edit->setObjectName(QStringLiteral("component_%1").arg(QString::fromStdString(role)));
      QStringList hints;
      for (const auto& h : r.file_hints) hints << QString::fromStdString(h);
      edit->setPlaceholderText(tr("found automatically (%1)").arg(hints.join(QStringLiteral(", "))));
      edit->setClearButtonEnabled(true);
      const auto it = m_paths.find(role);
      if (it != m_paths.end()) edit->setText(QString::fromStdString(it->second));
      auto* pick = new QPushButton(tr("…"), m_componentBox);
      pick->setMaximumWidth(32);
      pick->setToolTip(tr("Choose the %1 file").arg(label));
      m_componentGrid->addWidget(name, row, 0);
      m_componentGrid->addWidget(edit, row, 1);
      m_componentGrid->addWidget(pick, row, 2);
      ++row;
      m_roleWidgets.insert(m_roleWidgets.end(), {name, edit, pick});
      m_componentEdits[role] = edit;
      connect(pick, &QPushButton::clicked, this, [this, edit, role, label] {
        const QString start = edit->text().isEmpty() ? QFileInfo(checkpoint()).absolutePath() : edit->text();
        const QString path = QFileDialog::getOpenFileName(this, tr("Choose the %1 file").arg(label), start,
                                                          tr("Safetensors files (*.safetensors)"));
        if (path.isEmpty()) return;
        edit->setText(path);
        m_paths[role] = path.toStdString();
        Q_EMIT componentsChanged();
      });
      connect(edit, &QLineEdit::editingFinished, this, [this, edit, role] {
        if (edit->isModified()) {
          edit->setModified(false);
          m_paths[role] = edit->text().trimmed().toStdString();
          Q_EMIT componentsChanged();
        }
      });
    }
    m_componentGrid->addWidget(m_components, row, 0, 1, 3);
  }
  m_componentBox->setVisible(!m_roles.empty());
}

void ModelPanel::setModelInfo(const ModelInfo& info) {
  setRoles(info.traits.components);
  m_components->setVisible(!info.components.empty());
  if (info.components.empty()) return;
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
    FamilyTraits traits;
  };
  runInBackground(
      this,
      [path]() -> Result {
        try {
          SafetensorsFile file(path.toStdString());
          return {std::make_shared<InspectReport>(inspect_model_file(file)), QString(), family_traits_of(path.toStdString())};
        } catch (const std::exception& e) {
          return {nullptr, QString::fromStdString(e.what()), FamilyTraits{}};
        }
      },
      [this, path, serial](Result r) {
        if (serial != m_inspectSerial) return;
        // a model's other files can be picked before it loads
        if (r.report && !r.traits.components.empty()) setRoles(r.traits.components);
        showReport(path, std::move(r.report), r.error);
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
                       .arg(QString::fromStdString(m_report->architecture()).toHtmlEscaped());
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
    if (!m_report->formats_summary.empty()) {
      html += tr("<br>Layers: %1").arg(QString::fromStdString(m_report->formats_summary).toHtmlEscaped());
    }
    if (m_report->has_block_layers()) {
      html += tr("<br><span style='color:#b9770e'>A mixed file: its INT8, MXFP8, NVFP4 and 4-bit layers stay as stored "
                 "under every storage type; the storage choice decides its other layers.</span>");
    } else if (m_report->is_fp8_source()) {
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
  QVariantMap components;
  for (const auto& [role, path] : m_paths) components.insert(QString::fromStdString(role), QString::fromStdString(path));
  s.setValue(QStringLiteral("model/components"), components);
  s.setValue(QStringLiteral("model/current"), checkpoint());
}

void ModelPanel::restoreSettings(const QSettings& s) {
  m_recent = s.value(QStringLiteral("model/recent")).toStringList();
  std::map<std::string, std::string> paths;
  const QVariantMap components = s.value(QStringLiteral("model/components")).toMap();
  for (auto it = components.begin(); it != components.end(); ++it) paths[it.key().toStdString()] = it.value().toString().toStdString();
  setComponents(paths);
  const QString current = s.value(QStringLiteral("model/current")).toString();
  rescan();
  if (!current.isEmpty() && QFileInfo::exists(current)) setCheckpoint(current);
}

}  // namespace fp8s::gui
