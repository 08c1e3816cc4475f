// Helpers of the GUI tests (test_gui, test_gui_flux): waiting for the worker's signals, finding a
// window's child by its object name.
#pragma once

#include <QCoreApplication>
#include <QSignalSpy>
#include <QWidget>

namespace fp8s::gui {

// The worker's signals reach a QSignalSpy on the worker thread, possibly before wait() is called,
// and wait() only counts emissions after the call: check what already arrived first. Then deliver
// the queued copies of the signal that the window itself receives (posted before the spy's).
inline bool arrived(QSignalSpy& spy, int timeout_ms) {
  if (spy.count() == 0 && !spy.wait(timeout_ms)) return false;
  QCoreApplication::sendPostedEvents();
  QCoreApplication::processEvents();
  return true;
}

template <typename T>
inline T* child(QWidget* w, const char* name) {
  auto* c = w->findChild<T*>(QString::fromLatin1(name));
  if (!c) qFatal("no child %s", name);
  return c;
}

}  // namespace fp8s::gui
