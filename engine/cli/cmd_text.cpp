// tokenize: CLIP BPE ids of a prompt, raw or as A1111's weighted 77-token windows.
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_parser.h"
#include "text/qwen_tokenizer.h"
#include "models/lm/tekken_file.h"
#include "text/t5_tokenizer.h"

namespace fp8s::cli {
namespace {

// --mistral-tokenizer, else FP8S_MISTRAL_TOKENIZER.
std::string mistral_tokenizer_path(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv("FP8S_MISTRAL_TOKENIZER");
  if (!env || !*env) throw InputError("--mistral needs the tokenizer: pass --mistral-tokenizer FILE or set FP8S_MISTRAL_TOKENIZER");
  return env;
}

}  // namespace

void register_tokenize(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    std::string prompt, vocab, t5_tokenizer, qwen_tokenizer, mistral_tokenizer;
    bool raw = false, t5 = false, qwen = false, mistral = false;
    std::string chat;  // the chat template's name (empty: none)
    int length = 512;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("tokenize", "token ids of a prompt: CLIP (A1111 windows and weights), T5 or Qwen");
  add_common_options(*sub, o->common, true);
  sub->add_option("prompt", o->prompt, "the prompt")->required();
  sub->add_flag("--raw", o->raw, "BPE ids only: no emphasis parsing, BOS/EOS or padding");
  sub->add_option("--vocab", o->vocab, "CLIP vocabulary (.txt.gz, vocab.json, or a folder)");
  sub->add_flag("--t5", o->t5, "T5 ids (Flux's second text encoder) instead of CLIP: the prompt's pieces, </s>, padding");
  sub->add_option("--length", o->length, "with --t5: the padded length (Flux dev 512, schnell 256)")->check(CLI::Range(1, 4096));
  sub->add_option("--t5-tokenizer", o->t5_tokenizer, "with --t5: the T5 tokenizer.json (or its folder)");
  sub->add_flag("--qwen", o->qwen, "Qwen ids (Z-Image's Qwen3 text encoder) instead of CLIP: byte-level BPE, no BOS/EOS");
  sub->add_option("--template", o->chat, "with --qwen: the prompt in Qwen's chat template: zimage (the default when no name "
                  "follows), or klein (FLUX.2 klein's, with the empty think block)")
      ->expected(0, 1)
      ->default_str("zimage")
      ->check([](const std::string& v) {
        return v == "zimage" || v == "klein" || v == "dev" ? std::string() : "unknown template '" + v + "': zimage or klein (dev with --mistral)";
      });
  sub->add_option("--qwen-tokenizer", o->qwen_tokenizer, "with --qwen: the Qwen tokenizer.json (or its folder)");
  sub->add_flag("--mistral", o->mistral, "Mistral's Tekken ids (FLUX.2 dev's text encoder); with --template, in FLUX.2 dev's prompt");
  sub->add_option("--mistral-tokenizer", o->mistral_tokenizer,
                  "with --mistral: tekken.json(.gz), its folder, or a text encoder file holding tekken_model (default: "
                  "FP8S_MISTRAL_TOKENIZER)");
  sub->callback([o] {
    // the byte-level tokenizers' ids: Mistral's, Qwen's, T5's
    std::optional<std::vector<int32_t>> ids;
    if (o->mistral) {
      const auto tokenizer = load_tekken(mistral_tokenizer_path(o->mistral_tokenizer));
      ids = o->chat.empty() ? tokenizer.encode(o->prompt) : tokenizer.instruct_prompt(o->prompt);
    } else if (o->qwen) {
      const auto tokenizer = QwenTokenizer::find(o->qwen_tokenizer, "");
      ids = tokenizer.encode(o->chat.empty() ? o->prompt : QwenTokenizer::chat_template(o->prompt, o->chat == "klein"));
    } else if (o->t5) {
      const auto tokenizer = T5Tokenizer::find(o->t5_tokenizer, "");
      ids = o->raw ? tokenizer.encode(o->prompt) : tokenizer.encode_padded(o->prompt, o->length);
    }
    if (ids) {
      const nlohmann::json j{{"prompt", o->prompt}, {"ids", *ids}};
      std::cout << (o->common.json ? j.dump() : j["ids"].dump()) << "\n";
      return;
    }
    const auto tokenizer = ClipTokenizer::find(o->vocab, "");
    nlohmann::json j{{"prompt", o->prompt}};
    if (o->raw) {
      j["ids"] = tokenizer.encode(o->prompt);
    } else {
      const auto extra = parse_extra_networks(o->prompt);
      const auto chunks = tokenize_prompt(tokenizer, extra.prompt_without_tags);
      j["chunks"] = nlohmann::json::array();
      j["multipliers"] = nlohmann::json::array();
      for (std::size_t c = 0; c < chunks.ids.size(); ++c) {
        j["chunks"].push_back(chunks.ids[c]);
        j["multipliers"].push_back(chunks.multipliers[c]);
      }
      j["token_count"] = chunks.token_count;
      j["loras"] = nlohmann::json::array();
      for (const auto& l : extra.loras) {
        j["loras"].push_back({{"name", l.name}, {"te", l.te_multiplier}, {"unet", l.unet_multiplier}});
      }
    }
    if (o->common.json) {
      std::cout << j.dump() << "\n";
    } else if (o->raw) {
      std::cout << j["ids"].dump() << "\n";
    } else {
      for (std::size_t c = 0; c < j["chunks"].size(); ++c) {
        std::cout << "chunk " << c << ": " << j["chunks"][c].dump() << "\n";
      }
      std::cout << "tokens: " << j["token_count"] << "/" << 75 * j["chunks"].size() << "\n";
    }
  });
}

}  // namespace fp8s::cli
