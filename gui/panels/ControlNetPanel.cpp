#include "ControlNetPanel.h"

#include <QCheckBox>
#include <QDir>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QImageReader>
#include <QMimeData>
#include <QSettings>
#include <QTabWidget>

#include "ImageView.h"
#include "Widgets.h"
#include "io/control_image.h"

namespace fp8s::gui {
namespace {

QPixmap thumbnail(const QImage& image) {
  return image.isNull() ? QPixmap() : QPixmap::fromImage(image.scaled(170, 170, Qt::KeepAspectRatio, Qt::SmoothTransformation));
}

}  // namespace

ControlNetPanel::ControlNetPanel(QWidget* parent) : QWidget(parent) {
  setAcceptDrops(true);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  m_tabs = new QTabWidget(this);
  m_tabs->setObjectName(QStringLiteral("controlUnitTabs"));
  for (int i = 0; i < kUnits; ++i) m_tabs->addTab(makeUnit(i), tr("Unit %1").arg(i));
  layout->addWidget(m_tabs);
  auto* note = new QLabel(tr("SD 1.x and SDXL. The ControlNet is stored like the model (FP8 too); drop a control image here."), this);
  note->setWordWrap(true);
  layout->addWidget(note);
}

QWidget* ControlNetPanel::makeUnit(int index) {
  auto* page = new QWidget;
  auto& u = m_units[static_cast<std::size_t>(index)];
  auto* grid = new QVBoxLayout(page);
  grid->addLayout(unitForm(index, page));
  grid->addLayout(unitImages(index, page));
  grid->addStretch(1);
  auto refresh = [this, index] {
    updatePreview(index);
    emitChanged();
  };
  for (auto* s : {u.low, u.high}) connect(s, &QSpinBox::valueChanged, this, refresh);
  connect(u.preprocessor, &QComboBox::currentIndexChanged, this, refresh);
  for (auto* s : {u.weight, u.start, u.end}) connect(s, &QDoubleSpinBox::valueChanged, this, [this] { emitChanged(); });
  for (auto* c : {u.model, u.resize, u.mode}) connect(c, &QComboBox::currentIndexChanged, this, [this] { emitChanged(); });
  connect(u.enable, &QCheckBox::toggled, this, [this] { emitChanged(); });
  updatePreview(index);
  return page;
}

// A unit's settings: enable, model (Browse…), control image (Open…), preprocessor and Canny's
// thresholds, weight, start and end, resize and control mode.
QFormLayout* ControlNetPanel::unitForm(int index, QWidget* page) {
  auto& u = m_units[static_cast<std::size_t>(index)];
  auto* form = new QFormLayout;
  u.enable = new QCheckBox(tr("Enable"), page);
  u.enable->setObjectName(QStringLiteral("controlEnable%1").arg(index));
  form->addRow(u.enable);
  auto* modelRow = new QHBoxLayout;
  u.model = new QComboBox(page);
  u.model->setObjectName(QStringLiteral("controlModel%1").arg(index));
  u.model->setMinimumContentsLength(14);
  u.model->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  auto* browse = new QPushButton(tr("Browse…"), page);
  modelRow->addWidget(u.model, 1);
  modelRow->addWidget(browse);
  form->addRow(tr("Model"), modelRow);
  auto* open = new QPushButton(tr("Open control image…"), page);
  form->addRow(tr("Image"), open);
  u.preprocessor = makeCombo(page, {{tr("none (the image is the hint)"), int(ControlPreprocessor::None)},
                                    {tr("invert"), int(ControlPreprocessor::Invert)},
                                    {tr("canny"), int(ControlPreprocessor::Canny)}},
                             QStringLiteral("controlPreprocessor%1").arg(index));
  form->addRow(tr("Preprocessor"), u.preprocessor);
  auto pair = [&](QAbstractSpinBox* a, QAbstractSpinBox* b) {
    auto* row = new QHBoxLayout;
    row->addWidget(a);
    row->addWidget(b);
    return row;
  };
  u.low = makeSpin(page, 1, 255, 100);
  u.high = makeSpin(page, 1, 255, 200);
  u.low->setPrefix(tr("low "));
  u.high->setPrefix(tr("high "));
  form->addRow(tr("Canny"), pair(u.low, u.high));
  u.weight = makeDoubleSpin(page, 0, 2, 0.05, 1.0, QStringLiteral("controlWeight%1").arg(index));
  form->addRow(tr("Control weight"), u.weight);
  u.start = makeDoubleSpin(page, 0, 1, 0.05, 0.0);
  u.end = makeDoubleSpin(page, 0, 1, 0.05, 1.0);
  u.start->setPrefix(tr("start "));
  u.end->setPrefix(tr("end "));
  form->addRow(tr("Control steps"), pair(u.start, u.end));
  u.resize = makeCombo(page, {{tr("Just Resize"), int(ResizeMode::JustResize)}, {tr("Crop and Resize"), int(ResizeMode::Crop)},
                              {tr("Resize and Fill"), int(ResizeMode::Fill)}});
  u.resize->setCurrentIndex(1);
  form->addRow(tr("Resize mode"), u.resize);
  u.mode = makeCombo(page, {{tr("Balanced"), int(ControlMode::Balanced)}, {tr("My prompt is more important"), int(ControlMode::Prompt)},
                            {tr("ControlNet is more important"), int(ControlMode::ControlNet)}});
  form->addRow(tr("Control mode"), u.mode);
  connect(browse, &QPushButton::clicked, this, [this, index] {
    const QString path = QFileDialog::getOpenFileName(this, tr("ControlNet"), m_folder, tr("ControlNet (*.safetensors)"));
    if (!path.isEmpty()) setModel(index, path);
  });
  connect(open, &QPushButton::clicked, this, [this, index] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Control image"), QString(), tr("Images (*.png *.jpg *.jpeg *.webp *.bmp)"));
    QString error;
    if (!path.isEmpty() && !openImage(index, path, &error)) m_units[static_cast<std::size_t>(index)].info->setText(error);
  });
  return form;
}

