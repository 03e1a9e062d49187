// doctest, as every test includes it: with a C string in INFO or CAPTURE
// printed as its text. doctest 2.4.9 prints a `const char*` held in a variable
// as an address ("form 0x5652..."), and its DOCTEST_CONFIG_TREAT_CHAR_STAR_AS_STRING
// does not compile there. Each test file includes this header instead of
// <doctest/doctest.h>, so that every one sees the same specialization.
#pragma once

#include <doctest/doctest.h>

namespace doctest::detail {

template <>
struct filldata<const char*> {
  static void fill(std::ostream* stream, const char* in) { *stream << (in ? in : "(null)"); }
};
template <>
struct filldata<char*> : filldata<const char*> {};

}  // namespace doctest::detail
