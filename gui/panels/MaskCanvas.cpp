#include "MaskCanvas.h"

#include <QMouseEvent>
#include <QPainter>

namespace fp8s::gui {

MaskCanvas::MaskCanvas(QWidget* parent) : QWidget(parent) {
  setMinimumSize(160, 160);
  setMouseTracking(false);
  setCursor(Qt::CrossCursor);
}

void MaskCanvas::setImage(const QImage& image) {
  m_image = image.convertToFormat(QImage::Format_RGB888);
  m_mask = QImage(m_image.size(), QImage::Format_Grayscale8);
  m_mask.fill(0);
  update();
  Q_EMIT maskChanged();
}

void MaskCanvas::setMask(const QImage& mask) {
  if (m_image.isNull() || mask.size() != m_image.size()) return;
  m_mask = mask.convertToFormat(QImage::Format_Grayscale8);
  update();
  Q_EMIT maskChanged();
}

bool MaskCanvas::hasMask() const {
  for (int y = 0; y < m_mask.height(); ++y) {
    const uchar* row = m_mask.constScanLine(y);
    for (int x = 0; x < m_mask.width(); ++x) {
      if (row[x]) return true;
    }
  }
  return false;
}

void MaskCanvas::clearMask() {
  if (m_mask.isNull()) return;
  m_mask.fill(0);
  update();
  Q_EMIT maskChanged();
}

void MaskCanvas::invertMask() {
  if (m_mask.isNull()) return;
  m_mask.invertPixels();
  update();
  Q_EMIT maskChanged();
}

void MaskCanvas::stroke(const QPointF& from, const QPointF& to, bool erase) {
  if (m_mask.isNull()) return;
  paintStroke(from, to, erase);
  Q_EMIT maskChanged();
}

void MaskCanvas::paintStroke(const QPointF& from, const QPointF& to, bool erase) {
  QPainter p(&m_mask);
  p.setRenderHint(QPainter::Antialiasing, false);
  p.setPen(QPen(erase ? Qt::black : Qt::white, m_brush, Qt::SolidLine, Qt::RoundCap, Qt::RoundJoin));
  if (from == to) {
    p.setPen(Qt::NoPen);
    p.setBrush(erase ? Qt::black : Qt::white);
    p.drawEllipse(to, m_brush / 2.0, m_brush / 2.0);
  } else {
    p.drawLine(from, to);
  }
  p.end();
  update();
}

QRectF MaskCanvas::imageRect() const {
  if (m_image.isNull()) return {};
  const QSizeF s = QSizeF(m_image.size()).scaled(size(), Qt::KeepAspectRatio);
  return {(width() - s.width()) / 2, (height() - s.height()) / 2, s.width(), s.height()};
}

QPointF MaskCanvas::toImage(const QPointF& w) const {
  const QRectF r = imageRect();
  if (r.isEmpty()) return {};
  return {(w.x() - r.x()) * m_image.width() / r.width(), (w.y() - r.y()) * m_image.height() / r.height()};
}

void MaskCanvas::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().color(QPalette::Base));
  if (m_image.isNull()) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap, tr("Drop an image here, open one, or send one from the image view or the gallery"));
    return;
  }
  const QRectF r = imageRect();
  p.drawImage(r, m_image);
  QImage overlay(m_mask.size(), QImage::Format_ARGB32_Premultiplied);  // the mask as translucent red
  overlay.fill(Qt::transparent);
  for (int y = 0; y < m_mask.height(); ++y) {
    const uchar* m = m_mask.constScanLine(y);
    auto* o = reinterpret_cast<QRgb*>(overlay.scanLine(y));
    for (int x = 0; x < m_mask.width(); ++x) {
      const int a = m[x] * 140 / 255;
      o[x] = qRgba(a, 0, 0, a);  // premultiplied red
    }
  }
  p.drawImage(r, overlay);
}

void MaskCanvas::mousePressEvent(QMouseEvent* e) {
  if (m_image.isNull()) return;
  m_drawing = true;
  m_erasing = m_eraser || e->button() == Qt::RightButton;
  m_last = toImage(e->position());
  paintStroke(m_last, m_last, m_erasing);
}

void MaskCanvas::mouseMoveEvent(QMouseEvent* e) {
  if (!m_drawing) return;
  const QPointF p = toImage(e->position());
  paintStroke(m_last, p, m_erasing);
  m_last = p;
}

void MaskCanvas::mouseReleaseEvent(QMouseEvent*) {
  if (!m_drawing) return;
  m_drawing = false;
  Q_EMIT maskChanged();  // once per drag: the request (a copy of image and mask) is rebuilt here
}

}  // namespace fp8s::gui
