#include <gtest/gtest.h>

#include <string>

#include "render_helpers.h"

namespace nanovllm::jinja {
namespace {

using ojson = nlohmann::ordered_json;
using test::error_of;
using test::render;

TEST(Jinja, WhitespaceControlAsTransformersConfiguresIt) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before a block tag goes.
  EXPECT_EQ(render("{% if true %}\n  yes\n{% endif %}\nafter"), "  yes\nafter");
  EXPECT_EQ(render("    {% if true %}x{% endif %}"), "x");
  EXPECT_EQ(render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(render("a\n{%- if true -%}\n b \n{%- endif %}"), "ab");
  EXPECT_EQ(render("a {# comment #}b"), "a b");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("x\n"), "x");              // one trailing newline is dropped
  EXPECT_EQ(render("x{{ 1 }}\ny"), "x1\ny");  // variables do not trim
}

TEST(Jinja, ExpressionsFollowPython) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}"),
            "3 -4 1 2 3.5 1024");
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }}"), "7 9 a1None abab");
  EXPECT_EQ(render("{{ [1, 2, 3][::-1] }} {{ 'héllo'[1:3] }} {{ 'abc'[-1] }} {{ [1,2,3,4][1::2] }}"),
            "[3, 2, 1] él c [2, 4]");
  EXPECT_EQ(render("{{ 'x' in 'xyz' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }} {{ not (1 < 2 < 3) }}"),
            "True True True False");
  EXPECT_EQ(render("{{ 'yes' if 0 else 'no' }} {{ none is none }} {{ 1 == 1.0 }} {{ true and 'x' }} {{ '' or 'd' }}"),
            "no True True x d");
  EXPECT_EQ(render("{{ {'a': 1, 'b': [true, none, 'q']} }} {{ 1.5 }} {{ 2.0 }}"),
            "{'a': 1, 'b': [True, None, 'q']} 1.5 2.0");
  EXPECT_EQ(render("{{ x.y is defined }} {{ x is defined }} {{ x.y }}", ojson{{"x", {{"y", 3}}}}), "True True 3");
}

TEST(Jinja, StringMethodsAndFilters) {
  EXPECT_EQ(
      render("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\nq'.lstrip('\\n') }}|{{ 'q  '.rstrip() }}"),
      "a b|a|q|q");
  EXPECT_EQ(
      render("{{ 'a</think>b</think>c'.split('</think>')[-1] }} {{ ' a  b '.split() }} {{ 'a,b'.split(',', 1) }}"),
      "c ['a', 'b'] ['a', 'b']");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'bc')) }} {{ 'aXa'.replace('a', 'b') }} {{ "
                   "'Hi'.upper() }}"),
            "True True bXb HI");
  EXPECT_EQ(render("{{ [1, 2] | length }} {{ 'héllo' | length }} {{ '  t ' | trim }} {{ [3, 1, 2] | sort | join(',') "
                   "}} {{ x | default('d') }}"),
            "2 5 t 1,2,3 d");
  EXPECT_EQ(render("{{ {'b': 'é', 'a': [1, 2.5, none, true]} | tojson }}"), R"({"b": "é", "a": [1, 2.5, null, true]})");
  EXPECT_EQ(render("{{ {'a': {'b': 1}} | tojson(indent=2) }}"), "{\n  \"a\": {\n    \"b\": 1\n  }\n}");
  EXPECT_EQ(render("{{ 'a\"\\n' | tojson }}"), R"("a\"\n")");
  EXPECT_EQ(
      render("{{ items | map(attribute='n') | join(' ') }} {{ items | selectattr('n', 'equalto', 2) | list | length }}",
             ojson{{"items", ojson::parse(R"([{"n": 1}, {"n": 2}])")}}),
      "1 2 1");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                   ojson{{"d", ojson::parse(R"({"z": 1, "a": 2})")}}),
            "z=1;a=2;");
  EXPECT_EQ(render("{{ 'a\\nb' | indent(2) }}|{{ 'x' | first }}{{ [4, 5] | last }}"), "a\n  b|x5");
}

TEST(Jinja, LoopsSetNamespaceAndMacros) {
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ "
                   "loop.length }};{% endfor %}"),
            "01TrueFalse3;12FalseFalse3;23FalseTrue3;");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif "
                   "%}{{ x }}{% endfor %}"),
            "02");
  EXPECT_EQ(render("{% for x in range(5) if x is odd %}{{ x }}{% endfor %}"), "13");
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");  // loop scope
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set block %}x{{ 1 }}{% endset %}[{{ block }}]"), "[x1]");
  EXPECT_EQ(
      render(
          "{% macro greet(name, p='!') %}Hi {{ name }}{{ p }}{% endmacro %}{{ greet('A') }} {{ greet('B', p='?') }}"),
      "Hi A! Hi B?");
  EXPECT_EQ(render("{% if a %}1{% elif b %}2{% else %}3{% endif %}", ojson{{"b", true}}), "2");
  EXPECT_EQ(render("{{ enable_thinking is defined and enable_thinking is false }}", ojson{{"enable_thinking", false}}),
            "True");
}

TEST(Jinja, ErrorsNameTheConstructAndLine) {
  EXPECT_NE(error_of("line1\n{% raw %}x{% endraw %}").find("line 2: unsupported tag '{% raw %}'"), std::string::npos);
  EXPECT_NE(error_of("{{ x | frobnicate }}").find("unsupported filter 'frobnicate'"), std::string::npos);
  EXPECT_NE(error_of("{{ x is frob }}").find("unsupported test 'frob'"), std::string::npos);
  EXPECT_NE(error_of("a\nb\n{% if x %}").find("line 3"), std::string::npos);
  EXPECT_NE(error_of("{% if x %}").find("expected '{% endif %}'"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 + }}").find("line 1"), std::string::npos);
  EXPECT_NE(error_of("{{ 'abc }}").find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of("{{ x").find("unclosed tag"), std::string::npos);
  EXPECT_NE(error_of("{% break %}").find("outside a for loop"), std::string::npos);
  EXPECT_NE(error_of("\n\n{{ x.y.z }}").find("line 3: 'x' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ raise_exception('bad role') }}").find("bad role"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 + 'a' }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 // 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(error_of("{{ [].append(1) }}").find("sandbox"), std::string::npos);
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("recursed too deeply"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' | round }}").find("expected a number"), std::string::npos);
  EXPECT_NE(error_of("{{ x.99999999999999999999999 }}").find("out of range"), std::string::npos);
  // Integers are 64-bit (Python's are unbounded): overflow wraps instead of being undefined behaviour.
  EXPECT_NO_THROW(render("{{ -(-9223372036854775807 - 1) }} {{ 9223372036854775807 * 3 }}"));
  EXPECT_EQ(render("{{ range(9223372036854775806, 9223372036854775807, 10) | list }}"), "[9223372036854775806]");
  EXPECT_NE(error_of("ok \xFF").find("not valid UTF-8 (byte offset 3)"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace() %}{% set ns.me = ns %}").find("cannot store a namespace"),
            std::string::npos);
}

TEST(Jinja, HostileTemplatesHitBudgetsNotTheMachine) {
  EXPECT_NE(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}").find("budget"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .find("too large"),
            std::string::npos);
  std::string deep;
  for (int i = 0; i < 1000; ++i) deep += "{% if true %}";
  EXPECT_NE(error_of(deep).find("nested too deeply"), std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}").find("nested too deeply"),
            std::string::npos);
}

}  // namespace
}  // namespace nanovllm::jinja
