#include "Img2ImgPanel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QImageReader>
#include <QMimeData>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QVBoxLayout>

#include "ImageView.h"
#include "MaskCanvas.h"
#include "Widgets.h"

namespace fp8s::gui {

Img2ImgPanel::Img2ImgPanel(QWidget* parent) : QWidget(parent) {
  setAcceptDrops(true);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* top = new QHBoxLayout;
  m_mode = makeCombo(this, {{tr("txt2img"), int(ImageMode::Txt2Img)}, {tr("img2img"), int(ImageMode::Img2Img)},
                            {tr("inpaint"), int(ImageMode::Inpaint)}}, QStringLiteral("imageModeCombo"));
  auto* open = new QPushButton(tr("Open image…"), this);
  top->addWidget(m_mode, 1);
  top->addWidget(open);
  layout->addLayout(top);
  m_canvas = new MaskCanvas(this);
  m_canvas->setObjectName(QStringLiteral("maskCanvas"));
  m_canvas->setMinimumHeight(180);
  layout->addWidget(m_canvas, 1);

  m_inpaintBox = new QWidget(this);
  auto* brushRow = new QHBoxLayout(m_inpaintBox);
  brushRow->setContentsMargins(0, 0, 0, 0);
  m_brush = makeSpin(m_inpaintBox, 1, 256, 24, QStringLiteral("brushSizeSpin"));
  m_brush->setPrefix(tr("brush "));
  m_brush->setSuffix(QStringLiteral(" px"));
  m_eraser = new QCheckBox(tr("Eraser"), m_inpaintBox);
  auto* clear = new QPushButton(tr("Clear"), m_inpaintBox);
  auto* invert = new QPushButton(tr("Invert"), m_inpaintBox);
  brushRow->addWidget(m_brush);
  brushRow->addWidget(m_eraser);
  brushRow->addWidget(clear);
  brushRow->addWidget(invert);
  layout->addWidget(m_inpaintBox);

  auto* form = new QFormLayout;
  m_strength = makeDoubleSpin(this, 0.0, 1.0, 0.05, 0.75, QStringLiteral("denoisingSpin"));
  form->addRow(tr("Denoising strength"), m_strength);
  m_resize = makeCombo(this, {{tr("Just resize"), int(ResizeMode::JustResize)}, {tr("Crop and resize"), int(ResizeMode::Crop)},
                              {tr("Resize and fill"), int(ResizeMode::Fill)}});
  form->addRow(tr("Resize mode"), m_resize);
  m_blur = makeSpin(this, 0, 64, 4);
  form->addRow(tr("Mask blur"), m_blur);
  m_maskMode = makeCombo(this, {{tr("Inpaint masked"), 0}, {tr("Inpaint not masked"), 1}});
  m_maskMode->setObjectName(QStringLiteral("maskModeCombo"));
  form->addRow(tr("Mask mode"), m_maskMode);
  m_fill = makeCombo(this, {{tr("fill"), int(InpaintFill::Fill)}, {tr("original"), int(InpaintFill::Original)},
                            {tr("latent noise"), int(InpaintFill::LatentNoise)}, {tr("latent nothing"), int(InpaintFill::LatentNothing)}});
  m_fill->setCurrentIndex(1);
  form->addRow(tr("Masked content"), m_fill);
  auto* maskedRow = new QHBoxLayout;
  m_onlyMasked = new QCheckBox(tr("Only masked"), this);
  m_padding = makeSpin(this, 0, 256, 32);
  m_padding->setPrefix(tr("padding "));
  m_padding->setSuffix(QStringLiteral(" px"));
  maskedRow->addWidget(m_onlyMasked);
  maskedRow->addWidget(m_padding);
  form->addRow(tr("Inpaint area"), maskedRow);
  layout->addLayout(form);

  connect(open, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open init image"), QString(), tr("Images (*.png *.jpg *.jpeg *.webp *.bmp)"));
    if (!path.isEmpty()) openImage(path);
  });
  connect(m_brush, &QSpinBox::valueChanged, this, [this](int v) { m_canvas->setBrushSize(v); });
  connect(m_eraser, &QCheckBox::toggled, this, [this](bool on) { m_canvas->setEraser(on); });
  connect(clear, &QPushButton::clicked, m_canvas, &MaskCanvas::clearMask);
  connect(invert, &QPushButton::clicked, m_canvas, &MaskCanvas::invertMask);
  connect(m_mode, &QComboBox::currentIndexChanged, this, [this] {
    updateEnabled();
    emitChanged();
  });
  connect(m_canvas, &MaskCanvas::maskChanged, this, &Img2ImgPanel::emitChanged);
  for (auto* sp : {m_blur, m_padding}) connect(sp, &QSpinBox::valueChanged, this, &Img2ImgPanel::emitChanged);
  for (auto* c : {m_resize, m_fill, m_maskMode}) connect(c, &QComboBox::currentIndexChanged, this, &Img2ImgPanel::emitChanged);
  connect(m_strength, &QDoubleSpinBox::valueChanged, this, &Img2ImgPanel::emitChanged);
  connect(m_onlyMasked, &QCheckBox::toggled, this, &Img2ImgPanel::emitChanged);
  updateEnabled();
}

ImageMode Img2ImgPanel::mode() const { return static_cast<ImageMode>(m_mode->currentData().toInt()); }

void Img2ImgPanel::setMode(ImageMode mode) { m_mode->setCurrentIndex(m_mode->findData(int(mode))); }

