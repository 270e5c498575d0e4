// Markup splitting: pieces concatenate to the input on well-formed, malformed and random documents;
// an "identity translation" (upper-casing the text) changes only text; the right parts are
// translated; hostile inputs stay linear.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "translate/markup.h"

namespace hymt {
namespace {

using Splitter = std::function<std::vector<MarkupPiece>(std::string_view)>;

std::string Concat(const std::vector<MarkupPiece>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += p.text;
  return out;
}

std::vector<std::string> Sources(const std::vector<MarkupPiece>& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces)
    if (p.translate) out.push_back(p.source);
  return out;
}

// The markup, whitespace aside: what must survive translation unchanged.
std::string Markup(const std::vector<MarkupPiece>& pieces) {
  std::string out;
  for (const auto& p : pieces) {
    if (p.translate) {
      out += "\x01";  // where a translatable piece was
      continue;
    }
    for (char c : p.text)
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') out.push_back(c);
  }
  return out;
}

std::string Upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}

// Splits, checks the concatenation, "translates" by upper-casing, and checks that splitting the result
// finds the same markup and the upper-cased sources.
std::vector<MarkupPiece> CheckRoundTrip(const Splitter& split, std::string_view doc) {
  auto pieces = split(doc);
  EXPECT_EQ(Concat(pieces), doc);
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_FALSE(pieces[i].text.empty());
    if (i > 0) {
      EXPECT_FALSE(!pieces[i].translate && !pieces[i - 1].translate) << "unmerged neighbours";
    }
  }
  std::vector<std::string> upper;
  for (const auto& s : Sources(pieces)) upper.push_back(Upper(s));
  std::string out = JoinMarkup(pieces, upper);
  auto again = split(out);
  EXPECT_EQ(Markup(again), Markup(pieces)) << "in:  " << doc << "\nout: " << out;
  EXPECT_EQ(Sources(again), upper) << "in:  " << doc << "\nout: " << out;
  return pieces;
}

// ---- HTML ----------------------------------------------------------------------------------------

TEST(Markup, HtmlTextNodesAndAttributes) {
  auto pieces = CheckRoundTrip(
      SplitHtml,
      "<!DOCTYPE html>\n<html><head><title>My &amp; page</title>\n"
      "<style>p { color: red; } /* Hello */</style>\n"
      "<script>var s = \"</div> Hello\"; if (a < b) x();</script></head>\n"
      "<body class=\"main\">\n  <h1 id=\"top\">Hello,   world!</h1>\n"
      "  <p>This is <b>bold</b> and <a href=\"https://example.com/x?a=1&amp;b=2\" "
      "title=\"Go &quot;there&quot;\">a link</a>.</p>\n"
      "  <img src=\"cat.png\" alt=\"A cat\"><input placeholder='Your name'>\n"
      "  <pre>keep   this</pre><code>int x;</code>\n"
      "  <p translate=\"no\">Brand <span>Name</span></p><div class=\"x notranslate\">No</div>\n"
      "  <!-- a comment with <p>text</p> --><![CDATA[ raw ]]>\n"
      "  <p>Tom &eacute;t&eacute; &copy; 2024 &#x4E2D;&#25991;</p>\n</body></html>\n");
  EXPECT_EQ(Sources(pieces),
            (std::vector<std::string>{"My & page", "Hello, world!", "This is", "bold", "and", "Go \"there\"",
                                      "a link", "A cat", "Your name", "Tom été © 2024 中文"}));
}

TEST(Markup, HtmlEscapingOfTranslations) {
  auto pieces = SplitHtml("<p title=\"t\">x &lt; y</p>");
  ASSERT_EQ(Sources(pieces), (std::vector<std::string>{"t", "x < y"}));
  EXPECT_EQ(JoinMarkup(pieces, {"a \"b\" 'c'", "1 < 2 & 3 > 0"}),
            "<p title=\"a &quot;b&quot; &#39;c&#39;\">1 &lt; 2 &amp; 3 &gt; 0</p>");
  EXPECT_THROW(JoinMarkup(pieces, {"only one"}), Error);
  EXPECT_EQ(DecodeHtmlEntities("&amp;&lt;&#65;&#x42;&eacute;&Omega;&unknown;&#0;&#xD800;&amp &copy x&"),
            "&<ABéΩ&unknown;\uFFFD\uFFFD& © x&");
  EXPECT_EQ(EscapeHtmlText("a & b < c &unknown; &amp;"), "a &amp; b &lt; c &unknown; &amp;amp;");
}

