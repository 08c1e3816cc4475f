// safetensors reader/writer: round trips and one test per malformation (issue 2).
#include <unistd.h>

#include <cstring>

#include "core/error.h"
#include "io/safetensors.h"
#include "support.h"

using namespace fp8s;

namespace {

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

std::string file_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

}  // namespace

class TestSafetensors : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  std::string path(const char* name) { return (m_dir.path() + "/" + name).toStdString(); }

  // Writes `bytes` and expects opening to fail with an InputError naming the file and `needle`.
  void expect_invalid(const std::string& bytes, const char* needle) {
    const std::string p = path("bad.safetensors");
    test::write_bytes(p, bytes);
    try {
      SafetensorsFile f(p);
      QFAIL(qPrintable(QString("opened a malformed file; expected: ") + needle));
    } catch (const InputError& e) {
      const std::string msg = e.what();
      QVERIFY2(msg.find(p) != std::string::npos, e.what());
      QVERIFY2(msg.find(needle) != std::string::npos, e.what());
      QVERIFY2(msg.find('\n') == std::string::npos, e.what());
    }
  }

 private Q_SLOTS:
  void roundTripAllDtypes() {
    const std::string p = path("rt.safetensors");
    std::vector<TensorSpec> specs{
        {"a.f32", Dtype::F32, {2, 3}},   {"b.f16", Dtype::F16, {4}},
        {"c.ids", Dtype::I64, {1, 77}},  {"d.scalar", Dtype::F32, {}},
        {"e.empty", Dtype::U8, {0}},     {"f.fp8", Dtype::F8_E4M3, {5}},
        {"g.bool", Dtype::BOOL, {3}},    {"h.bf16", Dtype::BF16, {2}},
        {"i.e5m2", Dtype::F8_E5M2, {3}}, {"j.f64", Dtype::F64, {1}},
        {"k.i32", Dtype::I32, {2}},      {"l.i16", Dtype::I16, {2}},
        {"m.i8", Dtype::I8, {2}}};
    std::vector<std::string> payloads;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      std::string bytes(specs[i].nbytes(), '\0');
      for (std::size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<char>(i * 31 + j * 7);
      payloads.push_back(bytes);
    }
    {
      SafetensorsWriter w(p, specs, {{"format", "pt"}, {"note", "ünïcode"}});
      for (const auto& b : payloads) {
        // write in two pieces to exercise chunked appends
        const std::size_t half = b.size() / 2;
        w.append(b.data(), half);
        w.append(b.data() + half, b.size() - half);
      }
      QVERIFY(w.done());
      w.commit();
    }
    SafetensorsFile f(p);
    QCOMPARE(f.tensors().size(), specs.size());
    QCOMPARE(f.index().header_bytes % 8, uint64_t(0));
    QCOMPARE(f.metadata().at("note"), std::string("ünïcode"));
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const auto& r = f.at(specs[i].name);
      QCOMPARE(r.dtype, specs[i].dtype);
      QCOMPARE(r.shape, specs[i].shape);
      std::string via_read(r.nbytes(), '\0');
      f.read(r, via_read.data());
      QCOMPARE(via_read, payloads[i]);
      QCOMPARE(std::string(reinterpret_cast<const char*>(f.view(r)), r.nbytes()), payloads[i]);
    }
    QCOMPARE(f.find("d.scalar")->numel(), uint64_t(1));
    QVERIFY(f.find("missing") == nullptr);
    f.release_mapping();
    std::string again(f.at("a.f32").nbytes(), '\0');
    f.read(f.at("a.f32"), again.data());
    QCOMPARE(again, payloads[0]);
  }

  void readsUnalignedAndUnpaddedFiles() {
    // a 0.2-style writer: no padding, so data starts at an odd offset
    const std::string header = R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    float values[2] = {1.5f, -2.25f};
    std::string data(reinterpret_cast<const char*>(values), 8);
    test::write_bytes(path("odd.safetensors"), file_bytes(header, data));
    SafetensorsFile f(path("odd.safetensors"));
    float back[2];
    f.read(f.at("x"), back);
    QCOMPARE(back[0], 1.5f);
    QCOMPARE(back[1], -2.25f);
  }

  void shorterThanEightBytes() { expect_invalid("abc", "shorter than the 8-byte"); }
  void headerLongerThanFile() { expect_invalid(le64(1000) + "{}", "exceeds the file size"); }
  void headerAbsurd() { expect_invalid(le64(200ull * 1000 * 1000) + "{}", "absurd"); }
  void headerNotUtf8() {
    expect_invalid(file_bytes("{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}",
                              "abcd"),
                   "not valid UTF-8 JSON");
  }
  void headerNotJson() { expect_invalid(file_bytes("hello", ""), "not valid UTF-8 JSON"); }
  void headerNotObject() { expect_invalid(file_bytes("[1,2]", ""), "not a JSON object"); }
  // A header the reader must refuse, each with the words its error names (one row a case).
  void invalidHeaderIsRefused_data() {
    QTest::addColumn<QByteArray>("header");
    QTest::addColumn<int>("dataBytes");
    QTest::addColumn<QString>("message");
    QTest::newRow("unknownDtype") << QByteArray(R"({"t":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})") << 16 << QString("unknown dtype 'F128'");
    QTest::newRow("negativeShape") << QByteArray(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})") << 4 << QString("negative shape entry");
    QTest::newRow("nonIntegerShape") << QByteArray(R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})") << 4 << QString("non-integer shape entry");
    QTest::newRow("shapeDisagreesWithByteRange") << QByteArray(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})") << 8 << QString("shape x dtype size is 12 bytes but its byte range holds 8");
    QTest::newRow("rangeBeyondDataArea") << QByteArray(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})") << 8 << QString("beyond the data area");
    QTest::newRow("rangesOverlap") << QByteArray(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})") << 12 << QString("overlaps");
    QTest::newRow("rangesLeaveHole") << QByteArray(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})") << 12 << QString("a hole of 4 bytes");
    QTest::newRow("trailingBytesBelongToNoTensor") << QByteArray(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})") << 12 << QString("belong to no tensor");
    QTest::newRow("duplicateNames") << QByteArray(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})") << 8 << QString("appears twice");
    QTest::newRow("shapeProductOverflows") << QByteArray(R"({"t":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,4]}})") << 4 << QString("overflows");
  }
  void invalidHeaderIsRefused() {
    QFETCH(QByteArray, header);
    QFETCH(int, dataBytes);
    QFETCH(QString, message);
    expect_invalid(file_bytes(header.toStdString(), std::string(static_cast<std::size_t>(dataBytes), '\0')), message.toStdString().c_str());
  }
  void metadataMustHoldStrings() {
    expect_invalid(file_bytes(R"({"__metadata__":{"k":1}})", ""), "is not a string");
  }

  void refusesPickleCheckpoints() {
    for (const char* name : {"model.ckpt", "model.pt", "model.pth", "pytorch_model.bin"}) {
      const std::string p = path(name);
      test::write_bytes(p, "PK\x03\x04 pickled");
      try {
        SafetensorsFile f(p);
        QFAIL("opened a pickle file");
      } catch (const InputError& e) {
        QVERIFY2(std::string(e.what()).find("execute arbitrary code") != std::string::npos, e.what());
        QVERIFY2(std::string(e.what()).find(".safetensors") != std::string::npos, e.what());
      }
    }
  }

  void writerNeverOverwritesAndCleansUp() {
    const std::string p = path("keep.safetensors");
    test::write_bytes(p, "user data");
    QVERIFY_EXCEPTION_THROWN(SafetensorsWriter(p, {{"x", Dtype::F32, {1}}}, {}), InputError);
    QCOMPARE(test::read_bytes(p), std::string("user data"));

    const std::string q = path("abandoned.safetensors");
    {
      SafetensorsWriter w(q, {{"x", Dtype::F32, {4}}}, {});
      float v = 1;
      w.append(&v, 4);
      QVERIFY_EXCEPTION_THROWN(w.commit(), RuntimeFailure);
    }
    QVERIFY(!QFileInfo::exists(QString::fromStdString(q)));
    const auto leftovers = QDir(m_dir.path()).entryList({"*partial*"});
    QVERIFY2(leftovers.isEmpty(), qPrintable(leftovers.join(",")));
  }

  void writerRejectsDuplicateNames() {
    QVERIFY_EXCEPTION_THROWN(
        SafetensorsWriter(path("dup.safetensors"), {{"x", Dtype::F32, {1}}, {"x", Dtype::F32, {1}}}, {}),
        InputError);
  }

  void truncatedAfterOpenIsAnErrorNotACrash() {
    const std::string p = path("trunc.safetensors");
    {
      SafetensorsWriter w(p, {{"big", Dtype::F32, {1 << 16}}}, {});
      std::vector<float> v(1 << 16, 3.0f);
      w.append(v.data(), v.size() * 4);
      w.commit();
    }
    SafetensorsFile f(p);
    QVERIFY(::truncate(p.c_str(), 1000) == 0);
    std::vector<float> out(1 << 16);
    try {
      f.read(f.at("big"), out.data());
      QFAIL("read a truncated tensor");
    } catch (const InputError& e) {
      QVERIFY2(std::string(e.what()).find("truncated") != std::string::npos, e.what());
    }
  }
};

QTEST_GUILESS_MAIN(TestSafetensors)
#include "test_safetensors.moc"
