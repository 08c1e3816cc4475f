// CLIP tokenizer and A1111 prompt handling against ../shared/reference/clip (issue 3).
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>

#include "core/error.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_parser.h"
#include "text/qwen_tokenizer.h"
#include "models/lm/tekken_file.h"
#include "text/t5_tokenizer.h"

#include <nlohmann/json.hpp>
#include "support.h"

using namespace fp8s;

namespace {

// A case's expected ids.
std::vector<int32_t> ids_of(const QJsonObject& c) {
  std::vector<int32_t> ids;
  for (const auto& id : c["ids"].toArray()) ids.push_back(id.toInt());
  return ids;
}

// `tokenize --json` ran and printed the case's ids.
void expect_cli_ids(const test::CliResult& r, const QJsonObject& c) {
  QVERIFY2(r.exit_code == 0, qPrintable(r.err));
  QCOMPARE(QJsonDocument::fromJson(r.out.toUtf8()).object()["ids"].toArray(), c["ids"].toArray());
}

QJsonDocument load_json(const char* rel) {
  return QJsonDocument::fromJson(QByteArray::fromStdString(test::read_bytes(test::reference_path(rel))));
}

}  // namespace

class TestTokenizer : public QObject {
  Q_OBJECT

  std::unique_ptr<ClipTokenizer> m_gz, m_json;

 private Q_SLOTS:
  void initTestCase() {
    if (!test::have_reference()) return;
    m_gz = std::make_unique<ClipTokenizer>(ClipTokenizer::load(test::reference_path("clip/bpe_simple_vocab_16e6.txt.gz")));
    m_json = std::make_unique<ClipTokenizer>(ClipTokenizer::load(test::reference_path("clip/vocab.json")));
  }

  // Flux's T5 tokenizer against HF tokenizers' encoding of the same tokenizer.json
  // (flux/t5_tokenize_cases.json): every case through the library and the CLI.
  void t5TokenizeCases() {
    FP8S_REQUIRE_REFERENCE();
    const std::string dir = test::reference_path("flux/t5_tokenizer");
    const auto t5 = T5Tokenizer::load(dir);
    QCOMPARE(t5.vocab_size(), std::size_t(32100));
    QCOMPARE(t5.eos(), 1);
    QCOMPARE(t5.pad(), 0);
    const auto cases = load_json("flux/t5_tokenize_cases.json").array();
    QVERIFY(cases.size() >= 10);
    for (const auto& v : cases) {
      const auto c = v.toObject();
      const auto want = ids_of(c);
      const std::string prompt = c["prompt"].toString().toStdString();
      QVERIFY2(t5.encode_padded(prompt, c["length"].toInt()) == want, qPrintable(c["prompt"].toString()));
    }
    // the CLI, finding the tokenizer through FP8S_T5_TOKENIZER as the harness sets it
    qputenv("FP8S_T5_TOKENIZER", QByteArray::fromStdString(dir + "/tokenizer.json"));
    const auto c = cases[0].toObject();
    const auto r = test::run_cli({"tokenize", "--t5", "--length", QString::number(c["length"].toInt()), "--json", c["prompt"].toString()});
    qunsetenv("FP8S_T5_TOKENIZER");
    expect_cli_ids(r, c);
  }

  // Qwen3's byte-level BPE (Z-Image's text encoder) against transformers' Qwen2Tokenizer on every
  // case of the reference folder (templated or not), and through the CLI
  void qwenTokenizeCases() {
    FP8S_REQUIRE_REFERENCE();
    const std::string dir = test::reference_path("zimage/qwen_tokenizer");
    const auto qwen = QwenTokenizer::load(dir);
    QCOMPARE(qwen.pad(), 151643);
    QCOMPARE(qwen.vocab_size(), std::size_t(151643 + 26));
    const auto cases = load_json("zimage/qwen_tokenize_cases.json").array();
    QVERIFY(cases.size() >= 10);
    for (const auto& v : cases) {
      const auto c = v.toObject();
      const auto want = ids_of(c);
      const std::string prompt = c["prompt"].toString().toStdString();
      const auto got = qwen.encode(c["template"].toBool() ? QwenTokenizer::chat_template(prompt) : prompt);
      QVERIFY2(got == want, qPrintable(c["prompt"].toString()));
    }
    qputenv("FP8S_QWEN_TOKENIZER", QByteArray::fromStdString(dir));
    const auto c = cases[0].toObject();
    QStringList args{"tokenize", "--qwen", "--json", c["prompt"].toString()};
    if (c["template"].toBool()) args.insert(2, "--template");
    const auto r = test::run_cli(args);
    qunsetenv("FP8S_QWEN_TOKENIZER");
    expect_cli_ids(r, c);
  }

