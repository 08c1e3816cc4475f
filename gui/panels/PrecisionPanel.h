// Precision panel, the FP8 toggle: weight storage (FP16 / BF16 / FP8 E4M3 / FP8 E5M2), FP8 scaling,
// compute type, VAE precision, the weight memory this choice predicts, and "Compare FP8 vs FP16".
#pragma once

#include <QWidget>

#include "core/types.h"

class QComboBox;
class QLabel;
class QSettings;

namespace fp8s {
struct InspectReport;
}

namespace fp8s::gui {

struct PrecisionSettings {
  StorageSpec storage{WeightType::FP8_E4M3, Fp8Scale::Tensor, false};
  ComputeType compute = ComputeType::BF16;
  bool operator==(const PrecisionSettings& o) const {
    return storage == o.storage && compute == o.compute;
  }
};

// Predicted bytes of the weights in `storage` (UNet and text encoders per their storage type, the VAE
// 16-bit unless FP8 VAE is chosen), from an inspect report.
double predictedWeightBytes(const InspectReport& report, const StorageSpec& storage);

class PrecisionPanel : public QWidget {
  Q_OBJECT

 public:
  explicit PrecisionPanel(QWidget* parent = nullptr);

  PrecisionSettings settings() const;
  void setSettings(const PrecisionSettings& p);
  // The FP8 storage that "Compare" sets against FP16: the chosen one if FP8, else E4M3.
  StorageSpec compareStorage() const;
  void setReport(const InspectReport* report);  // for the prediction; nullptr clears it
  QString predictionText() const;
  // Where the model runs: "auto", "cpu" or "cuda:N" (a change reloads the model).
  QString device() const;
  void setDevice(const QString& id);

  void saveSettings(QSettings& s) const;
  void restoreSettings(const QSettings& s);

 Q_SIGNALS:
  void changed(const fp8s::gui::PrecisionSettings& settings);
  void compareRequested();
  void deviceChanged(const QString& device);

 private:
  void update();

  QComboBox* m_storage;
  QComboBox* m_scale;
  QComboBox* m_compute;
  QComboBox* m_vae;
  QComboBox* m_device;
  QLabel* m_prediction;
  const InspectReport* m_report = nullptr;
  std::string m_followedPath;  // the FP8 checkpoint whose storage setReport last followed
};

}  // namespace fp8s::gui
