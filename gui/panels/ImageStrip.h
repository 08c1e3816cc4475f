// A strip of image files, for a family's Files setting (FLUX.2's reference images of an edit): a
// thumbnail of each with its remove button, an Add button, and PNG files dropped on the strip;
// at most `max` files (0: any number). Its value is the paths joined by ';' (FamilyOption::Files).
#pragma once

#include <QStringList>
#include <QWidget>

class QHBoxLayout;
class QMimeData;
class QPushButton;

namespace fp8s::gui {

class ImageStrip : public QWidget {
  Q_OBJECT

 public:
  explicit ImageStrip(int max, QWidget* parent = nullptr);
  QStringList files() const { return m_files; }
  // Replaces the files (beyond `max`, the first `max`), without emitting changed().
  void setFiles(const QStringList& files);
  // Adds files at the end while there is room; emits changed() when one was added.
  void addFiles(const QStringList& files);
  void removeAt(int index);
  // What a drop adds: the PNG files among the URLs (others are passed over); true when one was.
  bool dropFiles(const QMimeData* mime);

 Q_SIGNALS:
  void changed();

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void rebuild();

  int m_max;
  QStringList m_files;
  QHBoxLayout* m_row;
  QPushButton* m_add;
};

}  // namespace fp8s::gui