TEST(Markup, HtmlMalformed) {
  const std::vector<std::string> docs = {
      "",
      "plain text only",
      "<",
      "a < b > c",
      "<p>unclosed paragraph <b>bold",
      "<p class=\"unterminated>text after",
      "<p class='x'>ok</p><div",
      "</p>stray end</div>",
      "<!-- unclosed comment <p>text</p>",
      "<!---->x<!-->y<!--->z",
      "<![CDATA[ unclosed",
      "<script>if (a</b) { s = '</scr' + 'ipt>'; }</script>after",
      "<script>never closed </div> text",
      "<SCRIPT>x</ScRiPt >Text",
      "<code>unclosed code <p>inside</p>",
      "<pre><pre>nested</pre>still pre</pre>out",
      "<svg><text>hi</text></svg>after svg",
      "<p a=1 b = \"2\" c='3' d>attrs</p>",
      "<img alt=\"\"><img alt=unquoted>",
      "<p>\xff\xfe invalid \xc3 utf8 \xe4\xb8</p>",
      "<a href=\"x\" title=\"" + std::string(100000, 'A') + "\">huge attribute</a>",
      "<<<>>><</>>< /p><p/><3 <= 4 &&& &#; &#x; &;",
      "<textarea><p>not a tag</p></textarea><title>T &amp; T</title>",
      "<?xml version=\"1.0\"?><!doctype html><p>after</p>",
      "text\r\nwith\r\nCRLF <br/> lines",
      std::string("nul\0byte <b>here</b>", 20),
  };
  for (const auto& doc : docs) CheckRoundTrip(SplitHtml, doc);
  EXPECT_EQ(Sources(SplitHtml("<script>if (a</b) { s = '</scr' + 'ipt>'; }</script>after")),
            (std::vector<std::string>{"after"}));
  EXPECT_EQ(Sources(SplitHtml("<pre><pre>nested</pre>still pre</pre>out")),
            (std::vector<std::string>{"out"}));
  EXPECT_EQ(Sources(SplitHtml("<code>unclosed code <p>inside</p>")).size(), 0u);
}

// ---- Markdown ------------------------------------------------------------------------------------

TEST(Markup, MarkdownBlocks) {
  const std::string doc =
      "---\ntitle: Front matter\n---\n"
      "# Heading *one* #\n\n"
      "A paragraph that is\nwrapped over two lines, with `code` and a [link](https://x.y/(a)) here.\n\n"
      "- Item **bold** text\n- [ ] Task item\n  continued item\n1. Numbered\n\n"
      "> Quoted text\n\n"
      "```python\nprint(\"not translated\")\n```\n\n"
      "    indented code\n\n"
      "| Name | Value |\n|------|:-----:|\n| Apple | `red` |\n| Pipe \\| in cell | x |\n\n"
      "<div>\nHTML block\n</div>\n\n"
      "[ref]: https://example.com \"Title\"\n"
      "See [the docs][ref], ![an image](img.png \"t\") and <https://auto.link> or www.example.com.\n\n"
      "Setext\n======\n\n***\n";
  auto pieces = CheckRoundTrip(SplitMarkdown, doc);
  EXPECT_EQ(Sources(pieces), (std::vector<std::string>{"Heading",
                                                       "one",
                                                       "A paragraph that is wrapped over two lines, with",
                                                       "and a",
                                                       "link",
                                                       "here.",
                                                       "Item",
                                                       "bold",
                                                       "text",
                                                       "Task item continued item",
                                                       "Numbered",
                                                       "Quoted text",
                                                       "Name",
                                                       "Value",
                                                       "Apple",
                                                       "Pipe | in cell",
                                                       "x",
                                                       "See",
                                                       "the docs",
                                                       "an image",
                                                       "and",
                                                       "or",
                                                       "Setext"}));
}

