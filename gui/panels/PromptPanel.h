// Prompt panel: positive and negative prompts (A1111 emphasis highlighted, token counters per
// 75-token chunk), steps, CFG, sampler, schedule, seed (random / reuse last), size with presets and
// batch count. Fills the prompt part of a GenerationRequest; never talks to the engine.
#pragma once

#include <QWidget>

#include <map>
#include <memory>
#include <string>

#include "pipeline/request.h"

class QComboBox;
class QDoubleSpinBox;
class QHBoxLayout;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QSettings;
class QSpinBox;
class QVBoxLayout;

namespace fp8s {
class ClipTokenizer;
}

namespace fp8s::gui {

class PromptPanel : public QWidget {
  Q_OBJECT

 public:
  explicit PromptPanel(QWidget* parent = nullptr);
  ~PromptPanel() override;

  // Writes prompt, negative, steps, cfg, sampler, schedule, seed, size and batch count.
  void fillRequest(GenerationRequest& r) const;
  // Sets the same fields from a request (a gallery entry, a dropped PNG's parameters).
  void setFromRequest(const GenerationRequest& r);
  void setLastSeed(int64_t seed);
  // Appends `word` to the prompt (or the negative prompt), comma-separated.
  void appendWord(const QString& word, bool negative);
  // The tokenizer for the counters (nullptr: counters show "?" with `why` as tooltip).
  void setTokenizer(std::shared_ptr<const ClipTokenizer> tokenizer, const QString& why = {});
  void setNativeSize(int size);  // the model's size; "native" preset and default
  // The model family's controls from its traits: its samplers and schedules, sizes in its multiple
  // with its presets, CFG where it has it, its declared settings' controls. A change of
  // family sets the size to the model's native size (the first model keeps a restored size that fits).
  void setTraits(const FamilyTraits& traits);
  QString tokenCounterText(bool negative) const;

  QPlainTextEdit* promptEdit() const { return m_prompt; }

  void saveSettings(QSettings& s) const;
  void restoreSettings(const QSettings& s);

 Q_SIGNALS:
  void generateRequested();
  // Any field changed: the request fields this panel owns (prompt, sampling, size, seed, batch,
  // hires fix), in an otherwise default request.
  void changed(const fp8s::GenerationRequest& prompt);

 private:
  QPlainTextEdit* addEditor(QVBoxLayout* layout, const QString& name, const QString& placeholder, QLabel*& counter);
  QHBoxLayout* sizeRow();
  QHBoxLayout* seedRow();
  void updateCounter(bool negative);
  void emitChanged();

  QPlainTextEdit* m_prompt;
  QPlainTextEdit* m_negative;
  QLabel* m_promptCount;
  QLabel* m_negativeCount;
  QSpinBox* m_steps;
  QDoubleSpinBox* m_cfg;
  QLabel* m_cfgLabel;
  class FamilyOptionsBox* m_options;  // the family's declared settings (FamilyTraits::options)
  std::map<std::string, std::string> m_optionValues;  // every family's last values, by option name
  std::string m_family;  // the traits' id
  bool m_familyKnown = false;  // a model's family has been set once
  bool m_stepsRestored = false;  // the settings held a step count (the first model keeps it)
  QComboBox* m_sampler;
  QComboBox* m_schedule;
  QLineEdit* m_seed;
  QSpinBox* m_width;
  QSpinBox* m_height;
  QComboBox* m_sizePreset;
  QSpinBox* m_batchCount;
  class HiresGroup* m_hires;
  int64_t m_lastSeed = -1;
  std::shared_ptr<const ClipTokenizer> m_tokenizer;
  QString m_tokenizerWhy;
};

}  // namespace fp8s::gui
