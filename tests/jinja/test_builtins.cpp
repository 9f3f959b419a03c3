// Every filter, str/dict method, test and global function, each expectation taken from Jinja2 3.1 configured as
// transformers configures it (sandboxed, trim_blocks, lstrip_blocks, loop controls).
#include <gtest/gtest.h>

#include <string>

#include "render_helpers.h"

namespace nanovllm::jinja {
namespace {

using ojson = nlohmann::ordered_json;

const ojson kVariables = ojson::parse(R"({"items": [{"n": 2}, {"n": 1}, {"n": 3}], "d": {"a": 1, "b": 2}})");

std::string render(const std::string& source, const ojson& variables) { return test::render(source, variables); }
std::string error_of(const std::string& source) { return test::error_of(source, kVariables); }

TEST(JinjaFilters, OnStrings) {
  EXPECT_EQ(render("{{ 'hello world' | upper }}|{{ 'HeLLo' | lower }}|{{ 'hello world' | title }}"
                   "|{{ 'hello World' | capitalize }}|{{ 'aXa' | replace('a', 'b', 1) }}"
                   "|{{ 'a b  c' | wordcount }}|{{ '<a href=\"x\">' | e }}|{{ '&' | escape }}|{{ 'x' | safe }}"
                   "|{{ 1.0 | string }}",
                   kVariables),
            "HELLO WORLD|hello|Hello World|Hello world|bXa|3|&lt;a href=&#34;x&#34;&gt;|&amp;|x|1.0");
}

TEST(JinjaFilters, OnNumbersAndSizes) {
  EXPECT_EQ(render("{{ '42' | int }} {{ 3.9 | int }} {{ 'x' | int(7) }} {{ '2.5' | float }} {{ -3 | abs }}"
                   " {{ 2.567 | round(2) }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ [1, 2.5] | sum }}"
                   " {{ {'a': 1, 'b': 2} | length }} {{ [1, 2] | count }}",
                   kVariables),
            "42 3 7 2.5 3 2.57 1 3 3.5 2 2");
}

TEST(JinjaFilters, DefaultsAndEnds) {
  EXPECT_EQ(render("{{ x | d('u') }}|{{ '' | default('e', true) }}|{{ '' | default('e') }}|{{ [] | first }}"
                   "|{{ 'ab' | last }}|{{ 'ab' | list }}",
                   kVariables),
            "u|e|||b|['a', 'b']");
}

TEST(JinjaFilters, ReorderAndMapSequences) {
  EXPECT_EQ(render("{{ 'abc' | reverse }} {{ [1, 2, 3] | reverse | list }}"
                   " {{ [2, 3, 1] | sort(reverse=true) | list }}"
                   " {{ items | sort(attribute='n') | map(attribute='n') | list }}"
                   " {{ [1, 2, 1, 3] | unique | list }} {{ ['a', 'b'] | map('upper') | list }}",
                   kVariables),
            "cba [3, 2, 1] [3, 2, 1] [1, 2, 3] [1, 2, 3] ['A', 'B']");
}

TEST(JinjaFilters, SelectItemsByTestOrAttribute) {
  EXPECT_EQ(render("{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('odd') | list }}"
                   " {{ [0, 1, ''] | select | list }}"
                   " {{ items | selectattr('n', 'gt', 1) | map(attribute='n') | list }}"
                   " {{ items | rejectattr('n', 'gt', 1) | map(attribute='n') | list }}"
                   " {{ items | join(', ', attribute='n') }}",
                   kVariables),
            "[1, 3] [2, 4] [1] [2, 3] [1] 2, 1, 3");
}

TEST(JinjaFilters, IterateDictItems) {
  EXPECT_EQ(render("{% for k, v in {'b': 1, 'a': 2} | dictsort %}{{ k }}{{ v }}{% endfor %}"
                   ";{% for k, v in {'b': 1, 'a': 2} | items %}{{ k }}{{ v }}{% endfor %}",
                   kVariables),
            "a2b1;b1a2");
}

TEST(JinjaFilters, Indent) {
  EXPECT_EQ(render("[{{ 'a\\n\\nb' | indent(2, true) }}][{{ 'a\\n\\nb' | indent(2, blank=true) }}"
                   "][{{ 'a\\nb' | indent('> ') }}]",
                   kVariables),
            "[  a\n\n  b][a\n  \n  b][a\n> b]");
}

TEST(JinjaMethods, OfStrings) {
  EXPECT_EQ(render("{{ 'HeLLo'.lower() }} {{ 'hello world'.title() }} {{ 'hello World'.capitalize() }}"
                   " {{ 'héllo'.find('l') }} {{ 'x'.find('y') }} {{ 'banana'.count('an') }}"
                   " {{ '-'.join(['a', 'b']) }} {{ '123'.isdigit() }} {{ 'abc'.isalpha() }}"
                   " {{ ' \\t'.isspace() }} {{ ''.isdigit() }} {{ 'a1'.isalpha() }} {{ 'a b  c'.rsplit() }}"
                   " {{ 'xa'.lstrip('x') }}",
                   kVariables),
            "hello Hello World Hello world 2 -1 2 a-b True True True False False ['a', 'b', 'c'] a");
}

TEST(JinjaMethods, OfDicts) {
  EXPECT_EQ(render("{{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z', 0) }}"
                   " {{ d.get('z') }} {{ d['get']('a') }}",
                   kVariables),
            "['a', 'b'] [1, 2] 1 0 None 1");
}

TEST(JinjaTests, AfterIs) {
  EXPECT_EQ(render("{{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }}"
                   " {{ 'a' is string }} {{ 1 is number }} {{ 1 is integer }} {{ 1.5 is float }}"
                   " {{ true is boolean }} {{ true is true }} {{ 0 is false }} {{ {} is mapping }}"
                   " {{ [] is iterable }} {{ 'x' is sequence }} {{ range is callable }} {{ none is none }}"
                   " {{ y is undefined }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 1 is ne 2 }}"
                   " {{ 1 is lt 2 }} {{ 2 is ge 2 }} {{ 1 is le 0 }} {{ 2 is gt 1 }} {{ 1 is in([1, 2]) }}"
                   " {{ 1 is sameas 1 }} {{ 1 is eq 1.0 }} {{ 'x' is escaped }}",
                   kVariables),
            "True True True False True True True True True True False True True True True True True True True True "
            "True True False True True True True False");
}

TEST(JinjaTests, ByNameInSelect) {
  EXPECT_EQ(render("{{ [1, 2, 3] | select('equalto', 2) | list }} {{ [1, 2, 3] | select('ne', 2) | list }}"
                   " {{ [1, 2, 3] | select('lt', 2) | list }} {{ [1, 2, 3] | select('in', [1, 3]) | list }}",
                   kVariables),
            "[2] [1, 3] [1] [1, 3]");
}

TEST(JinjaLoop, CycleAndNeighbours) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.cycle('o', 'e') }}{{ loop.revindex }}{{ loop.revindex0 }}"
                   "{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
                   kVariables),
            "o32b;e21ac;o10b;");
}

