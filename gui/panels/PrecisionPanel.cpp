#include "PrecisionPanel.h"

#include "Widgets.h"

#include <QComboBox>
#include <QFormLayout>
#include <QLabel>
#include <QPushButton>
#include <QSettings>
#include <QSignalBlocker>
#include <QHBoxLayout>
#include <QSlider>
#include <QSpinBox>
#include <QVBoxLayout>

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <cmath>
#include <vector>

#include "ModelPanel.h"
#include "core/compute_choice.h"
#include "core/error.h"
#include "core/threads.h"
#include "models/inspect.h"
#include "pipeline/engine.h"

namespace fp8s::gui {

namespace {
constexpr uint64_t kBudgetStep = 512ull << 20;  // the slider's step: half a GiB
}  // namespace

WeightEstimate engineWeightEstimate(const std::string& checkpoint, const std::map<std::string, std::string>& components) {
  LoadOptions o;
  o.checkpoint = checkpoint;
  o.components = components;
  // each storage's figure read from the headers once: the panel asks on every control change
  // (the budget slider while it is dragged too)
  auto cache = std::make_shared<std::vector<std::pair<StorageSpec, std::optional<WeightBytes>>>>();
  return [o, cache](const StorageSpec& storage) -> std::optional<WeightBytes> {
    for (const auto& [s, bytes] : *cache) {
      if (s == storage) return bytes;
    }
    std::optional<WeightBytes> bytes;
    try {
      bytes = estimate_weight_bytes(o, storage);
    } catch (const std::exception&) {
      // a component not found yet: the load says which
    }
    cache->emplace_back(storage, bytes);
    return bytes;
  };
}

PrecisionPanel::PrecisionPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* form = new QFormLayout;
  m_storage = makeCombo(this, {{tr("FP16"), int(WeightType::FP16)}, {tr("BF16"), int(WeightType::BF16)},
                               {tr("FP8 E4M3"), int(WeightType::FP8_E4M3)}, {tr("FP8 E5M2"), int(WeightType::FP8_E5M2)},
                               {tr("INT8"), int(WeightType::INT8)}, {tr("MXFP8"), int(WeightType::MXFP8)},
                               {tr("NVFP4"), int(WeightType::NVFP4)}},
                         QStringLiteral("storageCombo"));
  m_storage->addItem(tr("FP32"), int(WeightType::FP32));
  m_storage->setToolTip(tr("How the denoiser's and text encoders' weights are kept in memory. FP8 and INT8 store one byte "
                           "per weight (INT8 with a scale per row), MXFP8 one byte and a power of two per 32, NVFP4 half a "
                           "byte and an FP8 scale per 16 (ComfyUI's comfy_quant layouts); each is decoded to the compute type "
                           "just in time. A file's own INT8/MXFP8/NVFP4 layers are kept as they are stored."));
  m_scale = new QComboBox(this);
  m_scale->setObjectName(QStringLiteral("scaleCombo"));
  m_scale->addItem(tr("per tensor"), int(Fp8Scale::Tensor));
  m_scale->addItem(tr("per channel"), int(Fp8Scale::Channel));
  m_scale->addItem(tr("none (A1111)"), int(Fp8Scale::None));
  m_scale->setToolTip(tr("FP8 scaling: none casts as A1111/Forge do; tensor or channel scales use the whole FP8 range"));
  m_compute = new QComboBox(this);
  m_compute->setObjectName(QStringLiteral("computeCombo"));
  m_compute->addItem(tr("Auto"), int(ComputeType::Auto));
  m_compute->addItem(tr("BF16"), int(ComputeType::BF16));
  m_compute->addItem(tr("FP32"), int(ComputeType::FP32));
  m_compute->addItem(tr("FP16"), int(ComputeType::FP16));
  m_vae = new QComboBox(this);
  m_vae->setObjectName(QStringLiteral("vaeCombo"));
  m_vae->addItem(tr("16-bit"), false);
  m_vae->addItem(tr("FP8 (with FP8 storage)"), true);
  addMachineRows(form);
  form->addRow(tr("Weights"), m_storage);
  form->addRow(tr("FP8 scaling"), m_scale);
  form->addRow(tr("Compute"), m_compute);
  form->addRow(tr("VAE"), m_vae);
  form->addRow(tr("Weight budget"), budgetRow());
  layout->addLayout(form);
  m_prediction = new QLabel(this);
  m_prediction->setObjectName(QStringLiteral("predictionLabel"));
  m_prediction->setWordWrap(true);
  layout->addWidget(m_prediction);
  auto* compare = new QPushButton(tr("Compare with FP16"), this);
  compare->setObjectName(QStringLiteral("compareButton"));
  compare->setToolTip(tr("Generate the same image with FP16 and with the chosen quantised storage (FP8, INT8, MXFP8 or NVFP4; "
                         "FP8 E4M3 when a 16-bit type is chosen) and compare memory, speed and pixels"));
  layout->addWidget(compare);
  connect(compare, &QPushButton::clicked, this, &PrecisionPanel::compareRequested);
  for (auto* c : {m_storage, m_scale, m_compute, m_vae}) {
    connect(c, &QComboBox::currentIndexChanged, this, [this] {
      update();
      Q_EMIT changed(settings());
    });
  }
  setSettings(PrecisionSettings{});
}

