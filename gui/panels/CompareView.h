// Compare view: the FP16 and FP8 images side by side, their difference heat map, and the metrics
// table (weight memory, each mode's own peaks, step time, PSNR, SSIM); Export writes the engine's
// compare files (write_compare: images, report.md, report.json) into a folder.
#pragma once

#include <QWidget>

#include "GuiTypes.h"
#include "pipeline/family_traits.h"

class QLabel;
class QTableWidget;

namespace fp8s::gui {

class CompareView : public QWidget {
  Q_OBJECT

 public:
  explicit CompareView(QWidget* parent = nullptr);

  void setResult(const CompareResult& result);
  // The model family the next results come from (its denoiser's name in the table).
  void setTraits(const FamilyTraits& traits) { m_denoiser = QString::fromStdString(traits.denoiser_label); }
  bool hasResult() const { return m_has; }
  QTableWidget* table() const { return m_table; }
  // Writes the compare's files into `folder` (created if missing); false with `error` set on failure.
  bool exportTo(const QString& folder, QString* error = nullptr) const;

 public Q_SLOTS:
  void exportInteractive();

 protected:
  void resizeEvent(QResizeEvent* e) override;

 private:
  void renderImages();

  QLabel* m_images[3];
  QLabel* m_captions[3];
  QLabel* m_note = nullptr;  // the checkpoint is already FP8
  QTableWidget* m_table;
  CompareResult m_result;
  bool m_has = false;
  QString m_denoiser = QStringLiteral("UNet");
};

}  // namespace fp8s::gui