TEST(JinjaGlobals, RangeDictNamespace) {
  EXPECT_EQ(render("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}"
                   " {{ dict(a=1, b='x') }} {% set ns = namespace({'k': 1}) %}{{ ns.k }}",
                   kVariables),
            "[0, 1, 2] [1, 3, 5] [3, 2, 1] {'a': 1, 'b': 'x'} 1");
}

TEST(JinjaBuiltins, KnownButUnsupportedOnesFailWhenUsed) {
  EXPECT_EQ(render("{{ 'x'.format is defined }}{% if false %}{{ [1] | batch(2) }}{% endif %}", kVariables), "True");
  EXPECT_NE(error_of("{{ '{}'.format(1) }}").find("unsupported string method 'format'"), std::string::npos);
  EXPECT_NE(error_of("{{ [1] | batch(2) }}").find("unsupported filter 'batch'"), std::string::npos);
  EXPECT_NE(error_of("{{ [1] | select('frob') | list }}").find("unsupported test 'frob'"), std::string::npos);
  EXPECT_NE(error_of("{{ [1] | map('frob') | list }}").find("map: unsupported filter 'frob'"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 is eq }}").find("test 'eq': missing argument 'other'"), std::string::npos);
  EXPECT_NE(error_of("{{ 1.5 is odd }}").find("test 'odd' needs an integer"), std::string::npos);
  EXPECT_EQ(render("{{ 'x'.nope is defined }} {{ d.nope is defined }} {{ nope is defined }}", kVariables),
            "False False False");
}

}  // namespace
}  // namespace nanovllm::jinja