// The device (a change reloads the model) and the CPU threads.
void PrecisionPanel::addMachineRows(QFormLayout* form) {
  m_device = new QComboBox(this);
  m_device->setObjectName(QStringLiteral("deviceCombo"));
  const auto devices = available_devices();
  m_device->addItem(devices.size() > 1 ? tr("Auto (first GPU)") : tr("Auto (CPU: no CUDA GPU found)"), QStringLiteral("auto"));
  for (const auto& d : devices) m_device->addItem(QString::fromStdString(d.description), QString::fromStdString(d.id));
  updateAutoCompute();
  m_device->setToolTip(tr("Where the model runs. On a GPU the charts show VRAM; changing it reloads the model."));
  connect(m_device, &QComboBox::currentIndexChanged, this, [this] {
    updateAutoCompute();
    Q_EMIT deviceChanged(device());
  });
  form->addRow(tr("Device"), m_device);
  m_threads = new QSpinBox(this);
  m_threads->setObjectName(QStringLiteral("threadsSpin"));
  m_threads->setRange(0, 1024);
  m_threads->setSpecialValueText(tr("Auto (%1)").arg(usable_cores().cores));
  m_threads->setToolTip(tr("CPU threads for the arithmetic. Auto uses the cores this process may use (its "
                           "affinity and cgroup quota); fewer leave room for other work on this machine."));
  connect(m_threads, &QSpinBox::valueChanged, this, [this](int n) { Q_EMIT threadsChanged(n); });
  form->addRow(tr("CPU threads"), m_threads);
}

// The weight budget: half-GiB steps up to the machine's memory, then auto.
QHBoxLayout* PrecisionPanel::budgetRow() {
  m_budget = new QSlider(Qt::Horizontal, this);
  m_budget->setObjectName(QStringLiteral("weightBudgetSlider"));
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const double machine = pages > 0 && page > 0 ? double(pages) * double(page) : 64.0 * (1ull << 30);
  m_budget->setRange(0, static_cast<int>(std::ceil(machine / kBudgetStep)) + 1);
  m_budget->setValue(m_budget->maximum());
  m_budget->setToolTip(tr("Weight budget (Forge's GPU Weights): the memory the denoiser's resident weights may "
                          "take. The blocks beyond it stream from the model file at every step (the same image, "
                          "slower). Auto keeps everything resident when the model fits and streams when it does not."));
  m_budgetLabel = new QLabel(this);
  m_budgetLabel->setObjectName(QStringLiteral("weightBudgetLabel"));
  m_budgetLabel->setMinimumWidth(m_budgetLabel->fontMetrics().horizontalAdvance(QStringLiteral("000.0 GB")));
  auto* row = new QHBoxLayout;
  row->addWidget(m_budget, 1);
  row->addWidget(m_budgetLabel);
  connect(m_budget, &QSlider::valueChanged, this, [this] {
    update();
    Q_EMIT changed(settings());
  });
  return row;
}