  // FLUX.2 klein's template (the empty think block of enable_thinking=False) on every case of
  // flux2/klein_tokenize_cases.json, in the library and through `tokenize --qwen --template klein`
  void kleinTemplateCases() {
    FP8S_REQUIRE_REFERENCE();
    const std::string dir = test::reference_path("zimage/qwen_tokenizer");
    const auto qwen = QwenTokenizer::load(dir);
    const auto cases = load_json("flux2/klein_tokenize_cases.json").array();
    QVERIFY(!cases.isEmpty());
    for (const auto& v : cases) {
      const auto c = v.toObject();
      QCOMPARE(c["template"].toString(), QString("klein"));
      const auto want = ids_of(c);
      QVERIFY2(qwen.encode(QwenTokenizer::chat_template(c["prompt"].toString().toStdString(), true)) == want,
               qPrintable(c["prompt"].toString()));
    }
    const auto c = cases[0].toObject();
    const auto r = test::run_cli({"tokenize", "--qwen", "--qwen-tokenizer", QString::fromStdString(dir), "--template", "klein", "--json",
                                  c["prompt"].toString()});
    expect_cli_ids(r, c);
    const auto bad = test::run_cli({"tokenize", "--qwen", "--template", "kline", "--json", "x"});
    QVERIFY(bad.exit_code != 0 && bad.err.contains("zimage or klein"));
  }

  // Mistral's Tekken BPE (FLUX.2 dev's) against mistral-common on every case of
  // flux2/mistral_tokenize_cases.json, raw and in dev's template; from tekken.json.gz and from the
  // text encoder's tekken_model, and through `tokenize --mistral`
  void mistralTokenizeCases() {
    FP8S_REQUIRE_REFERENCE();
    const std::string gz = test::reference_path("flux2/mistral_tokenizer/tekken.json.gz");
    const auto tekken = load_tekken(gz);
    const auto from_te = load_tekken(test::reference_path("flux2/tiny-mistral3-small-te.safetensors"));
    const auto cases = load_json("flux2/mistral_tokenize_cases.json").array();
    QVERIFY(cases.size() >= 10);
    for (const auto& v : cases) {
      const auto c = v.toObject();
      const auto want = ids_of(c);
      const std::string prompt = c["prompt"].toString().toStdString();
      const auto got = c["template"].toBool() ? tekken.instruct_prompt(prompt) : tekken.encode(prompt);
      QVERIFY2(got == want, qPrintable(c["prompt"].toString()));
      QVERIFY(from_te.encode(prompt) == tekken.encode(prompt));
    }
    const auto c = cases[0].toObject();
    QStringList args{"tokenize", "--mistral", "--mistral-tokenizer", QString::fromStdString(gz), "--json", c["prompt"].toString()};
    if (c["template"].toBool()) args.insert(2, "--template");
    const auto r = test::run_cli(args);
    expect_cli_ids(r, c);
  }

