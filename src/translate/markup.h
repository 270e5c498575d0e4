// Translating documents with markup (HTML, Markdown, SRT subtitles) without touching the markup. A
// document is split into pieces; the caller translates the `source` of each translatable piece (through
// the sentence segmenter) and joins the pieces again with JoinMarkup.
//
// Contracts shared by the three splitters:
// - The pieces' `text` concatenate to the input, byte for byte, whatever the input (malformed markup,
//   invalid UTF-8, binary junk); splitting never throws and runs in time linear in the input.
// - A translatable piece has no leading or trailing whitespace and holds at least one letter; its
//   `source` is plain text for the model: entities and backslash escapes decoded, runs of whitespace
//   (line breaks inside a paragraph included) collapsed to one space. Invalid UTF-8 passes through.
// - Everything else (tags, comments, code, URLs, whitespace between pieces) is untranslated, and
//   neighbouring untranslated pieces are merged.
//
// What is translated:
// - HTML: text nodes, the title element, and the values of the attributes alt, title, placeholder and
//   aria-label. Not: script, style, textarea and the other raw-text elements; the content of code, pre,
//   kbd, samp, var, svg and math; any element marked translate="no" or class="notranslate" (HTML's own
//   opt-out, and Google's), with everything inside it; comments, CDATA, doctypes.
// - Markdown (CommonMark and GFM, line by line, simplified): paragraphs (lines of one paragraph become
//   one piece), headings, list items, block quotes, table cells, link and image text, emphasis content.
//   Not: code spans, fenced and indented code blocks, HTML blocks and inline HTML, front matter (--- or
//   +++ at the top), link destinations and titles, reference definitions, autolinks and bare URLs,
//   emphasis markers. A piece ends at inline markup, so "a **b** c" gives three pieces.
// - SRT: the text lines of each cue (as one piece; dialogue cues, where every line starts with "-",
//   one piece per line), without leading and trailing formatting tags such as <i> or {\an8}. Not: cue
//   numbers and timing lines.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hymt {

// How a translation is written back in place of a translatable piece.
enum class MarkupEscape {
  kNone,
  kHtmlText,           // HTML text: & < > as references
  kHtmlAttribute,      // a quoted HTML attribute value: also " and '
  kMarkdown,           // Markdown inline text: what would read as markup gets a backslash; one line
  kMarkdownLineStart,  // the same, for a piece that starts a line (# > - + = and "1." there too)
  kSrt,                // subtitle text: no blank lines (they would end the cue)
};

struct MarkupPiece {
  std::string text;        // bytes of the input, exactly
  bool translate = false;  // true: `source` is to be translated; the translation replaces `text`
  std::string source;      // translatable pieces only: the plain text to translate
  MarkupEscape escape = MarkupEscape::kNone;  // translatable pieces only
};

std::vector<MarkupPiece> SplitHtml(std::string_view html);
std::vector<MarkupPiece> SplitMarkdown(std::string_view markdown);
std::vector<MarkupPiece> SplitSrt(std::string_view srt);

// The document with each translatable piece replaced by its translation, escaped as the piece needs:
// translations[i] belongs to the i-th translatable piece. Throws Error(kInvalidArgument) when the
// counts differ.
std::string JoinMarkup(const std::vector<MarkupPiece>& pieces, const std::vector<std::string>& translations);

// A translation of piece.source, escaped for the piece's place in the document.
std::string RenderTranslation(const MarkupPiece& piece, std::string_view translation);

// & < > as &amp; &lt; &gt; (an '&' that starts a reference hymt does not decode is kept, so references
// left undecoded in a source come back unchanged).
std::string EscapeHtmlText(std::string_view text);
// EscapeHtmlText plus " and ' as &quot; and &#39;.
std::string EscapeHtmlAttribute(std::string_view text);
// Decodes numeric references and the common named ones (the HTML 4 set: Latin-1, punctuation,
// symbols, Greek); unknown names stay as they are.
std::string DecodeHtmlEntities(std::string_view text);

}  // namespace hymt
