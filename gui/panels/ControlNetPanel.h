// ControlNet (issue 43): up to three units, each with an enable box, the ControlNet picked from the
// controlnet folder (ComfyUI's models/controlnet; any file by "Browse…"), the control image by
// file or drop, the preprocessor (none, invert, canny with its thresholds) with a live preview of
// the hint, weight, start, end, resize mode and control mode. Fills GenerationRequest::controlnets.
#pragma once

#include <QImage>
#include <QWidget>

#include <array>

#include "pipeline/request.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QGridLayout;
class QLabel;
class QSettings;
class QSpinBox;
class QTabWidget;

namespace fp8s::gui {

class ControlNetPanel : public QWidget {
  Q_OBJECT

 public:
  static constexpr int kUnits = 3;
  explicit ControlNetPanel(QWidget* parent = nullptr);

  // The folder whose *.safetensors (and diffusers folders) the model boxes list.
  void setFolder(const QString& folder);
  // Unit `unit`'s control image (enables it); false (with `error`) when the file is not an image.
  bool openImage(int unit, const QString& path, QString* error = nullptr);
  void setImage(int unit, const QImage& image, const QString& name = {});
  void setEnabledUnit(int unit, bool on);
  void setModel(int unit, const QString& path);
  void setPreprocessor(int unit, ControlPreprocessor p);
  // The hint the preview shows (the preprocessed control image at its own size; null without one).
  QImage hintPreview(int unit) const;
  // Why the enabled units cannot run ("" when they can): each needs a model and an image.
  QString problem() const;
  void fillRequest(GenerationRequest& r) const;
  static void applyTo(const GenerationRequest& control, GenerationRequest& r) { r.controlnets = control.controlnets; }
  // A restored request's units: their settings, the model found in the folder by name (images stay).
  void setFromRequest(const GenerationRequest& r);

  void saveSettings(QSettings& s) const;
  void restoreSettings(const QSettings& s);

 Q_SIGNALS:
  void changed(const fp8s::GenerationRequest& control);

 protected:
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;

 private:
  struct Unit {
    QCheckBox* enable = nullptr;
    QComboBox* model = nullptr;
    QComboBox* preprocessor = nullptr;
    QSpinBox *low = nullptr, *high = nullptr;
    QDoubleSpinBox *weight = nullptr, *start = nullptr, *end = nullptr;
    QComboBox *resize = nullptr, *mode = nullptr;
    QLabel *image = nullptr, *hint = nullptr, *info = nullptr;
    std::optional<RgbImage> source;
    QString sourceName;
    QImage preview;
  };
  QWidget* makeUnit(int index);
  QFormLayout* unitForm(int index, QWidget* page);
  QGridLayout* unitImages(int index, QWidget* page);
  void updatePreview(int unit);
  void emitChanged();
  void fillModels(QComboBox* box) const;

  QTabWidget* m_tabs;
  std::array<Unit, kUnits> m_units;
  QString m_folder;
};

}  // namespace fp8s::gui
