#include "ImageView.h"

#include <algorithm>

#include <QApplication>
#include <QClipboard>
#include <QDesktopServices>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QScrollArea>
#include <QToolButton>
#include <QUrl>
#include <QVBoxLayout>

#include "io/png.h"

namespace fp8s::gui {

QImage toQImage(const RgbImage& image) {
  if (image.width <= 0 || image.height <= 0) return {};
  QImage q(reinterpret_cast<const uchar*>(image.pixels.data()), image.width, image.height, image.width * 3, QImage::Format_RGB888);
  return q.copy();  // own the pixels
}

RgbImage toRgb(const QImage& image) {
  const QImage rgb = image.convertToFormat(QImage::Format_RGB888);
  RgbImage out;
  out.width = rgb.width();
  out.height = rgb.height();
  out.pixels.resize(static_cast<std::size_t>(out.width) * out.height * 3);
  for (int y = 0; y < out.height; ++y) {
    std::copy_n(rgb.constScanLine(y), out.width * 3, &out.pixels[static_cast<std::size_t>(y) * out.width * 3]);
  }
  return out;
}

ImageView::ImageView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  m_scroll = new QScrollArea(this);
  m_scroll->setAlignment(Qt::AlignCenter);
  m_scroll->setWidgetResizable(false);
  m_label = new QLabel;
  m_label->setObjectName(QStringLiteral("imageLabel"));
  m_label->setAlignment(Qt::AlignCenter);
  m_scroll->setWidget(m_label);
  layout->addWidget(m_scroll, 1);
  auto* tools = new QHBoxLayout;
  auto button = [&](const QString& text, const QString& tip) {
    auto* b = new QToolButton(this);
    b->setText(text);
    b->setToolTip(tip);
    tools->addWidget(b);
    return b;
  };
  m_fit = button(tr("Fit"), tr("Fit the image to the view"));
  m_fit->setCheckable(true);
  m_fit->setChecked(true);
  auto* oneToOne = button(tr("1:1"), tr("Actual pixels"));
  auto* zoomIn = button(QStringLiteral("+"), tr("Zoom in"));
  auto* zoomOut = button(QStringLiteral("−"), tr("Zoom out"));
  tools->addStretch(1);
  auto* copyButton = button(tr("Copy"), tr("Copy the image to the clipboard"));
  auto* saveButton = button(tr("Save…"), tr("Save the image as PNG (with its parameters)"));
  auto* folderButton = button(tr("Open folder"), tr("Show the output folder"));
  auto* sendButton = button(tr("To img2img"), tr("Use this image as the init image of img2img / inpainting"));
  sendButton->setObjectName(QStringLiteral("sendToImg2ImgButton"));
  connect(sendButton, &QToolButton::clicked, this, [this] {
    if (!m_image.isNull()) Q_EMIT sendToImg2Img(m_image);
  });
  layout->addLayout(tools);
  connect(m_fit, &QToolButton::toggled, this, &ImageView::setFit);
  connect(oneToOne, &QToolButton::clicked, this, [this] {
    m_zoom = 1.0;
    setFit(false);
  });
  connect(zoomIn, &QToolButton::clicked, this, [this] { zoom(1.25); });
  connect(zoomOut, &QToolButton::clicked, this, [this] { zoom(0.8); });
  connect(copyButton, &QToolButton::clicked, this, &ImageView::copy);
  connect(saveButton, &QToolButton::clicked, this, &ImageView::save);
  connect(folderButton, &QToolButton::clicked, this, &ImageView::openFolder);
  setPlaceholder(tr("Press Generate (Ctrl+Enter) to make an image."));
}

void ImageView::setPlaceholder(const QString& text) {
  m_image = QImage();
  m_label->setPixmap(QPixmap());
  m_label->setText(text);
  m_label->adjustSize();
}

void ImageView::setPreview(const QImage& preview, int targetWidth, int targetHeight) {
  if (preview.isNull()) return;
  m_image = preview.scaled(targetWidth, targetHeight, Qt::IgnoreAspectRatio, Qt::SmoothTransformation);
  render();
}

void ImageView::setImage(const QImage& image, const QString& path) {
  m_image = image;
  m_path = path;
  render();
}

void ImageView::render() {
  if (m_image.isNull()) return;
  QSize size = m_image.size();
  if (m_isFit) {
    size = m_image.size().scaled(m_scroll->viewport()->size() - QSize(4, 4), Qt::KeepAspectRatio);
  } else {
    size = m_image.size() * m_zoom;
  }
  m_label->setPixmap(QPixmap::fromImage(m_image.scaled(size, Qt::KeepAspectRatio,
                                                       size.width() > m_image.width() ? Qt::FastTransformation : Qt::SmoothTransformation)));
  m_label->resize(size);
}

void ImageView::resizeEvent(QResizeEvent* e) {
  QWidget::resizeEvent(e);
  render();
}

void ImageView::setFit(bool fit) {
  m_isFit = fit;
  if (m_fit->isChecked() != fit) m_fit->setChecked(fit);
  render();
}

void ImageView::zoom(double factor) {
  if (m_isFit && !m_image.isNull()) m_zoom = static_cast<double>(m_label->width()) / m_image.width();
  m_zoom = std::clamp(m_zoom * factor, 0.1, 16.0);
  setFit(false);
}

void ImageView::copy() {
  if (!m_image.isNull()) QApplication::clipboard()->setImage(m_image);
}

void ImageView::save() {
  if (m_image.isNull()) return;
  const QString target = QFileDialog::getSaveFileName(this, tr("Save image"), m_path.isEmpty() ? QStringLiteral("image.png") : m_path,
                                                      tr("PNG images (*.png)"));
  if (target.isEmpty()) return;
  if (!m_path.isEmpty() && QFileInfo::exists(m_path)) {
    QFile::remove(target);
    QFile::copy(m_path, target);  // keeps the parameters chunk
  } else {
    m_image.save(target, "PNG");
  }
}

void ImageView::openFolder() {
  if (!m_path.isEmpty()) QDesktopServices::openUrl(QUrl::fromLocalFile(QFileInfo(m_path).absolutePath()));
}

}  // namespace fp8s::gui