void Img2ImgPanel::updateEnabled() {
  const bool inpaint = mode() == ImageMode::Inpaint;
  m_canvas->setEnabled(mode() != ImageMode::Txt2Img);
  m_inpaintBox->setVisible(inpaint);
  m_strength->setEnabled(mode() != ImageMode::Txt2Img);
  m_resize->setEnabled(mode() != ImageMode::Txt2Img);
  for (QWidget* w : {static_cast<QWidget*>(m_blur), static_cast<QWidget*>(m_fill), static_cast<QWidget*>(m_onlyMasked),
                     static_cast<QWidget*>(m_padding), static_cast<QWidget*>(m_maskMode)}) {
    w->setEnabled(inpaint);
  }
}

void Img2ImgPanel::setInitImage(const QImage& image) {
  m_canvas->setImage(image);
  if (mode() == ImageMode::Txt2Img) setMode(ImageMode::Img2Img);
  emitChanged();
}

bool Img2ImgPanel::openImage(const QString& path, QString* error) {
  QImageReader reader(path);
  const QImage image = reader.read();
  if (image.isNull()) {
    if (error) *error = tr("%1: %2").arg(path, reader.errorString());
    return false;
  }
  setInitImage(image);
  return true;
}

QString Img2ImgPanel::problem() const {
  if (mode() == ImageMode::Inpaint && !m_canvas->image().isNull() && !m_canvas->hasMask()) {
    return tr("Inpaint needs a mask: paint over the part of the init image to change (or switch the mode to img2img)");
  }
  if (mode() == ImageMode::Txt2Img || !m_canvas->image().isNull()) return {};
  return tr("%1 needs an init image: open one in the img2img / inpaint tab, drop one there, or send one "
            "from the image view or the gallery (or switch the mode to txt2img)")
      .arg(m_mode->currentText());
}

void Img2ImgPanel::emitChanged() {
  GenerationRequest r;
  fillRequest(r);
  Q_EMIT changed(r);
}

void Img2ImgPanel::applyTo(const GenerationRequest& images, GenerationRequest& r) {
  r.init_image = images.init_image;
  r.denoising_strength = images.denoising_strength;
  r.resize_mode = images.resize_mode;
  r.mask = images.mask;
  r.mask_blur = images.mask_blur;
  r.inpainting_fill = images.inpainting_fill;
  r.inpaint_full_res = images.inpaint_full_res;
  r.inpaint_full_res_padding = images.inpaint_full_res_padding;
  r.invert_mask = images.invert_mask;
}

void Img2ImgPanel::fillRequest(GenerationRequest& r) const {
  if (mode() == ImageMode::Txt2Img || m_canvas->image().isNull()) return;
  r.init_image = toRgb(m_canvas->image());
  r.denoising_strength = static_cast<float>(m_strength->value());
  r.resize_mode = static_cast<ResizeMode>(m_resize->currentData().toInt());
  if (mode() == ImageMode::Inpaint) {
    r.mask = toRgb(m_canvas->mask().convertToFormat(QImage::Format_RGB888));
    r.mask_blur = m_blur->value();
    r.inpainting_fill = static_cast<InpaintFill>(m_fill->currentData().toInt());
    r.inpaint_full_res = m_onlyMasked->isChecked();
    r.inpaint_full_res_padding = m_padding->value();
    r.invert_mask = m_maskMode->currentData().toInt() == 1;
  }
}

void Img2ImgPanel::setFromRequest(const GenerationRequest& r) {
  m_strength->setValue(r.denoising_strength);
  m_blur->setValue(r.mask_blur);
  m_fill->setCurrentIndex(std::max(0, m_fill->findData(int(r.inpainting_fill))));
  m_onlyMasked->setChecked(r.inpaint_full_res);
  m_padding->setValue(r.inpaint_full_res_padding);
  m_maskMode->setCurrentIndex(r.invert_mask ? 1 : 0);
}

void Img2ImgPanel::saveSettings(QSettings& s) const {
  s.setValue(QStringLiteral("img2img/strength"), m_strength->value());
  s.setValue(QStringLiteral("img2img/resize"), m_resize->currentIndex());
  s.setValue(QStringLiteral("img2img/blur"), m_blur->value());
  s.setValue(QStringLiteral("img2img/fill"), m_fill->currentIndex());
  s.setValue(QStringLiteral("img2img/invert_mask"), m_maskMode->currentIndex() == 1);
  s.setValue(QStringLiteral("img2img/brush"), m_brush->value());
}

void Img2ImgPanel::restoreSettings(const QSettings& s) {
  m_strength->setValue(s.value(QStringLiteral("img2img/strength"), 0.75).toDouble());
  m_resize->setCurrentIndex(s.value(QStringLiteral("img2img/resize"), 0).toInt());
  m_blur->setValue(s.value(QStringLiteral("img2img/blur"), 4).toInt());
  m_fill->setCurrentIndex(s.value(QStringLiteral("img2img/fill"), 1).toInt());
  m_maskMode->setCurrentIndex(s.value(QStringLiteral("img2img/invert_mask"), false).toBool() ? 1 : 0);
  m_brush->setValue(s.value(QStringLiteral("img2img/brush"), 24).toInt());
}

void Img2ImgPanel::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasImage() || e->mimeData()->hasUrls()) e->acceptProposedAction();
}

void Img2ImgPanel::dropEvent(QDropEvent* e) {
  if (e->mimeData()->hasImage()) {
    setInitImage(qvariant_cast<QImage>(e->mimeData()->imageData()));
    return;
  }
  for (const auto& url : e->mimeData()->urls()) {
    if (url.isLocalFile() && openImage(url.toLocalFile())) return;
  }
}

}  // namespace fp8s::gui
