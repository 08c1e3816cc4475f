// Bad input from files, prompts and options (issue 54): every case gives a one-line error with exit
// code 2 (or a correct picture), never a crash, a runaway allocation, a hang or a one-colour PNG.
// The files are the tiny SD1 reference checkpoint rewritten with one thing damaged.
#include <QtTest>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <zlib.h>

#include "fp8/codec.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "support.h"

using namespace fp8s;

namespace {

// A copy of `src` whose metadata and tensors `edit_meta` and `edit_tensor` change (a tensor's raw
// bytes, by name).
void rewrite(const std::string& src_path, const std::string& out,
             const std::function<void(std::map<std::string, std::string>&)>& edit_meta,
             const std::function<void(const std::string&, std::vector<uint8_t>&)>& edit_tensor = {},
             const std::string& drop = {}) {
  SafetensorsFile src(src_path);
  auto meta = src.metadata();
  edit_meta(meta);
  std::vector<TensorSpec> specs;
  for (const auto& t : src.tensors()) {
    if (t.name != drop) specs.push_back({t.name, t.dtype, t.shape});
  }
  SafetensorsWriter w(out, specs, meta, true);
  for (const auto& t : src.tensors()) {
    if (t.name == drop) continue;
    std::vector<uint8_t> raw(t.nbytes());
    src.read(t, raw.data());
    if (edit_tensor) edit_tensor(t.name, raw);
    w.append(raw.data(), raw.size());
  }
  w.commit();
}

// A copy of a reference file with its metadata JSON `key` changed by `edit`.
void with_metadata(const std::string& src, const std::string& out, const std::string& key,
                   const std::function<void(nlohmann::json&)>& edit) {
  rewrite(src, out, [&](std::map<std::string, std::string>& meta) {
    auto j = nlohmann::json::parse(meta.at(key));
    edit(j);
    meta[key] = j.dump();
  });
}

// The first element of a float tensor's raw bytes set to `value` in the tensor's own type.
void set_first(std::vector<uint8_t>& raw, Dtype dtype, float value) {
  if (dtype == Dtype::F32) {
    std::memcpy(raw.data(), &value, sizeof value);
  } else {
    const uint16_t bits = dtype == Dtype::F16 ? f32_to_f16(value) : f32_to_bf16(value);
    std::memcpy(raw.data(), &bits, sizeof bits);
  }
}

}  // namespace

