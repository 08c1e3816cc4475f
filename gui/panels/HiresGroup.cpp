#include "HiresGroup.h"

#include "Widgets.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QLabel>
#include <QSpinBox>

namespace fp8s::gui {

HiresGroup::HiresGroup(QWidget* parent) : QGroupBox(tr("Hires fix"), parent) {
  setObjectName(QStringLiteral("hiresGroup"));
  setCheckable(true);
  setChecked(false);
  setToolTip(tr("A first pass at the size above, upscaled, then an img2img pass at the larger size"));
  auto* grid = new QGridLayout(this);
  m_scale = makeDoubleSpin(this, 1.0, 4.0, 0.25, 2.0, QStringLiteral("hiresScaleSpin"));
  m_upscaler = makeCombo(this, {{QString::fromLatin1(hr_upscaler_display_name(HrUpscaler::Latent)), int(HrUpscaler::Latent)},
                                {QString::fromLatin1(hr_upscaler_display_name(HrUpscaler::LatentNearest)), int(HrUpscaler::LatentNearest)},
                                {QString::fromLatin1(hr_upscaler_display_name(HrUpscaler::Lanczos)), int(HrUpscaler::Lanczos)}},
                         QStringLiteral("hiresUpscalerCombo"));
  m_steps = makeSpin(this, 0, 150, 0);
  m_steps->setSpecialValueText(tr("same"));
  m_strength = makeDoubleSpin(this, 0.0, 1.0, 0.05, 0.7);
  addLabelled(grid, 0, 0, tr("Upscale by"), m_scale);
  addLabelled(grid, 0, 2, tr("Upscaler"), m_upscaler);
  addLabelled(grid, 1, 0, tr("Hires steps"), m_steps);
  addLabelled(grid, 1, 2, tr("Denoising"), m_strength);
  connect(this, &QGroupBox::toggled, this, &HiresGroup::changed);
  connect(m_scale, &QDoubleSpinBox::valueChanged, this, &HiresGroup::changed);
  connect(m_upscaler, &QComboBox::currentIndexChanged, this, &HiresGroup::changed);
  connect(m_steps, &QSpinBox::valueChanged, this, &HiresGroup::changed);
  connect(m_strength, &QDoubleSpinBox::valueChanged, this, &HiresGroup::changed);
}

void HiresGroup::fillRequest(GenerationRequest& r) const {
  r.enable_hr = isChecked();
  r.hr_scale = static_cast<float>(m_scale->value());
  r.hr_upscaler = static_cast<HrUpscaler>(m_upscaler->currentData().toInt());
  r.hr_steps = m_steps->value();
  r.hr_denoising_strength = static_cast<float>(m_strength->value());
}

void HiresGroup::setFromRequest(const GenerationRequest& r) {
  setChecked(r.enable_hr);
  m_scale->setValue(r.hr_scale);
  m_upscaler->setCurrentIndex(std::max(0, m_upscaler->findData(int(r.hr_upscaler))));
  m_steps->setValue(r.hr_steps);
  m_strength->setValue(r.hr_denoising_strength);
}

}  // namespace fp8s::gui
