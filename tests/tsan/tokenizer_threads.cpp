// The CLIP tokenizer encoding from two threads at once, as the GUI's token counter (UI thread) and
// a generation (engine thread) do with the one tokenizer they share. Built with ThreadSanitizer:
// a data race (the BPE cache written without its lock) fails the test; the ids must also equal
// those of one thread alone.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "text/clip_tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tokenizer_threads VOCABULARY\n");
    return 2;
  }
  const auto tokenizer = fp8s::ClipTokenizer::load(argv[1]);
  // distinct words, so both threads keep adding to the cache while the other reads it
  std::vector<std::string> prompts;
  const char* words[] = {"red", "circle", "blue", "square", "green", "triangle", "yellow", "star", "top", "left"};
  for (int i = 0; i < 400; ++i) {
    prompts.push_back(std::string(words[i % 10]) + " " + words[(i / 10) % 10] + std::to_string(i) + " x" +
                      std::to_string(i * 7919 % 1000));
  }
  std::vector<std::vector<int32_t>> alone;
  {
    const auto fresh = fp8s::ClipTokenizer::load(argv[1]);
    for (const auto& p : prompts) alone.push_back(fresh.encode(p));
  }
  std::vector<std::vector<int32_t>> a(prompts.size()), b(prompts.size());
  std::thread first([&] {
    for (std::size_t i = 0; i < prompts.size(); ++i) a[i] = tokenizer.encode(prompts[i]);
  });
  std::thread second([&] {
    for (std::size_t i = prompts.size(); i-- > 0;) b[i] = tokenizer.encode(prompts[i]);
  });
  first.join();
  second.join();
  if (a != alone || b != alone) {
    std::fprintf(stderr, "tokenizer_threads: ids differ between threads\n");
    return 1;
  }
  std::printf("tokenizer_threads: %zu prompts from two threads, ids as one thread's\n", prompts.size());
  return 0;
}
