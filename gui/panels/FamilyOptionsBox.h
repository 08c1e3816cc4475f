// The controls of a family's declared settings (FamilyOption with prompt_panel): a spin box for a
// number, a check box for a flag, a combo box for a choice, a line edit for text, an image strip for
// files (ImageStrip, on a row of its own), each named "option_NAME" and labelled as the family
// declares. Built from the traits, never from a family's name; the Prompt panel holds one.
#pragma once

#include <QWidget>

#include <map>
#include <string>
#include <vector>

#include "pipeline/family_traits.h"

class QGridLayout;

namespace fp8s::gui {

class FamilyOptionsBox : public QWidget {
  Q_OBJECT

 public:
  explicit FamilyOptionsBox(QWidget* parent = nullptr);
  // Replaces the controls by those of `options` that the Prompt panel shows, each at its value in
  // `values` (else its default); hidden when there are none.
  void setOptions(const std::vector<FamilyOption>& options, const std::map<std::string, std::string>& values);
  // The controls' values by option name, as text (FamilyOption's).
  std::map<std::string, std::string> values() const;
  // Sets the controls named in `values` (others keep theirs).
  void setValues(const std::map<std::string, std::string>& values);

 Q_SIGNALS:
  void changed();

 private:
  struct Control {
    FamilyOption option;
    QWidget* widget = nullptr;
  };
  QGridLayout* m_grid;
  std::vector<Control> m_controls;
};

}  // namespace fp8s::gui
