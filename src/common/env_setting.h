// Settings read from the environment: a string knob checked against its choices, in one place.
#pragma once

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdlib>
#include <initializer_list>
#include <string>

namespace lltm_ext {

// The value of the environment variable `name`, read now: `choices`' first (the default) where it
// is unset or empty, else one of `choices`; anything else is an error naming `op`, the variable
// and its choices ("lltm_ext.lltm: LLTM_EXT_CELL_PATH must be auto, fused or cublas, but got
// 'x'.").
inline std::string env_choice(const char* op, const char* name,
                              std::initializer_list<const char*> choices) {
  const char* env = std::getenv(name);
  const std::string value = env != nullptr ? env : "";
  if (value.empty()) {
    return *choices.begin();
  }
  std::string listed;
  std::size_t i = 0;
  for (const char* choice : choices) {
    if (value == choice) {
      return value;
    }
    listed += i == 0 ? "" : (i + 1 == choices.size() ? " or " : ", ");
    listed += choice;
    ++i;
  }
  TORCH_CHECK(false, op, ": ", name, " must be ", listed, ", but got '", value, "'.");
  return value;  // not reached: TORCH_CHECK(false) throws
}

}  // namespace lltm_ext