void PrecisionPanel::applyTo(const PrecisionSettings& p, GenerationRequest& r) {
  r.storage = p.storage;
  r.compute = p.compute;
  r.weight_budget = p.weightBudget;
}

PrecisionSettings PrecisionPanel::settings() const {
  PrecisionSettings p;
  p.storage.weights = static_cast<WeightType>(m_storage->currentData().toInt());
  p.storage.scale = is_fp8(p.storage.weights) ? static_cast<Fp8Scale>(m_scale->currentData().toInt()) : Fp8Scale::None;
  p.storage.fp8_vae = is_fp8(p.storage.weights) && m_vae->currentData().toBool();
  p.compute = static_cast<ComputeType>(m_compute->currentData().toInt());
  if (m_budget->value() < m_budget->maximum()) p.weightBudget = static_cast<uint64_t>(m_budget->value()) * kBudgetStep;
  return p;
}

void PrecisionPanel::setSettings(const PrecisionSettings& p) {
  {
    const QSignalBlocker b1(m_storage), b2(m_scale), b3(m_compute), b4(m_vae), b5(m_budget);
    m_budget->setValue(p.weightBudget ? static_cast<int>(std::min<uint64_t>(*p.weightBudget / kBudgetStep, m_budget->maximum() - 1))
                                      : m_budget->maximum());
    m_storage->setCurrentIndex(std::max(0, m_storage->findData(int(p.storage.weights))));
    if (is_fp8(p.storage.weights)) m_scale->setCurrentIndex(std::max(0, m_scale->findData(int(p.storage.scale))));
    m_compute->setCurrentIndex(std::max(0, m_compute->findData(int(p.compute))));
    m_vae->setCurrentIndex(p.storage.fp8_vae ? 1 : 0);
  }
  update();
  Q_EMIT changed(settings());
}

StorageSpec PrecisionPanel::compareStorage() const {
  auto s = settings().storage;
  if (!is_quantised(s.weights)) s = StorageSpec{WeightType::FP8_E4M3, static_cast<Fp8Scale>(m_scale->currentData().toInt()), false};
  return s;
}

void PrecisionPanel::setEstimate(WeightEstimate estimate) {
  m_estimate = std::move(estimate);
  update();
}

void PrecisionPanel::setReport(const InspectReport* report) {
  // A checkpoint whose weights are FP8 in the file loads as that FP8 (one byte a weight, its own
  // format and scaling), as the CLI's `--weights auto` does; upcasting it stays one choice away.
  // A mixed comfy_quant file (INT8/MXFP8/NVFP4 layers beside 16-bit ones) keeps the user's choice:
  // its quantised layers stay as stored under any storage.
  if (report && report->is_fp8_source() && !report->has_block_layers() && report->path != m_followedPath) {
    m_followedPath = report->path;
    auto p = settings();
    p.storage.weights = report->own_storage->weights;
    p.storage.scale = report->own_storage->scale;
    setSettings(p);
    return;
  }
  update();
}

QString PrecisionPanel::predictionText() const { return m_prediction->text(); }

int PrecisionPanel::threads() const { return m_threads->value(); }

void PrecisionPanel::setThreads(int threads) { m_threads->setValue(std::clamp(threads, 0, m_threads->maximum())); }

QString PrecisionPanel::device() const { return m_device->currentData().toString(); }

void PrecisionPanel::setDevice(const QString& id) {
  const QSignalBlocker block(m_device);
  m_device->setCurrentIndex(std::max(0, m_device->findData(id)));  // a GPU that is gone: auto
  updateAutoCompute();
}