// A unit's control image and its live preprocessed hint side by side, the image's note and Save hint….
QGridLayout* ControlNetPanel::unitImages(int index, QWidget* page) {
  auto& u = m_units[static_cast<std::size_t>(index)];
  auto* images = new QGridLayout;
  u.image = new QLabel(tr("No control image"), page);
  u.hint = new QLabel(page);
  u.hint->setObjectName(QStringLiteral("controlHint%1").arg(index));
  u.info = new QLabel(page);
  for (auto* l : {u.image, u.hint}) {
    l->setMinimumSize(170, 170);
    l->setAlignment(Qt::AlignCenter);
    l->setFrameShape(QFrame::StyledPanel);
  }
  images->addWidget(new QLabel(tr("Control image"), page), 0, 0);
  images->addWidget(new QLabel(tr("Preprocessed hint (live)"), page), 0, 1);
  images->addWidget(u.image, 1, 0);
  images->addWidget(u.hint, 1, 1);
  auto* save = new QPushButton(tr("Save hint…"), page);
  images->addWidget(u.info, 2, 0);
  images->addWidget(save, 2, 1);
  connect(save, &QPushButton::clicked, this, [this, index] {
    const auto& unit = m_units[static_cast<std::size_t>(index)];
    if (unit.preview.isNull()) return;
    const QString path = QFileDialog::getSaveFileName(this, tr("Save hint"), QStringLiteral("hint.png"), tr("PNG (*.png)"));
    if (!path.isEmpty()) unit.preview.save(path, "PNG");
  });
  return images;
}

void ControlNetPanel::fillModels(QComboBox* box) const {
  const QString current = box->currentData().toString();
  box->blockSignals(true);
  box->clear();
  QDir dir(m_folder);
  for (const auto& f : dir.entryInfoList({QStringLiteral("*.safetensors")}, QDir::Files, QDir::Name)) box->addItem(f.completeBaseName(), f.absoluteFilePath());
  for (const auto& f : dir.entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
    if (QFileInfo::exists(f.absoluteFilePath() + QStringLiteral("/config.json"))) box->addItem(f.fileName() + QLatin1Char('/'), f.absoluteFilePath());
  }
  const int at = box->findData(current);
  if (at >= 0) box->setCurrentIndex(at);
  else if (!current.isEmpty()) box->addItem(QFileInfo(current).completeBaseName(), current), box->setCurrentIndex(box->count() - 1);
  box->blockSignals(false);
}

