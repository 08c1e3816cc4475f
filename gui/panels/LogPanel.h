// Log view fed by an spdlog sink: the engine's log lines appear here as well as on stderr.
#pragma once

#include <QWidget>

#include <memory>

class QPlainTextEdit;

namespace spdlog::sinks {
class sink;
}

namespace fp8s::gui {

class LogPanel : public QWidget {
  Q_OBJECT

 public:
  explicit LogPanel(QWidget* parent = nullptr);
  ~LogPanel() override;  // detaches the sink

  QString text() const;

 public Q_SLOTS:
  void append(const QString& line);

 private:
  QPlainTextEdit* m_text;
  std::shared_ptr<spdlog::sinks::sink> m_sink;
};

}  // namespace fp8s::gui