class TestHardening : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  std::string m_model;

  QString path(const QString& name) const { return m_dir.filePath(name); }

  // The tiny SD1 file with its ldm.config changed by `edit`.
  QString with_config(const QString& name, const std::function<void(nlohmann::json&)>& edit) {
    const QString out = path(name);
    rewrite(m_model, out.toStdString(), [&](std::map<std::string, std::string>& meta) {
      auto j = nlohmann::json::parse(meta.at("ldm.config"));
      edit(j);
      meta["ldm.config"] = j.dump();
    });
    return out;
  }

  test::CliResult generate(const QString& model, const QStringList& extra = {}) {
    return test::run_cli(QStringList{"generate", "--model", model, "--vocab", QString::fromStdString(test::reference_path("clip")),
                                     "--prompt", "a red circle", "--steps", "2", "--width", "64", "--height", "64",
                                     "--outdir", path("out")} + extra,
                         QString(), 120000);
  }

 private Q_SLOTS:
  void initTestCase() {
    FP8S_REQUIRE_REFERENCE();
    m_model = test::reference_path("sd1/tiny-sd1.safetensors");
  }

  // Class 1: a file's own configuration is checked before anything is built: zero heads (once
  // SIGFPE), an empty VAE ch_mult (once SIGSEGV), absurd widths, depths and lists (once allocating
  // until the machine ran out), and a configuration that does not describe the file's tensors
  void configurationsAreCheckedBeforeBuilding() {
    struct Case { const char* name; std::function<void(nlohmann::json&)> edit; const char* needle; };
    const std::vector<Case> cases = {
        {"unet-heads0", [](nlohmann::json& j) { j["unet"]["num_heads"] = 0; }, "unet num_heads"},
        {"text-heads0", [](nlohmann::json& j) { j["text_encoders"][0]["heads"] = 0; }, "heads is 0"},
        {"vae-chmult-empty", [](nlohmann::json& j) { j["vae"]["ch_mult"] = nlohmann::json::array(); }, "vae ch_mult's length is 0"},
        {"unet-wide", [](nlohmann::json& j) { j["unet"]["model_channels"] = 1000000000; }, "unet model_channels is 1000000000"},
        {"text-deep", [](nlohmann::json& j) { j["text_encoders"][0]["layers"] = 1000000; }, "layers is 1000000"},
        {"unet-long-list", [](nlohmann::json& j) { j["unet"]["channel_mult"] = std::vector<int>(100000, 1); }, "channel_mult's length is 100000"},
        {"heads-divide", [](nlohmann::json& j) { j["unet"]["num_heads"] = 3; }, "does not divide a level's width"},
        {"vae-scale0", [](nlohmann::json& j) { j["vae"]["scale_factor"] = 0; }, "scale_factor"},
        {"vae-scale-tiny", [](nlohmann::json& j) { j["vae"]["scale_factor"] = 1e-300; }, "scale_factor"},
        {"other-width", [](nlohmann::json& j) { j["unet"]["model_channels"] = 64; }, "does not describe its tensors"},
        {"other-depth", [](nlohmann::json& j) { j["text_encoders"][0]["width"] = 128; }, "does not describe its tensors"},
    };
    for (const auto& c : cases) {
      const QString model = with_config(QString("%1.safetensors").arg(c.name), c.edit);
      test::expect_one_line_error(generate(model), 2, c.needle);
      test::expect_one_line_error(test::run_cli({"inspect", "--model", model, "--weight-budget", "1G"}), 2, c.needle);
    }
  }

  // Class 1 for the other families' configurations (their metadata, a folder's config.json): RoPE
  // axes of 0 or a million entries, a zero theta, a latent scale of 0, zero CLIP heads; each a
  // one-line error naming the file and the field, before the network is built
  void otherFamiliesConfigurationsAreChecked() {
    const QString flux = QString::fromStdString(test::reference_path("flux")) + "/";
    const QString zimage = QString::fromStdString(test::reference_path("zimage")) + "/";
    auto flux_run = [&](const QString& model, const QString& ae, const QString& clip) {
      qputenv("FP8S_T5_TOKENIZER", (flux + "t5_tokenizer/tokenizer.json").toUtf8());
      return test::run_cli({"generate", "--model", model, "--t5", flux + "tiny-t5xxl.safetensors", "--clip-l", clip, "--vae", ae,
                            "--vocab", QString::fromStdString(test::reference_path("clip")), "--prompt", "a red circle",
                            "--steps", "1", "--width", "64", "--height", "64", "--outdir", path("out")},
                           QString(), 120000);
    };
    auto zimage_run = [&](const QString& model, const QString& ae) {
      return test::run_cli({"generate", "--model", model, "--text-encoder", zimage + "tiny-qwen3.safetensors", "--vae", ae,
                            "--qwen-tokenizer", zimage + "qwen_tokenizer", "--prompt", "a red circle", "--steps", "1",
                            "--width", "64", "--height", "64", "--outdir", path("out")},
                           QString(), 120000);
    };
    struct Case { const char* file; const char* key; std::function<void(nlohmann::json&)> edit; const char* needle; };
    const std::vector<Case> cases = {
        {"tiny-flux-schnell.safetensors", "flux.config", [](nlohmann::json& j) { j["axes_dim"] = {0, 20, 12}; }, "flux.config axes_dim entry is 0"},
        {"tiny-flux-schnell.safetensors", "flux.config", [](nlohmann::json& j) { j["axes_dim"] = std::vector<int>(1000000, 1); }, "axes_dim's length is 1e+06"},
        {"tiny-flux-schnell.safetensors", "flux.config", [](nlohmann::json& j) { j["theta"] = 0; }, "flux.config theta is 0"},
        {"tiny-ae.safetensors", "ae.config", [](nlohmann::json& j) { j["scale_factor"] = 0; }, "scale_factor (its magnitude) is 0"},
        {"tiny-ae.safetensors", "ae.config", [](nlohmann::json& j) { j["scale_factor"] = 1e-300; }, "scale_factor (its magnitude) is 0"},
        {"tiny-clip-l.safetensors", "clip.config", [](nlohmann::json& j) { j["heads"] = 0; }, "clip.config heads is 0"},
        {"tiny-clip-l.safetensors", "clip.config", [](nlohmann::json& j) { j["heads"] = 3; }, "heads 3 does not divide the width 32"},
    };
    for (const auto& c : cases) {
      const QString out = path(QString("bad-%1-%2").arg(&c - cases.data()).arg(c.file));
      with_metadata((flux + c.file).toStdString(), out.toStdString(), c.key, c.edit);
      const QString file = c.file;
      const auto r = flux_run(file.contains("flux-") ? out : flux + "tiny-flux-schnell.safetensors",
                              file.contains("-ae") ? out : flux + "tiny-ae.safetensors",
                              file.contains("clip") ? out : flux + "tiny-clip-l.safetensors");
      test::expect_one_line_error(r, 2, c.needle);
    }
    const std::vector<Case> zcases = {
        {"tiny-zimage-turbo.safetensors", "zimage.config", [](nlohmann::json& j) { j["norm_eps"] = -1; }, "zimage.config norm_eps is -1"},
        {"tiny-zimage-turbo.safetensors", "zimage.config", [](nlohmann::json& j) { j["rope_theta"] = 0; }, "zimage.config rope_theta is 0"},
        {"tiny-zimage-turbo.safetensors", "zimage.config", [](nlohmann::json& j) { j["axes_dims"] = nlohmann::json::array(); }, "axes_dims's length is 0"},
        {"tiny-ae.safetensors", "ae.config", [](nlohmann::json& j) { j["scale_factor"] = 0; }, "scale_factor (its magnitude) is 0"},
    };
    for (const auto& c : zcases) {
      const QString out = path(QString("zbad-%1-%2").arg(&c - zcases.data()).arg(c.file));
      with_metadata((zimage + c.file).toStdString(), out.toStdString(), c.key, c.edit);
      const bool ae = QString(c.file).contains("-ae");
      test::expect_one_line_error(zimage_run(ae ? zimage + "tiny-zimage-turbo.safetensors" : out, ae ? out : zimage + "tiny-ae.safetensors"),
                                  2, c.needle);
    }
  }

  // Class 2: NaN or Inf never becomes a picture: in a UNet, text-encoder or VAE weight, a LoRA's
  // factor, an embedding, or a prompt whose emphasis overflows; each is one line naming its source
  void nonFiniteValuesNeverBecomeAPicture() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto poisoned = [&](const QString& name, const std::string& tensor, float value) {
      const QString out = path(name);
      rewrite(m_model, out.toStdString(), [](auto&) {}, [&](const std::string& n, std::vector<uint8_t>& raw) {
        if (n == tensor) set_first(raw, SafetensorsFile(m_model).at(n).dtype, value);
      });
      return out;
    };
    test::expect_one_line_error(generate(poisoned("unet-nan.safetensors", "model.diffusion_model.out.2.weight", nan)), 2,
                                "the UNet gave NaN or Inf at step 1");
    test::expect_one_line_error(
        generate(poisoned("text-inf.safetensors", "cond_stage_model.transformer.text_model.final_layer_norm.bias",
                          std::numeric_limits<float>::infinity())),
        2, "the UNet gave NaN or Inf at step 1");
    test::expect_one_line_error(generate(poisoned("vae-nan.safetensors", "first_stage_model.decoder.conv_out.bias", nan)), 2,
                                "gives NaN or Inf even in fp32");
    // a LoRA with a NaN in a factor, merged or online: refused when read
    const std::string lora = test::reference_path("sd1/lora-tiny-sd1.safetensors");
    const QString bad_lora = path("lora-nan.safetensors");
    bool poisoned_one = false;
    rewrite(lora, bad_lora.toStdString(), [](auto&) {}, [&](const std::string& n, std::vector<uint8_t>& raw) {
      if (!poisoned_one && n.find("lora_up") != std::string::npos) {
        set_first(raw, SafetensorsFile(lora).at(n).dtype, nan);
        poisoned_one = true;
      }
    });
    QVERIFY(poisoned_one);
    for (const char* mode : {"merge", "online"}) {
      test::expect_one_line_error(generate(QString::fromStdString(m_model), {"--lora", bad_lora + ":1", "--lora-mode", mode}), 2,
                                  "holds NaN or Inf in its up factor");
    }
    // an embedding with an Inf, used by name in the prompt
    QDir().mkpath(path("emb"));
    {
      SafetensorsWriter w(path("emb/badword.safetensors").toStdString(), {{"emb_params", Dtype::F32, {1, 64}}}, {});
      std::vector<float> v(64, 0.01f);
      v[5] = std::numeric_limits<float>::infinity();
      w.append(v.data(), v.size() * sizeof(float));
      w.commit();
    }
    auto r = test::run_cli({"generate", "--model", QString::fromStdString(m_model), "--vocab", QString::fromStdString(test::reference_path("clip")),
                            "--embeddings-dir", path("emb"), "--prompt", "a badword circle", "--steps", "2", "--width", "64",
                            "--height", "64", "--outdir", path("out")});
    test::expect_one_line_error(r, 2, "holds NaN or Inf");
    // emphasis: a weight beyond FP32's range, and brackets nested a thousand deep
    test::expect_one_line_error(generate(QString::fromStdString(m_model), {"--prompt", "(cat:" + QString(39, '9') + ")"}), 2,
                                "beyond what a weight can be");
    test::expect_one_line_error(generate(QString::fromStdString(m_model), {"--prompt", QString(1000, '(') + "cat" + QString(1000, ')')}), 2,
                                "nested more than 256 deep");
    QVERIFY(!QDir(path("out")).exists() || QDir(path("out")).entryList({"*.png"}).isEmpty());  // no picture was written
  }

  // Class 3: linear parsers and bounds: 125 KB of prompt (argv's limit for one argument is 128 KiB)
  // and 2,000 BREAKs end with the chunk
  // cap; a FIFO as the model or the init image is refused before open() blocks; --threads beyond
  // the cores is capped with a warning; a header of 150,000 tensors is refused by its count
  void parsersAreLinearAndInputsBounded() {
    test::expect_one_line_error(generate(QString::fromStdString(m_model), {"--prompt", QString("cat, ").repeated(25000)}), 2,
                                "more than 150 chunks of 75 tokens");
    test::expect_one_line_error(generate(QString::fromStdString(m_model), {"--prompt", QString("cat BREAK ").repeated(2000)}), 2,
                                "more than 150 chunks of 75 tokens");
    test::expect_one_line_error(generate(QString::fromStdString(m_model), {"--prompt", QString("((a)) [b] ").repeated(12000)}), 2,
                                "more than 150 chunks of 75 tokens");
    const QString fifo = path("x.safetensors");
    QCOMPARE(::mkfifo(fifo.toLocal8Bit().constData(), 0600), 0);
    test::expect_one_line_error(generate(fifo), 2, "not a regular file (a FIFO)");
    test::expect_one_line_error(generate(QString::fromStdString(m_model), {"--init-image", fifo}), 2, "not a regular file (a FIFO)");
    const auto many = generate(QString::fromStdString(m_model), {"--threads", "4096", "--steps", "1"});
    QVERIFY2(many.exit_code == 0, qPrintable(many.err));
    QVERIFY2(many.err.contains("--threads 4096 threads, but this process may use"), qPrintable(many.err));
    // a header of 150,000 tiny tensors (1.1 MB of JSON)
    const QString big = path("many.safetensors");
    {
      std::string header = "{";
      for (int i = 0; i < 150000; ++i) {
        header += (i ? "," : "") + std::string("\"t") + std::to_string(i) + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" +
                  std::to_string(i) + "," + std::to_string(i + 1) + "]}";
      }
      header += "}";
      std::string bytes(8, '\0');
      uint64_t n = header.size();
      std::memcpy(bytes.data(), &n, 8);
      test::write_bytes(big.toStdString(), bytes + header + std::string(150000, '\0'));
    }
    test::expect_one_line_error(test::run_cli({"inspect", "--model", big}), 2, "limit 100000 tensors");
  }

  // Class 4: SIGTERM ends the process within 2 s, inside a long single step (2048² on the tiny
  // UNet: its full-resolution attention) and during the load and text encode, with nothing written
  void sigtermEndsTheProcessWithinTwoSeconds() {
    for (const bool in_step : {true, false}) {
      const QString outdir = path(in_step ? "term-step" : "term-encode");
      QProcess p;
      p.setProcessChannelMode(QProcess::MergedChannels);
      p.start(QString::fromUtf8(FP8S_CLI_PATH),
              {"generate", "--model", QString::fromStdString(m_model), "--vocab", QString::fromStdString(test::reference_path("clip")),
               "--prompt", QString("a red circle, ").repeated(in_step ? 1 : 700), "--steps", "1", "--width", in_step ? "2048" : "64",
               "--height", in_step ? "2048" : "64", "--outdir", outdir});
      QVERIFY(p.waitForStarted());
      QString seen;
      QElapsedTimer waited;
      waited.start();
      // in the step: once sampling has begun; else as soon as the engine begins to load the model
      const QString mark = in_step ? "compute:" : "kernels:";
      while (!seen.contains(mark) && waited.elapsed() < 60000) {
        p.waitForReadyRead(100);
        seen += QString::fromUtf8(p.readAll());
      }
      QVERIFY2(seen.contains(mark), qPrintable(seen));
      if (in_step) {
        QTest::qWait(1000);
        seen += QString::fromUtf8(p.readAll());
        // the warning before a long run: 2048² is 1024x the 64² the tiny model was made for
        QVERIFY2(seen.contains("2048x2048 is 1024x the pixels"), qPrintable(seen));
      }
      QElapsedTimer t;
      t.start();
      p.terminate();  // SIGTERM
      QVERIFY(p.waitForFinished(10000));
      const qint64 ms = t.elapsed();
      seen += QString::fromUtf8(p.readAll());
      QVERIFY2(ms < 2000, qPrintable(QString("ended %1 ms after SIGTERM: %2").arg(ms).arg(seen.right(400))));
      QCOMPARE(p.exitCode(), 130);
      QVERIFY2(seen.trimmed().endsWith("error: cancelled"), qPrintable(seen.right(400)));
      QVERIFY(!QDir(outdir).exists() || QDir(outdir).entryList(QDir::Files | QDir::Hidden).isEmpty());
    }
  }

  // Class 5: images and vocabularies are bounded: a PNG that claims 16384² is refused from its
  // header (its pixel data is never read), a gzip bomb given as the CLIP vocabulary stops at 32 MB
  void imagesAndVocabulariesAreBounded() {
    const QString png = path("huge.png");
    {
      auto chunk = [](const std::string& type, const std::string& data) {
        std::string c(4, '\0');
        const uint32_t n = static_cast<uint32_t>(data.size());
        for (int i = 0; i < 4; ++i) c[static_cast<std::size_t>(i)] = static_cast<char>((n >> (24 - 8 * i)) & 0xFF);
        const std::string body = type + data;
        uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
        std::string tail(4, '\0');
        for (int i = 0; i < 4; ++i) tail[static_cast<std::size_t>(i)] = static_cast<char>((crc >> (24 - 8 * i)) & 0xFF);
        return c + body + tail;
      };
      // IHDR: 16384 x 16384, 8-bit RGB; the IDAT that follows is never reached
      const std::string ihdr("\x00\x00\x40\x00\x00\x00\x40\x00\x08\x02\x00\x00\x00", 13);
      test::write_bytes(png.toStdString(), std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", "xx") + chunk("IEND", ""));
    }
    test::expect_one_line_error(generate(QString::fromStdString(m_model), {"--init-image", png}), 2, "more than the 64 megapixels");
    // 40 MB of zeros in 40 KB of gzip
    const QString bomb = path("bomb/bpe_simple_vocab_16e6.txt.gz");
    QDir().mkpath(path("bomb"));
    {
      gzFile f = gzopen(bomb.toLocal8Bit().constData(), "wb9");
      const std::string zeros(1 << 20, '\0');
      for (int i = 0; i < 40; ++i) gzwrite(f, zeros.data(), static_cast<unsigned>(zeros.size()));
      gzclose(f);
    }
    auto r = test::run_cli({"tokenize", "--vocab", bomb, "a cat"});
    test::expect_one_line_error(r, 2, "decompresses to more than 32 MB");
    // Class 6: a CLIP vocabulary cut short is refused, not read as a smaller one
    const QString cut = path("cut/bpe_simple_vocab_16e6.txt.gz");
    QDir().mkpath(path("cut"));
    {
      const std::string full = test::read_bytes(test::reference_path("clip/merges.txt"));
      std::size_t end = 0;
      for (int line = 0; line < 1000; ++line) end = full.find('\n', end) + 1;
      gzFile f = gzopen(cut.toLocal8Bit().constData(), "wb");
      gzwrite(f, full.data(), static_cast<unsigned>(end));
      gzclose(f);
    }
    test::expect_one_line_error(test::run_cli({"tokenize", "--vocab", cut, "astronaut"}), 2, "holds 999 merges");
  }

  // Class 7: answers that say what the thing is, with exit code 2: a seed beyond 64 bits, a
  // checkpoint given as a LoRA
  void messagesSayWhatTheThingIs() {
    for (const char* seed : {"9223372036854775808", "18446744073709551616"}) {
      test::expect_one_line_error(generate(QString::fromStdString(m_model), {"--seed", seed}), 2, "is not a whole number from -1");
    }
    test::expect_one_line_error(generate(QString::fromStdString(m_model), {"--lora", QString::fromStdString(m_model) + ":1"}), 2,
                                "is a model checkpoint (tensor '");
    // a file no family loads: every family is named, in generate and in inspect
    const QString lora = QString::fromStdString(test::reference_path("sd1/lora-tiny-sd1.safetensors"));
    for (const auto& r : {generate(lora), test::run_cli({"inspect", "--model", lora})}) {
      test::expect_one_line_error(r, 2, "not a model of a family this program loads (SD 1.x, SDXL base");
      QVERIFY2(r.err.contains("Flux.1 dev and schnell") && r.err.contains("Z-Image Turbo"), qPrintable(r.err));
    }
    // a checkpoint that lacks a layer's weight names it once
    const std::string gone = "model.diffusion_model.out.2.weight";
    const QString lacking = path("lacking.safetensors");
    rewrite(m_model, lacking.toStdString(), [](auto&) {}, {}, gone);
    const auto missing = generate(lacking);
    test::expect_one_line_error(missing, 2, "1 tensor the model needs is missing (" + QString::fromStdString(gone) + ")");
  }

  // Class 5: a PNG is sized against the memory free before its pixels are decoded: 4096² needs
  // 4096 x 4096 x 3 bytes x 7 = 336 MiB to decode and prepare, refused when only 100 MB (95 MiB) are free
  void imagesAreSizedAgainstMemory() {
    const QString png = path("big.png");
    write_png(png.toStdString(), RgbImage{4096, 4096, std::vector<uint8_t>(4096ull * 4096 * 3, 128)}, "");
    qputenv("FP8S_AVAILABLE_MEMORY", "100M");
    const auto r = generate(QString::fromStdString(m_model), {"--init-image", png});
    qunsetenv("FP8S_AVAILABLE_MEMORY");
    test::expect_one_line_error(r, 2, "a PNG of 4096x4096 needs about 336 MiB to decode and prepare, more than the 95 MiB free");
  }
};

QTEST_GUILESS_MAIN(TestHardening)
#include "test_hardening.moc"