TEST(Markup, MarkdownEscapingOfTranslations) {
  auto pieces = SplitMarkdown("Some *text* here\n");
  ASSERT_EQ(Sources(pieces), (std::vector<std::string>{"Some", "text", "here"}));
  // What would read as markup in a translation is escaped; a piece that starts a line also guards the
  // block markers there.
  EXPECT_EQ(JoinMarkup(pieces, {"# 1*2 [a]", "x_y _z_", "<b> &amp; a\nb"}),
            "\\# 1\\*2 \\[a\\] *x_y \\_z\\_* \\<b> &amp;amp; a b\n");
  EXPECT_EQ(JoinMarkup(SplitMarkdown("Text\n"), {"1. not a list"}), "1\\. not a list\n");
}

TEST(Markup, MarkdownMalformed) {
  const std::vector<std::string> docs = {
      "",
      "\n\n\n",
      "plain",
      "```\nunclosed fence\n# not a heading",
      "~~~~\ncode\n~~~\nstill code\n~~~~\nafter",
      "`unclosed code span and [unclosed link(",
      "[a]([b](c)",
      "**unclosed emphasis and _under_score_ snake_case",
      "<!-- unclosed html comment\n\nstill comment",
      "<div>\nunclosed html block",
      "---\nunclosed front matter\n",
      "| a | b |\n|---|\n| c |",
      "> > nested > quote\n>\n> - list in quote",
      "1) one\n2) two\n   * nested\n\n  lazy",
      "\\*escaped\\* \\[not link\\](x) \\`",
      "text\r\nwith CRLF\r\n\r\n# Heading\r\n",
      "[![img](a.png)](b.html) [^1]\n\n[^1]: Footnote text",
      "\xff\xfe invalid \xc3 utf8 *\xe4\xb8*",
      "2020. That year\n- - -\n* * *\n___",
      "line with trailing spaces   \nnext line",
  };
  for (const auto& doc : docs) CheckRoundTrip(SplitMarkdown, doc);
  EXPECT_EQ(Sources(SplitMarkdown("```\nunclosed fence\n# not a heading")).size(), 0u);
  EXPECT_EQ(Sources(SplitMarkdown("---\nunclosed front matter\n")),
            (std::vector<std::string>{"unclosed front matter"}));
}

// ---- SRT -----------------------------------------------------------------------------------------

TEST(Markup, SrtCues) {
  const std::string doc =
      "\xEF\xBB\xBF"
      "1\r\n00:00:01,000 --> 00:00:04,000\r\nHello there,\r\nhow are you?\r\n\r\n"
      "2\n00:00:05,000 --> 00:00:06,500 X1:100 X2:200\n<i>I'm fine.</i>\n\n"
      "3\n00:00:07,000 --> 00:00:08,000\n- Who?\n- Me.\n\n"
      "4\n00:00:09,000 --> 00:00:10,000\n\xE2\x99\xAA\n";
  auto pieces = CheckRoundTrip(SplitSrt, doc);
  EXPECT_EQ(Sources(pieces),
            (std::vector<std::string>{"Hello there, how are you?", "I'm fine.", "- Who?", "- Me."}));
  // A translation with blank lines would end the cue early; they go.
  auto one = SplitSrt("1\n00:00:01,000 --> 00:00:02,000\nHi\n");
  EXPECT_EQ(JoinMarkup(one, {"Line one\n\n\nLine two\n"}),
            "1\n00:00:01,000 --> 00:00:02,000\nLine one\nLine two\n");
  for (const std::string bad : {"", "\n\n", "no cues at all", "1\n", "-->\n-->", "1\n2\n3\nx --> y\ntext\n"})
    CheckRoundTrip(SplitSrt, bad);
}

// ---- robustness ----------------------------------------------------------------------------------

