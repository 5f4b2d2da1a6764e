// Settings read from the environment, each named in settings.h's table (a name that is not there
// does not compile), read now and checked against the table's values, in one place.
#pragma once

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/settings.h"

namespace lltm_ext {

namespace settings {

// The variable's value now, "" where unset. (The table's names are string literals: their data()
// ends with a '\0'.)
template <Kind K>
std::string env_raw(Key<K> key) {
  const char* env = std::getenv(key->name.data());
  return env != nullptr ? env : "";
}

// A value set's words as a message lists them: "auto, fused or cublas", "1, 2, 4 or 8"; a range's
// "an integer from 4 to 24".
inline std::string expected_text(const Setting& s) {
  const std::size_t dots = s.values.find("..");
  if (dots != std::string_view::npos) {
    return "an integer from " + std::string(s.values.substr(0, dots)) + " to " +
           std::string(s.values.substr(dots + 2));
  }
  std::string listed;
  const std::size_t n = value_count(s);
  for (std::size_t i = 0; i < n; ++i) {
    listed += i == 0 ? "" : (i + 1 == n ? " or " : ", ");
    listed += value_at(s, i);
  }
  return listed;
}

// The index of `value` among a choice setting's values (0, the default, for ""); -1 for none.
inline int find_choice(ChoiceKey key, std::string_view value) {
  if (value.empty()) {
    return 0;
  }
  const std::size_t n = value_count(*key);
  for (std::size_t i = 0; i < n; ++i) {
    if (value == value_at(*key, i)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// The index of `value` among the setting's values (0 for ""); anything else is an error that names
// the op, `what` (the variable, or a setter's subject) and the values ("lltm_ext.gemm: the GEMM
// path must be auto, async or staged, but got 'x'.").
inline int choice_index(ChoiceKey key, const std::string& value, std::string_view what) {
  const int i = find_choice(key, value);
  TORCH_CHECK(i >= 0, key->op, ": ", what, " must be ", expected_text(*key), ", but got '", value,
              "'.");
  return i;
}

}  // namespace settings

// The value of a choice setting, read now: the table's first value (the default) where it is unset
// or empty, else one of its values; anything else is an error naming its op, the variable and its
// values ("lltm_ext.lltm: LLTM_EXT_CELL_PATH must be auto, fused or cublas, but got 'x'.").
inline std::string env_choice(settings::ChoiceKey key) {
  const std::string value = settings::env_raw(key);
  return std::string(settings::value_at(*key, settings::choice_index(key, value, key->name)));
}

// The value of a number setting, read now: 0 where unset or empty, else its value, which must be
// one of the table's values or in its range ("08" or " 8" are no value); an error that names them
// otherwise ("lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_CLUSTER_ROWS must be 2, 4, 8 or 16, but
// got '3'.").
inline int env_number(settings::NumberKey key) {
  const std::string value = settings::env_raw(key);
  if (value.empty()) {
    return 0;
  }
  const settings::Setting& s = *key;
  const std::size_t dots = s.values.find("..");
  const auto allowed = [&](int v) {
    if (dots != std::string_view::npos) {
      return v >= std::stoi(std::string(s.values.substr(0, dots))) &&
             v <= std::stoi(std::string(s.values.substr(dots + 2)));
    }
    const std::string text = std::to_string(v);
    for (std::size_t i = 0; i < settings::value_count(s); ++i) {
      if (settings::value_at(s, i) == text) {
        return true;
      }
    }
    return false;
  };
  for (int v = 1; v <= 64; ++v) {  // every number setting's values lie in 1 .. 64
    if (value == std::to_string(v) && allowed(v)) {
      return v;
    }
  }
  TORCH_CHECK(false, s.op, ": ", s.name, " must be ", settings::expected_text(s), ", but got '",
              value, "'.");
  return 0;  // not reached: TORCH_CHECK(false) throws
}

}  // namespace lltm_ext
