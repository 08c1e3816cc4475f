// The init image with a paintable inpainting mask over it: left button paints (white = repaint),
// right button or the eraser erases; the mask is shown as a translucent red layer. The mask has
// the image's size whatever the widget's.
#pragma once

#include <QImage>
#include <QWidget>

namespace fp8s::gui {

class MaskCanvas : public QWidget {
  Q_OBJECT

 public:
  explicit MaskCanvas(QWidget* parent = nullptr);

  void setImage(const QImage& image);  // clears the mask
  QImage image() const { return m_image; }
  QImage mask() const { return m_mask; }  // Grayscale8, the image's size (null without an image)
  bool hasMask() const;                   // any painted pixel
  void setMask(const QImage& mask);  // luminance of `mask` (the image's size)
  void setBrushSize(int pixels) { m_brush = pixels; }
  int brushSize() const { return m_brush; }
  void setEraser(bool on) { m_eraser = on; }
  // Paints (or erases) a brush stroke from `from` to `to`, in image coordinates, and says so
  // (maskChanged). Mouse drags paint without it and say it once, on release.
  void stroke(const QPointF& from, const QPointF& to, bool erase);

 public Q_SLOTS:
  void clearMask();
  void invertMask();

 Q_SIGNALS:
  void maskChanged();

 protected:
  void paintEvent(QPaintEvent*) override;
  void mousePressEvent(QMouseEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;

 private:
  void paintStroke(const QPointF& from, const QPointF& to, bool erase);
  QRectF imageRect() const;  // where the image is drawn
  QPointF toImage(const QPointF& widget) const;

  QImage m_image;
  QImage m_mask;
  int m_brush = 24;
  bool m_eraser = false;
  bool m_drawing = false;
  bool m_erasing = false;
  QPointF m_last;
};

}  // namespace fp8s::gui
