// Textual-inversion embeddings: the `.safetensors` files of the embeddings folder (listed off the UI
// thread, with their vector count and width), a click adds the name to the prompt, a right click
// to the negative prompt — as A1111's extra-networks cards do.
#pragma once

#include <QWidget>

class QLabel;
class QListWidget;

namespace fp8s::gui {

class EmbeddingsPanel : public QWidget {
  Q_OBJECT

 public:
  explicit EmbeddingsPanel(QWidget* parent = nullptr);
  void setFolder(const QString& folder);  // lists it; `listed` follows
  int count() const;

 public Q_SLOTS:
  void refresh();

 Q_SIGNALS:
  void insertRequested(const QString& name, bool negative);
  void listed();

 private:
  QListWidget* m_list;
  QLabel* m_folderLabel;
  QString m_folder;
  int m_serial = 0;
};

}  // namespace fp8s::gui
