// The prompt panel's hires-fix group (A1111's txt2img "Hires. fix"): upscale factor, upscaler,
// second-pass steps and denoising strength. Checkable: unchecked, no hires pass.
#pragma once

#include <QGroupBox>

#include "pipeline/request.h"

class QComboBox;
class QDoubleSpinBox;
class QSpinBox;

namespace fp8s::gui {

class HiresGroup : public QGroupBox {
  Q_OBJECT

 public:
  explicit HiresGroup(QWidget* parent = nullptr);
  void fillRequest(GenerationRequest& r) const;  // enable_hr and the hr_* fields
  void setFromRequest(const GenerationRequest& r);

 Q_SIGNALS:
  void changed();  // any of its values (or the check box)

 private:
  QDoubleSpinBox* m_scale;
  QComboBox* m_upscaler;
  QSpinBox* m_steps;
  QDoubleSpinBox* m_strength;
};

}  // namespace fp8s::gui