void ControlNetPanel::setFolder(const QString& folder) {
  m_folder = folder;
  for (auto& u : m_units) fillModels(u.model);
  emitChanged();
}

void ControlNetPanel::setModel(int unit, const QString& path) {
  auto& u = m_units[static_cast<std::size_t>(unit)];
  int at = u.model->findData(path);
  if (at < 0) {
    u.model->addItem(QFileInfo(path).completeBaseName(), path);
    at = u.model->count() - 1;
  }
  u.model->setCurrentIndex(at);
  emitChanged();
}

bool ControlNetPanel::openImage(int unit, const QString& path, QString* error) {
  QImageReader reader(path);
  const QImage image = reader.read();
  if (image.isNull()) {
    if (error) *error = tr("%1: not an image (%2)").arg(QFileInfo(path).fileName(), reader.errorString());
    return false;
  }
  setImage(unit, image, path);
  return true;
}

void ControlNetPanel::setImage(int unit, const QImage& image, const QString& name) {
  auto& u = m_units[static_cast<std::size_t>(unit)];
  u.source = toRgb(image);
  u.sourceName = name;
  u.image->setPixmap(thumbnail(image));
  u.enable->setChecked(true);
  updatePreview(unit);
  emitChanged();
}

void ControlNetPanel::setEnabledUnit(int unit, bool on) { m_units[static_cast<std::size_t>(unit)].enable->setChecked(on); }

void ControlNetPanel::setPreprocessor(int unit, ControlPreprocessor p) {
  auto* box = m_units[static_cast<std::size_t>(unit)].preprocessor;
  box->setCurrentIndex(box->findData(int(p)));
}

QImage ControlNetPanel::hintPreview(int unit) const { return m_units[static_cast<std::size_t>(unit)].preview; }

void ControlNetPanel::updatePreview(int unit) {
  auto& u = m_units[static_cast<std::size_t>(unit)];
  const auto p = static_cast<ControlPreprocessor>(u.preprocessor->currentData().toInt());
  u.low->setEnabled(p == ControlPreprocessor::Canny);
  u.high->setEnabled(p == ControlPreprocessor::Canny);
  if (!u.source) {
    u.preview = QImage();
    u.hint->setText(tr("No hint"));
    return;
  }
  try {
    u.preview = toQImage(preprocess_control(*u.source, p, u.low->value(), u.high->value()));
    u.hint->setPixmap(thumbnail(u.preview));
    u.info->setText(tr("%1×%2, resized to the image when it runs").arg(u.source->width).arg(u.source->height));
  } catch (const std::exception& e) {
    u.preview = QImage();
    u.hint->setText(QString::fromUtf8(e.what()));
  }
}

QString ControlNetPanel::problem() const {
  for (int i = 0; i < kUnits; ++i) {
    const auto& u = m_units[static_cast<std::size_t>(i)];
    if (!u.enable->isChecked()) continue;
    if (u.model->currentData().toString().isEmpty()) return tr("ControlNet unit %1 has no model: pick one or put ControlNets in %2").arg(i).arg(m_folder);
    if (!u.source) return tr("ControlNet unit %1 has no control image: open one or drop it on the ControlNet tab").arg(i);
  }
  return {};
}

void ControlNetPanel::fillRequest(GenerationRequest& r) const {
  r.controlnets.clear();
  for (const auto& u : m_units) {
    if (!u.enable->isChecked() || !u.source || u.model->currentData().toString().isEmpty()) continue;
    ControlUnit c;
    c.model = u.model->currentData().toString().toStdString();
    c.image = u.source;
    c.image_name = u.sourceName.toStdString();
    c.preprocessor = static_cast<ControlPreprocessor>(u.preprocessor->currentData().toInt());
    c.canny_low = u.low->value();
    c.canny_high = u.high->value();
    c.strength = static_cast<float>(u.weight->value());
    c.start = static_cast<float>(u.start->value());
    c.end = static_cast<float>(u.end->value());
    c.resize = static_cast<ResizeMode>(u.resize->currentData().toInt());
    c.mode = static_cast<ControlMode>(u.mode->currentData().toInt());
    r.controlnets.push_back(std::move(c));
  }
}

