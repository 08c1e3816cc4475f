// Precision panel, the FP8 toggle: weight storage (FP16 / BF16 / FP8 E4M3 / FP8 E5M2), FP8 scaling,
// compute type, VAE precision, the weight memory this choice predicts, and "Compare with FP16".
#pragma once

#include <QWidget>

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "pipeline/family_traits.h"
#include "pipeline/request.h"

#include "core/types.h"

class QComboBox;
class QFormLayout;
class QHBoxLayout;
class QSlider;
class QSpinBox;
class QLabel;
class QSettings;

namespace fp8s {
struct InspectReport;
}

namespace fp8s::gui {

struct PrecisionSettings {
  StorageSpec storage{WeightType::FP8_E4M3, Fp8Scale::Tensor, false};
  ComputeType compute = ComputeType::Auto;  // BF16 or FP32 from the processor (core/compute_choice.h)
  // The memory the denoiser's resident weights may take (Forge's GPU Weights); unset: auto.
  std::optional<uint64_t> weightBudget;
  bool operator==(const PrecisionSettings& o) const {
    return storage == o.storage && compute == o.compute && weightBudget == o.weightBudget;
  }
};

// The weight bytes a model would hold in a storage type (nullopt: unknown).
using WeightEstimate = std::function<std::optional<WeightBytes>(const StorageSpec& storage)>;
// The engine's estimate (its family's, from the headers) for a checkpoint and its components.
WeightEstimate engineWeightEstimate(const std::string& checkpoint, const std::map<std::string, std::string>& components);

class PrecisionPanel : public QWidget {
  Q_OBJECT

 public:
  explicit PrecisionPanel(QWidget* parent = nullptr);

  PrecisionSettings settings() const;
  // A request's storage, compute and weight budget as `p` says.
  static void applyTo(const PrecisionSettings& p, GenerationRequest& r);
  void setSettings(const PrecisionSettings& p);
  // The FP8 storage that "Compare" sets against FP16: the chosen one if FP8, else E4M3.
  StorageSpec compareStorage() const;
  void setReport(const InspectReport* report);  // an FP8 file's own storage is followed
  void setEstimate(WeightEstimate estimate);    // for the prediction; empty clears it
  QString predictionText() const;
  // Where the model runs: "auto", "cpu" or "cuda:N" (a change reloads the model).
  QString device() const;
  void setDevice(const QString& id);
  // CPU threads for the arithmetic: 0 = auto (the cores this process may use, core/threads.h).
  int threads() const;
  void setThreads(int threads);

  void saveSettings(QSettings& s) const;
  void restoreSettings(const QSettings& s);

 Q_SIGNALS:
  void changed(const fp8s::gui::PrecisionSettings& settings);
  void compareRequested();
  void deviceChanged(const QString& device);
  void threadsChanged(int threads);

 private:
  void addMachineRows(QFormLayout* form);
  QHBoxLayout* budgetRow();
  void update();
  // The Auto item names what it chooses on the device now selected: "Auto (FP32: no BF16 instructions)".
  void updateAutoCompute();

  QComboBox* m_storage;
  QComboBox* m_scale;
  QComboBox* m_compute;
  QComboBox* m_vae;
  QSlider* m_budget;        // half-GiB steps; the last position is auto
  QLabel* m_budgetLabel;
  QComboBox* m_device;
  QSpinBox* m_threads;
  QLabel* m_prediction;
  WeightEstimate m_estimate;
  std::string m_followedPath;  // the FP8 checkpoint whose storage setReport last followed
};

}  // namespace fp8s::gui
