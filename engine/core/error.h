// Errors the engine reports to users: every one carries a message a user can act on.
#pragma once

#include <stdexcept>
#include <string>

namespace fp8s {

// Base of all engine errors. `what()` is a single line: what went wrong, where, and what to do.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The input given by the user is wrong (file, flag, size): the CLI exits with code 2.
class InputError : public Error {
 public:
  using Error::Error;
};

// The CLIP vocabulary was not found (an InputError the GUI answers with its download offer).
class MissingVocabulary : public InputError {
 public:
  using InputError::InputError;
};

// A request that cannot fit in this machine's memory, refused with its estimate before any weight
// is read (compare reports the mode as not run instead of failing).
class DoesNotFit : public InputError {
 public:
  using InputError::InputError;
};

// Something failed while running (out of memory, I/O failure mid-write): the CLI exits with code 1.
class RuntimeFailure : public Error {
 public:
  using Error::Error;
};

// The user cancelled a long operation: the CLI exits with code 130.
class Cancelled : public Error {
 public:
  Cancelled() : Error("cancelled") {}
};

// `map`'s value for `key`; InputError "<where>: the <what> lacks '<key>'" without one.
template <class Map>
const typename Map::mapped_type& required_entry(const Map& map, const std::string& key, const std::string& where,
                                                const char* what) {
  const auto it = map.find(key);
  if (it == map.end()) throw InputError(where + ": the " + what + " lacks '" + key + "'");
  return it->second;
}

}  // namespace fp8s