void ControlNetPanel::setFromRequest(const GenerationRequest& r) {
  for (int i = 0; i < kUnits; ++i) {
    auto& u = m_units[static_cast<std::size_t>(i)];
    const bool has = i < static_cast<int>(r.controlnets.size());
    u.enable->setChecked(has);
    if (!has) continue;
    const auto& c = r.controlnets[static_cast<std::size_t>(i)];
    const QString name = QFileInfo(QString::fromStdString(c.model)).completeBaseName();
    const int at = u.model->findText(name);
    if (at >= 0) u.model->setCurrentIndex(at);
    u.preprocessor->setCurrentIndex(u.preprocessor->findData(int(c.preprocessor)));
    u.low->setValue(c.canny_low);
    u.high->setValue(c.canny_high);
    u.weight->setValue(c.strength);
    u.start->setValue(c.start);
    u.end->setValue(c.end);
    u.resize->setCurrentIndex(u.resize->findData(int(c.resize)));
    u.mode->setCurrentIndex(u.mode->findData(int(c.mode)));
    if (c.image) setImage(i, toQImage(*c.image), QString::fromStdString(c.image_name));
  }
  emitChanged();
}

void ControlNetPanel::saveSettings(QSettings& s) const {
  for (int i = 0; i < kUnits; ++i) {
    const auto& u = m_units[static_cast<std::size_t>(i)];
    const QString k = QStringLiteral("controlnet/unit%1/").arg(i);
    s.setValue(k + QStringLiteral("model"), u.model->currentData().toString());
    s.setValue(k + QStringLiteral("preprocessor"), u.preprocessor->currentIndex());
    s.setValue(k + QStringLiteral("low"), u.low->value());
    s.setValue(k + QStringLiteral("high"), u.high->value());
    s.setValue(k + QStringLiteral("weight"), u.weight->value());
    s.setValue(k + QStringLiteral("start"), u.start->value());
    s.setValue(k + QStringLiteral("end"), u.end->value());
    s.setValue(k + QStringLiteral("resize"), u.resize->currentIndex());
    s.setValue(k + QStringLiteral("mode"), u.mode->currentIndex());
  }
}

void ControlNetPanel::restoreSettings(const QSettings& s) {
  for (int i = 0; i < kUnits; ++i) {
    auto& u = m_units[static_cast<std::size_t>(i)];
    const QString k = QStringLiteral("controlnet/unit%1/").arg(i);
    const QString model = s.value(k + QStringLiteral("model")).toString();
    if (!model.isEmpty() && QFileInfo::exists(model)) setModel(i, model);
    u.preprocessor->setCurrentIndex(s.value(k + QStringLiteral("preprocessor"), 0).toInt());
    u.low->setValue(s.value(k + QStringLiteral("low"), 100).toInt());
    u.high->setValue(s.value(k + QStringLiteral("high"), 200).toInt());
    u.weight->setValue(s.value(k + QStringLiteral("weight"), 1.0).toDouble());
    u.start->setValue(s.value(k + QStringLiteral("start"), 0.0).toDouble());
    u.end->setValue(s.value(k + QStringLiteral("end"), 1.0).toDouble());
    u.resize->setCurrentIndex(s.value(k + QStringLiteral("resize"), 1).toInt());
    u.mode->setCurrentIndex(s.value(k + QStringLiteral("mode"), 0).toInt());
  }
  emitChanged();
}

void ControlNetPanel::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasUrls() || e->mimeData()->hasImage()) e->acceptProposedAction();
}

void ControlNetPanel::dropEvent(QDropEvent* e) {
  const int unit = m_tabs->currentIndex();
  if (e->mimeData()->hasImage()) {
    setImage(unit, qvariant_cast<QImage>(e->mimeData()->imageData()));
  } else if (!e->mimeData()->urls().isEmpty()) {
    QString error;
    if (!openImage(unit, e->mimeData()->urls().front().toLocalFile(), &error)) m_units[static_cast<std::size_t>(unit)].info->setText(error);
  }
  e->acceptProposedAction();
}

void ControlNetPanel::emitChanged() {
  GenerationRequest r;
  fillRequest(r);
  Q_EMIT changed(r);
}

}  // namespace fp8s::gui
