#include "LoraPanel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDesktopServices>
#include <QDir>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSettings>
#include <QSignalBlocker>
#include <QSlider>
#include <QTableWidget>
#include <QUrl>
#include <QVBoxLayout>

#include "Background.h"
#include "Widgets.h"

namespace fp8s::gui {
namespace {

QString tooltipOf(const LoraInfo& info) {
  if (!info.error.empty()) return QString::fromStdString(info.error);
  QStringList lines;
  lines << QObject::tr("Base model: %1").arg(info.base_model.empty() ? QObject::tr("unknown") : QString::fromStdString(info.base_model));
  lines << QObject::tr("Rank %1, alpha %2, %3 modules").arg(info.rank).arg(info.alpha).arg(info.modules);
  if (!info.trigger_words.empty()) {
    QStringList words;
    for (const auto& w : info.trigger_words) words << QString::fromStdString(w);
    lines << QObject::tr("Trigger words: %1").arg(words.join(QStringLiteral(", ")));
  }
  lines << QDir::toNativeSeparators(QString::fromStdString(info.path));
  return lines.join(QLatin1Char('\n'));
}

}  // namespace

LoraPanel::LoraPanel(QWidget* parent) : QWidget(parent) {
  const FolderRow top = makeFolderRow(this);
  auto* layout = top.layout;
  m_folderLabel = top.label;
  auto* refresh = top.refresh;
  auto* open = new QPushButton(tr("Folder"), this);
  open->setToolTip(tr("Open the LoRA folder"));
  top.row->addWidget(open);
  m_table = new QTableWidget(0, 3, this);
  m_table->setObjectName(QStringLiteral("loraTable"));
  m_table->setHorizontalHeaderLabels({tr("LoRA"), tr("Weight"), QString()});
  m_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  m_table->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
  m_table->horizontalHeader()->setSectionResizeMode(2, QHeaderView::ResizeToContents);
  m_table->verticalHeader()->hide();
  m_table->setSelectionMode(QAbstractItemView::NoSelection);
  m_table->setMinimumHeight(70);
  layout->addWidget(m_table, 1);
  auto* modeRow = new QHBoxLayout;
  modeRow->addWidget(new QLabel(tr("Mode")));
  m_mode = new QComboBox(this);
  m_mode->setObjectName(QStringLiteral("loraModeCombo"));
  m_mode->addItem(tr("auto (online under FP8)"), int(LoraMode::Auto));
  m_mode->addItem(tr("online (exact under FP8)"), int(LoraMode::Online));
  m_mode->addItem(tr("merge (A1111/Forge)"), int(LoraMode::Merge));
  m_mode->addItem(tr("merge, stochastic (ComfyUI)"), int(LoraMode::MergeStochastic));
  modeRow->addWidget(m_mode, 1);
  layout->addLayout(modeRow);
  connect(refresh, &QPushButton::clicked, this, &LoraPanel::refresh);
  connect(open, &QPushButton::clicked, this, [this] {
    if (!m_folder.isEmpty()) {
      QDir().mkpath(m_folder);
      QDesktopServices::openUrl(QUrl::fromLocalFile(m_folder));
    }
  });
  connect(m_mode, &QComboBox::currentIndexChanged, this, [this] { Q_EMIT changed(settings()); });
}

void LoraPanel::setFolder(const QString& folder) {
  m_folder = folder;
  refresh();
}

void LoraPanel::refresh() {
  // keep what the user set across a refresh
  for (int r = 0; r < m_table->rowCount(); ++r) {
    auto* box = qobject_cast<QCheckBox*>(m_table->cellWidget(r, 0));
    auto* spin = m_table->cellWidget(r, 2) ? m_table->cellWidget(r, 2)->findChild<QDoubleSpinBox*>() : nullptr;
    if (box && spin && !m_pending.count(box->text())) m_pending[box->text()] = {box->isChecked(), spin->value()};
  }
  m_folderLabel->setText(QDir::toNativeSeparators(m_folder));
  const int serial = ++m_listSerial;
  m_listing = true;
  struct Result {
    std::vector<LoraInfo> infos;
    QString error;
  };
  runInBackground(
      this,
      [folder = m_folder]() -> Result {
        try {
          if (folder.isEmpty() || !QDir(folder).exists()) return {};
          return {list_loras(folder.toStdString()), QString()};
        } catch (const std::exception& e) {
          return {{}, QString::fromStdString(e.what())};
        }
      },
      [this, serial](Result r) {
        if (serial == m_listSerial) showList(std::move(r.infos), r.error);
      });
}

void LoraPanel::showList(std::vector<LoraInfo> infos, const QString& error) {
  m_listing = false;
  if (!error.isEmpty()) m_folderLabel->setText(error);
  m_infos = std::move(infos);
  const auto previous = std::move(m_pending);
  m_pending.clear();
  m_table->setRowCount(0);
  m_table->setRowCount(static_cast<int>(m_infos.size()));
  for (int r = 0; r < static_cast<int>(m_infos.size()); ++r) {
    const auto& info = m_infos[static_cast<std::size_t>(r)];
    const QString name = QString::fromStdString(info.name);
    auto* box = new QCheckBox(name);
    box->setToolTip(tooltipOf(info));
    box->setEnabled(info.error.empty());
    auto* slider = new QSlider(Qt::Horizontal);
    slider->setRange(-200, 200);
    slider->setValue(100);
    auto* spinHolder = new QWidget;
    auto* spinLayout = new QHBoxLayout(spinHolder);
    spinLayout->setContentsMargins(0, 0, 0, 0);
    auto* spin = new QDoubleSpinBox;
    spin->setRange(-2.0, 2.0);
    spin->setSingleStep(0.05);
    spin->setDecimals(2);
    spin->setValue(1.0);
    spinLayout->addWidget(spin);
    if (auto it = previous.find(name); it != previous.end()) {
      box->setChecked(it->second.first);
      spin->setValue(it->second.second);
      slider->setValue(static_cast<int>(std::lround(it->second.second * 100)));
    }
    connect(slider, &QSlider::valueChanged, spin, [spin](int v) {
      if (std::lround(spin->value() * 100) != v) spin->setValue(v / 100.0);
    });
    connect(spin, &QDoubleSpinBox::valueChanged, slider, [this, slider](double v) {
      const QSignalBlocker b(slider);
      slider->setValue(static_cast<int>(std::lround(v * 100)));
      Q_EMIT changed(settings());
    });
    connect(box, &QCheckBox::toggled, this, [this] { Q_EMIT changed(settings()); });
    m_table->setCellWidget(r, 0, box);
    m_table->setCellWidget(r, 1, slider);
    m_table->setCellWidget(r, 2, spinHolder);
  }
  if (m_infos.empty()) {
    m_table->setRowCount(1);
    auto* hint = new QLabel(tr("  No LoRAs yet: add files, Refresh."));
    hint->setEnabled(false);
    m_table->setCellWidget(0, 0, hint);
    m_table->setSpan(0, 0, 1, 3);
  } else {
    m_table->clearSpans();
  }
  Q_EMIT changed(settings());
  Q_EMIT listed();
}

int LoraPanel::rowCount() const { return static_cast<int>(m_infos.size()); }

LoraSettings LoraPanel::settings() const {
  LoraSettings s;
  s.mode = static_cast<LoraMode>(m_mode->currentData().toInt());
  for (int r = 0; r < rowCount(); ++r) {
    auto* box = qobject_cast<QCheckBox*>(m_table->cellWidget(r, 0));
    auto* spin = m_table->cellWidget(r, 2)->findChild<QDoubleSpinBox*>();
    if (box && spin && box->isChecked()) {
      s.loras.push_back({m_infos[static_cast<std::size_t>(r)].path, spin->value(), spin->value()});
    }
  }
  return s;
}

bool LoraPanel::setLora(const QString& name, double weight, bool enabled) {
  for (int r = 0; r < rowCount(); ++r) {
    auto* box = qobject_cast<QCheckBox*>(m_table->cellWidget(r, 0));
    if (!box || box->text() != name) continue;
    m_table->cellWidget(r, 2)->findChild<QDoubleSpinBox*>()->setValue(weight);
    box->setChecked(enabled);
    return true;
  }
  if (m_listing) {  // the list is on its way: applied when it arrives (if the LoRA is there)
    m_pending[name] = {enabled, weight};
    return true;
  }
  return false;
}

void LoraPanel::saveSettings(QSettings& s) const {
  s.setValue(QStringLiteral("lora/mode"), QString::fromLatin1(lora_mode_name(settings().mode)));
  QStringList enabled;
  for (int r = 0; r < rowCount(); ++r) {
    auto* box = qobject_cast<QCheckBox*>(m_table->cellWidget(r, 0));
    auto* spin = m_table->cellWidget(r, 2)->findChild<QDoubleSpinBox*>();
    if (box && spin && box->isChecked()) enabled << QStringLiteral("%1=%2").arg(box->text()).arg(spin->value());
  }
  for (const auto& [name, choice] : m_pending) {  // chosen before the list arrived
    if (choice.first) enabled << QStringLiteral("%1=%2").arg(name).arg(choice.second);
  }
  s.setValue(QStringLiteral("lora/enabled"), enabled);
}

void LoraPanel::restoreSettings(const QSettings& s) {
  if (auto m = parse_lora_mode(s.value(QStringLiteral("lora/mode")).toString().toStdString())) {
    m_mode->setCurrentIndex(std::max(0, m_mode->findData(int(*m))));
  }
  for (const auto& item : s.value(QStringLiteral("lora/enabled")).toStringList()) {
    const int eq = static_cast<int>(item.lastIndexOf(QLatin1Char('=')));
    if (eq > 0) setLora(item.left(eq), item.mid(eq + 1).toDouble());
  }
}

}  // namespace fp8s::gui
