// The centre image: live previews during sampling and the finished image, fit or zoomed, with copy,
// save and open-folder actions.
#pragma once

#include <QImage>
#include <QWidget>

class QLabel;
class QScrollArea;
class QToolButton;

namespace fp8s {
struct RgbImage;
}

namespace fp8s::gui {

QImage toQImage(const RgbImage& image);
// A QImage as 8-bit RGB pixels (any format converted).
RgbImage toRgb(const QImage& image);

class ImageView : public QWidget {
  Q_OBJECT

 public:
  explicit ImageView(QWidget* parent = nullptr);

  // A preview (scaled up smoothly to the last image's size) or a finished image saved at `path`.
  void setPreview(const QImage& preview, int targetWidth, int targetHeight);
  void setImage(const QImage& image, const QString& path = {});
  QImage image() const { return m_image; }
  QString path() const { return m_path; }
  void setPlaceholder(const QString& text);

 public Q_SLOTS:
  void copy();
  void save();
  void openFolder();
  void setFit(bool fit);
  void zoom(double factor);

 Q_SIGNALS:
  void sendToImg2Img(const QImage& image);

 protected:
  void resizeEvent(QResizeEvent* e) override;

 private:
  void render();

  QScrollArea* m_scroll;
  QLabel* m_label;
  QToolButton* m_fit;
  QImage m_image;
  QString m_path;
  double m_zoom = 1.0;
  bool m_isFit = true;
};

}  // namespace fp8s::gui
