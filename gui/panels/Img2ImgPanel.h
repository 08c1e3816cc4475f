// img2img and inpainting: the mode (txt2img, img2img, inpaint), the init image (open, drop, or
// "send to img2img" from the image view and the gallery), the mask brush (size, eraser, clear,
// invert) over it, and A1111's settings: denoising strength, resize mode, mask blur, masked
// content, only masked + padding. Fills those fields of a GenerationRequest.
#pragma once

#include <QWidget>

#include "pipeline/request.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QSettings;
class QSpinBox;

namespace fp8s::gui {

class MaskCanvas;

enum class ImageMode { Txt2Img, Img2Img, Inpaint };

class Img2ImgPanel : public QWidget {
  Q_OBJECT

 public:
  explicit Img2ImgPanel(QWidget* parent = nullptr);

  ImageMode mode() const;
  void setMode(ImageMode mode);
  // Sets the init image (and switches txt2img to img2img); the mask is cleared.
  void setInitImage(const QImage& image);
  // Reads an image file as the init image; false (with `error`) when it is not one.
  bool openImage(const QString& path, QString* error = nullptr);
  MaskCanvas* canvas() const { return m_canvas; }
  // Why the current mode cannot run ("" when it can): img2img and inpaint need an init image.
  QString problem() const;
  // Writes init_image, mask and the img2img settings (nothing in txt2img mode).
  void fillRequest(GenerationRequest& r) const;
  // Copies the fields fillRequest writes (init image, mask, their settings) from `images` into `r`.
  static void applyTo(const GenerationRequest& images, GenerationRequest& r);
  // The settings of a restored request (the images stay).
  void setFromRequest(const GenerationRequest& r);

  void saveSettings(QSettings& s) const;
  void restoreSettings(const QSettings& s);

 Q_SIGNALS:
  // Any input changed: fillRequest's fields in an otherwise default request.
  void changed(const fp8s::GenerationRequest& images);

 protected:
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;

 private:
  void updateEnabled();
  void emitChanged();

  QComboBox* m_mode;
  MaskCanvas* m_canvas;
  QSpinBox* m_brush;
  QCheckBox* m_eraser;
  QDoubleSpinBox* m_strength;
  QComboBox* m_resize;
  QSpinBox* m_blur;
  QComboBox* m_fill;
  QComboBox* m_maskMode;  // A1111's "Mask mode": inpaint masked / inpaint not masked (invert)
  QCheckBox* m_onlyMasked;
  QSpinBox* m_padding;
  QWidget* m_inpaintBox;
};

}  // namespace fp8s::gui