void PrecisionPanel::updateAutoCompute() {
  const QString id = device();
  const bool cuda = id.startsWith(QStringLiteral("cuda")) || (id == QStringLiteral("auto") && m_device->count() > 2);
  QString label;
  try {
    label = QString::fromStdString(auto_compute_label(cuda));
  } catch (const InputError& e) {  // a bad FP8S_CPU_ISA: the run will say so in full
    label = tr("Auto (%1)").arg(QString::fromStdString(e.what()));
  }
  m_compute->setItemText(m_compute->findData(int(ComputeType::Auto)), label);
  m_compute->setToolTip(tr("The arithmetic's type. Auto: BF16 on a GPU and on CPUs with BF16 instructions "
                           "(AVX512-BF16, AMX); FP32 on other CPUs, where BF16 is emulated and several times slower."));
}

void PrecisionPanel::update() {
  const auto p = settings();
  m_budgetLabel->setText(p.weightBudget ? formatBytes(double(*p.weightBudget)) : tr("Auto"));
  m_scale->setEnabled(is_fp8(p.storage.weights));
  m_vae->setEnabled(is_fp8(p.storage.weights));
  const auto estimate = m_estimate ? m_estimate(p.storage) : std::nullopt;
  const auto estimate16 = m_estimate ? m_estimate(StorageSpec{WeightType::FP16, Fp8Scale::None, false}) : std::nullopt;
  if (!estimate || !estimate16) {
    m_prediction->setText(tr("Weight memory: choose a model to see the prediction."));
    return;
  }
  const double bytes = double(estimate->total());
  const double fp16 = double(estimate16->total());
  QString text = tr("Weight memory: <b>%1</b>").arg(formatBytes(bytes));
  if (p.storage.weights != WeightType::FP16) {
    const double saved = fp16 - bytes;
    text += saved >= 0 ? tr(" — %1 less than FP16").arg(formatBytes(saved)) : tr(" — %1 more than FP16").arg(formatBytes(-saved));
  }
  m_prediction->setText(text);
}

void PrecisionPanel::saveSettings(QSettings& s) const {
  const auto p = settings();
  s.setValue(QStringLiteral("precision/weights"), QString::fromLatin1(weight_type_name(p.storage.weights)));
  s.setValue(QStringLiteral("precision/scale"), int(m_scale->currentData().toInt()));
  s.setValue(QStringLiteral("precision/compute_type"), QString::fromLatin1(compute_type_name(p.compute)));
  s.setValue(QStringLiteral("precision/fp8_vae"), m_vae->currentData().toBool());
  s.setValue(QStringLiteral("precision/device"), device());
  s.setValue(QStringLiteral("precision/threads"), threads());
  s.setValue(QStringLiteral("precision/weight_budget"),
             p.weightBudget ? QString::number(qulonglong(*p.weightBudget)) : QStringLiteral("auto"));
}

void PrecisionPanel::restoreSettings(const QSettings& s) {
  PrecisionSettings p;
  if (auto w = parse_weight_type(s.value(QStringLiteral("precision/weights")).toString().toStdString())) p.storage.weights = *w;
  p.storage.scale = static_cast<Fp8Scale>(s.value(QStringLiteral("precision/scale"), int(Fp8Scale::Tensor)).toInt());
  // "precision/compute" was saved by versions whose default was bf16: that default becomes auto, a
  // choice of fp32 or fp16 is kept
  const QString older = s.value(QStringLiteral("precision/compute")).toString();
  const QString compute = s.value(QStringLiteral("precision/compute_type"), older == QStringLiteral("bf16") ? QStringLiteral("auto") : older).toString();
  if (auto c = parse_compute_type(compute.toStdString())) p.compute = *c;
  p.storage.fp8_vae = s.value(QStringLiteral("precision/fp8_vae"), false).toBool();
  const QString budget = s.value(QStringLiteral("precision/weight_budget"), QStringLiteral("auto")).toString();
  bool number = false;
  const qulonglong bytes = budget.toULongLong(&number);
  if (number) p.weightBudget = bytes;
  setSettings(p);
  setDevice(s.value(QStringLiteral("precision/device"), QStringLiteral("auto")).toString());
  setThreads(s.value(QStringLiteral("precision/threads"), 0).toInt());
}

}  // namespace fp8s::gui
