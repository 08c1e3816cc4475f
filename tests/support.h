// Helpers shared by the test executables: reference data location, temporary files, the CLI.
#pragma once

#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QString>
#include <QTemporaryDir>
#include <QtTest>

#include <atomic>
#include <fstream>

#include "models/convert.h"
#include "io/safetensors.h"
#include "core/error.h"
#include "pipeline/engine.h"
#include "pipeline/request.h"
#include <string>
#include <vector>

namespace fp8s::test {

inline QString reference_dir() { return QString::fromUtf8(FP8S_REFERENCE_DIR); }
inline bool have_reference() { return QFileInfo(reference_dir() + "/README.md").exists(); }
inline std::string reference_path(const QString& rel) {
  return (reference_dir() + "/" + rel).toStdString();
}

// CI runs with ../shared present: there (CI=true) a missing reference fails a test instead of skipping it.
inline bool reference_required() { return qgetenv("CI") == "true"; }

// Skips the test with `why` where ../shared/reference/ is absent; fails it under CI=true.
#define FP8S_SKIP_WITHOUT_REFERENCE(why)                                                    \
  do {                                                                                      \
    if (!fp8s::test::have_reference()) {                                                    \
      if (fp8s::test::reference_required())                                                 \
        QFAIL("CI=true and ../shared/reference/ is absent: " why);                          \
      QSKIP(why);                                                                           \
    }                                                                                       \
  } while (0)

#define FP8S_REQUIRE_REFERENCE() FP8S_SKIP_WITHOUT_REFERENCE("../shared/reference/ is absent: reference comparisons skipped")

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A float tensor of a safetensors file widened to FP32 (with its shape).
inline std::vector<float> read_f32_tensor(const fp8s::SafetensorsFile& f, const std::string& name,
                                          std::vector<int64_t>* shape = nullptr) {
  const auto& r = f.at(name);
  std::vector<uint8_t> raw(r.nbytes());
  f.read(r, raw.data());
  std::vector<float> out(r.numel());
  fp8s::widen_to_f32(raw.data(), r.dtype, out.size(), out.data(), name);
  if (shape) *shape = r.shape;
  return out;
}

struct CliResult {
  int exit_code = -1;
  QString out;
  QString err;
};

// Runs fp8studio-cli with `args` in `cwd`, waiting up to `timeout_ms`.
inline CliResult run_cli(const QStringList& args, const QString& cwd = QString(),
                         int timeout_ms = 600000,
                         const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  QProcess p;
  if (!cwd.isEmpty()) p.setWorkingDirectory(cwd);
  p.setProcessEnvironment(env);
  p.start(QString::fromUtf8(FP8S_CLI_PATH), args);
  CliResult r;
  if (!p.waitForFinished(timeout_ms)) {
    p.kill();
    p.waitForFinished();
    r.err = "timed out";
    return r;
  }
  r.exit_code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

// The last non-empty line of stderr must be a single `error: ...` line naming `needle`.
inline void expect_one_line_error(const CliResult& r, int code, const QString& needle) {
  QCOMPARE(r.exit_code, code);
  const auto lines = r.err.split('\n', Qt::SkipEmptyParts);
  QVERIFY2(!lines.isEmpty(), "no error message");
  QVERIFY2(lines.last().startsWith("error: "), qPrintable(r.err));
  QVERIFY2(lines.last().contains(needle), qPrintable(r.err));
}

// An observer that keeps every step event of a generation.
struct Steps : Observer {
  std::vector<StepEvent> events;
  void onStep(const StepEvent& e) override { events.push_back(e); }
};

// The message a request is refused with (an InputError); empty, with a warning, when it ran.
inline QString refusal(Engine& engine, const GenerationRequest& r) {
  std::atomic<bool> cancel{false};
  try {
    engine.generate(r, nullptr, cancel);
  } catch (const InputError& e) {
    return QString::fromUtf8(e.what());
  }
  qWarning("the request was accepted");
  return {};
}

}  // namespace fp8s::test