  // The pre-tokenizer's pieces, derived by hand from the regex of tokenizer.json: contractions in
  // any case, a leading space or mark joined to letters, every digit alone, a space before
  // punctuation, newline runs, and the last of several spaces kept for the next word; no
  // tokenizer anywhere is an error naming where it looked
  void qwenPreTokenizerAndErrors() {
    auto pieces = [](const std::u32string& s) {
      QStringList out;
      for (const auto& p : QwenTokenizer::split(s)) out << QString::fromStdU32String(p);
      return out;
    };
    QCOMPARE(pieces(U"It's a DOG'S life"), (QStringList{"It", "'s", " a", " DOG", "'S", " life"}));
    QCOMPARE(pieces(U"year 2026!"), (QStringList{"year", " ", "2", "0", "2", "6", "!"}));
    QCOMPARE(pieces(U"a  b"), (QStringList{"a", " ", " b"}));
    QCOMPARE(pieces(U"end.\n\nNext ..."), (QStringList{"end", ".\n\n", "Next", " ..."}));
    QCOMPARE(pieces(U"x \n y  "), (QStringList{"x", " \n", " y", "  "}));
    QCOMPARE(pieces(U"(hi)"), (QStringList{"(hi", ")"}));
    QCOMPARE(pieces(U"\t\tgo"), (QStringList{"\t", "\tgo"}));
    QVERIFY(QwenTokenizer::split(U"").empty());
    qputenv("XDG_DATA_HOME", "/nonexistent-fp8s");
    try {
      QwenTokenizer::find("", "/nonexistent-fp8s/models/z_image_turbo_bf16.safetensors");
      QFAIL("found a tokenizer where there is none");
    } catch (const MissingVocabulary& e) {
      QVERIFY2(QString(e.what()).contains("/nonexistent-fp8s/models/qwen_tokenizer") && QString(e.what()).contains("--qwen-tokenizer"), e.what());
    }
    qunsetenv("XDG_DATA_HOME");
    QTemporaryDir dir;
    const QString junk = dir.path() + "/tokenizer.json";
    QFile f(junk);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}");
    f.close();
    try {
      QwenTokenizer::load(junk.toStdString());
      QFAIL("a Unigram tokenizer.json was taken for Qwen's");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("not a Qwen byte-level BPE") && QString(e.what()).contains("Unigram"), e.what());
    }
  }

  // Hand-built inputs with known answers: the NFKC map (full-width letters, the ligature ﬁ,
  // a non-breaking space), trailing spaces stripped, a run of spaces one '▁', truncation keeping
  // </s> last, and no tokenizer anywhere named with where it looked.
  void t5NormalizerAndErrors() {
    FP8S_REQUIRE_REFERENCE();
    const auto t5 = T5Tokenizer::load(test::reference_path("flux/t5_tokenizer"));
    QCOMPARE(t5.normalize("\xef\xbc\xa1\xef\xbc\xa2"), std::string("AB"));   // ＡＢ
    QCOMPARE(t5.normalize("\xef\xac\x81ne"), std::string("fine"));             // ﬁne
    QCOMPARE(t5.normalize("a\xc2\xa0" "b  "), std::string("a b"));               // NBSP, trailing spaces
    QCOMPARE(t5.normalize("a   b"), std::string("a\xe2\x96\x81" "b"));           // a run of spaces
    QCOMPARE(t5.encode("\xef\xbc\xa1\xef\xbc\xa2"), t5.encode("AB"));
    // a combining accent on a letter with no precomposed form: <unk> for it (HF gives 3 226 2 63)
    QCOMPARE(t5.encode("x\xcc\x81y"), (std::vector<int32_t>{3, 226, 2, 63}));
    const auto ids = t5.encode_padded("word word word word", 3);
    QCOMPARE(ids.size(), std::size_t(3));
    QCOMPARE(ids[2], 1);
    QCOMPARE(ids[0], t5.encode("word")[0]);
    qputenv("XDG_DATA_HOME", "/nonexistent-fp8s");
    try {
      T5Tokenizer::find("", "/nonexistent-fp8s/models/flux1-dev.safetensors");
      QFAIL("found a tokenizer where there is none");
    } catch (const MissingVocabulary& e) {
      QVERIFY2(QString(e.what()).contains("/nonexistent-fp8s/models/t5_tokenizer"), e.what());
    }
    qunsetenv("XDG_DATA_HOME");
    // issue 54: an unk_id outside the vocabulary is refused when read, not at the first unknown piece
    auto j = nlohmann::json::parse(test::read_bytes(test::reference_path("flux/t5_tokenizer/tokenizer.json")));
    j["model"]["unk_id"] = 1000000;
    QTemporaryDir dir;
    test::write_bytes(dir.filePath("tokenizer.json").toStdString(), j.dump());
    try {
      (void)T5Tokenizer::load(dir.path().toStdString());
      QFAIL("an unk_id of 1000000 was taken");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("unk_id 1000000 is outside its vocabulary"), e.what());
    }
  }

  void vocabularyFacts() {
    FP8S_REQUIRE_REFERENCE();
    for (auto* t : {m_gz.get(), m_json.get()}) {
      QCOMPARE(t->vocab_size(), std::size_t(49408));
      QCOMPARE(t->bos(), 49406);
      QCOMPARE(t->eos(), 49407);
      QCOMPARE(t->comma(), 267);
    }
  }

  void tokenizeCases() {
    FP8S_REQUIRE_REFERENCE();
    int checked = 0;
    const auto cases = load_json("clip/tokenize_cases.json").array();
    for (const auto& v : cases) {
      const auto c = v.toObject();
      const auto want = ids_of(c);
      const std::string prompt = c["prompt"].toString().toStdString();
      const auto got = m_gz->encode(prompt);
      QCOMPARE(m_json->encode(prompt), got);
      if (c["ftfy_mojibake"].toBool()) {
        // Documented difference: ftfy's heuristic mojibake repair (cafÃ© -> café) is not ported.
        QVERIFY(got != want);
        continue;
      }
      QVERIFY2(got == want, qPrintable(c["prompt"].toString()));
      ++checked;
    }
    QCOMPARE(checked, 60);
  }

  void emphasisCases() {
    FP8S_REQUIRE_REFERENCE();
    const auto cases = load_json("clip/prompt_cases.json").object()["emphasis_cases"].toArray();
    for (const auto& v : cases) {
      const auto c = v.toObject();
      const auto parsed = parse_prompt_attention(c["prompt"].toString().toStdString());
      const auto want = c["parsed"].toArray();
      QVERIFY2(parsed.size() == std::size_t(want.size()), qPrintable(c["prompt"].toString()));
      for (int i = 0; i < want.size(); ++i) {
        QCOMPARE(QString::fromStdString(parsed[i].text), want[i].toArray()[0].toString());
        QCOMPARE(parsed[i].weight, want[i].toArray()[1].toDouble());  // exact, as A1111 computes
      }
    }
  }

  // What the text encoders read: A1111's text without the space a tag leaves at an end or doubled
  void tagsLeaveNoSpaceForEncoders() {
    const std::vector<std::pair<std::string, std::string>> cases{
        {"a photo <lora:foo:0.8>", "a photo"},
        {"<lora:a:1> <lora:b:-0.5> test", "test"},
        {"a <lora:x:1> cat", "a cat"},
        {"a<lora:x:1> cat", "a cat"},
        {"a <lora:x:1>cat", "a cat"},
        {"<lyco:old_style:0.9>, <lora:new_style:0.3>", ","},
        {"  two  spaces  ", "  two  spaces  "},
        {"(<lora:inside:0.7>:1.2) parenthesized", "(:1.2) parenthesized"}};
    for (const auto& [prompt, want] : cases) {
      QCOMPARE(QString::fromStdString(parse_extra_networks(prompt).prompt_for_encoders), QString::fromStdString(want));
    }
  }

  void extraNetworkCases() {
    FP8S_REQUIRE_REFERENCE();
    const auto cases = load_json("clip/prompt_cases.json").object()["extra_network_cases"].toArray();
    for (const auto& v : cases) {
      const auto c = v.toObject();
      const auto got = parse_extra_networks(c["prompt"].toString().toStdString());
      QCOMPARE(QString::fromStdString(got.prompt_without_tags), c["prompt_without_tags"].toString());
      const auto loras = c["loras"].toArray();
      QCOMPARE(int(got.loras.size()), loras.size());
      for (int i = 0; i < loras.size(); ++i) {
        QCOMPARE(QString::fromStdString(got.loras[i].name), loras[i].toArray()[0].toString());
        const QJsonValue w = loras[i].toArray()[1];
        QCOMPARE(got.loras[i].weight_text.has_value(), !w.isNull());
        if (!w.isNull()) QCOMPARE(QString::fromStdString(*got.loras[i].weight_text), w.toString());
      }
      const auto tags = c["tags"].toObject();
      QCOMPARE(int(got.tags.size()), tags.size());
      for (const auto& [type, entries] : got.tags) {
        const auto want = tags[QString::fromStdString(type)].toArray();
        QCOMPARE(int(entries.size()), want.size());
        for (int i = 0; i < want.size(); ++i) {
          QStringList items;
          for (const auto& s : entries[i]) items << QString::fromStdString(s);
          QStringList want_items;
          for (const auto& s : want[i].toArray()) want_items << s.toString();
          QCOMPARE(items, want_items);
        }
      }
    }
  }

  void chunkCases() {
    FP8S_REQUIRE_REFERENCE();
    const auto cases = load_json("clip/chunk_cases.json").array();
    for (const auto& v : cases) {
      const auto c = v.toObject();
      const auto got = tokenize_prompt(*m_gz, c["prompt"].toString().toStdString());
      const auto chunks = c["chunks"].toArray();
      const auto mults = c["multipliers"].toArray();
      QVERIFY2(got.ids.size() == std::size_t(chunks.size()), qPrintable(c["prompt"].toString()));
      for (int k = 0; k < chunks.size(); ++k) {
        for (int i = 0; i < 77; ++i) {
          QCOMPARE(got.ids[k][i], chunks[k].toArray()[i].toInt());
          QCOMPARE(double(got.multipliers[k][i]), double(float(mults[k].toArray()[i].toDouble())));
        }
      }
      QCOMPARE(got.token_count, c["token_count"].toInt());
    }
  }

  // Hand cases of A1111's rules that need no vocabulary.
  void emphasisRules() {
    auto p = parse_prompt_attention("a ((b)) [c] (d:1.5)");
    QCOMPARE(p.size(), std::size_t(6));
    QCOMPARE(p[1].text, std::string("b"));
    QCOMPARE(p[1].weight, 1.1 * 1.1);
    QCOMPARE(p[3].weight, 1 / 1.1);
    QCOMPARE(p[5].weight, 1.5);
    QVERIFY_EXCEPTION_THROWN(parse_prompt_attention("(a:1.3.4)"), InputError);
    // BREAK between fragments of equal weight stays its own entry (the neighbours merge around it)
    p = parse_prompt_attention("cat BREAK dog BREAK fish");
    QCOMPARE(p.size(), std::size_t(5));
    QCOMPARE(p[2].text, std::string("dog"));
    QCOMPARE(p[3].weight, -1.0);
    // issue 54: 256 brackets deep parse (1.1^256), 257 are refused; a weight beyond FP32 is refused
    double deep = 1.0;
    for (int k = 0; k < 256; ++k) deep *= 1.1;  // unclosed brackets apply at the end, one by one
    QCOMPARE(parse_prompt_attention(std::string(256, '(') + "x").at(0).weight, deep);
    QVERIFY_EXCEPTION_THROWN(parse_prompt_attention(std::string(257, '[') + "x"), InputError);
    QVERIFY_EXCEPTION_THROWN(parse_prompt_attention("(x:" + std::string(39, '9') + ")"), InputError);
    QCOMPARE(parse_prompt_attention("(x:" + std::string(38, '9') + ")").at(0).weight, std::stod(std::string(38, '9')));
    auto e = parse_extra_networks("x <lora:style:0.5:0.25> y");
    QCOMPARE(e.loras.size(), std::size_t(1));
    QCOMPARE(e.loras[0].te_multiplier, 0.5);
    QCOMPARE(e.loras[0].unet_multiplier, 0.25);
    QVERIFY(!parse_extra_networks("<lora:x:abc>").loras.at(0).error.empty());
    QVERIFY(parse_extra_networks("<lora:x:0.5>").loras.at(0).error.empty());
  }

  void missingVocabularyListsEveryPlace() {
    qputenv("FP8S_CLIP_VOCAB", "");
    qputenv("XDG_DATA_HOME", "/nonexistent-xdg");
    try {
      ClipTokenizer::find("", "/nonexistent-models/model.safetensors");
      QFAIL("found a vocabulary where none exists");
    } catch (const InputError& e) {
      const std::string msg = e.what();
      QVERIFY2(msg.find("/nonexistent-models/tokenizer") != std::string::npos, e.what());
      QVERIFY2(msg.find("/nonexistent-xdg/fp8studio/clip") != std::string::npos, e.what());
      QVERIFY2(msg.find("openai/CLIP") != std::string::npos, e.what());
    }
    QVERIFY_EXCEPTION_THROWN(ClipTokenizer::find("/nonexistent/vocab.json", ""), InputError);
  }
};

QTEST_GUILESS_MAIN(TestTokenizer)
#include "test_tokenizer.moc"