// Random token soups: the pieces always concatenate to the input. With the tokens separated by
// whitespace (as words are), the identity translation also keeps the markup; glued together, an
// escape the source decodes can change where a neighbouring bare URL or marker ends, so only the
// concatenation is checked there. Known limit (seen about once in 60,000 spaced Markdown soups): when a
// literal '[' of a text pairs with a ']' of the markup around it, escaping it in the translation frees
// that ']' for another opener.
TEST(Markup, RandomDocumentsRoundTrip) {
  const std::vector<std::string> tokens = {"<",         ">",
                                           "</",        "/>",
                                           "<p>",       "</p>",
                                           "<b>",       "<script>",
                                           "</script>", "<code>",
                                           "</code>",   "<!--",
                                           "-->",       "<![CDATA[",
                                           "]]>",       "\"",
                                           "'",         "=",
                                           "&amp;",     "&",
                                           "&#",        ";",
                                           "word",      "Text",
                                           "mot",       "中文",
                                           "\xff",      "`",
                                           "```",       "*",
                                           "**",        "_",
                                           "~~",        "[",
                                           "]",         "(",
                                           ")",         "](",
                                           "![",        "#",
                                           "# ",        "> ",
                                           "- ",        "1. ",
                                           "|",         "---",
                                           "\\",        "http://x.y",
                                           "www.a",     "00:00:01,000 --> 00:00:02,000",
                                           "1",         "alt=\"",
                                           "title='",   "translate=\"no\"",
                                           "<img ",     "<pre>",
                                           "<title>",   "{\\an8}",
                                           "<i>",       "</i>",
                                           "&lt;",      "&#x41;",
                                           "\\*"};
  const char* kSpaces[] = {" ", " ", " ", "\n", "\n\n", "\t"};
  std::mt19937 rng(42);
  for (const auto& [name, split] : std::vector<std::pair<std::string, Splitter>>{
           {"html", SplitHtml}, {"markdown", SplitMarkdown}, {"srt", SplitSrt}}) {
    SCOPED_TRACE(name);
    for (int doc_index = 0; doc_index < 3000; ++doc_index) {
      std::string glued, spaced;
      int n = static_cast<int>(rng() % 40);
      for (int i = 0; i < n; ++i) {
        const std::string& token = tokens[rng() % tokens.size()];
        glued += token;
        spaced += token + kSpaces[rng() % std::size(kSpaces)];
      }
      ASSERT_EQ(Concat(split(glued)), glued);
      CheckRoundTrip(split, spaced);
      if (testing::Test::HasFailure()) return;
    }
  }
}

// Hostile inputs take linear time: 8 times the input takes about 8 times as long (a quadratic scan
// would take 64 times), whatever the build (sanitizers slow everything alike). Each size is timed as
// the best of three runs, so a busy machine (another test binary, a page fault storm on the first
// touch of the bigger input) cannot make a linear scan look quadratic.
TEST(Markup, HostileInputsStayLinear) {
  const std::vector<std::string> units = {
      "<",    "<a", "<!--", "</",   "<a b=\"", "<script>", "<script></", "[a](", "[",           "`",
      "`` `", "*_", "<b ",  "[x][", "&#x1;",   "> - 1. ",  "|",          "a\n",  "<pre><code>", "("};
  auto repeat = [](const std::string& unit, size_t size) {
    std::string s;
    while (s.size() < size) s += unit;
    return s;
  };
  auto seconds = [](const Splitter& split, const std::string& doc) {
    double best = 1e30;
    for (int run = 0; run < 3; ++run) {
      auto start = std::chrono::steady_clock::now();
      auto pieces = split(doc);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      EXPECT_EQ(Concat(pieces).size(), doc.size());
    }
    return best;
  };
  for (const auto& unit : units) {
    std::string small = repeat(unit, 1 << 17), big = repeat(unit, 1 << 20);
    for (const auto& split : {Splitter(SplitHtml), Splitter(SplitMarkdown), Splitter(SplitSrt)}) {
      double t_small = seconds(split, small), t_big = seconds(split, big);
      EXPECT_LT(t_big, 24 * t_small + 0.05)
          << "unit " << unit << ": " << t_small << " s, then " << t_big << " s";
    }
  }
}

}  // namespace
}  // namespace hymt
