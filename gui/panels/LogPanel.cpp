#include "LogPanel.h"

#include <QMetaObject>
#include <QPlainTextEdit>
#include <QPointer>
#include <QVBoxLayout>
#include <spdlog/sinks/base_sink.h>

#include <algorithm>
#include <mutex>

#include "core/logging.h"

namespace fp8s::gui {
namespace {

// Formats each record and hands it to the panel through a queued call (any thread may log).
class PanelSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit PanelSink(LogPanel* panel) : m_panel(panel) {}
  void detach() {
    std::lock_guard<std::mutex> lock(mutex_);
    m_panel = nullptr;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!m_panel) return;
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    QString line = QString::fromUtf8(buf.data(), static_cast<int>(buf.size())).trimmed();
    QPointer<LogPanel> panel(m_panel);
    QMetaObject::invokeMethod(m_panel, [panel, line] {
      if (panel) panel->append(line);
    }, Qt::QueuedConnection);
  }
  void flush_() override {}

 private:
  LogPanel* m_panel;
};

}  // namespace

LogPanel::LogPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  m_text = new QPlainTextEdit(this);
  m_text->setObjectName(QStringLiteral("logText"));
  m_text->setReadOnly(true);
  m_text->setMaximumBlockCount(5000);
  m_text->setFont(QFont(QStringLiteral("monospace"), 9));
  layout->addWidget(m_text);
  auto sink = std::make_shared<PanelSink>(this);
  sink->set_pattern("%H:%M:%S [%l] %v");
  m_sink = sink;
  log().sinks().push_back(m_sink);
}

LogPanel::~LogPanel() {
  auto& sinks = log().sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), m_sink), sinks.end());
  static_cast<PanelSink*>(m_sink.get())->detach();
}

void LogPanel::append(const QString& line) { m_text->appendPlainText(line); }

QString LogPanel::text() const { return m_text->toPlainText(); }

}  // namespace fp8s::gui
