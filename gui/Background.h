// File work off the UI thread: `work()` runs on Qt's thread pool, `done(result)` on the UI thread
// afterwards, unless `owner` has been destroyed meanwhile. `work` must not throw.
#pragma once

#include <QCoreApplication>
#include <QObject>
#include <QPointer>
#include <QThreadPool>

#include <utility>

namespace fp8s::gui {

template <class Work, class Done>
void runInBackground(QObject* owner, Work work, Done done) {
  QPointer<QObject> guard(owner);
  QThreadPool::globalInstance()->start([guard, work = std::move(work), done = std::move(done)]() mutable {
    auto result = work();
    QMetaObject::invokeMethod(
        QCoreApplication::instance(),
        [guard, done = std::move(done), result = std::move(result)]() mutable {
          if (guard) done(std::move(result));
        },
        Qt::QueuedConnection);
  });
}

}  // namespace fp8s::gui
